//! Real headless Chromium loads the waiting page over HTTPS (HTTP/2 by
//! ALPN) with the test CA trusted by its SPKI, walks the queue with Secure
//! cookies and lands on the origin.

use std::time::Duration;

use crate::support::browser::{wait_for, with_browser_args};
use crate::support::origin::Origin;
use crate::support::tls::{Ca, config, try_start};
use anyhow::{Context as _, ensure};
use base64::Engine as _;
use fantoccini::Locator;
use sha2::{Digest as _, Sha256};

const HOST: &str = "tickets.test";
const STEP: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn chromium_walks_the_queue_over_https_and_http2() {
    let ca = Ca::new("anteroom browser test ca");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.leaf(&[HOST], 30);
    // A full chain, as an operator's fullchain.pem: Chromium matches the
    // pinned CA key among the certificates the server presents.
    let chain = format!("{}{}", leaf.cert_pem, ca.pem);
    let cert = dir.path().join("fullchain.pem");
    let key = dir.path().join("privkey.pem");
    std::fs::write(&cert, chain).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    let origin = Origin::options().echo_proto().start().await.addr;
    let tls = format!("cert = {cert:?}\nkey = {key:?}");
    let toml = config(dir.path(), origin).tls(&tls).toml();
    let s = try_start(dir, &toml).await.unwrap();
    let port = s.public.port();

    let spki = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(&ca.spki_der));
    let pin = format!("--ignore-certificate-errors-spki-list={spki}");
    let resolve = format!("--host-resolver-rules=MAP {HOST} 127.0.0.1");
    with_browser_args(&[&pin, &resolve], |client| async move {
        client
            .goto(&format!("https://{HOST}:{port}/tickets/item?x=1"))
            .await?;
        wait_for("arrival at the original path", STEP, || async {
            let url = client.current_url().await?;
            Ok((url.path() == "/tickets/item").then_some(()))
        })
        .await?;
        let body = client.find(Locator::Css("body")).await?.text().await?;
        ensure!(
            body.contains("origin /tickets/item?x=1 proto=https"),
            "origin did not answer over the gate: {body}"
        );
        let protocol = client
            .execute(
                "return performance.getEntriesByType('navigation')[0].nextHopProtocol",
                vec![],
            )
            .await?;
        ensure!(protocol == "h2", "not HTTP/2: {protocol}");
        let cookies = client.get_all_cookies().await?;
        let pass = cookies
            .iter()
            .find(|c| c.name().ends_with("anteroom_pass"))
            .context("no pass cookie")?;
        ensure!(pass.secure() == Some(true), "pass cookie not Secure");
        Ok(())
    })
    .await;
    s.stop().await;
}

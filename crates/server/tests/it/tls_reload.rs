//! Certificate files replaced under a running server: new handshakes get
//! the new pair (on the poll and on SIGHUP) while an open connection keeps
//! working; a bad new pair keeps the old certificate and sets a metric.

use crate::support::origin::Origin;
use crate::support::tls;

use crate::support::tls::{Ca, TlsServer, client_config, config, handshake, try_start, wait_until};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;

const HOST: &str = "tickets.test";

async fn shown(s: &TlsServer, ca: &Ca) -> Vec<u8> {
    handshake(s.public, HOST, client_config(ca.roots(), &[b"http/1.1"]))
        .await
        .unwrap()
        .leaf
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn replaced_files_serve_new_handshakes_and_open_connections_stay() {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let first = ca.leaf(&[HOST], 30);
    let (cert, key) = first.write(dir.path(), "site");
    let origin = Origin::options().echo_proto().start().await.addr;
    let tls = format!("cert = {cert:?}\nkey = {key:?}\nreload_interval = \"100ms\"");
    let toml = config(dir.path(), origin).tls(&tls).toml();
    let s = try_start(dir, &toml).await.unwrap();
    assert_eq!(shown(&s, &ca).await, first.der);

    // A keep-alive HTTP/1.1 connection opened on the first certificate.
    let open = handshake(s.public, HOST, client_config(ca.roots(), &[b"http/1.1"]))
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(open.stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let get = || {
        http::Request::get("/queue/tickets")
            .header("host", HOST)
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    assert_eq!(sender.send_request(get()).await.unwrap().status(), 200);

    let second = ca.leaf(&[HOST], 60);
    second.write(s.dir.path(), "site");
    wait_until("the new certificate is served", || async {
        shown(&s, &ca).await == second.der
    })
    .await;
    let res = sender.send_request(get()).await.unwrap();
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.unwrap();

    // A certificate with someone else's key: refused, the second one stays.
    let third = ca.leaf(&[HOST], 90);
    tls::write_atomic(&s.dir.path().join("site.crt"), &third.cert_pem);
    wait_until("the failed reload is reported", || async {
        metric(
            &s.metrics().await,
            "anteroom_tls_reload_failed{cert=\"server.tls\"}",
        ) == Some(1.0)
    })
    .await;
    assert_eq!(shown(&s, &ca).await, second.der);
    // The open connection still works through all of it.
    assert_eq!(sender.send_request(get()).await.unwrap().status(), 200);

    // The operator fixes the pair: served, and the metric clears.
    let fourth = ca.leaf(&[HOST], 120);
    fourth.write(s.dir.path(), "site");
    wait_until("the fixed pair is served", || async {
        shown(&s, &ca).await == fourth.der
    })
    .await;
    let m = s.metrics().await;
    assert_eq!(
        metric(&m, "anteroom_tls_reload_failed{cert=\"server.tls\"}"),
        Some(0.0)
    );
    let left = metric(&m, "anteroom_tls_cert_expiry_seconds{cert=\"server.tls\"}").unwrap();
    assert!(left > 100.0 * 86400.0, "{left}");
    s.stop().await;
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_at_once() {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let first = ca.leaf(&[HOST], 30);
    let (cert, key) = first.write(dir.path(), "site");
    let origin = Origin::options().echo_proto().start().await.addr;
    // The poll alone would take an hour.
    let tls = format!("cert = {cert:?}\nkey = {key:?}\nreload_interval = \"1h\"");
    let toml = config(dir.path(), origin).tls(&tls).toml();
    let s = try_start(dir, &toml).await.unwrap();
    assert_eq!(shown(&s, &ca).await, first.der);
    let second = ca.leaf(&[HOST], 60);
    second.write(s.dir.path(), "site");
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_until("SIGHUP reloads", || async {
        shown(&s, &ca).await == second.der
    })
    .await;
    s.stop().await;
}

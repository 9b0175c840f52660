//! HTTPS on the public listener, over real TLS with a CA the test makes:
//! ALPN and HTTP/2 with a real client, the whole visitor journey over both
//! protocols, SNI, the redirect listener, HSTS and a TLS admin listener.

use crate::support::origin::Origin;
use crate::support::tls;

use std::time::Duration;

use crate::support::tls::{Ca, config, handshake, https_client, try_start};
use http::{StatusCode, Version};
use serde_json::Value;

const HOST: &str = "tickets.test";

/// Enter, poll until admitted, redeem, then reach the origin through the
/// gate, all on one client; returns what the origin answered.
async fn journey(client: &reqwest::Client, base: &str, want: Version) -> String {
    let enter = client
        .post(format!("{base}/api/queue/enter?eventId=tickets"))
        .send()
        .await
        .unwrap();
    assert_eq!(enter.version(), want);
    assert_eq!(enter.status(), StatusCode::OK);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let token = loop {
        let url = format!("{base}/api/queue/position?eventId=tickets");
        let p: Value = client.get(url).send().await.unwrap().json().await.unwrap();
        if let Some(t) = p["token"].as_str() {
            break t.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "not admitted: {p}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let redeem = client
        .post(format!("{base}/api/queue/redeem?eventId=tickets"))
        .json(&serde_json::json!({ "token": token }))
        .send()
        .await
        .unwrap();
    assert_eq!(redeem.status(), StatusCode::OK);
    let page = client
        .get(format!("{base}/tickets/seat?x=1"))
        .send()
        .await
        .unwrap();
    assert_eq!((page.status(), page.version()), (StatusCode::OK, want));
    page.text().await.unwrap()
}

#[tokio::test]
async fn http2_and_http1_over_tls_carry_the_whole_journey() {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST], 30).write(dir.path(), "site");
    let origin = Origin::options().echo_proto().start().await.addr;
    let tls = format!("cert = {cert:?}\nkey = {key:?}\nhsts = \"max-age=31536000\"");
    let toml = config(dir.path(), origin).tls(&tls).toml();
    let s = try_start(dir, &toml).await.unwrap();

    // ALPN: h2 preferred, http/1.1 offered alone is accepted, TLS 1.3 by
    // default and TLS 1.2 still spoken.
    let h = handshake(
        s.public,
        HOST,
        tls::client_config(ca.roots(), &[b"h2", b"http/1.1"]),
    )
    .await
    .unwrap();
    assert_eq!(h.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(h.version, Some(rustls::ProtocolVersion::TLSv1_3));
    let h = handshake(
        s.public,
        HOST,
        tls::client_config(ca.roots(), &[b"http/1.1"]),
    )
    .await
    .unwrap();
    assert_eq!(h.alpn.as_deref(), Some(&b"http/1.1"[..]));
    let tls12 = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS12])
    .unwrap()
    .with_root_certificates(ca.roots())
    .with_no_client_auth();
    let h = handshake(s.public, HOST, tls12).await.unwrap();
    assert_eq!(h.version, Some(rustls::ProtocolVersion::TLSv1_2));

    let base = format!("https://{HOST}:{}", s.public.port());
    for (http2, want) in [(true, Version::HTTP_2), (false, Version::HTTP_11)] {
        let client = https_client(&ca, HOST, s.public, http2);
        let page = client
            .get(format!("{base}/queue/tickets"))
            .send()
            .await
            .unwrap();
        assert_eq!((page.status(), page.version()), (StatusCode::OK, want));
        // The session cookie is Secure, and the client keeps it over HTTPS.
        let sid = page
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .find(|c| c.starts_with("__Host-anteroom_sid=") || c.starts_with("anteroom_sid="))
            .unwrap();
        assert!(sid.contains("Secure"), "{sid}");
        assert_eq!(
            page.headers()["strict-transport-security"],
            "max-age=31536000"
        );
        let body = journey(&client, &base, want).await;
        assert_eq!(body, "origin /tickets/seat?x=1 proto=https");
    }
    s.stop().await;
}

#[tokio::test]
async fn sni_picks_the_certificate_and_unknown_names_get_the_default() {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let a = ca.leaf(&["a.test"], 30);
    let b = ca.leaf(&["b.test", "*.b.test"], 30);
    let (ac, ak) = a.write(dir.path(), "a");
    let (bc, bk) = b.write(dir.path(), "b");
    let origin = Origin::options().echo_proto().start().await.addr;
    let tls = format!(
        "[[server.tls.certs]]\ncert = {ac:?}\nkey = {ak:?}\n[[server.tls.certs]]\ncert = {bc:?}\nkey = {bk:?}"
    );
    let toml = config(dir.path(), origin).tls(&tls).toml();
    let s = try_start(dir, &toml).await.unwrap();
    let leaf_for = |name: &'static str| {
        let roots = ca.roots();
        async move {
            let mut c = tls::client_config(roots, &[b"h2"]);
            // Shown certificate only: the default one does not hold an
            // unknown name, which a verifying client refuses by itself.
            c.dangerous()
                .set_certificate_verifier(std::sync::Arc::new(support_noverify::NoVerify));
            handshake(s.public, name, c).await.unwrap().leaf
        }
    };
    assert_eq!(leaf_for("a.test").await, a.der);
    assert_eq!(leaf_for("b.test").await, b.der);
    assert_eq!(leaf_for("www.b.test").await, b.der);
    assert_eq!(leaf_for("B.TEST").await, b.der);
    assert_eq!(leaf_for("unknown.test").await, a.der);
    // A verifying client with an unknown name fails the handshake cleanly.
    let err = handshake(
        s.public,
        "unknown.test",
        tls::client_config(ca.roots(), &[]),
    )
    .await
    .err()
    .unwrap();
    assert!(err.to_string().contains("certificate"), "{err}");
    s.stop().await;
}

#[tokio::test]
async fn redirect_listener_answers_308_to_https_and_tls_admin_works() {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST, "127.0.0.1"], 30).write(dir.path(), "site");
    let origin = Origin::options().echo_proto().start().await.addr;
    let tls = format!("cert = {cert:?}\nkey = {key:?}\nadmin = true\nhsts = \"max-age=600\"");
    let toml = config(dir.path(), origin).tls(&tls).toml();
    let s = try_start(dir, &toml).await.unwrap();

    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let check = |host: &'static str, path: &'static str| {
        let plain = plain.clone();
        let url = format!("http://{}{path}", s.redirect);
        async move {
            let res = plain.get(url).header("host", host).send().await.unwrap();
            let status = res.status();
            let location = res
                .headers()
                .get("location")
                .map(|l| l.to_str().unwrap().to_owned());
            let body = res.text().await.unwrap();
            (status, location, body)
        }
    };
    let port = s.public.port();
    let (status, location, _) = check("tickets.test", "/tickets/a?b=c&d").await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(
        location.unwrap(),
        format!("https://tickets.test:{port}/tickets/a?b=c&d")
    );
    let (status, location, _) = check("tickets.test:80", "/").await;
    assert_eq!(
        (status, location.unwrap()),
        (
            StatusCode::PERMANENT_REDIRECT,
            format!("https://tickets.test:{port}/")
        )
    );
    let (status, _, body) = check("evil.test/x", "/").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("\"bad_host\""), "{body}");
    // An ACME challenge path no order is proving right now.
    let (status, _, body) = check("tickets.test", "/.well-known/acme-challenge/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("\"not_found\""), "{body}");

    // The admin listener speaks TLS with the same certificate, and tells
    // browsers to keep to HTTPS as the public one does: the dashboard is a
    // page there.
    let admin = https_client(&ca, HOST, s.admin, true);
    for path in ["/healthz", "/dashboard"] {
        let res = admin
            .get(format!("https://{HOST}:{}{path}", s.admin.port()))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        assert_eq!(
            res.headers()["strict-transport-security"],
            "max-age=600",
            "{path}"
        );
    }
    s.stop().await;
}

/// The redirect listener holds as many connections as the public one:
/// held to the admin listener's 256, a few hundred idle sockets (or a crowd
/// typing the bare name) had every visitor refused there, and the ACME
/// CA's validations failed. And each answer closes its connection, so
/// none sits idle on a slot until the header timeout.
#[tokio::test]
async fn the_redirect_listener_is_not_filled_by_a_few_hundred_sockets() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST], 30).write(dir.path(), "site");
    let origin = Origin::options().echo_proto().start().await.addr;
    let toml = config(dir.path(), origin)
        .tls(&format!("cert = {cert:?}\nkey = {key:?}"))
        .toml();
    let s = try_start(dir, &toml).await.unwrap();
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(tokio::net::TcpStream::connect(s.redirect).await.unwrap());
    }
    let mut visitor = tokio::net::TcpStream::connect(s.redirect).await.unwrap();
    visitor
        .write_all(b"GET /tickets/ HTTP/1.1\r\nHost: tickets.test\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), visitor.read_to_end(&mut answer))
        .await
        .expect("the connection closed after its answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_lowercase();
    assert!(answer.starts_with("http/1.1 308"), "{answer}");
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    // HTTP/2 with prior knowledge is not spoken there: served, it took
    // `Connection: close` off every answer, and a request a minute held
    // the socket for good. The preface is a bad HTTP/1 request, and the
    // connection ends.
    let mut h2 = tokio::net::TcpStream::connect(s.redirect).await.unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), h2.read_to_end(&mut answer))
        .await
        .expect("a connection opened with the HTTP/2 preface is closed")
        .unwrap();
    assert!(
        answer.len() < 9 || answer[3] != 0x04,
        "answered with HTTP/2 SETTINGS: {answer:?}"
    );
    drop(idle);
    s.stop().await;
}

/// A verifier that accepts anything: to see which certificate was shown.
mod support_noverify {
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::{DigitallySignedStruct, SignatureScheme};
    use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

    #[derive(Debug)]
    pub struct NoVerify;

    impl ServerCertVerifier for NoVerify {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            rustls::crypto::ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
}

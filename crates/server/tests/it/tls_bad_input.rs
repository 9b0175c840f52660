//! Bad TLS input: a missing, unreadable or mismatched pair stops the start
//! naming the key and the file; garbage, plain HTTP, truncated and silent
//! handshakes are closed or answered without harm, and a slow handshake
//! leaves less time for the head, not more; a certificate about to expire
//! shows in the metrics.

use std::time::Duration;

use crate::support::origin::Origin;
use crate::support::tls::{Ca, client_config, config, handshake, try_start};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const HOST: &str = "tickets.test";

/// The start error for `[server.tls]` lines `tls`.
async fn start_error(tls: &str, prepare: impl FnOnce(&std::path::Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let origin = Origin::options().echo_proto().start().await.addr;
    let lines = tls.replace("{dir}", &dir.path().display().to_string());
    let toml = config(dir.path(), origin).tls(&lines).toml();
    match try_start(dir, &toml).await {
        Ok(_) => panic!("started with {tls}"),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn bad_pairs_stop_the_start_naming_key_and_file() {
    let ca = Ca::new("test ca");
    let a = ca.leaf(&[HOST], 30);
    let b = ca.leaf(&[HOST], 30);
    let pair = "cert = \"{dir}/site.crt\"\nkey = \"{dir}/site.key\"";

    let e = start_error(pair, |_| {}).await;
    assert!(
        e.contains("server.tls.cert") && e.contains("site.crt") && e.contains("cannot read"),
        "{e}"
    );

    let e = start_error(pair, |d| {
        std::fs::write(d.join("site.crt"), &a.cert_pem).unwrap();
    })
    .await;
    assert!(
        e.contains("server.tls.key") && e.contains("site.key"),
        "{e}"
    );

    let e = start_error(pair, |d| {
        std::fs::write(d.join("site.crt"), &a.cert_pem).unwrap();
        std::fs::write(d.join("site.key"), &b.key_pem).unwrap();
    })
    .await;
    assert!(
        e.contains("server.tls.key") && e.contains("does not match"),
        "{e}"
    );

    let e = start_error(pair, |d| {
        std::fs::write(d.join("site.crt"), "garbage").unwrap();
        std::fs::write(d.join("site.key"), &a.key_pem).unwrap();
    })
    .await;
    assert!(
        e.contains("server.tls.cert") && e.contains("no PEM certificate"),
        "{e}"
    );

    let e = start_error(pair, |d| {
        std::fs::write(d.join("site.crt"), &a.cert_pem).unwrap();
        std::fs::write(d.join("site.key"), &a.cert_pem).unwrap();
    })
    .await;
    assert!(
        e.contains("server.tls.key") && e.contains("not a PEM private key"),
        "{e}"
    );

    let many = "[[server.tls.certs]]\ncert = \"{dir}/x.crt\"\nkey = \"{dir}/x.key\"";
    let e = start_error(many, |_| {}).await;
    assert!(
        e.contains("server.tls.certs[0].cert") && e.contains("x.crt"),
        "{e}"
    );

    // insecure_cookies contradicts HTTPS: refused by name.
    let dir = tempfile::tempdir().unwrap();
    let toml = config(dir.path(), "127.0.0.1:1".parse().unwrap())
        .server_line("insecure_cookies = true")
        .tls(&pair.replace("{dir}", &dir.path().display().to_string()))
        .toml();
    let e = anteroom::Config::from_toml(&toml).unwrap_err().to_string();
    assert!(e.contains("server.insecure_cookies"), "{e}");
    let toml = config(dir.path(), "127.0.0.1:1".parse().unwrap())
        .tls("redirect_listen = \"nope\"")
        .toml();
    let e = anteroom::Config::from_toml(&toml).unwrap_err().to_string();
    assert!(e.contains("server.tls.cert"), "{e}");
}

/// A FIFO or a device at a certificate or key path is refused at once,
/// naming the key: reading it hung the start (and, on a reload, froze the
/// listeners), and `/dev/zero` was read until memory ran out.
#[tokio::test]
async fn a_fifo_or_a_device_at_a_pair_path_is_refused_at_once() {
    let ca = Ca::new("test ca");
    let a = ca.leaf(&[HOST], 30);
    let pem = a.cert_pem.clone();
    let fifo = "cert = \"{dir}/site.crt\"\nkey = \"{dir}/fifo.key\"";
    let e = tokio::time::timeout(
        Duration::from_secs(20),
        start_error(fifo, move |d| {
            std::fs::write(d.join("site.crt"), &pem).unwrap();
            rustix::fs::mknodat(
                rustix::fs::CWD,
                d.join("fifo.key"),
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap();
        }),
    )
    .await
    .expect("the start hung on the FIFO");
    assert!(
        e.contains("server.tls.key") && e.contains("not a regular file"),
        "{e}"
    );
    let e = tokio::time::timeout(
        Duration::from_secs(20),
        start_error("cert = \"/dev/zero\"\nkey = \"{dir}/site.key\"", |_| {}),
    )
    .await
    .expect("the start read /dev/zero");
    assert!(
        e.contains("server.tls.cert") && e.contains("not a regular file"),
        "{e}"
    );
}

#[tokio::test]
async fn garbage_plain_http_and_broken_handshakes_are_closed_cleanly() {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST], 3).write(dir.path(), "site");
    let origin = Origin::options().echo_proto().start().await.addr;
    let tls = format!("cert = {cert:?}\nkey = {key:?}");
    let toml = config(dir.path(), origin)
        .server_line("header_read_timeout = \"1s\"")
        .tls(&tls)
        .toml();
    let s = try_start(dir, &toml).await.unwrap();

    let read_all = |mut c: TcpStream| async move {
        let mut out = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out)).await;
        assert!(r.is_ok(), "connection left open");
        out
    };
    // Plain HTTP on the TLS port: a readable 400, then close.
    let mut c = TcpStream::connect(s.public).await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let out = String::from_utf8(read_all(c).await).unwrap();
    assert!(
        out.starts_with("HTTP/1.1 400") && out.contains("\"https_required\""),
        "{out}"
    );
    let body = out.split("\r\n\r\n").nth(1).unwrap();
    assert!(
        out.contains(&format!("content-length: {}", body.len())),
        "{out}"
    );

    // Garbage bytes: closed (with an alert or without).
    let mut c = TcpStream::connect(s.public).await.unwrap();
    c.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 0, 0, 0])
        .await
        .unwrap();
    c.write_all(&[0u8; 512]).await.unwrap();
    read_all(c).await;
    let mut c = TcpStream::connect(s.public).await.unwrap();
    c.write_all(&[0x00, 0x01, 0x02, 0xff]).await.unwrap();
    read_all(c).await;

    // Half a ClientHello and then silence: closed by the first-bytes timeout.
    let mut c = TcpStream::connect(s.public).await.unwrap();
    c.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc])
        .await
        .unwrap();
    read_all(c).await;
    // Nothing at all: closed too, and counted as a handshake that timed
    // out (it left no trace in the metrics).
    let timeouts = |m: String| {
        m.lines()
            .find_map(|l| {
                l.strip_prefix("anteroom_tls_handshake_failures_total{reason=\"timeout\"} ")
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = timeouts(s.metrics().await);
    let c = TcpStream::connect(s.public).await.unwrap();
    read_all(c).await;
    assert_eq!(timeouts(s.metrics().await), before + 1.0);
    // A client that hangs up mid-handshake.
    let mut c = TcpStream::connect(s.public).await.unwrap();
    c.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    drop(c);

    // After all of it, a real client is served.
    let h = handshake(s.public, HOST, client_config(ca.roots(), &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(h.alpn.as_deref(), Some(&b"h2"[..]));

    // Three days left: the expiry gauge says so (the log warns at start).
    let m = s.metrics().await;
    let left: f64 = m
        .lines()
        .find(|l| l.starts_with("anteroom_tls_cert_expiry_seconds{cert=\"server.tls\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(left > 2.0 * 86400.0 && left < 7.0 * 86400.0, "{left}");
    assert!(
        m.contains("anteroom_tls_handshake_failures_total{reason=\"plain_http\"}"),
        "{m}"
    );
    s.stop().await;
}

/// The first request head is due `server.header_read_timeout` after the
/// accept, the TLS handshake's time included: a client that spends most of
/// it before its ClientHello and most of it again before its head is closed
/// unanswered. (The wait for the first byte, the handshake and the head
/// had each been timed afresh: about three timeouts in all.)
#[tokio::test]
async fn the_handshake_and_the_first_head_share_one_timeout() {
    let ca = Ca::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&[HOST], 30).write(dir.path(), "site");
    let origin = Origin::options().echo_proto().start().await.addr;
    let tls = format!("cert = {cert:?}\nkey = {key:?}");
    let toml = config(dir.path(), origin)
        .server_line("header_read_timeout = \"4s\"")
        .tls(&tls)
        .toml();
    let s = try_start(dir, &toml).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(client_config(
        ca.roots(),
        &[b"http/1.1"],
    )));
    let name = rustls::pki_types::ServerName::try_from(HOST).unwrap();
    let request = b"GET /api/queue/position?eventId=tickets HTTP/1.1\r\nHost: tickets.test\r\n\r\n";

    // Within the timeout in all: answered.
    let tcp = TcpStream::connect(s.public).await.unwrap();
    let mut tls = connector.connect(name.clone(), tcp).await.unwrap();
    tls.write_all(request).await.unwrap();
    let mut answer = [0u8; 12];
    tls.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");

    // 2.5 s before the ClientHello, 3.5 s more before the head: each step
    // within the timeout, the whole well past it. (A handshake the server
    // ends for the deadline is the same closed connection.)
    let tcp = TcpStream::connect(s.public).await.unwrap();
    let opened = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let Ok(mut tls) = connector.connect(name, tcp).await else {
        s.stop().await;
        return;
    };
    tokio::time::sleep_until(opened + Duration::from_millis(6000)).await;
    // The write may already fail: the server has closed.
    let _ = tls.write_all(request).await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the connection was left open");
    assert!(
        out.is_empty(),
        "a head sent {:?} after the accept was answered: {}",
        opened.elapsed(),
        String::from_utf8_lossy(&out)
    );
    s.stop().await;
}

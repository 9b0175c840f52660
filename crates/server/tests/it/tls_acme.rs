//! Certificates from ACME against a real `pebble` (Debian's package) started
//! on loopback ports the test picks: pebble validates HTTP-01 for real
//! against our redirect listener; the account and certificate land in the
//! storage directory, are reused on restart, and an expiring certificate is
//! renewed.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::free_port;
use crate::support::origin::Origin;
use crate::support::tls::{Ca, config, wait_until};

/// pebble by PID: killed when dropped.
struct Pebble {
    child: Child,
    directory: String,
    management: SocketAddr,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts pebble with its HTTPS on a certificate from `ca`, validating
/// HTTP-01 on `http_port` (our redirect listener).
async fn start_pebble(ca: &Ca, dir: &Path, http_port: u16) -> Pebble {
    let Ok(path) = which("pebble") else {
        panic!("pebble is not installed: apt-get install pebble (scripts/test does)");
    };
    let leaf = ca.leaf(&["127.0.0.1", "localhost"], 30);
    let (cert, key) = leaf.write(dir, "pebble");
    let (acme, management, tls_port) = (free_port(), free_port(), free_port());
    let config = serde_json::json!({ "pebble": {
        "listenAddress": format!("127.0.0.1:{acme}"),
        "managementListenAddress": format!("127.0.0.1:{management}"),
        "certificate": cert, "privateKey": key,
        "httpPort": http_port, "tlsPort": tls_port,
        "ocspResponderURL": "", "externalAccountBindingRequired": false,
    }});
    let config_path = dir.join("pebble.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let log = std::fs::File::create(dir.join("pebble.log")).unwrap();
    let child = Command::new(path)
        .arg("-config")
        .arg(&config_path)
        .arg("-strict=false")
        // Real validation, just without pebble's random 0-15 s pauses and
        // its rejected nonces (instant-acme retries those, slowly).
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", "0")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let pebble = Pebble {
        child,
        directory: format!("https://127.0.0.1:{acme}/dir"),
        management: ([127, 0, 0, 1], management).into(),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", acme))
        .await
        .is_err()
    {
        let log = std::fs::read_to_string(dir.join("pebble.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "pebble did not start: {log}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    pebble
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

/// pebble's issuing root, from its management interface.
async fn pebble_root(ca: &Ca, pebble: &Pebble) -> String {
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!("https://{}/roots/0", pebble.management);
    client.get(url).send().await.unwrap().text().await.unwrap()
}

/// Does an HTTPS request to the server verify against pebble's root?
async fn verified_by(root_pem: &str, public: SocketAddr) -> bool {
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(root_pem.as_bytes()).unwrap())
        .resolve("localhost", public)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let url = format!("https://localhost:{}/queue/tickets", public.port());
    matches!(client.get(url).send().await, Ok(r) if r.status() == 200)
}

/// A server started by [`start_server`].
struct Started {
    public: SocketAddr,
    admin: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    dir: tempfile::TempDir,
}

/// Starts the server with ACME; the redirect listener was bound by the test
/// so pebble knows its port.
async fn start_server(
    dir: tempfile::TempDir,
    toml: &str,
    redirect: tokio::net::TcpListener,
) -> Started {
    let config = anteroom::Config::from_toml(toml).unwrap();
    let public = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (public_addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listeners = anteroom::Listeners {
        public,
        admin,
        redirect: Some(redirect),
    };
    let task = tokio::spawn(anteroom::run_listeners(listeners, config, async move {
        let _ = stopped.await;
    }));
    Started {
        public: public_addr,
        admin: admin_addr,
        stop,
        task,
        dir,
    }
}

#[tokio::test]
async fn pebble_issues_by_http01_the_certificate_is_kept_and_renewed() {
    let ca = Ca::new("pebble https ca");
    let dir = tempfile::tempdir().unwrap();
    let redirect = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirect_port = redirect.local_addr().unwrap().port();
    let pebble = start_pebble(&ca, dir.path(), redirect_port).await;
    let ca_root = dir.path().join("pebble-https-ca.pem");
    std::fs::write(&ca_root, &ca.pem).unwrap();
    let storage = dir.path().join("acme");
    let tls = format!(
        "redirect_listen = \"127.0.0.1:0\"\nacme = {{ directory = {:?}, domains = [\"localhost\"], contact = \"mailto:ops@example.com\", ca_root = {ca_root:?}, storage = {storage:?} }}",
        pebble.directory
    );
    let origin = Origin::options().echo_proto().start().await.addr;
    let toml = config(dir.path(), origin).tls(&tls).toml();

    // First start: no certificate yet; one is ordered and served.
    let Started {
        public,
        stop,
        task,
        dir,
        ..
    } = start_server(dir, &toml, redirect).await;
    let root = pebble_root(&ca, &pebble).await;
    wait_until("pebble's certificate is served", || {
        verified_by(&root, public)
    })
    .await;
    let cert_file = storage.join("localhost.cert.pem");
    let first = std::fs::read_to_string(&cert_file).unwrap();
    let account: Vec<_> = std::fs::read_dir(&storage)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("account-"))
        .collect();
    assert_eq!(account.len(), 1, "{account:?}");
    let account_file = storage.join(&account[0]);
    let account_json = std::fs::read_to_string(&account_file).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(storage.join("localhost.key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "the key is private");
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();

    // Restart with a stored certificate that expires in two days: it is
    // renewed with the same account.
    let expiring = ca.leaf(&["localhost"], 2);
    std::fs::write(storage.join("localhost.key.pem"), &expiring.key_pem).unwrap();
    std::fs::write(&cert_file, &expiring.cert_pem).unwrap();
    let redirect = tokio::net::TcpListener::bind(("127.0.0.1", redirect_port))
        .await
        .unwrap();
    // The storage directory lives as long as the server (`_dir`).
    let Started {
        public,
        stop,
        task,
        dir: _dir,
        ..
    } = start_server(dir, &toml, redirect).await;
    wait_until("the renewed certificate is served", || {
        verified_by(&root, public)
    })
    .await;
    let renewed = std::fs::read_to_string(&cert_file).unwrap();
    assert_ne!(renewed, first);
    assert_ne!(renewed, expiring.cert_pem);
    assert_eq!(
        std::fs::read_to_string(&account_file).unwrap(),
        account_json
    );
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// The expiry gauge of a certificate the CA will not renew keeps counting
/// down: set only when one was loaded or issued, a stored certificate
/// whose renewal kept failing read the same seconds left for good, and the
/// expiry alerts never fired. (No CA answers here at all.)
#[tokio::test]
async fn a_certificate_the_ca_will_not_renew_still_counts_down() {
    let ca = Ca::new("stored ca");
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("acme");
    std::fs::create_dir_all(&storage).unwrap();
    let stored = ca.leaf(&["localhost"], 20);
    std::fs::write(storage.join("localhost.key.pem"), &stored.key_pem).unwrap();
    std::fs::write(storage.join("localhost.cert.pem"), &stored.cert_pem).unwrap();
    let nobody = free_port();
    let tls = format!(
        "redirect_listen = \"127.0.0.1:0\"\nacme = {{ directory = \"https://127.0.0.1:{nobody}/dir\", domains = [\"localhost\"], contact = \"mailto:ops@example.com\", renew_before = \"30d\", storage = {storage:?} }}"
    );
    let origin = Origin::options().echo_proto().start().await.addr;
    let toml = config(dir.path(), origin).tls(&tls).toml();
    let redirect = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    // The storage directory lives as long as the server (`_dir`).
    let Started {
        admin,
        stop,
        task,
        dir: _dir,
        ..
    } = start_server(dir, &toml, redirect).await;
    let metrics_url = format!("http://{admin}/metrics");
    let read = || async {
        let text = match reqwest::get(&metrics_url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let value = |prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        (
            value("anteroom_tls_cert_expiry_seconds{cert=\"server.tls.acme\"} "),
            value("anteroom_tls_acme_orders_total{result=\"error\"} ").unwrap_or(0.0),
        )
    };
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    let (at_first, later) = loop {
        let (left, failed) = read().await;
        match (first, left) {
            (None, Some(left)) if failed >= 1.0 => first = Some((left, failed)),
            // A later failed order, seconds on.
            (Some((at, f)), Some(left)) if failed > f => break (at, left),
            _ => {}
        }
        assert!(Instant::now() < deadline, "two failed orders within 20 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(at_first <= 20.0 * 86_400.0, "{at_first}");
    assert!(
        later < at_first,
        "the gauge stood at {at_first} s across a failed order"
    );
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

//! Validation messages name the key of the bad value.

use super::*;

const BASE: &str = r#"
[server]
admin_token = "admin-token-123"
[keys]
secrets = ["0123456789abcdef0123456789abcdef"]
[[events]]
id = "drop"
origin = "http://127.0.0.1:9000"
paths = ["/tickets"]
admission = { mode = "batch", batch_size = 5, interval = "100ms" }
bots = { challenge = "medium", difficulty = 18, high_risk = "back_of_queue" }
"#;

/// Applies `edit` to the base document and expects the given error text.
fn check(edit: (&str, &str), expected: &str) {
    let text = BASE.replacen(edit.0, edit.1, 1);
    assert_ne!(text, BASE, "edit {edit:?} did not apply");
    match Config::from_toml(&text) {
        Ok(_) => panic!("{edit:?} was accepted"),
        Err(e) => assert_eq!(e.to_string(), expected, "for {edit:?}"),
    }
}

#[test]
fn the_base_document_is_valid_with_defaults() {
    let c = Config::from_toml(BASE).unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.server.admin_listen.to_string(), "127.0.0.1:9090");
    assert!(!c.server.insecure_cookies);
    // One event loop per core unless told otherwise.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    assert_eq!(c.server.connections.event_loops, cores);
    assert_eq!(
        c.store,
        StoreConfig::Embedded {
            path: "./anteroom-data".into(),
            timeout: Duration::from_secs(1),
        }
    );
    assert_eq!(c.server.drain.store_timeout, Duration::from_secs(1));
    // The embedded store takes the store's timeout too: it bounds a call
    // waiting on a hung disk, and the drain probe with it.
    let hung = BASE.replacen("[server]", "[store]\ntimeout = \"250ms\"\n\n[server]", 1);
    let c2 = Config::from_toml(&hung).unwrap();
    assert!(
        matches!(c2.store, StoreConfig::Embedded { timeout, .. } if timeout == Duration::from_millis(250))
    );
    assert_eq!(c2.server.drain.store_timeout, Duration::from_millis(250));
    let e = &c.events[0];
    assert_eq!(e.max_active, 500);
    assert_eq!(e.pass_ttl, Duration::from_secs(60));
    assert_eq!(e.token_ttl, Duration::from_secs(120));
    assert_eq!(
        e.admission,
        Admission::Batch {
            size: 5,
            interval: Duration::from_millis(100)
        }
    );
    assert_eq!(e.bots.challenge, ChallengeLevel::Medium);
}

#[test]
fn invalid_values_name_their_key() {
    let inv = "invalid configuration: ";
    check(
        ("id = \"drop\"", "id = \"drop\"\nmax_active = 0"),
        &format!("{inv}events[0].max_active (event \"drop\"): must be > 0"),
    );
    check(
        ("id = \"drop\"", "id = \"a b\""),
        &format!("{inv}events[0].id: must match ^[A-Za-z0-9_-]{{1,64}}$"),
    );
    check(
        ("id = \"drop\"", "id = \"drop\"\ntoken_ttl = \"soon\""),
        &format!(
            "{inv}events[0].token_ttl (event \"drop\"): \"soon\" is not a duration like \"90s\" or \"10m\""
        ),
    );
    // Every duration is bounded: one near u64::MAX seconds overflowed the
    // sums it goes into, and a pass_ttl of that size made nodes panic.
    check(
        (
            "id = \"drop\"",
            "id = \"drop\"\npass_ttl = \"18446744073709551615s\"",
        ),
        &format!("{inv}events[0].pass_ttl (event \"drop\"): must be at most 365d"),
    );
    check(
        ("[server]", "[server]\nshutdown_grace = \"366d\""),
        &format!("{inv}server.shutdown_grace: must be at most 365d"),
    );
    check(
        (
            "[server]",
            "[server]\nadmin_hosts = [\"ops.example\", \"ops.example:9090\"]",
        ),
        &format!(
            "{inv}server.admin_hosts[1]: \"ops.example:9090\" is not a host name (a name such as \"admin.example.com\", without scheme or port, or \"*\" for any)"
        ),
    );
    check(
        ("http://127.0.0.1:9000", "ftp://x"),
        &format!(
            "{inv}events[0].origin (event \"drop\"): \"ftp://x\" must be an http:// URL with a host"
        ),
    );
    // The proxy and the health probe speak plain HTTP: an https:// origin
    // would start and then answer every admitted visitor with a 502.
    check(
        ("http://127.0.0.1:9000", "https://app.example.com"),
        &format!(
            "{inv}events[0].origin (event \"drop\"): \"https://app.example.com\" must be an http:// URL: Anteroom speaks plain HTTP/1.1 to its origin (keep the origin on a private network, or give an https-only origin a local TLS proxy)"
        ),
    );
    // Credentials are refused and never quoted back.
    check(
        (
            "http://127.0.0.1:9000",
            "http://ops:hunter2@127.0.0.1:9000/app",
        ),
        &format!(
            "{inv}events[0].origin (event \"drop\"): \"http://…@127.0.0.1:9000/app\" must not carry credentials (user:password@)"
        ),
    );
    // A port no connection can be made to is refused, not a 502 for every
    // admitted visitor.
    for port in ["99999", "0", "-1", "65536", "+80", ""] {
        check(
            ("http://127.0.0.1:9000", &format!("http://127.0.0.1:{port}")),
            &format!(
                "{inv}events[0].origin (event \"drop\"): \"http://127.0.0.1:{port}\" has no usable port (1 to 65535)"
            ),
        );
    }
    check(
        (
            "admission = { mode = \"batch\", batch_size = 5, interval = \"100ms\" }",
            "admission = { mode = \"capacity\", health_url = \"http://o:0/h\", field = \"c\", target = 4 }",
        ),
        &format!(
            "{inv}events[0].admission.health_url (event \"drop\"): \"http://o:0/h\" has no usable port (1 to 65535)"
        ),
    );
    check(
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000/app?v=2"),
        &format!(
            "{inv}events[0].origin (event \"drop\"): \"http://127.0.0.1:9000/app?v=2\" must not carry a query: each request keeps its own"
        ),
    );
    check(
        (
            "[server]",
            "[server]\ndefault_origin = \"https://127.0.0.1:9000\"",
        ),
        &format!(
            "{inv}server.default_origin: \"https://127.0.0.1:9000\" must be an http:// URL: Anteroom speaks plain HTTP/1.1 to its origin (keep the origin on a private network, or give an https-only origin a local TLS proxy)"
        ),
    );
    check(
        (
            "admission = { mode = \"batch\", batch_size = 5, interval = \"100ms\" }",
            "admission = { mode = \"capacity\", health_url = \"http://a:b@o:1/h\", field = \"c\", target = 4 }",
        ),
        &format!(
            "{inv}events[0].admission.health_url (event \"drop\"): \"http://…@o:1/h\" must not carry credentials (user:password@)"
        ),
    );
    check(
        ("batch_size = 5", "batch_size = 0"),
        &format!("{inv}events[0].admission.batch_size (event \"drop\"): must be > 0"),
    );
    check(
        ("mode = \"batch\"", "mode = \"fifo\""),
        &format!(
            "{inv}events[0].admission.mode (event \"drop\"): \"fifo\" is not batch, continuous, capacity or adaptive"
        ),
    );
    check(
        ("high_risk = \"back_of_queue\"", "high_risk = \"shrug\""),
        &format!(
            "{inv}events[0].bots.high_risk (event \"drop\"): \"shrug\" is not back_of_queue, captcha, reject or allow"
        ),
    );
    check(
        ("0123456789abcdef0123456789abcdef", "short"),
        &format!("{inv}keys.secrets[0]: must be at least 32 bytes"),
    );
    check(
        ("admin_token = \"admin-token-123\"", "admin_token = \"\""),
        &format!(
            "{inv}server.admin_token: must be set (at least 8 characters; ANTEROOM_ADMIN_TOKEN)"
        ),
    );
    // A key the event's own choices leave unused does nothing: a mistake.
    check(
        (
            "mode = \"batch\", batch_size = 5, interval = \"100ms\"",
            "max_per_minute = 600",
        ),
        &format!(
            "{inv}events[0].admission.max_per_minute (event \"drop\"): is a key of mode \"continuous\", not used by mode \"batch\""
        ),
    );
    check(
        (
            "mode = \"batch\"",
            "mode = \"continuous\", max_per_minute = 600",
        ),
        &format!(
            "{inv}events[0].admission.batch_size (event \"drop\"): is a key of mode \"batch\", not used by mode \"continuous\""
        ),
    );
    check(
        (
            "id = \"drop\"",
            "id = \"drop\"\njwt = { algorithm = \"HS256\", secret_env = \"CARGO_PKG_DESCRIPTION\" }",
        ),
        &format!("{inv}events[0].jwt (event \"drop\"): is used only with identity = \"jwt\""),
    );
    // A token no Authorization header can carry could never be sent.
    check(
        (
            "admin_token = \"admin-token-123\"",
            "admin_token = \"tökén-with-ümlauts-0123\"",
        ),
        &format!(
            "{inv}server.admin_token: must be visible ASCII (it is sent in an Authorization header)"
        ),
    );
    // Times finer than a millisecond are 0 where they are used.
    check(
        ("[[events]]", "[[events]]\ntoken_ttl = \"999us\""),
        &format!("{inv}events[0].token_ttl (event \"drop\"): must be at least 1ms"),
    );
    check(
        ("[server]", "[bots]\nchallenge_ttl = \"0s\"\n\n[server]"),
        &format!("{inv}bots.challenge_ttl: must be at least 1ms"),
    );
    check(
        ("[server]", "[bots]\nchallenge_ttl = \"400d\"\n\n[server]"),
        &format!("{inv}bots.challenge_ttl: must be at most 365d"),
    );
    check(
        (
            "[server]",
            "[bots.captcha]\nverify_url = \"http://127.0.0.1:9/v\"\nsecret = \"s\"\ntimeout = \"0s\"\n\n[server]",
        ),
        &format!("{inv}bots.captcha.timeout: must be at least 1ms"),
    );
    check(
        ("[server]", "[store]\ntimeout = \"0s\"\n\n[server]"),
        &format!("{inv}store.timeout: must be > 0"),
    );
    check(
        ("[server]", "[server]\nlisten = \"localhost\""),
        &format!("{inv}server.listen: \"localhost\" is not an address like 127.0.0.1:8080"),
    );
    check(
        ("[server]", "[server]\nevent_loops = 5000"),
        &format!("{inv}server.event_loops: must be between 0 (the shared runtime) and 1024"),
    );
    check(
        ("[server]", "[server]\nevent_loops = -1"),
        "configuration could not be read: server.event_loops: invalid value: found signed int, expected u64 (in TOML source string)",
    );
    check(
        ("[server]", "[server]\nlog_format = \"xml\""),
        &format!("{inv}server.log_format: \"xml\" is not \"text\" or \"json\""),
    );
    check(
        ("id = \"drop\"", "id = \"drop\"\nidentity = \"jwt\""),
        &format!(
            "{inv}events[0].jwt.algorithm (event \"drop\"): \"\" is not HS256, RS256 or EdDSA"
        ),
    );
}

#[test]
fn unknown_keys_and_duplicates_are_refused() {
    let text = BASE.replacen("[server]", "[server]\nlisten_port = 1", 1);
    let err = Config::from_toml(&text).unwrap_err().to_string();
    assert!(err.contains("listen_port"), "{err}");
    let twice = format!(
        "{BASE}\n[[events]]\nid = \"drop\"\norigin = \"http://127.0.0.1:9001\"\npaths = [\"/other\"]\n"
    );
    assert_eq!(
        Config::from_toml(&twice).unwrap_err().to_string(),
        "invalid configuration: events[1].id: duplicate event id \"drop\""
    );
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the error type
fn env_overrides_file_and_cli_overrides_env() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("anteroom.toml");
    std::fs::write(&file, BASE).unwrap();
    figment::Jail::expect_with(|jail| {
        jail.set_env("ANTEROOM_SERVER__ADMIN_LISTEN", "127.0.0.1:9999");
        jail.set_env("ANTEROOM_SERVER__LISTEN", "127.0.0.1:8888");
        jail.set_env("ANTEROOM_ADMIN_TOKEN", "from-the-environment");
        jail.set_env("ANTEROOM_SECRET", "ffffffffffffffffffffffffffffffffffff");
        let overrides = Overrides {
            listen: Some("127.0.0.1:7777".into()),
            admin_listen: None,
        };
        let c = Config::load(Some(&file), &overrides).unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:7777");
        assert_eq!(c.server.admin_listen.to_string(), "127.0.0.1:9999");
        assert_eq!(c.server.admin_tokens[0].token, "from-the-environment");
        assert_eq!(
            c.secrets,
            vec!["ffffffffffffffffffffffffffffffffffff".to_owned()]
        );
        Ok(())
    });
}

#[test]
fn cookie_defaults_follow_secure() {
    use crate::identity::SameSite;
    let c = Config::from_toml(BASE).unwrap();
    assert!(c.server.cookies.secure);
    assert_eq!(c.server.cookies.session_same_site, SameSite::Lax);
    assert_eq!(c.server.cookies.pass_same_site, SameSite::None);
    assert!(!c.server.cookies.read_unprefixed);
    assert_eq!(c.limits.entries_per_ip, 20);
    assert_eq!(c.limits.entries_window, Duration::from_secs(600));
    let plain = BASE.replacen("[server]\n", "[server]\ninsecure_cookies = true\n", 1);
    let c = Config::from_toml(&plain).unwrap();
    assert!(!c.server.cookies.secure);
    assert_eq!(c.server.cookies.pass_same_site, SameSite::Lax);
    let strict = BASE.replacen(
        "[keys]",
        "[server.cookies]\nsession_same_site = \"strict\"\npass_same_site = \"lax\"\nread_unprefixed = true\n[keys]",
        1,
    );
    let c = Config::from_toml(&strict).unwrap();
    assert_eq!(c.server.cookies.session_same_site, SameSite::Strict);
    assert_eq!(c.server.cookies.pass_same_site, SameSite::Lax);
    assert!(c.server.cookies.read_unprefixed);
}

#[test]
fn session_cookie_none_is_refused() {
    let inv = "invalid configuration: ";
    check(
        (
            "[keys]",
            "[server.cookies]\nsession_same_site = \"none\"\n[keys]",
        ),
        &format!(
            "{inv}server.cookies.session_same_site: \"none\" would let any site make queue calls as the visitor; use \"lax\" or \"strict\""
        ),
    );
    check(
        (
            "[keys]",
            "[server.cookies]\npass_same_site = \"loose\"\n[keys]",
        ),
        &format!("{inv}server.cookies.pass_same_site: must be \"strict\", \"lax\" or \"none\""),
    );
    check(
        (
            "admin_token = \"admin-token-123\"",
            "admin_token = \"admin-token-123\"\ninsecure_cookies = true\n[server.cookies]\npass_same_site = \"none\"",
        ),
        &format!(
            "{inv}server.cookies.pass_same_site: \"none\" needs Secure cookies, which server.insecure_cookies = true turns off (browsers drop SameSite=None without Secure); use \"lax\""
        ),
    );
}

// Variables from the environment: cargo sets `CARGO_PKG_*` for every test
// run, so these need no process-wide `set_var`.
const LONG_VAR: &str = "CARGO_PKG_DESCRIPTION";
const SHORT_VAR: &str = "CARGO_PKG_NAME";
/// Long, and without spaces: a token an `Authorization` header can carry.
const TOKEN_VAR: &str = "CARGO_MANIFEST_DIR";

#[test]
fn admin_tokens_are_named_with_roles() {
    let tokens = format!(
        r#"
[[server.admin_tokens]]
name = "ops"
token = "ops-token-0123456789"
[[server.admin_tokens]]
name = "wall"
token_env = "{TOKEN_VAR}"
role = "read"
"#
    );
    let c = Config::from_toml(&format!("{BASE}{tokens}")).unwrap();
    let t = &c.server.admin_tokens;
    assert_eq!(
        t.iter()
            .map(|t| (t.name.as_str(), t.role))
            .collect::<Vec<_>>(),
        [
            ("admin", AdminRole::Admin),
            ("ops", AdminRole::Admin),
            ("wall", AdminRole::Read)
        ]
    );
    assert_eq!(t[2].token, env!("CARGO_MANIFEST_DIR"));
    assert!(
        !format!("{t:?}").contains("token-0123"),
        "Debug hides tokens"
    );
    let inv = "invalid configuration: ";
    let bad = |from: &str, to: &str, want: &str| {
        let text = format!("{BASE}{}", tokens.replacen(from, to, 1));
        let err = Config::from_toml(&text).unwrap_err().to_string();
        assert_eq!(err, format!("{inv}{want}"));
    };
    bad(
        "role = \"read\"",
        "role = \"root\"",
        "server.admin_tokens[1].role: \"root\" is not \"admin\" or \"read\"",
    );
    bad(
        "name = \"wall\"",
        "name = \"ops\"",
        "server.admin_tokens[1].name: \"ops\" is already the name of another admin token",
    );
    bad(
        "role = \"read\"",
        "token = \"another-token-0123456789\"",
        "server.admin_tokens[1].token: set exactly one of token and token_env",
    );
    bad(
        TOKEN_VAR,
        "ANTEROOM_TEST_UNSET_VAR",
        "server.admin_tokens[1].token_env: environment variable \"ANTEROOM_TEST_UNSET_VAR\" is not set",
    );
    bad(
        TOKEN_VAR,
        SHORT_VAR,
        "server.admin_tokens[1].token: must be at least 16 characters",
    );
    bad(
        "name = \"wall\"",
        "name = \"a b\"",
        "server.admin_tokens[1].name: must match ^[A-Za-z0-9_.@-]{1,64}$",
    );
    // Named tokens alone are enough.
    let only_named = format!(
        "{}{tokens}",
        BASE.replace("admin_token = \"admin-token-123\"", "")
    );
    assert_eq!(
        Config::from_toml(&only_named)
            .unwrap()
            .server
            .admin_tokens
            .len(),
        2
    );
}

#[test]
fn the_jwt_key_comes_from_a_file_or_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key");
    let secret = "a-jwt-secret-of-at-least-32-bytes-long!!";
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let with = |jwt: &str| {
        BASE.replacen(
            "id = \"drop\"",
            &format!("id = \"drop\"\nidentity = \"jwt\"\njwt = {jwt}"),
            1,
        )
    };
    let key = |c: Config| match &c.events[0].identity {
        Identity::Jwt(j) => j.key.clone(),
        Identity::Cookie => panic!("cookie"),
    };
    let from_file = with(&format!(
        "{{ algorithm = \"HS256\", secret_file = \"{}\" }}",
        file.display()
    ));
    assert_eq!(key(Config::from_toml(&from_file).unwrap()), secret);
    let c = Config::from_toml(&with(&format!(
        "{{ algorithm = \"HS256\", secret_env = \"{LONG_VAR}\" }}"
    )))
    .unwrap();
    let long = env!("CARGO_PKG_DESCRIPTION");
    assert!(
        !format!("{:?}", c.events[0].identity).contains(long),
        "Debug hides the key"
    );
    assert_eq!(key(c), long);
    let inv = "invalid configuration: ";
    let err = |jwt: &str| Config::from_toml(&with(jwt)).unwrap_err().to_string();
    assert_eq!(
        err(&format!(
            "{{ algorithm = \"HS256\", secret = \"{secret}\", secret_env = \"X\" }}"
        )),
        format!(
            "{inv}events[0].jwt.secret_env (event \"drop\"): set only one of secret and secret_env"
        )
    );
    assert!(
        err("{ algorithm = \"HS256\", secret_file = \"/nonexistent/key\" }").starts_with(&format!(
            "{inv}events[0].jwt.secret_file (event \"drop\"): cannot read \"/nonexistent/key\""
        ))
    );
    assert_eq!(
        err("{ algorithm = \"HS256\", secret_env = \"ANTEROOM_TEST_UNSET_VAR\" }"),
        format!(
            "{inv}events[0].jwt.secret_env (event \"drop\"): environment variable \"ANTEROOM_TEST_UNSET_VAR\" is not set"
        )
    );
    assert_eq!(
        err("{ algorithm = \"HS256\" }"),
        format!(
            "{inv}events[0].jwt.secret (event \"drop\"): HS256 needs a secret of at least 32 bytes (secret_file, secret_env or secret)"
        )
    );
}

/// A key file's path can come through the admin API, and validation runs
/// on the event loop: a FIFO (whose `open` waits for a writer) froze every
/// connection of the node, and `/dev/zero` would be read until memory ran
/// out. Only a regular file of at most 64 KiB is read.
#[test]
fn a_key_file_that_is_not_a_small_regular_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let big = dir.path().join("big");
    std::fs::write(&big, "k".repeat(64 * 1024 + 1)).unwrap();
    let inv = "invalid configuration: ";
    for (path, why) in [
        (fifo.display().to_string(), "not a regular file"),
        ("/dev/zero".to_owned(), "not a regular file"),
        (dir.path().display().to_string(), "not a regular file"),
        (big.display().to_string(), "larger than 64 KiB"),
    ] {
        let text = BASE.replacen(
            "id = \"drop\"",
            &format!(
                "id = \"drop\"\nidentity = \"jwt\"\njwt = {{ algorithm = \"HS256\", secret_file = \"{path}\" }}"
            ),
            1,
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(
                Config::from_toml(&text)
                    .map(drop)
                    .map_err(|e| e.to_string()),
            );
        });
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("reading {path} hung"));
        assert_eq!(
            got,
            Err(format!(
                "{inv}events[0].jwt.secret_file (event \"drop\"): cannot read \"{path}\": {why}"
            )),
        );
    }
}

#[test]
fn an_event_beside_others_follows_the_files_rules_across_events() {
    let running = Config::from_toml(BASE).unwrap().events;
    let held = || running.iter().map(|e| (&e.id, e.paths.as_slice()));
    let table = |id: &str, path: &str| RawEvent {
        id: Some(id.to_owned()),
        origin: Some("http://127.0.0.1:9001".to_owned()),
        paths: Some(vec![path.to_owned()]),
        ..RawEvent::default()
    };
    // A prefix the gate takes for the other's is refused, in any spelling:
    // the gate drops trailing dots, `;params` and encoded spaces too.
    for path in [
        "/tickets",
        "/TICKETS/",
        "/tickets.",
        "/Tickets;x",
        "/tickets%3Bjsessionid=1",
        "/%20tickets%20",
    ] {
        let err = event_beside("event", &table("vip", path), held())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("event.paths[0]")
                && err.contains("already protected by another event (\"drop\")"),
            "{err}"
        );
    }
    let err = event_beside("event", &table("drop", "/vip"), held())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("event.id") && err.contains("duplicate event id"),
        "{err}"
    );
    // The event itself is checked in full.
    let err = event_beside(
        "event",
        &RawEvent {
            origin: None,
            ..table("vip", "/vip")
        },
        held(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("event.origin"), "{err}");
    let ok = event_beside("event", &table("vip", "/vip"), held()).unwrap();
    assert_eq!(
        (ok.id.as_str(), ok.paths.as_slice()),
        ("vip", &["/vip".to_owned()][..])
    );
}

/// The text of a figment refusal, for the tests below.
fn refusal(result: Result<Config, LoadError>) -> String {
    match result {
        Ok(_) => panic!("the document was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the error type
fn a_refused_value_is_named_by_its_key_and_kind_never_quoted() {
    const SECRET: &str = "s3cret-s3cret-s3cret-s3cret-s3cret";
    // A secret given as a string where the file takes a list of them.
    let text = BASE.replace(
        "secrets = [\"0123456789abcdef0123456789abcdef\"]",
        &format!("secrets = \"{SECRET}\""),
    );
    let err = refusal(Config::from_toml(&text));
    assert!(
        err.contains("keys.secrets: invalid type: found string, expected a sequence"),
        "{err}"
    );
    assert!(!err.contains(SECRET), "{err}");
    // Every kind of value keeps its kind and loses its text.
    let err = refusal(Config::from_toml(
        &BASE.replace("batch_size = 5", "batch_size = -7331"),
    ));
    assert!(
        err.contains("events[0].admission.batch_size (event \"drop\"): invalid value: found signed int, expected"),
        "{err}"
    );
    assert!(!err.contains("7331"), "{err}");

    // A syntax error on the secret's own line: where, and why, but not the line.
    let text = BASE.replace("admin-token-123\"", &format!("{SECRET}\n"));
    let err = refusal(Config::from_toml(&text));
    assert!(err.contains("line 3"), "the position is kept: {err}");
    assert!(!err.contains(SECRET), "{err}");

    // The same secret set in the environment under the list's key.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("anteroom.toml");
    std::fs::write(&file, BASE).unwrap();
    figment::Jail::expect_with(|jail| {
        jail.set_env("ANTEROOM_KEYS__SECRETS", SECRET);
        let err = refusal(Config::load(Some(&file), &Overrides::default()));
        assert!(
            err.contains("keys.secrets: invalid type: found string, expected a sequence"),
            "{err}"
        );
        assert!(!err.contains(SECRET), "{err}");
        Ok(())
    });
}

#[test]
fn an_admin_tokens_surrounding_whitespace_is_taken_off() {
    // As a secret file or variable often ends: the header's token is
    // trimmed, so the configured one is too.
    let text = BASE.replacen("\"admin-token-123\"", "\"admin-token-123\\n\"", 1);
    let c = Config::from_toml(&text).unwrap();
    assert_eq!(c.server.admin_tokens[0].token, "admin-token-123");
    // Spaces inside are sent as they are: a passphrase is a token.
    let text = BASE.replacen("\"admin-token-123\"", "\"correct horse battery staple\"", 1);
    let c = Config::from_toml(&text).unwrap();
    assert_eq!(
        c.server.admin_tokens[0].token,
        "correct horse battery staple"
    );
}

/// A pass may not outlive the store's record of its session's release (a
/// released session's pass would work again once it was gone): a longer
/// `pass_ttl` is used as the longest, not refused, so an event stored
/// with one before the bound still runs, its paths protected.
#[test]
fn a_pass_may_live_until_the_store_forgets_its_sessions_release() {
    for ttl in ["59m30s", "59m31s", "2h", "365d"] {
        let text = BASE.replacen(
            "id = \"drop\"",
            &format!("id = \"drop\"\npass_ttl = \"{ttl}\""),
            1,
        );
        let c = Config::from_toml(&text).unwrap();
        assert_eq!(c.events[0].pass_ttl, crate::config::PASS_TTL_MAX, "{ttl}");
    }
    let text = BASE.replacen("id = \"drop\"", "id = \"drop\"\npass_ttl = \"59m\"", 1);
    assert_eq!(
        Config::from_toml(&text).unwrap().events[0].pass_ttl,
        Duration::from_secs(59 * 60)
    );
    assert_eq!(
        crate::config::PASS_TTL_MAX + crate::config::REVOCATION_MARGIN,
        Duration::from_micros(anteroom_store::REVOCATION_RETENTION_US as u64)
    );
}

//! The admin API's rules against the real server: named tokens and the
//! read-only role, PATCH, PUT validated like the file, DELETE, close until
//! reopen, the audit trail, redacted secrets and the start-up rule when the
//! config file and stored changes differ.

use std::sync::OnceLock;
use std::time::Duration;

use crate::support::config::{ADMIN_TOKEN, Event, FAST_BATCH};
use crate::support::logs::LogBuf;
use crate::support::server::{self, TestServer};
use crate::support::visitor::Visitor;
use http::{Method, StatusCode};
use serde_json::{Value, json};

const OPS: &str = "ops-token-0123456789abcdef";
const WALL: &str = "wall-token-0123456789abcdef";
const JWT_SECRET: &str = "jwt-secret-jwt-secret-jwt-secret-0123456789";

/// Named tokens beside the single `admin_token` (TOML appended to the
/// first event's table, so the array of tables comes after it).
const TOKENS: &str = r#"
[[server.admin_tokens]]
name = "ops"
token = "ops-token-0123456789abcdef"
[[server.admin_tokens]]
name = "wall"
token = "wall-token-0123456789abcdef"
role = "read"
"#;

/// Every log line of this test binary, to check what the server logs.
fn logs() -> LogBuf {
    static LOGS: OnceLock<LogBuf> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = LogBuf::default();
        tracing::subscriber::set_global_default(buf.subscriber()).unwrap();
        buf
    })
    .clone()
}

fn log_text() -> String {
    logs().text()
}

async fn call(
    s: &TestServer,
    m: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let body = body.map(|b| b.to_string());
    let (status, _, bytes) = s.admin_call(m, path, Some(token), body.as_deref()).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn audit(s: &TestServer, query: &str) -> Vec<Value> {
    let (status, body) = call(
        s,
        Method::GET,
        &format!("/admin/audit{query}"),
        ADMIN_TOKEN,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["entries"].as_array().unwrap().clone()
}

/// A token cannot be guessed at the speed the listener answers: twenty
/// wrong tokens from an address within a minute, and its next calls are
/// `429 rate_limited` with `Retry-After`, the right token's too (the answer
/// must not tell a guess that hit); the dashboard's assets and the health
/// checks are not held.
#[tokio::test]
async fn an_address_that_guesses_tokens_is_held_off() {
    let s = TestServer::start("").await;
    for i in 0..20 {
        let (status, _, _) = s
            .admin_get("/admin/events", Some(&format!("guess-{i:08}")))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let (status, headers, body) = s
        .admin_get("/admin/events", Some(crate::support::config::ADMIN_TOKEN))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"], "rate_limited");
    let (status, _, _) = s.admin_get("/healthz", None).await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await;
}

/// DNS rebinding: a page whose own name was pointed at the admin listener
/// after it loaded reaches the listener through the operator's browser, by
/// that name. Such a request is answered `421 unknown_host` before any
/// token is read, so the page can neither read the metrics nor lock the
/// operator's address out; addresses, `localhost` and the names listed in
/// `server.admin_hosts` are answered.
#[tokio::test]
async fn a_page_rebound_to_the_admin_listener_by_its_name_is_not_answered() {
    let origin = crate::support::origin::Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = server::config(dir.path(), origin.addr, server::tickets(origin.addr))
        .server_line(r#"admin_hosts = ["ops.example"]"#)
        .toml();
    let s = TestServer::start_with(&toml, origin, dir).await;
    let port = s.admin.port();
    let named = |host: String, path: &str, token: Option<String>| {
        let mut headers = vec![("host".to_owned(), host)];
        if let Some(t) = token {
            headers.push(("authorization".to_owned(), format!("Bearer {t}")));
        }
        let url = format!("http://{}{path}", s.admin);
        async move { server::send(Method::GET, &url, &headers, None).await }
    };
    let rebound = format!("rebind.attacker.example:{port}");
    for path in [
        "/metrics",
        "/openapi.json",
        "/dashboard",
        "/healthz",
        "/nothing",
    ] {
        let (status, _, body) = named(rebound.clone(), path, None).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{path}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "unknown_host", "{path}");
    }
    for i in 0..40 {
        let (status, _, _) = named(
            rebound.clone(),
            "/admin/events",
            Some(format!("guess-{i:08}")),
        )
        .await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "guess {i}");
    }
    // No guess counted: the operator's own calls are answered, by address,
    // by `localhost` and by the listed name in any case.
    for host in [
        s.admin.to_string(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("OPS.example.:{port}"),
    ] {
        let (status, _, _) =
            named(host.clone(), "/admin/events", Some(ADMIN_TOKEN.to_owned())).await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
    let (status, _, _) = named(format!("other.example:{port}"), "/healthz", None).await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
    s.stop().await;
}

/// A request without a token is no guess: any page open in the operator's
/// browser can send those cross-site (an image, a form post), and counted,
/// they kept the operator's own address locked out of the admin API and
/// the dashboard.
#[tokio::test]
async fn requests_without_a_token_do_not_lock_the_operator_out() {
    let s = TestServer::start("").await;
    for _ in 0..40 {
        let (status, _, _) = s.admin_get("/admin/events", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, _, _) = s
        .admin_get("/admin/events", Some(crate::support::config::ADMIN_TOKEN))
        .await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await;
}

#[tokio::test]
async fn named_tokens_and_the_read_only_role() {
    let _ = logs();
    let s = TestServer::start(TOKENS).await;
    // Read: every GET works with the read-only token.
    let (status, body) = call(&s, Method::GET, "/admin/events", WALL, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.as_array().unwrap().len(), 2);
    assert_eq!(
        call(&s, Method::GET, "/admin/audit", WALL, None).await.0,
        StatusCode::OK
    );
    // A write with it is 403 JSON, and nothing changes.
    for (m, path, body) in [
        (Method::POST, "/admin/events/tickets/pause", None),
        (
            Method::PATCH,
            "/admin/events/tickets",
            Some(json!({"max_active": 9})),
        ),
        (
            Method::PUT,
            "/admin/events/x",
            Some(json!({"origin": "http://127.0.0.1:1"})),
        ),
        (Method::DELETE, "/admin/events/other", None),
    ] {
        let (status, err) = call(&s, m.clone(), path, WALL, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{m} {path}");
        assert_eq!(err["error"], "forbidden");
    }
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", WALL, None).await;
    assert_eq!(
        (ev["state"].as_str(), ev["config"]["max_active"].as_u64()),
        (Some("running"), Some(2))
    );
    // Unknown, truncated and missing tokens are 401.
    for t in ["nope", &OPS[..OPS.len() - 1], ""] {
        assert_eq!(
            call(&s, Method::GET, "/admin/events", t, None).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    // The admin role writes, and the trail names the token.
    assert_eq!(
        call(&s, Method::POST, "/admin/events/tickets/pause", OPS, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(
            &s,
            Method::POST,
            "/admin/events/tickets/resume",
            ADMIN_TOKEN,
            None
        )
        .await
        .0,
        StatusCode::NO_CONTENT
    );
    let trail = audit(&s, "?event=tickets").await;
    assert_eq!(trail.len(), 2, "{trail:?}");
    assert_eq!(
        (trail[0]["action"].as_str(), trail[0]["by"].as_str()),
        (Some("resume"), Some("admin"))
    );
    assert_eq!(
        (trail[1]["action"].as_str(), trail[1]["by"].as_str()),
        (Some("pause"), Some("ops"))
    );
    assert_eq!(trail[1]["before"], json!({"state": "running"}));
    assert_eq!(trail[1]["after"], json!({"state": "paused"}));
    // One structured line per action; no token value is ever logged.
    let text = log_text();
    assert!(
        text.contains("admin action") && text.contains("by=ops"),
        "{text}"
    );
    for secret in [OPS, WALL, ADMIN_TOKEN] {
        assert!(!text.contains(secret), "a token was logged");
    }
    s.stop().await;
}

#[tokio::test]
async fn patch_changes_only_the_fields_it_names() {
    let s = TestServer::start("").await;
    let (status, ev) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"max_active": 7})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert_eq!(ev["config"]["max_active"], 7);
    assert_eq!(
        ev["config"]["paths"],
        json!(["/tickets"]),
        "other fields kept"
    );
    assert_eq!(ev["config"]["admission"]["interval"], "100ms");
    // Nested tables merge too; null resets a field to its default.
    let (status, ev) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"admission": {"batch_size": 3}, "max_active": null})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert_eq!(
        ev["config"]["admission"],
        json!({"mode": "batch", "batch_size": 3, "interval": "100ms"})
    );
    assert!(ev["config"]["max_active"].is_null());
    // A bad value is refused naming its key; nothing changes.
    for (patch, needle) in [
        (json!({"origin": ""}), "event.origin"),
        (json!({"token_ttl": "soon"}), "event.token_ttl"),
        // A duration past any sum it goes into: stored, it made every node
        // panic at start.
        (
            json!({"pass_ttl": "18446744073709551615s"}),
            "event.pass_ttl",
        ),
        (json!({"nope": 1}), "unknown field"),
        (json!({"id": "other"}), "id differs"),
        (json!([1]), "JSON object"),
    ] {
        let (status, err) = call(
            &s,
            Method::PATCH,
            "/admin/events/tickets",
            ADMIN_TOKEN,
            Some(patch.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{patch}");
        assert_eq!(err["error"], "bad_request");
        assert!(err["message"].as_str().unwrap().contains(needle), "{err}");
    }
    let (status, _) = call(
        &s,
        Method::PATCH,
        "/admin/events/nope",
        ADMIN_TOKEN,
        Some(json!({"max_active": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let trail = audit(&s, "?action=patch").await;
    assert_eq!(trail.len(), 2);
    assert_eq!(trail[1]["changed"], json!(["max_active"]));
    assert_eq!(
        (
            trail[1]["before"]["max_active"].as_u64(),
            trail[1]["after"]["max_active"].as_u64()
        ),
        (Some(2), Some(7))
    );
    assert_eq!(trail[0]["changed"], json!(["admission", "max_active"]));
    s.stop().await;
}

/// Puts an event "vip" on `path`, which must be refused with `400`; the
/// refusal's message.
async fn refused_vip_on(s: &TestServer, origin: &str, path: &str) -> String {
    let (status, err) = call(
        s,
        Method::PUT,
        "/admin/events/vip",
        ADMIN_TOKEN,
        Some(json!({"origin": origin, "paths": [path]})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {err}");
    err["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn put_validates_exactly_like_the_config_file() {
    let s = TestServer::start("").await;
    let origin = format!("http://{}", s.origin_addr);
    // A path another event owns is refused, in any spelling the gate treats as the same.
    for path in ["/tickets", "/TICKETS/", "/tickets.", "/Tickets;x", "/other"] {
        let msg = refused_vip_on(&s, &origin, path).await;
        assert!(
            msg.contains("event.paths[0]") && msg.contains("already protected by another event"),
            "{msg}"
        );
    }
    // The same table in a file is refused with the same words.
    let dir = tempfile::tempdir().unwrap();
    let file = server::config(dir.path(), s.origin_addr, server::tickets(s.origin_addr))
        .event(Event::new("vip", &origin).paths(&["/TICKETS/"]))
        .toml();
    let err = anteroom::Config::from_toml(&file).unwrap_err().to_string();
    assert!(
        err.contains("events[2].paths[0]")
            && err.contains("already protected by another event (\"tickets\")"),
        "{err}"
    );
    // Replacing an event with its own paths is fine; a new one goes live at once.
    let (status, _) = call(
        &s,
        Method::PUT,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"origin": origin, "paths": ["/tickets"], "max_active": 3})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, ev) = call(
        &s,
        Method::PUT,
        "/admin/events/vip",
        ADMIN_TOKEN,
        Some(json!({"origin": origin, "paths": ["/vip"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    let (status, headers, _) = Visitor::default()
        .call(
            Method::GET,
            &s.url("/vip/seat"),
            &[("accept", "text/html")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FOUND);
    assert!(
        headers["location"]
            .to_str()
            .unwrap()
            .starts_with("/queue/vip")
    );
    let trail = audit(&s, "?event=vip").await;
    assert_eq!(
        (trail[0]["action"].as_str(), trail[0]["before"].is_null()),
        (Some("put"), true)
    );
    s.stop().await;
}

#[tokio::test]
async fn close_is_final_until_reopen() {
    let s = TestServer::start("").await;
    let post = |what: &'static str| {
        let s = &s;
        async move {
            call(
                s,
                Method::POST,
                &format!("/admin/events/tickets/{what}"),
                ADMIN_TOKEN,
                None,
            )
            .await
        }
    };
    assert_eq!(post("close").await.0, StatusCode::NO_CONTENT);
    assert_eq!(
        post("close").await.0,
        StatusCode::NO_CONTENT,
        "repeating is harmless"
    );
    for what in ["resume", "pause"] {
        let (status, err) = post(what).await;
        assert_eq!(status, StatusCode::CONFLICT, "{what}");
        assert_eq!(err["error"], "event_closed");
    }
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None).await;
    assert_eq!(ev["state"], "closed");
    assert_eq!(post("reopen").await.0, StatusCode::NO_CONTENT);
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None).await;
    assert_eq!(ev["state"], "running");
    assert_eq!(post("pause").await.0, StatusCode::NO_CONTENT);
    assert_eq!(
        post("reopen").await.0,
        StatusCode::NO_CONTENT,
        "nothing to reopen"
    );
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None).await;
    assert_eq!(ev["state"], "paused", "reopen is not resume");
    let actions: Vec<String> = audit(&s, "?event=tickets")
        .await
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(actions, ["reopen", "pause", "reopen", "close", "close"]);
    s.stop().await;
}

/// A new visitor of `tickets`, queued, admitted, redeemed and let through
/// the gate once.
async fn through_the_gate(s: &TestServer) -> Visitor {
    let mut v = Visitor::default();
    v.enter(s, "tickets").await;
    v.until_active(s, "tickets", Duration::from_secs(10), &mut Vec::new())
        .await;
    assert_eq!(v.fetch(s, "/tickets/a").await, StatusCode::OK);
    v
}

#[tokio::test]
async fn delete_is_refused_while_visitors_are_present_unless_forced() {
    let s = TestServer::start("").await;
    // A visitor with a session, whose pass the event started again from
    // the file at the end must refuse.
    let mut p = through_the_gate(&s).await;
    let mut v = Visitor::default();
    let (status, _) = v
        .json(
            Method::POST,
            &s.url("/api/queue/enter?eventId=tickets"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, err) = call(
        &s,
        Method::DELETE,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(err["error"], "visitors_present");
    let (status, _) = call(
        &s,
        Method::DELETE,
        "/admin/events/tickets?force=maybe",
        ADMIN_TOKEN,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = call(
        &s,
        Method::DELETE,
        "/admin/events/tickets?force=true",
        ADMIN_TOKEN,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let (status, err) = v
        .json(
            Method::GET,
            &s.url("/api/queue/position?eventId=tickets"),
            None,
        )
        .await;
    assert_eq!(
        (status, err["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("unknown_event"))
    );
    // An empty event goes without force; the trail outlives both.
    assert_eq!(
        call(&s, Method::DELETE, "/admin/events/other", ADMIN_TOKEN, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    let trail = audit(&s, "?action=delete").await;
    assert_eq!(trail.len(), 2);
    let tickets = trail.iter().find(|e| e["event"] == "tickets").unwrap();
    let before = &tickets["before"];
    let present = ["waiting", "admitted", "active"].map(|k| before[k].as_u64().unwrap());
    assert_eq!(present.iter().sum::<u64>(), 2, "{before}");
    // Re-created through the API, the queue starts empty.
    let origin = format!("http://{}", s.origin_addr);
    let (status, ev) = call(
        &s,
        Method::PUT,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"origin": origin, "paths": ["/tickets"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ev["stats"]["waiting"], 0);
    // Deleted, an unchanged file table stays deleted after a restart.
    assert_eq!(
        call(
            &s,
            Method::DELETE,
            "/admin/events/tickets",
            ADMIN_TOKEN,
            None
        )
        .await
        .0,
        StatusCode::NO_CONTENT
    );
    let toml = server::config(s.dir(), s.origin_addr, server::tickets(s.origin_addr)).toml();
    let s = s.restart(&toml).await;
    assert_eq!(
        call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(&s, Method::GET, "/admin/events/other", ADMIN_TOKEN, None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    // A changed table in the file brings it back.
    let toml = server::config(
        s.dir(),
        s.origin_addr,
        server::tickets(s.origin_addr).line("pre_window = \"30s\""),
    )
    .toml();
    let s = s.restart(&toml).await;
    assert_eq!(
        call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        p.fetch(&s, "/tickets/a").await,
        StatusCode::TOO_MANY_REQUESTS,
        "a pass of the deleted event opened the event the file started again"
    );
    s.stop().await;
}

/// A pass outlives no deletion: its session was the deleted event's, and
/// an event created again under the same id (the same table, the same
/// paths) lets it through no more, while the new event's own visitors pass.
/// Before, the store forgot the session and its revocations but the pass
/// kept its signature and its event id: it opened the new event's pages
/// without a wait until it ran out.
#[tokio::test]
async fn a_deleted_events_pass_opens_nothing_of_the_event_made_again() {
    let s = TestServer::start("").await;
    let mut v = through_the_gate(&s).await;
    let (status, _) = call(
        &s,
        Method::DELETE,
        "/admin/events/tickets?force=true",
        ADMIN_TOKEN,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let origin = format!("http://{}", s.origin_addr);
    let table = json!({
        "origin": origin, "paths": ["/tickets"], "max_active": 2,
        "admission": {"mode": "batch", "batch_size": 1, "interval": "100ms"},
    });
    let (status, _) = call(
        &s,
        Method::PUT,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(table),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v.fetch(&s, "/tickets/a").await,
        StatusCode::TOO_MANY_REQUESTS,
        "the deleted event's pass still opened the event made again"
    );
    // The new event's own visitors get in, the old one by queueing again.
    through_the_gate(&s).await;
    v.enter(&s, "tickets").await;
    v.until_active(&s, "tickets", Duration::from_secs(10), &mut Vec::new())
        .await;
    assert_eq!(v.fetch(&s, "/tickets/a").await, StatusCode::OK);
    s.stop().await;
}

#[tokio::test]
async fn the_file_wins_for_keys_it_changed_after_the_stored_change() {
    let _ = logs();
    let s = TestServer::start("").await;
    let (status, _) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"max_active": 9})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // Same file: the stored change stands, and the start says so.
    let toml = server::config(s.dir(), s.origin_addr, server::tickets(s.origin_addr)).toml();
    let s = s.restart(&toml).await;
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None).await;
    assert_eq!(ev["config"]["max_active"], 9);
    let text = log_text();
    assert!(
        text.contains("key=max_active") && text.contains("the stored value is used"),
        "{text}"
    );
    // The file changes max_active and pre_window: both win; the stored
    // change of another key would still stand.
    let tickets = Event::at("tickets", s.origin_addr)
        .max_active(4)
        .admission(FAST_BATCH)
        .line("pre_window = \"30s\"");
    let toml = server::config(s.dir(), s.origin_addr, tickets).toml();
    let s = s.restart(&toml).await;
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None).await;
    assert_eq!(
        (
            ev["config"]["max_active"].as_u64(),
            ev["config"]["pre_window"].as_str()
        ),
        (Some(4), Some("30s"))
    );
    assert!(log_text().contains("the file's value is used"));
    // And that merged result is what every later start begins from.
    let s = s.restart(&toml).await;
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None).await;
    assert_eq!(ev["config"]["max_active"], 4);
    s.stop().await;
}

#[tokio::test]
async fn the_admin_api_never_returns_or_stores_a_secret() {
    let key_dir = tempfile::tempdir().unwrap();
    let key_file = key_dir.path().join("jwt.key");
    std::fs::write(&key_file, format!("{JWT_SECRET}\n")).unwrap();
    let inline =
        format!("identity = \"jwt\"\njwt = {{ algorithm = \"HS256\", secret = \"{JWT_SECRET}\" }}");
    let s = TestServer::start(&inline).await;
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None).await;
    assert_eq!(ev["config"]["jwt"]["secret"], "[redacted]");
    let (_, list) = call(&s, Method::GET, "/admin/events", ADMIN_TOKEN, None).await;
    assert!(!list.to_string().contains(JWT_SECRET));
    // The store would have to keep an inline secret: refused, saying what to use.
    let (status, err) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"max_active": 5})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        err["message"].as_str().unwrap().contains("jwt.secret_file"),
        "{err}"
    );
    // A key file: the store and every answer hold its path only.
    let (status, ev) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"jwt": {"secret": null, "secret_file": key_file}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert!(ev["config"]["jwt"]["secret"].is_null());
    let (status, _) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"max_active": 5})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // It still verifies tokens signed with the key from the file.
    let jwt = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": "user-1", "exp": 4_000_000_000u64}),
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap();
    let auth = format!("Bearer {jwt}");
    let (status, _, _) = Visitor::default()
        .call(
            Method::POST,
            &s.url("/api/queue/enter?eventId=tickets"),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let trail = audit(&s, "?event=tickets")
        .await
        .iter()
        .map(Value::to_string)
        .collect::<String>();
    assert!(
        trail.contains("[redacted]") && !trail.contains(JWT_SECRET),
        "{trail}"
    );
    let data = s.stop_keeping_dir().await;
    for entry in walk(data.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes
                .windows(JWT_SECRET.len())
                .any(|w| w == JWT_SECRET.as_bytes()),
            "{} holds the secret",
            entry.display()
        );
    }
}

/// A running event's key file removed (or unreadable) after start: the
/// node runs on with the key it read, and a change to any other event is
/// checked beside what that event claims (its id and paths), not by reading
/// its files again. Its own change still reads them, and is refused.
#[tokio::test]
async fn a_key_file_gone_since_start_blocks_no_other_events_change() {
    let key_dir = tempfile::tempdir().unwrap();
    let key_file = key_dir.path().join("jwt.key");
    std::fs::write(&key_file, format!("{JWT_SECRET}\n")).unwrap();
    let s = TestServer::start(&format!(
        "identity = \"jwt\"\njwt = {{ algorithm = \"HS256\", secret_file = \"{}\" }}",
        key_file.display()
    ))
    .await;
    std::fs::remove_file(&key_file).unwrap();
    let (status, ev) = call(
        &s,
        Method::PATCH,
        "/admin/events/other",
        ADMIN_TOKEN,
        Some(json!({"max_active": 7})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert_eq!(ev["config"]["max_active"], 7);
    // Its paths are still its own.
    let origin = format!("http://{}", s.origin_addr);
    let msg = refused_vip_on(&s, &origin, "/TICKETS/").await;
    assert!(
        msg.contains("event.paths[0]")
            && msg.contains("already protected by another event (\"tickets\")"),
        "{msg}"
    );
    // A change of the event itself is checked in full: its file is read.
    let (status, err) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"max_active": 5})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("event.jwt.secret_file"),
        "{err}"
    );
    s.stop().await;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn the_audit_endpoint_filters_and_bounds() {
    let s = TestServer::start(TOKENS).await;
    for what in ["pause", "resume", "pause"] {
        assert_eq!(
            call(
                &s,
                Method::POST,
                &format!("/admin/events/other/{what}"),
                OPS,
                None
            )
            .await
            .0,
            StatusCode::NO_CONTENT
        );
    }
    assert_eq!(
        call(
            &s,
            Method::POST,
            "/admin/events/tickets/close",
            ADMIN_TOKEN,
            None
        )
        .await
        .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(audit(&s, "").await.len(), 4);
    assert_eq!(
        audit(&s, "?limit=1").await[0]["action"],
        "close",
        "newest first"
    );
    assert_eq!(audit(&s, "?event=other&action=pause").await.len(), 2);
    assert_eq!(audit(&s, "?by=admin").await.len(), 1);
    for bad in [
        "?limit=0",
        "?limit=1001",
        "?limit=x",
        "?event=a%20b",
        "?what=1",
    ] {
        let (status, err) = call(
            &s,
            Method::GET,
            &format!("/admin/audit{bad}"),
            ADMIN_TOKEN,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(err["error"], "bad_request");
    }
    let (status, _, _) = s.admin_call(Method::GET, "/admin/audit", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    s.stop().await;
}

/// A path segment that is not UTF-8 is refused as every other bad request
/// is: `400` JSON with a stable code. axum's own rejection was plain text.
#[tokio::test]
async fn a_path_segment_that_is_not_utf8_is_a_json_400() {
    let s = TestServer::start("").await;
    let admin = format!("http://{}", s.admin);
    let public = format!("http://{}", s.public);
    let auth = vec![("authorization".to_owned(), format!("Bearer {ADMIN_TOKEN}"))];
    for (method, url, headers) in [
        (Method::GET, format!("{admin}/admin/events/%FF"), &auth),
        (
            Method::POST,
            format!("{admin}/admin/events/%FF/pause"),
            &auth,
        ),
        (
            Method::DELETE,
            format!("{admin}/admin/events/tickets/sessions/%C3%28"),
            &auth,
        ),
        (Method::GET, format!("{admin}/dashboard/%FF"), &vec![]),
        (Method::GET, format!("{public}/queue/%FF"), &vec![]),
        (Method::GET, format!("{public}/_anteroom/%FF"), &vec![]),
    ] {
        let (status, headers, body) =
            crate::support::server::send(method.clone(), &url, headers, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {url}");
        assert_eq!(
            headers["content-type"], "application/json",
            "{method} {url}"
        );
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "bad_request", "{method} {url}: {body}");
    }
    s.stop().await;
}

/// A stored table that no longer validates on this node (the key file an
/// admin change named, removed since) does not keep the node from
/// starting, which would leave no admin API to fix it through: the file's
/// events run (one whose stored change is refused runs as the file has
/// it), an event only the store holds is left out, and both refusals are
/// listed at the watch's first look.
#[tokio::test]
async fn a_stored_table_that_no_longer_validates_does_not_stop_the_start() {
    let s = TestServer::start("").await;
    let origin = format!("http://{}", s.origin_addr);
    let key_dir = tempfile::tempdir().unwrap();
    let key_file = key_dir.path().join("jwt.key");
    std::fs::write(&key_file, format!("{JWT_SECRET}\n")).unwrap();
    let jwt = json!({"algorithm": "HS256", "secret_file": key_file});
    let (status, ev) = call(
        &s,
        Method::PUT,
        "/admin/events/j1",
        ADMIN_TOKEN,
        Some(json!({"origin": origin, "paths": ["/j1"], "identity": "jwt", "jwt": jwt})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    let (status, ev) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"identity": "jwt", "jwt": jwt, "max_active": 7})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    std::fs::remove_file(&key_file).unwrap();
    let toml = server::config(s.dir(), s.origin_addr, server::tickets(s.origin_addr)).toml();
    let s = s.restart(&toml).await;
    let (status, list) = call(&s, Method::GET, "/admin/events", ADMIN_TOKEN, None).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert!(ids.contains(&"tickets") && !ids.contains(&"j1"), "{list}");
    let (_, ev) = call(&s, Method::GET, "/admin/events/tickets", ADMIN_TOKEN, None).await;
    assert_ne!(ev["config"]["identity"], "jwt", "{ev}");
    assert_ne!(ev["config"]["max_active"], 7, "{ev}");
    // The watch's first look lists both.
    let refused = || async {
        let (_, view) = call(&s, Method::GET, "/admin/refusals", ADMIN_TOKEN, None).await;
        let mut ids: Vec<String> = view["refusals"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|r| r["event"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    };
    crate::support::wait_for(
        "both stored tables listed as refused",
        Duration::from_secs(15),
        || async { refused().await == ["j1", "tickets"] },
    )
    .await;
    s.stop().await;
}

/// A key the event's own choices leave unused is refused where it is
/// written: a `PUT`'s whole table, a `PATCH`'s named fields. A `PATCH`
/// that changes the mode needs not clear the old mode's keys.
#[tokio::test]
async fn a_key_the_events_mode_leaves_unused_is_refused_where_it_is_written() {
    let s = TestServer::start("").await;
    let origin = format!("http://{}", s.origin_addr);
    let (status, err) = call(
        &s,
        Method::PUT,
        "/admin/events/vip",
        ADMIN_TOKEN,
        Some(json!({"origin": origin, "paths": ["/vip"], "admission": {"max_per_minute": 600}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(
        err["message"].as_str().unwrap().ends_with(
            "event.admission.max_per_minute: is a key of mode \"continuous\", not used by mode \"batch\""
        ),
        "{err}"
    );
    let (status, err) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"admission": {"max_per_minute": 600}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    let (status, ev) = call(
        &s,
        Method::PATCH,
        "/admin/events/tickets",
        ADMIN_TOKEN,
        Some(json!({"admission": {"mode": "continuous", "max_per_minute": 600}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ev}");
    assert_eq!(ev["config"]["admission"]["mode"], "continuous", "{ev}");
    s.stop().await;
}

/// A deleted event's gauges read zero: the recorder cannot drop a series,
/// and left as they were a deleted event went on showing its last queue
/// until a restart (`anteroom_waiting{event="ghost"} 2`), which fired the
/// alert on a queue that is not moving.
#[tokio::test]
async fn a_deleted_events_gauges_read_zero() {
    let s = TestServer::start("").await;
    let table = json!({ "paths": ["/ghost/"], "origin": "http://127.0.0.1:9", "max_active": 1 });
    let (status, _, body) = s
        .admin_call(
            Method::PUT,
            "/admin/events/ghost",
            Some(ADMIN_TOKEN),
            Some(&table.to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    for _ in 0..3 {
        let (status, _) = Visitor::default()
            .json(Method::POST, &s.url("/api/queue/enter?eventId=ghost"), None)
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let gauge = |name: &'static str| {
        let s = &s;
        async move {
            let (_, _, body) = s.admin_get("/metrics", None).await;
            let text = String::from_utf8_lossy(&body).into_owned();
            let prefix = format!("{name}{{event=\"ghost\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .and_then(|v| v.trim().parse::<f64>().ok())
        }
    };
    crate::support::wait_for(
        "two visitors shown waiting",
        Duration::from_secs(10),
        || async { gauge("anteroom_waiting").await == Some(2.0) },
    )
    .await;
    let (status, _, _) = s
        .admin_call(
            Method::DELETE,
            "/admin/events/ghost?force=true",
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    crate::support::wait_for(
        "the deleted event's gauges at zero",
        Duration::from_secs(10),
        || async {
            gauge("anteroom_waiting").await == Some(0.0)
                && gauge("anteroom_admitting").await == Some(0.0)
                && gauge("anteroom_active").await.unwrap_or(0.0) == 0.0
        },
    )
    .await;
    s.stop().await;
}

/// The admin view's wait at the back of the queue and its gauge are what a
/// visitor joining now is told. They were a blend of the raw one- and
/// five-minute admission counts: seconds after an opening at 10 a second,
/// the blend saw 0.4 a second and said twenty times the visitors' wait.
#[tokio::test]
async fn the_wait_at_the_back_is_what_a_visitor_joining_now_is_told() {
    let origin = crate::support::origin::Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let event = Event::at("tickets", origin.addr)
        .max_active(100_000)
        .admission(r#"{ mode = "continuous", max_per_minute = 600 }"#);
    let toml = server::config(dir.path(), origin.addr, event).toml();
    let s = TestServer::start_with(&toml, origin, dir).await;
    for _ in 0..300 {
        let (status, _) = Visitor::default()
            .json(
                Method::POST,
                &s.url("/api/queue/enter?eventId=tickets"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    // The event as the admin view shows it.
    let view = || {
        let s = &s;
        async move {
            let (_, _, body) = s
                .admin_call(
                    Method::GET,
                    "/admin/events/tickets",
                    Some(ADMIN_TOKEN),
                    None,
                )
                .await;
            serde_json::from_slice::<Value>(&body).unwrap()
        }
    };
    // A few seconds of admissions, so the estimate is the rate's.
    crate::support::wait_for("thirty admitted", Duration::from_secs(20), || async {
        view().await["stats"]["admitted_total"].as_u64() >= Some(30)
    })
    .await;
    let (status, told) = Visitor::default()
        .json(
            Method::POST,
            &s.url("/api/queue/enter?eventId=tickets"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let told = told["estimatedWaitSeconds"]
        .as_f64()
        .expect("a wait is told");
    let shown = view().await["stats"]["eta_back_of_queue_seconds"]
        .as_f64()
        .expect("the admin view shows a wait");
    // Moments apart, the line moving at 10 a second.
    let near = |x: f64| (x - told).abs() <= told * 0.25 + 2.0;
    assert!(
        near(shown),
        "the admin view says {shown} s, a visitor at the back is told {told} s"
    );
    let gauge = || {
        let s = &s;
        async move {
            let (_, _, body) = s.admin_get("/metrics", None).await;
            let text = String::from_utf8_lossy(&body).into_owned();
            text.lines()
                .find_map(|l| l.strip_prefix("anteroom_eta_back_seconds{event=\"tickets\"} "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        }
    };
    crate::support::wait_for(
        "the gauge at the visitors' wait",
        Duration::from_secs(10),
        || async { gauge().await.is_some_and(near) },
    )
    .await;
    s.stop().await;
}

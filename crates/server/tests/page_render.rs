//! Render tests of the waiting page: the HTML per status (insta snapshots,
//! nonce redacted), autoescaping of hostile input, French, operator overrides,
//! the static assets and the Content-Security-Policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;

use anteroom::page::{Lang, PageContext, PageError, Pages, content_security_policy, static_asset};
use serde_json::{Value, json};

const NONCE: &str = "n0nce-for-tests";

fn ctx(position: Option<Value>, lang: Lang) -> PageContext {
    PageContext {
        event_id: "drop-2026".to_owned(),
        event_name: Some("Winter drop".to_owned()),
        return_path: "/shop?item=42".to_owned(),
        lang,
        position,
        nonce: NONCE.to_owned(),
    }
}

fn position(status: &str, rank: Option<u64>) -> Value {
    json!({
        "eventId": "drop-2026", "status": status, "rank": rank,
        "position": rank.map(|r| r + 1), "queueLength": 50211,
        "estimatedWaitSeconds": 372, "estimatedWait": "PT6M12S", "display": "about 7 minutes",
        "pollAfterMs": 3000, "token": null, "redirect": null,
        "timestamp": "2026-12-01T10:03:12.412Z",
    })
}

fn render(ctx: &PageContext) -> String {
    let html = Pages::new(&HashMap::new()).unwrap().render(ctx).unwrap();
    assert_eq!(
        html.matches(NONCE).count(),
        1,
        "the nonce is on the one script tag"
    );
    html.replace(NONCE, "[nonce]")
}

#[test]
fn waiting_english() {
    insta::assert_snapshot!(render(&ctx(
        Some(position("WAITING", Some(1233))),
        Lang::En
    )));
}

#[test]
fn waiting_french() {
    let html = render(&ctx(Some(position("WAITING", Some(1233))), Lang::Fr));
    assert!(html.contains(r#"<html lang="fr">"#));
    assert!(html.contains("Vous êtes numéro 1\u{202f}234 dans la file"));
    assert!(html.contains("50\u{202f}211 personnes dans la file"));
    insta::assert_snapshot!(html);
}

#[test]
fn status_sentences() {
    let check = |pos: Option<Value>, lang: Lang, expected: &[&str]| {
        let html = render(&ctx(pos.clone(), lang));
        for want in expected {
            assert!(html.contains(want), "{pos:?}: missing {want:?} in\n{html}");
        }
    };
    let refresh = r#"<meta http-equiv="refresh" content="10">"#;
    check(
        None,
        Lang::En,
        &[
            "Joining the line…",
            refresh,
            "<progress class=\"ar-progress\" id=\"ar-progress\" max=\"100\"></progress>",
        ],
    );
    check(
        Some(position("WAITING", Some(0))),
        Lang::En,
        &["You are next in line", "Almost there!", "value=\"100\""],
    );
    check(
        Some(position("WAITING", Some(1233))),
        Lang::En,
        &[
            "You are number 1,234 in line",
            "50,211 people in line",
            "Estimated wait: about 7 minutes",
            "value=\"97\"",
        ],
    );
    check(
        Some(position("PAUSED", Some(9))),
        Lang::En,
        &["You are number 10 in line", "The line is paused"],
    );
    check(
        Some(position("NOT_OPEN", None)),
        Lang::En,
        &[
            "The line opens soon",
            "Opens in 6 min 12 s",
            "role=\"timer\"",
        ],
    );
    check(
        Some(position("NOT_OPEN", None)),
        Lang::Fr,
        &["La file ouvre bientôt", "Ouverture dans 6 min 12 s"],
    );
    check(
        Some(position("CLOSED", None)),
        Lang::En,
        &["This event is closed"],
    );
    check(
        Some(position("DRAINING", None)),
        Lang::Fr,
        &["problème technique", refresh],
    );
    check(
        Some(position("ACTIVE", None)),
        Lang::En,
        &[
            "You already have access",
            r#"<a class="ar-button" href="&#x2f;shop?item=42">Continue</a>"#,
        ],
    );
    let closed = render(&ctx(Some(position("CLOSED", None)), Lang::En));
    assert!(
        !closed.contains(refresh),
        "no refresh once the event is closed"
    );
}

#[test]
fn admitted_without_javascript_offers_the_redeem_form() {
    let mut pos = position("ADMITTED", None);
    pos["token"] = json!("tok.en");
    pos["redirect"] = json!("/shop?item=42");
    let html = render(&ctx(Some(pos), Lang::En));
    assert!(
        !html.contains("http-equiv=\"refresh\""),
        "a refresh could outlive the token"
    );
    insta::assert_snapshot!(html);
}

#[test]
fn hostile_input_is_escaped() {
    let mut c = ctx(Some(position("WAITING", Some(3))), Lang::En);
    c.event_name = Some("<script>alert(1)</script>".to_owned());
    c.return_path = "/x\"><script>alert(2)</script></script>".to_owned();
    let html = render(&c);
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
        "{html}"
    );
    // Inside the JSON block the value survives, escaped for that context.
    assert!(
        html.contains(r#"\u003cscript\u003ealert(2)\u003c/script\u003e\u003c/script\u003e"#),
        "{html}"
    );
    assert_eq!(
        html.matches("</script>").count(),
        2,
        "only the two real script elements close"
    );
}

#[test]
fn foreign_return_paths_become_root() {
    for hostile in [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "javascript:alert(1)",
    ] {
        let mut c = ctx(Some(position("ACTIVE", None)), Lang::En);
        c.return_path = hostile.to_owned();
        let html = render(&c);
        assert!(
            html.contains(r#"href="&#x2f;">Continue"#),
            "{hostile}: {html}"
        );
        assert!(html.contains(r#""returnPath":"/""#), "{hostile}");
    }
}

#[test]
fn script_config_block_parses() {
    let html = render(&ctx(Some(position("WAITING", Some(5))), Lang::Fr));
    let start = html
        .find(r#"<script type="application/json" id="anteroom-config">"#)
        .unwrap();
    let body = &html[start..];
    let body = &body[body.find('>').unwrap() + 1..body.find("</script>").unwrap()];
    let config: Value = serde_json::from_str(body).unwrap();
    assert_eq!(config["eventId"], "drop-2026");
    assert_eq!(config["returnPath"], "/shop?item=42");
    assert_eq!(config["lang"], "fr");
    assert_eq!(config["position"]["rank"], 5);
    assert_eq!(config["messages"]["continueLabel"], "Continuer");
}

fn write(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, body).unwrap();
    path
}

#[test]
fn template_override_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "drop.html.tmpl",
        r#"{% extends "waiting.html" %}{% block header %}<p class="brand">ACME {{ view.event_label }}</p>{% endblock %}"#,
    );
    let pages = Pages::new(&HashMap::from([("drop-2026".to_owned(), path)])).unwrap();
    let mut c = ctx(Some(position("WAITING", Some(1))), Lang::En);
    c.event_name = Some("<b>".to_owned());
    let html = pages.render(&c).unwrap();
    assert!(
        html.contains(r#"<p class="brand">ACME &lt;b&gt;</p>"#),
        "override is autoescaped too: {html}"
    );
    assert!(html.contains("You are number 2 in line"));
    c.event_id = "other".to_owned();
    assert!(
        !pages.render(&c).unwrap().contains("ACME"),
        "other events keep the built-in page"
    );
}

#[test]
fn broken_overrides_fail_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.html");
    let syntax = write(&dir, "syntax.html", "{% if %}");
    let unknown = write(&dir, "unknown.html", "{{ view.nope | no_such_filter }}");
    for path in [missing, syntax, unknown] {
        let err = Pages::new(&HashMap::from([("drop".to_owned(), path.clone())])).unwrap_err();
        assert!(matches!(
            err,
            PageError::ReadOverride { .. } | PageError::ParseOverride { .. }
        ));
        let text = err.to_string();
        assert!(
            text.contains(&path.display().to_string()) && text.contains("`drop`"),
            "{text}"
        );
    }
}

#[test]
fn static_assets_and_csp() {
    for (name, kind) in [
        ("anteroom.js", "text/javascript"),
        ("pow-worker.js", "text/javascript"),
        ("sha256.js", "text/javascript"),
        ("anteroom.css", "text/css"),
    ] {
        let (content_type, body) = static_asset(name).unwrap();
        assert!(content_type.starts_with(kind) && !body.is_empty(), "{name}");
    }
    for name in ["", "../Cargo.toml", "waiting.html", "anteroom.js/"] {
        assert!(static_asset(name).is_none(), "{name}");
    }
    let csp = content_security_policy("abc");
    assert!(csp.contains("script-src 'self' 'nonce-abc'"));
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert!(!csp.contains("http"), "no third-party origin: {csp}");
}

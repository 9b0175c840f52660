//! Render tests of the waiting page: the HTML per status (insta snapshots,
//! nonce redacted), autoescaping of hostile input, French, operator overrides,
//! the static assets and the Content-Security-Policy.

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
        refusal: None,
        jitter: 0.5,
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
    pos["redirect"] =
        json!("/api/queue/redeem?eventId=drop-2026&token=tok.en&return=%2Fshop%3Fitem%3D42");
    let html = render(&ctx(Some(pos), Lang::En));
    // The page continues by itself, as the script does: its one refresh goes
    // to the redeem path (which spends the token at once), never back to
    // the page (a page refresh could outlive the token).
    assert_eq!(html.matches("http-equiv=\"refresh\"").count(), 1, "{html}");
    assert!(
        html.contains(
            r#"<noscript><meta http-equiv="refresh" content="0;url=&#x2f;api&#x2f;queue&#x2f;redeem?eventId=drop-2026&amp;token=tok.en&amp;return=%2Fshop%3Fitem%3D42"></noscript>"#
        ),
        "{html}"
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

/// The page without its script configuration block (the sentences it
/// carries are in the snapshots above): what a visitor sees in one state.
fn visible(html: &str) -> String {
    let start = html
        .find(r#"<script type="application/json" id="anteroom-config">"#)
        .unwrap();
    let end = start + html[start..].find("</script>").unwrap() + "</script>".len();
    format!("{}[config]{}", &html[..start], &html[end..])
}

/// Every server-rendered state, in English and French: what the page says
/// (the snapshots), and the rules it must keep in every state.
#[test]
fn every_state_in_both_languages() {
    use anteroom::page::Refusal;
    let waiting = |status: &str, rank: u64, length: u64| {
        let mut p = position(status, Some(rank));
        p["queueLength"] = json!(length);
        p
    };
    let mut not_open = position("NOT_OPEN", None);
    not_open["opensAt"] = json!("2026-12-01T10:09:24.412Z");
    not_open["preWindowStartsAt"] = json!("2026-12-01T10:08:24.412Z");
    let mut admitted = position("ADMITTED", None);
    admitted["token"] = json!("tok.en");
    admitted["redirect"] =
        json!("/api/queue/redeem?eventId=drop-2026&token=tok.en&return=%2Fshop%3Fitem%3D42");
    let states: Vec<(&str, Option<Value>, Option<Refusal>)> = vec![
        ("not_open", Some(not_open), None),
        ("joining", None, None),
        ("nojs_check", None, Some(Refusal::Challenge)),
        ("waiting_alone", waiting("WAITING", 0, 1).into(), None),
        ("waiting_second", waiting("WAITING", 1, 2).into(), None),
        ("waiting_many", waiting("WAITING", 1233, 50211).into(), None),
        ("paused_next", waiting("PAUSED", 0, 1).into(), None),
        ("draining", Some(position("DRAINING", None)), None),
        ("draining_on_join", None, Some(Refusal::Unavailable)),
        ("admitted", Some(admitted), None),
        ("active", Some(position("ACTIVE", None)), None),
        ("closed", Some(position("CLOSED", None)), None),
        ("blocked", None, Some(Refusal::Blocked)),
        ("rate_limited", None, Some(Refusal::RateLimited)),
    ];
    for lang in [Lang::En, Lang::Fr] {
        let code = if lang == Lang::En { "en" } else { "fr" };
        for (name, pos, refusal) in &states {
            let mut c = ctx(pos.clone(), lang);
            c.refusal = *refusal;
            let html = render(&c);
            let in_line = matches!(
                *name,
                "waiting_alone" | "waiting_second" | "waiting_many" | "paused_next"
            );
            let heading = if lang == Lang::En {
                "You are in line"
            } else {
                "Vous êtes dans la file"
            };
            assert_eq!(
                html.contains(&format!(">{heading}</span></h1>")),
                in_line,
                "{name} {code}: the heading must fit the state"
            );
            for wrong in [
                ">1 people",
                ">1 personnes",
                ">0 personnes",
                "Many people",
                "Beaucoup de personnes",
            ] {
                assert!(!html.contains(wrong), "{name} {code}: {wrong:?}");
            }
            insta::assert_snapshot!(format!("state_{name}_{code}"), visible(&html));
        }
    }
    // The lone visitor: one person, singular in both languages.
    let alone = render(&ctx(waiting("WAITING", 0, 1).into(), Lang::En));
    assert!(alone.contains(">1 person in line<"), "{alone}");
    let alone = render(&ctx(waiting("WAITING", 0, 1).into(), Lang::Fr));
    assert!(alone.contains(">1 personne dans la file<"), "{alone}");
    let two = render(&ctx(waiting("WAITING", 1, 2).into(), Lang::Fr));
    assert!(two.contains(">2 personnes dans la file<"), "{two}");
    // A paused line is not "almost there" and its bar is not full.
    for lang in [Lang::En, Lang::Fr] {
        let paused = visible(&render(&ctx(waiting("PAUSED", 0, 1).into(), lang)));
        assert!(
            !paused.contains("Almost there") && !paused.contains("presque"),
            "{paused}"
        );
        assert!(paused.contains(r#"value="99""#), "{paused}");
    }
    // Without JavaScript a check cannot pass: the page says so, hides the
    // script's "checking" line, and does not refresh for nothing.
    let mut check = ctx(None, Lang::En);
    check.refusal = Some(Refusal::Challenge);
    let html = render(&check);
    assert!(html.contains("<noscript><p class=\"ar-headline\">Before it can join the line, your browser must pass a quick check that needs JavaScript."), "{html}");
    assert!(html.contains(
        r#"<noscript><link rel="stylesheet" href="/_anteroom/noscript.css"></noscript>"#
    ));
    assert!(!html.contains("http-equiv=\"refresh\""), "{html}");
}

/// A page open before the pre-window refreshes (without JavaScript) so that
/// it lands inside the pre-window, spread over its first seconds; otherwise
/// every 10 s.
#[test]
fn no_script_refresh_lands_inside_the_pre_window() {
    let refresh = |until_ms: i64, window_ms: i64, jitter: f64| {
        let now = 1_764_583_392_412i64;
        let at = |ms: i64| {
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64),
            )
            .to_string()
        };
        let mut p = position("NOT_OPEN", None);
        p["timestamp"] = json!(at(now));
        p["preWindowStartsAt"] = json!(at(now + until_ms));
        p["opensAt"] = json!(at(now + until_ms + window_ms));
        let mut c = ctx(Some(p), Lang::En);
        c.jitter = jitter;
        let html = render(&c);
        let start = html.find(r#"http-equiv="refresh" content=""#).unwrap() + 30;
        html[start..start + html[start..].find('"').unwrap()]
            .parse::<i64>()
            .unwrap()
    };
    // Far off: the usual 10 s.
    assert_eq!(refresh(600_000, 60_000, 0.5), 10);
    // 3.2 s before a 60 s pre-window: between 3.2 s and 3.2 + 5 s, inside it.
    for jitter in [0.0, 0.5, 0.999] {
        let s = refresh(3_200, 60_000, jitter) * 1000;
        assert!(
            (3_200..=3_200 + 5_000 + 1_000).contains(&s) && s <= 10_000,
            "{jitter}: {s}"
        );
    }
    // A 4 s pre-window 2.5 s away: the spread is a quarter of it (1 s), so
    // the refresh lands within 2.5..4.5 s, before the opening at 6.5 s.
    for jitter in [0.0, 0.999] {
        let s = refresh(2_500, 4_000, jitter) * 1000;
        assert!((2_500..6_500).contains(&s), "{jitter}: {s}");
    }
    // Inside the pre-window already (the render joined): 10 s.
    assert_eq!(refresh(-1_000, 60_000, 0.5), 10);
}

/// The page a browser navigation gets when its continue link fails, per
/// reason and language: what happened and the way back into the line.
#[test]
fn redeem_failed_page_in_both_languages() {
    use anteroom::page::RedeemFailure;
    let pages = Pages::new(&HashMap::new()).unwrap();
    for lang in [Lang::En, Lang::Fr] {
        let code = if lang == Lang::En { "en" } else { "fr" };
        for (name, failure) in [
            ("token", RedeemFailure::Token),
            ("paused", RedeemFailure::Paused),
            ("closed", RedeemFailure::Closed),
        ] {
            let html = pages
                .render_redeem_failed(
                    "drop-2026",
                    Some("Winter drop"),
                    "/shop?item=42",
                    lang,
                    failure,
                )
                .unwrap();
            assert!(
                html.contains(r#"href="&#x2f;queue&#x2f;drop-2026?return=%2Fshop%3Fitem%3D42""#),
                "{html}"
            );
            assert!(!html.contains("<script"), "no script: {html}");
            insta::assert_snapshot!(format!("redeem_failed_{name}_{code}"), html);
        }
    }
    // A foreign return path never leaves the site.
    let html = pages
        .render_redeem_failed(
            "drop-2026",
            None,
            "//evil.example/",
            Lang::En,
            RedeemFailure::Token,
        )
        .unwrap();
    assert!(
        html.contains(r#"href="&#x2f;queue&#x2f;drop-2026?return=%2F""#),
        "{html}"
    );
}

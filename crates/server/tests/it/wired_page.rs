//! The waiting page without JavaScript, over real sockets with a plain HTTP
//! client: the first load joins and shows the position, refreshes keep it,
//! and once admitted the plain continue link redeems and lands on the origin.

use crate::support::server;
use crate::support::visitor::Visitor;

use crate::support::server::wait_until;
use crate::support::wired::{CHROME, CURL, ENTER, POSITION, call, start};
use http::{Method, StatusCode};

const PAGE: &str = "/queue/tickets?return=%2Ftickets%2Fseat%2F9";
const NO_LIMITS: &str =
    "[limits]\nper_ip_per_second = 0\nentries_per_ip = 0\nper_session_per_second = 0";

/// A browser with scripting off: its own headers plus `Accept: text/html`.
fn html_headers() -> Vec<(&'static str, &'static str)> {
    let mut h: Vec<_> = CHROME
        .iter()
        .filter(|(k, _)| *k != "accept")
        .copied()
        .collect();
    h.push(("accept", "text/html,application/xhtml+xml"));
    h
}

async fn page(s: &server::TestServer, v: &mut Visitor) -> String {
    let (status, h, body) = v
        .call(Method::GET, &s.url(PAGE), &html_headers(), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h["cache-control"], "no-store");
    String::from_utf8(body.to_vec()).unwrap()
}

/// The `value` of the hidden form input `name`, entities decoded as a
/// browser does (the template escapes `/` as `&#x2f;`).
fn input(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no input {name} in {html}"));
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()]
        .replace("&#x2f;", "/")
        .replace("&amp;", "&")
}

/// The `content` of the page's meta refresh, entities decoded.
fn meta_refresh(html: &str) -> Option<String> {
    let at = html.find(r#"<meta http-equiv="refresh" content=""#)?;
    let rest = &html[at + 36..];
    Some(
        rest[..rest.find('"')?]
            .replace("&#x2f;", "/")
            .replace("&amp;", "&"),
    )
}

#[tokio::test]
async fn without_javascript_the_page_shows_the_position_and_continues_once_admitted() {
    let admit_fast = "admission = { mode = \"batch\", batch_size = 1, interval = \"100ms\" }";
    let s = start(NO_LIMITS, admit_fast).await;
    // `first` holds the only slot; `second` waits at the front.
    let mut first = Visitor::default();
    call(&s, &mut first, Method::POST, ENTER, CHROME, None).await;
    let token = server::poll_until(&first, &s.url(POSITION), "ADMITTED").await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let redeem = serde_json::json!({ "token": token });
    let (status, _, _) = call(
        &s,
        &mut first,
        Method::POST,
        "/api/queue/redeem?eventId=tickets",
        CHROME,
        Some(&redeem),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut second = Visitor::default();
    call(&s, &mut second, Method::POST, ENTER, CHROME, None).await;

    let mut v = Visitor::default();
    let html = page(&s, &mut v).await;
    assert!(
        v.cookie("__Host-anteroom_sid").is_some(),
        "the first load sets the session"
    );
    assert!(html.contains("You are number 2 in line"), "{html}");
    assert!(html.contains(r#"<meta http-equiv="refresh""#), "{html}");
    assert!(html.contains(r#"data-status="WAITING""#), "{html}");
    // The refresh keeps the place and the session, whose cookie it sets
    // again for another day (it counts from the last page load or enter).
    let sid = v.cookie("__Host-anteroom_sid").unwrap().to_owned();
    let html = page(&s, &mut v).await;
    assert!(html.contains("You are number 2 in line"), "{html}");
    assert_eq!(
        v.cookie("__Host-anteroom_sid"),
        Some(sid.as_str()),
        "no second session"
    );
    let again = v.set_cookies.last().unwrap();
    assert!(
        again.starts_with(&format!("__Host-anteroom_sid={sid};"))
            && again.contains("Max-Age=86400"),
        "{again}"
    );

    // The two ahead leave; the page turns into the continue link.
    for w in [&mut second, &mut first] {
        let (status, _, _) = call(
            &s,
            w,
            Method::POST,
            "/api/queue/release?eventId=tickets",
            CHROME,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    let url = s.url(PAGE);
    wait_until("the page offers the continue link", || {
        let mut v = v.clone();
        let url = url.clone();
        async move {
            let (_, _, body) = v.call(Method::GET, &url, &html_headers(), None).await;
            String::from_utf8_lossy(&body).contains(r#"name="token""#)
        }
    })
    .await;
    let html = page(&s, &mut v).await;
    let (token, ret) = (input(&html, "token"), input(&html, "return"));
    assert_eq!(ret, "/tickets/seat/9");
    // The page continues by itself, as the script does: its one refresh
    // goes to the redeem path (never back to the page, which a refresh
    // could outlive the token on), the same GET the form makes.
    let link =
        format!("/api/queue/redeem?eventId=tickets&token={token}&return=%2Ftickets%2Fseat%2F9");
    assert_eq!(
        meta_refresh(&html).as_deref(),
        Some(format!("0;url={link}").as_str()),
        "{html}"
    );
    assert_eq!(html.matches("http-equiv=\"refresh\"").count(), 1, "{html}");

    // The refresh's GET, as a browser follows it.
    let (status, h, _) = v
        .call(Method::GET, &s.url(&link), &html_headers(), None)
        .await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(h["location"], "/tickets/seat/9");
    assert!(v.cookie("__Host-anteroom_pass").is_some());
    let (status, _, body) = v
        .call(
            Method::GET,
            &s.url("/tickets/seat/9"),
            &html_headers(),
            None,
        )
        .await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::OK, &b"origin saw /tickets/seat/9"[..])
    );

    // The used link again, as a browser navigation: an HTML page that says
    // so, with the way back into the line; the status stays the JSON one's.
    let mut navigate = html_headers();
    navigate.push(("sec-fetch-mode", "navigate"));
    let (status, h, body) = v.call(Method::GET, &s.url(&link), &navigate, None).await;
    let html = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{html}");
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(
        html.contains("has expired or has already been used"),
        "{html}"
    );
    assert!(
        html.contains(r#"<a class="ar-button" href="&#x2f;queue&#x2f;tickets?return=%2Ftickets%2Fseat%2F9">Back to the waiting room</a>"#),
        "{html}"
    );
    // An API client (asks for JSON, or is no navigation) keeps the JSON error.
    for headers in [
        &[("accept", "application/json")][..],
        &[("accept", "text/html, application/json")][..],
        &[("accept", "text/html"), ("sec-fetch-mode", "cors")][..],
        &[][..],
    ] {
        let (status, h, body) = v.call(Method::GET, &s.url(&link), headers, None).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(
            h["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{headers:?}"
        );
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "token_used", "{headers:?}");
    }
    // A forged token on a navigation: the same page, with its 401.
    let forged = "/api/queue/redeem?eventId=tickets&token=forged&return=%2Ftickets";
    let (status, _, body) = v.call(Method::GET, &s.url(forged), &navigate, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(String::from_utf8_lossy(&body).contains("?return=%2Ftickets\">"));
    s.stop().await;
}

#[tokio::test]
async fn the_page_is_no_way_around_a_challenge() {
    let medium = r#"bots = { challenge = "medium", difficulty = 8 }"#;
    let s = start(NO_LIMITS, medium).await;
    let mut script = Visitor::default();
    let headers = [CURL, &[("accept", "text/html")][..]].concat();
    let (status, _, body) = script.call(Method::GET, &s.url(PAGE), &headers, None).await;
    assert_eq!(status, StatusCode::OK);
    let html = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        !html.contains("in line</p>"),
        "not joined, so no position: {html}"
    );
    // Without JavaScript the check cannot pass: the page says why and what
    // to do instead of "joining" forever, and does not refresh for nothing.
    assert!(
        html.contains("<noscript><p class=\"ar-headline\">Before it can join the line, your browser must pass a quick check that needs JavaScript. Turn JavaScript on for this site, then reload this page.</p></noscript>"),
        "{html}"
    );
    assert!(meta_refresh(&html).is_none(), "{html}");
    let (_, _, p) = call(&s, &mut script, Method::GET, POSITION, CURL, None).await;
    assert_eq!(p["status"], "NONE", "{p}");
    // A browser loading the same page is joined and sees its place.
    let mut person = Visitor::default();
    let html = page(&s, &mut person).await;
    assert!(html.contains("You are next in line"), "{html}");
    s.stop().await;
}

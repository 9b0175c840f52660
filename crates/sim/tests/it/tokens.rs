//! `anteroom-sim tokens` against a real Anteroom started in-process: every
//! line it writes is an admitted visitor's session cookie and an unredeemed
//! token bound to it, so the redeem benchmark spends real tokens, each once.
use anteroom_sim::http::{TokensArgs, tokens};

use crate::support::{Anteroom, Event, Store, config};

const COUNT: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_admitted_visitors_tokens_each_redeemable_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    // Everyone who joins is admitted at the next 100 ms tick.
    let event = Event {
        id: "redeem",
        max_active: 1000,
        batch_size: 1000,
        per_ip_per_second: 0,
    };
    let server = Anteroom::start(config(
        "http://127.0.0.1:9",
        &Store::Embedded(&store),
        &event,
    ))
    .await;
    let base = server.target.clone();

    let out = dir.path().join("tokens");
    tokens(TokensArgs {
        target: base.clone(),
        event: "redeem".into(),
        count: COUNT,
        connections: 8,
        out: out.clone(),
    })
    .await
    .unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once('\t').expect("cookie<TAB>token"))
        .collect();
    assert_eq!(lines.len(), COUNT);
    let mut distinct: Vec<&str> = lines.iter().map(|(_, t)| *t).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), COUNT, "every visitor has its own token");

    let client = reqwest::Client::new();
    let redeem = |cookie: &str, token: &str| {
        client
            .post(format!("{base}/api/queue/redeem?eventId=redeem"))
            .header("cookie", cookie)
            .header("accept", "application/json")
            .json(&serde_json::json!({ "token": token }))
            .send()
    };
    for (cookie, token) in &lines {
        let first = redeem(cookie, token).await.unwrap().status();
        assert!(first.is_success(), "an unspent token redeems: {first}");
        let again = redeem(cookie, token).await.unwrap().status();
        assert!(again.is_client_error(), "a spent token is refused: {again}");
    }

    server.stop().await;
}

//! Batch order against a real `redis-server`: a batch that overtakes the one
//! formed before it is refused untouched and sent again after it, so its
//! members still sort after the earlier batch's.

use std::time::Duration;

use anteroom_core::score::JoinScoring;
use redis::aio::ConnectionManager;
use tokio::sync::oneshot;

use super::{Joins, Kind, Order, Request, run};
use crate::redis::conn::Conn;
use crate::redis::keys::EventKeys;
use crate::testing::RedisServer;
use crate::{EventId, JoinOutcome, Result};

const TIMEOUT: Duration = Duration::from_secs(5);

/// Opened an hour before the test: post-open scores, ordered by time.
static OPENS_AT_US: std::sync::LazyLock<i64> =
    std::sync::LazyLock::new(|| crate::embedded::system_clock_us() - 3_600_000_000);

fn scoring(tiebreak: i64) -> JoinScoring {
    JoinScoring {
        opens_at_us: *OPENS_AT_US,
        prewindow_score: -1,
        tiebreak,
        behind: false,
    }
}

/// Requests for `members`, with hash tie-breaks that alone would reverse them.
fn batch(
    members: &[&str],
) -> (
    Vec<Request<Joins>>,
    Vec<oneshot::Receiver<Result<JoinOutcome>>>,
) {
    members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (reply, answer) = oneshot::channel();
            let r = Request {
                member: (*m).to_owned(),
                input: scoring(1023 - i as i64),
                reply,
            };
            (r, answer)
        })
        .unzip()
}

async fn evalsha_calls(c: &mut ConnectionManager) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_overtakes_the_one_before_it_still_sorts_after_it() {
    let server = RedisServer::start().unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = ConnectionManager::new(client).await.unwrap();
    let conn = Conn::Single(raw.clone());
    let k = EventKeys::new(&EventId::new("overtake").unwrap());
    let mut keys = Joins::keys(&k);
    keys.push(k.join_order(7));

    // Load the script, so every later call is one EVALSHA.
    let (warm, answers) = batch(&["warm"]);
    run::<Joins>(
        &conn,
        &keys,
        warm,
        TIMEOUT,
        Order {
            seq: 1,
            before: None,
        },
    )
    .await;
    for a in answers {
        a.await.unwrap().unwrap();
    }

    // Batch 3 reaches Redis while batch 2, formed before it, is still on
    // its way.
    let calls = evalsha_calls(&mut raw).await;
    let (tx2, rx2) = oneshot::channel::<()>();
    let (third, third_answers) = batch(&["c0", "c1", "c2"]);
    let overtaker = {
        let (conn, keys) = (conn.clone(), keys.clone());
        tokio::spawn(async move {
            let order = Order {
                seq: 3,
                before: Some(rx2),
            };
            run::<Joins>(&conn, &keys, third, TIMEOUT, order).await;
        })
    };
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while evalsha_calls(&mut raw).await == calls {
        assert!(
            tokio::time::Instant::now() < deadline,
            "batch 3 never reached redis"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let queued: u64 = redis::cmd("ZCARD")
        .arg(k.queue())
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(queued, 1, "the overtaking batch changed the queue");

    let (second, second_answers) = batch(&["b0", "b1", "b2", "b3"]);
    run::<Joins>(
        &conn,
        &keys,
        second,
        TIMEOUT,
        Order {
            seq: 2,
            before: None,
        },
    )
    .await;
    drop(tx2);
    overtaker.await.unwrap();
    for a in second_answers.into_iter().chain(third_answers) {
        assert!(a.await.unwrap().unwrap().new);
    }
    let order: Vec<String> = redis::cmd("ZRANGE")
        .arg(k.queue())
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(order, ["warm", "b0", "b1", "b2", "b3", "c0", "c1", "c2"]);
}

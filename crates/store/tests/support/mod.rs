//! Set-up the Redis tests (`redis`, `redis_cluster`) share: a store on the
//! servers `anteroom_store::testing` started, event ids, and the scoring of
//! an open event.

use std::time::Duration;

use anteroom_core::score::JoinScoring;
use anteroom_store::redis::{RedisConfig, RedisStore};
use anteroom_store::{EventId, QueueStore};

/// The store's call timeout in these tests.
pub const TIMEOUT: Duration = Duration::from_millis(500);

/// A store on the Redis at `urls` (a cluster if `cluster`).
pub async fn connect(urls: Vec<String>, cluster: bool) -> RedisStore {
    let cfg = RedisConfig {
        urls,
        cluster,
        timeout: TIMEOUT,
    };
    RedisStore::connect(&cfg).await.unwrap()
}

pub fn event(id: &str) -> EventId {
    EventId::new(id).unwrap()
}

/// Scoring of an event that opened an hour ago: scores order by arrival time
/// (an event open for more than ~50 days saturates and ties every score).
pub fn open() -> JoinScoring {
    static OPENS_AT_US: std::sync::LazyLock<i64> = std::sync::LazyLock::new(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        i64::try_from(now.as_micros()).unwrap() - 3_600_000_000
    });
    JoinScoring {
        opens_at_us: *OPENS_AT_US,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    }
}

/// Sixteen rounds of one call alone, then three together, as an admission
/// tick made them, on a store whose Redis is `away`: the three of a round
/// must be answered together, within half a round trip of each other.
/// Nagle's hold answers the second and third a whole round trip after the
/// first whenever the first is still unacknowledged: with it turned on,
/// four to ten rounds of sixteen were apart. A stall of the box (a loaded
/// CI runner) delays all three alike, and says nothing about the socket,
/// or now and then one task of a round (a full suite once put 15 ms
/// between the three of one round): two rounds of sixteen may be apart.
pub async fn answered_together_within_one_round_trip(s: &RedisStore, away: Duration) {
    async fn timed<T>(call: impl Future<Output = anteroom_store::Result<T>>) -> Duration {
        let started = std::time::Instant::now();
        call.await.unwrap();
        started.elapsed()
    }
    let id = event("tickets");
    // The first call of each script finds it not loaded and sends it.
    s.now_us(&id).await.unwrap();
    s.stats(&id).await.unwrap();
    let mut rounds = Vec::new();
    for _ in 0..16 {
        s.now_us(&id).await.unwrap();
        let (now, stats, admin) = tokio::join!(
            timed(s.now_us(&id)),
            timed(s.stats(&id)),
            timed(s.admin_state(&id))
        );
        rounds.push([now, stats, admin]);
    }
    let mut apart = 0;
    for round in &rounds {
        let (first, last) = (round.iter().min().unwrap(), round.iter().max().unwrap());
        assert!(
            *first >= away,
            "a call answered in {first:?}, sooner than the proxy's {away:?}"
        );
        if *last - *first >= away / 2 {
            apart += 1;
        }
    }
    assert!(
        apart <= 2,
        "reads made together with Redis {away:?} away were answered apart in {apart} rounds of {}: {rounds:?}",
        rounds.len()
    );
}

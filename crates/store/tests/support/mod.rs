//! Set-up the Redis tests (`redis`, `redis_cluster`) share: a store on the
//! servers `anteroom_store::testing` started, event ids, and the scoring of
//! an open event.

use std::time::Duration;

use anteroom_core::score::JoinScoring;
use anteroom_store::EventId;
use anteroom_store::redis::{RedisConfig, RedisStore};

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

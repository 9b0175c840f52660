//! The conformance suite every `QueueStore` backend runs: the rules of the
//! trait as named checks, plus a property test against a tiny in-memory model.
//!
//! Call it from a backend's tests:
//!
//! ```ignore
//! let store: Arc<dyn QueueStore> = Arc::new(EmbeddedStore::open(dir, opts).await?);
//! anteroom_store::conformance::test_suite(store.clone()).await;
//! anteroom_store::conformance::model_check(store, 64).await;
//! ```
//!
//! Every check uses its own fresh event ids (a random run prefix), so a
//! shared Redis can run the suite repeatedly; no check depends on wall-clock
//! sleeps beyond a few milliseconds for the idle-expiry boundary. A failure
//! panics with the name of the rule that broke.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod checks;
mod model;

use std::sync::Arc;

use anteroom_core::score::JoinScoring;

use crate::{EventId, Nonce, QueueStore};

pub use model::model_check;

/// Unique names for one run of the suite.
#[derive(Clone)]
pub(crate) struct Ctx {
    run: String,
}

impl Ctx {
    fn new() -> Self {
        Self {
            run: format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff),
        }
    }

    /// A fresh event id for one check.
    pub(crate) fn event(&self, name: &str) -> EventId {
        let mut id = format!("ct-{}-{name}", self.run);
        id.truncate(EventId::MAX_LEN);
        EventId::new(&id).expect("suite event ids are valid")
    }
}

/// Scoring for a join after the event opened a second ago (by the store's
/// clock), so arrival order is the order of the calls.
pub(crate) async fn open_scoring(store: &dyn QueueStore, ev: &EventId) -> JoinScoring {
    let now = store.now_us(ev).await.expect("now_us");
    JoinScoring {
        opens_at_us: now - 1_000_000,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    }
}

/// A random nonce, distinct per call.
pub(crate) fn nonce() -> Nonce {
    rand::random()
}

/// A far-future expiry relative to the store's clock.
pub(crate) const HOUR_US: i64 = 3_600_000_000;

/// Runs every named check against `store`. Panics with the check's name on
/// the first broken rule.
pub async fn test_suite(store: Arc<dyn QueueStore>) {
    let ctx = Ctx::new();
    for (name, check) in checks::all() {
        // Each check runs as its own task so a panic is caught and named.
        if let Err(e) = tokio::spawn(check(store.clone(), ctx.clone())).await {
            panic!("conformance check `{name}` failed on {}: {e}", store.name());
        }
    }
}

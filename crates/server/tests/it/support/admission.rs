//! Shared by the `admission_*` and `lifecycle_*` tests: one event on an
//! embedded store in a temp dir, a hand-moved clock shared by the server and
//! the store, and scheduler ticks driven directly (no sleeps, no timers).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use anteroom::AppState;
use anteroom::app::{Clock, EventRuntime};
use anteroom_core::score::{JoinScoring, Placement};
use anteroom_store::embedded::{EmbeddedOptions, EmbeddedStore};
use anteroom_store::{EventId, EventStats, MemberState, QueueStore, RedeemOutcome, Touch};

use crate::support::config::{ConfigBuilder, Event};

/// 2027-01-15T08:00:00Z: any fixed time works.
pub const T0_MS: i64 = 1_800_000_000_000;

#[derive(Debug)]
pub struct TestClock(AtomicI64);

impl TestClock {
    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub struct Harness {
    pub clock: Arc<TestClock>,
    pub state: Arc<AppState>,
    pub id: EventId,
    pub store: Arc<dyn QueueStore>,
    config: anteroom::Config,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn new(event: &str) -> Self {
        Self::with_origin("http://127.0.0.1:9", event).await
    }

    pub async fn with_origin(origin: &str, event: &str) -> Self {
        Self::with_config(origin, event, |c| c).await
    }

    /// [`Harness::with_origin`] with the rest of the configuration changed
    /// by `more`.
    pub async fn with_config(
        origin: &str,
        event: &str,
        more: impl FnOnce(ConfigBuilder) -> ConfigBuilder,
    ) -> Self {
        Self::build(origin, event, more, 0).await
    }

    /// [`Harness::new`] with the store's clock `ahead_ms` ahead of the
    /// server's (a node whose clock lags the store's).
    pub async fn with_store_ahead(event: &str, ahead_ms: i64) -> Self {
        Self::build("http://127.0.0.1:9", event, |c| c, ahead_ms).await
    }

    async fn build(
        origin: &str,
        event: &str,
        more: impl FnOnce(ConfigBuilder) -> ConfigBuilder,
        store_ahead_ms: i64,
    ) -> Self {
        // These tests are about admission policy, not the disk: tens of
        // thousands of sequential joins, redeems and releases each wait for a
        // durable commit, so on tmpfs (where fsync costs nothing) they run in
        // half the time. Durability has its own tests on a real disk.
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let clock = Arc::new(TestClock(AtomicI64::new(T0_MS)));
        let c = clock.clone();
        let opts = EmbeddedOptions {
            clock: Arc::new(move || (c.now_ms() + store_ahead_ms) * 1000),
            ..EmbeddedOptions::default()
        };
        let store: Arc<dyn QueueStore> =
            Arc::new(EmbeddedStore::open(dir.path(), opts).await.unwrap());
        // One event `e` in front of `origin`, protecting `/shop`, with the
        // test's `event` keys.
        let config = more(
            ConfigBuilder::new()
                .embedded(dir.path())
                .event(Event::new("e", origin).paths(&["/shop"]).line(event)),
        )
        .build();
        let events = anteroom::config::stored::resolve(&config.events, store.as_ref())
            .await
            .unwrap();
        let state = Arc::new(
            AppState::new(
                &config,
                events,
                store.clone(),
                clock.clone() as Arc<dyn Clock>,
            )
            .unwrap(),
        );
        Self {
            clock,
            state,
            id: EventId::new("e").unwrap(),
            store,
            config,
            _dir: dir,
        }
    }

    /// A second gateway node: its own state (scheduler memory, caches) on
    /// the same store and clock, with the same configuration.
    pub async fn another_node(&self) -> Arc<AppState> {
        let events = anteroom::config::stored::resolve(&self.config.events, self.store.as_ref())
            .await
            .unwrap();
        Arc::new(
            AppState::new(
                &self.config,
                events,
                self.store.clone(),
                self.clock.clone() as Arc<dyn Clock>,
            )
            .unwrap(),
        )
    }

    pub fn rt(&self) -> Arc<EventRuntime> {
        self.state.event(&self.id).unwrap()
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Runs one scheduler tick at the current time (after the store's clock
    /// reading the scheduler takes once a second), then the refresh every
    /// node runs; returns how many were admitted.
    pub async fn tick(&self) -> u64 {
        let rt = self.rt();
        anteroom::scheduler::measure_clock(&self.state, &rt).await;
        let tick_ms =
            i64::try_from(anteroom::scheduler::tick_every(&rt.config.admission).as_millis())
                .unwrap();
        let tick = u64::try_from(self.now_ms() / tick_ms).unwrap();
        let n = anteroom::scheduler::tick_once(&self.state, &rt, tick, tick_ms)
            .await
            .unwrap();
        anteroom::scheduler::refresh_once(&self.state, &rt).await;
        n
    }

    /// Moves the clock by `ms`, then ticks.
    pub async fn step(&self, ms: i64) -> u64 {
        self.clock.advance(ms);
        self.tick().await
    }

    pub async fn join(&self, member: &str) {
        let rt = self.rt();
        let scoring = JoinScoring::new(
            &self.state.score_key,
            "e",
            member,
            rt.anchor_us,
            i64::try_from(rt.config.pre_window.as_micros()).unwrap(),
            Placement::ByArrival,
        );
        self.store.join(&self.id, member, &scoring).await.unwrap();
    }

    pub async fn join_many(&self, prefix: &str, n: usize) -> Vec<String> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let m = format!("{prefix}{i:06}");
            self.join(&m).await;
            out.push(m);
        }
        out
    }

    pub async fn status(&self, member: &str) -> MemberState {
        self.store
            .status(&self.id, member, Touch::Peek)
            .await
            .unwrap()
    }

    /// Keeps a waiting visitor's place alive (what a position poll does).
    pub async fn poll(&self, member: &str) -> MemberState {
        self.store
            .status(&self.id, member, Touch::Seen)
            .await
            .unwrap()
    }

    /// Redeems `member`'s token as the redeem endpoint would; `true` if it
    /// had one.
    pub async fn redeem(&self, member: &str) -> bool {
        let MemberState::Admitted { nonce, .. } = self.status(member).await else {
            return false;
        };
        let rt = self.rt();
        let now = self.now_ms();
        let end = anteroom::admission::lifecycle::session_end_us(&rt, now, now);
        let out = self
            .store
            .redeem(&self.id, member, &nonce, end)
            .await
            .unwrap();
        matches!(out, RedeemOutcome::Redeemed { .. })
    }

    pub async fn release(&self, member: &str) {
        self.store.release(&self.id, member).await.unwrap();
    }

    pub async fn stats(&self) -> EventStats {
        self.store.stats(&self.id).await.unwrap()
    }

    /// Members (of `among`) currently holding an admission token.
    pub async fn admitted(&self, among: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for m in among {
            if matches!(self.status(m).await, MemberState::Admitted { .. }) {
                out.push(m.clone());
            }
        }
        out
    }
}

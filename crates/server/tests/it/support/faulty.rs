//! A real store that fails the calls a test names, and can play another
//! node's admin change just before a compare-and-set: the failure paths a
//! handler meets only when a store fails one write of several (a deletion
//! whose marker is refused after the wipe), or loses every race (the admin
//! state's compare-and-set). Every call that is not failed goes to the
//! store inside, a real one.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use anteroom_core::phase::AdminState;
use anteroom_core::score::JoinScoring;
use anteroom_store::{
    Admission, AdmitRequest, ConfigSet, EventId, EventStats, ExpireRequest, Expired, JoinOutcome,
    MemberState, Nonce, QueueStore, RedeemOutcome, Result, Revocation, ShareGrant, ShareRequest,
    StoreError, TickView, Touch, UnavailableKind,
};

pub struct Faulty {
    inner: Arc<dyn QueueStore>,
    /// Method name → how many of its next calls fail as unavailable.
    fails: Mutex<HashMap<&'static str, u32>>,
    /// The admin states other nodes set, one before each compare-and-set.
    races: Mutex<VecDeque<AdminState>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Faulty {
    pub fn new(inner: Arc<dyn QueueStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            fails: Mutex::new(HashMap::new()),
            races: Mutex::new(VecDeque::new()),
        })
    }

    /// The next `times` calls of `method` fail as a store that timed out.
    pub fn fail(&self, method: &'static str, times: u32) {
        lock(&self.fails).insert(method, times);
    }

    /// Before each of the next compare-and-sets of an admin state, another
    /// node sets the next of `states`.
    pub fn race_admin_state(&self, states: impl IntoIterator<Item = AdminState>) {
        lock(&self.races).extend(states);
    }

    fn check(&self, method: &'static str) -> Result<()> {
        let mut fails = lock(&self.fails);
        match fails.get_mut(method) {
            Some(left) if *left > 0 => {
                *left -= 1;
                Err(StoreError::unavailable(
                    UnavailableKind::TimedOut,
                    format!("{method} failed by the test"),
                ))
            }
            _ => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl QueueStore for Faulty {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn admissions_elsewhere(&self) -> Option<tokio::sync::broadcast::Receiver<EventId>> {
        self.inner.admissions_elsewhere()
    }

    async fn now_us(&self, event: &EventId) -> Result<i64> {
        self.check("now_us")?;
        self.inner.now_us(event).await
    }

    async fn anchor_us(&self, event: &EventId) -> Result<i64> {
        self.check("anchor_us")?;
        self.inner.anchor_us(event).await
    }

    async fn join(
        &self,
        event: &EventId,
        member: &str,
        scoring: &JoinScoring,
    ) -> Result<JoinOutcome> {
        self.check("join")?;
        self.inner.join(event, member, scoring).await
    }

    async fn status(&self, event: &EventId, member: &str, touch: Touch) -> Result<MemberState> {
        self.check("status")?;
        self.inner.status(event, member, touch).await
    }

    async fn queue_length(&self, event: &EventId) -> Result<u64> {
        self.check("queue_length")?;
        self.inner.queue_length(event).await
    }

    async fn admit(&self, event: &EventId, req: &AdmitRequest) -> Result<Vec<Admission>> {
        self.check("admit")?;
        self.inner.admit(event, req).await
    }

    async fn admit_sharing(
        &self,
        event: &EventId,
        req: &AdmitRequest,
        node: &str,
    ) -> Result<Vec<Admission>> {
        self.check("admit_sharing")?;
        self.inner.admit_sharing(event, req, node).await
    }

    async fn redeem_as(
        &self,
        event: &EventId,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
        opens: bool,
    ) -> Result<RedeemOutcome> {
        self.check("redeem_as")?;
        self.inner
            .redeem_as(event, member, nonce, session_expires_at_us, opens)
            .await
    }

    async fn redeem(
        &self,
        event: &EventId,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
    ) -> Result<RedeemOutcome> {
        self.check("redeem")?;
        self.inner
            .redeem(event, member, nonce, session_expires_at_us)
            .await
    }

    async fn take_over_token(
        &self,
        event: &EventId,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
    ) -> Result<RedeemOutcome> {
        self.check("take_over_token")?;
        self.inner
            .take_over_token(event, member, nonce, session_expires_at_us)
            .await
    }

    async fn extend(&self, event: &EventId, member: &str, expires_at_us: i64) -> Result<bool> {
        self.check("extend")?;
        self.inner.extend(event, member, expires_at_us).await
    }

    async fn release(&self, event: &EventId, member: &str) -> Result<bool> {
        self.check("release")?;
        self.inner.release(event, member).await
    }

    async fn reconcile_active(&self, event: &EventId, members: &[(String, i64)]) -> Result<u64> {
        self.check("reconcile_active")?;
        self.inner.reconcile_active(event, members).await
    }

    async fn hold_share(&self, event: &EventId, req: &ShareRequest) -> Result<ShareGrant> {
        self.check("hold_share")?;
        self.inner.hold_share(event, req).await
    }

    async fn expire(&self, event: &EventId, req: &ExpireRequest) -> Result<Expired> {
        self.check("expire")?;
        self.inner.expire(event, req).await
    }

    async fn stats(&self, event: &EventId) -> Result<EventStats> {
        self.check("stats")?;
        self.inner.stats(event).await
    }

    async fn expire_and_stats(
        &self,
        event: &EventId,
        req: &ExpireRequest,
    ) -> Result<(Expired, EventStats)> {
        self.check("expire_and_stats")?;
        self.inner.expire_and_stats(event, req).await
    }

    async fn revocations_since(&self, event: &EventId, since_us: i64) -> Result<Vec<Revocation>> {
        self.check("revocations_since")?;
        self.inner.revocations_since(event, since_us).await
    }

    async fn consume_once(
        &self,
        event: &EventId,
        nonce: &Nonce,
        expires_at_us: i64,
    ) -> Result<bool> {
        self.check("consume_once")?;
        self.inner.consume_once(event, nonce, expires_at_us).await
    }

    async fn claim_tick(&self, event: &EventId, tick: u64, ttl_ms: u64) -> Result<bool> {
        self.check("claim_tick")?;
        self.inner.claim_tick(event, tick, ttl_ms).await
    }

    async fn set_batch_owed(
        &self,
        event: &EventId,
        start_ms: i64,
        owed: u64,
        ttl_ms: u64,
    ) -> Result<()> {
        self.check("set_batch_owed")?;
        self.inner
            .set_batch_owed(event, start_ms, owed, ttl_ms)
            .await
    }

    async fn batch_owed(&self, event: &EventId) -> Result<Option<(i64, u64)>> {
        self.check("batch_owed")?;
        self.inner.batch_owed(event).await
    }

    async fn claim_tick_and_read(
        &self,
        event: &EventId,
        tick: u64,
        ttl_ms: u64,
    ) -> Result<Option<TickView>> {
        self.check("claim_tick_and_read")?;
        self.inner.claim_tick_and_read(event, tick, ttl_ms).await
    }

    async fn set_admin_state(&self, event: &EventId, state: AdminState) -> Result<()> {
        self.check("set_admin_state")?;
        self.inner.set_admin_state(event, state).await
    }

    async fn admin_state(&self, event: &EventId) -> Result<AdminState> {
        self.check("admin_state")?;
        self.inner.admin_state(event).await
    }

    async fn set_admin_state_if(
        &self,
        event: &EventId,
        expected: AdminState,
        state: AdminState,
    ) -> Result<Option<AdminState>> {
        self.check("set_admin_state_if")?;
        // Another node's change, made between this node's read and its
        // compare-and-set.
        let raced = lock(&self.races).pop_front();
        if let Some(other) = raced {
            self.inner.set_admin_state(event, other).await?;
        }
        self.inner.set_admin_state_if(event, expected, state).await
    }

    async fn put_event_config(&self, event: &EventId, json: &str) -> Result<()> {
        self.check("put_event_config")?;
        self.inner.put_event_config(event, json).await
    }

    async fn event_configs(&self) -> Result<Vec<(EventId, String)>> {
        self.check("event_configs")?;
        self.inner.event_configs().await
    }

    async fn event_config_set(&self) -> Result<ConfigSet> {
        self.check("event_config_set")?;
        self.inner.event_config_set().await
    }

    async fn config_generation(&self) -> Result<u64> {
        self.check("config_generation")?;
        self.inner.config_generation().await
    }

    async fn replace_event_config(
        &self,
        event: &EventId,
        generation: u64,
        json: &str,
    ) -> Result<bool> {
        self.check("replace_event_config")?;
        self.inner
            .replace_event_config(event, generation, json)
            .await
    }

    async fn ping(&self, event: &EventId) -> Result<()> {
        self.check("ping")?;
        self.inner.ping(event).await
    }

    async fn delete_event(&self, event: &EventId) -> Result<()> {
        self.check("delete_event")?;
        self.inner.delete_event(event).await
    }

    async fn append_audit(&self, event: &EventId, json: &str) -> Result<()> {
        self.check("append_audit")?;
        self.inner.append_audit(event, json).await
    }

    async fn audit(&self, event: &EventId, limit: usize) -> Result<Vec<String>> {
        self.check("audit")?;
        self.inner.audit(event, limit).await
    }

    async fn audit_events(&self) -> Result<Vec<EventId>> {
        self.check("audit_events")?;
        self.inner.audit_events().await
    }
}

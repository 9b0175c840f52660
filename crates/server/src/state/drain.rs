//! Drain mode's records of one event on this node: whether it drains, the
//! rank cache, the admissions this node made on its own and its hold on the
//! event's capacity. The drain task (`drain`) and the request path's store
//! calls (`queue`) work on them; they live here, in the event's state, so
//! both can reach them through the event.

pub mod cache;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anteroom_store::{MemberState, Nonce, RedeemOutcome};

use crate::journal::{EventJournal, Record};
use crate::locks::lock;

/// `Retry-After` for new arrivals while draining: the store is usually back
/// (or known to be gone for longer) within seconds.
pub const RETRY_AFTER_SECS: u64 = 2;

/// Drain state of one event on this node; lives in [`super::Live`].
#[derive(Debug, Default)]
pub struct DrainState {
    /// Read on every request, so kept outside the lock.
    pub(crate) draining: AtomicBool,
    /// Set from entry until the reconcile succeeded: the scheduler is held.
    pub(crate) holding: AtomicBool,
    /// Whether `inner.local` holds anything (set under the lock as it
    /// changes): almost always false, and then a request's reads of the drain
    /// records take no lock and hash no member id.
    pub(crate) any_local: AtomicBool,
    /// A request saw the store fail: probe now instead of at the next tick,
    /// so a refused connection drains within milliseconds.
    pub(crate) wake: tokio::sync::Notify,
    pub(crate) inner: Mutex<Inner>,
    /// The last known ranks (the front is taken under `inner`'s lock, so a
    /// request's note takes only a shard of these, never `inner`).
    pub(crate) ranks: cache::Ranks,
    /// Where this node's drain admissions go before they are answered.
    pub(crate) journal: OnceLock<EventJournal>,
    /// The time rank notes carry (node ms), moved on by each refresh (twice
    /// a second): a clock read on every poll's note would cost the hot path.
    pub(crate) noted_at_ms: AtomicI64,
}

#[derive(Debug, Default)]
pub(crate) struct Inner {
    /// Node time (ms) this drain started, for logs and figures.
    pub(crate) since_ms: Option<i64>,
    /// Capacity already taken at the last refresh: active + outstanding.
    pub(crate) used_at_entry: u64,
    /// When (node ms) that refresh read it.
    pub(crate) used_as_of_ms: i64,
    /// Visitors this node admitted while draining, by token nonce. Kept until
    /// their token expires so a replay stays refused after the drain ends.
    pub(crate) local: HashMap<Nonce, LocalAdmission>,
    pub(crate) by_member: HashMap<String, Nonce>,
    /// This node's hold on the event's capacity in the store.
    pub(crate) share: ShareState,
    /// `(until, lasted)` in node ms: the last drain lasted `lasted`, and
    /// until `until` the idle sweep forgives waiters that long (see
    /// [`DrainState::forgiven_idle_ms`]).
    pub(crate) forgive: Option<(i64, i64)>,
    /// Sessions whose end the gate moved while the store could not hear of
    /// it (see [`DrainState::unextended`]): member → (session start µs,
    /// latest end µs).
    pub(crate) unextended: HashMap<String, (i64, i64)>,
    /// Tokens whose redemption is being written to the journal: a second
    /// redeem of one meanwhile is told to retry, as the first may yet fail.
    pub(crate) redeeming: std::collections::HashSet<Nonce>,
}

impl Inner {
    /// Notes that a drain of `lasted_ms` ended at `now_ms`: for one
    /// `queue_idle_ms` from now, [`DrainState::forgiven_idle_ms`] forgives
    /// that long. A drain that follows one still forgiven forgives from the
    /// first one's start: a waiter may not have been seen since.
    pub(crate) fn drain_ended(&mut self, now_ms: i64, lasted_ms: i64, queue_idle_ms: i64) {
        let mut forgiven = lasted_ms.max(0);
        if let Some((until, earlier)) = self.forgive
            && now_ms < until
        {
            let earlier_end = until.saturating_sub(queue_idle_ms);
            forgiven = forgiven.max(earlier.saturating_add(now_ms.saturating_sub(earlier_end)));
        }
        self.forgive = Some((now_ms.saturating_add(queue_idle_ms), forgiven));
    }
}

/// Sessions remembered for [`DrainState::unextended`] at most: beyond it (a
/// drain of more sessions than any event holds) the rest are dropped.
const MAX_UNEXTENDED: usize = 100_000;

#[derive(Debug, Clone)]
pub(crate) struct LocalAdmission {
    pub(crate) member: String,
    pub(crate) token_expires_at_ms: i64,
    /// `Some(session end)` once redeemed (the single use).
    pub(crate) redeemed_until_ms: Option<i64>,
    /// When the session began, if this node redeemed it since it started
    /// (a journal replayed after a restart says only its end).
    pub(crate) session_start_ms: Option<i64>,
    pub(crate) reconciled: bool,
    /// When (node ms) the drain's end found it recorded in the store:
    /// capacity figures older than that do not count it yet, so it still
    /// counts against the node's share (see `admit_locally`).
    pub(crate) reconciled_at_ms: i64,
}

impl DrainState {
    /// Whether new arrivals of the event are turned away now.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Whether the event's scheduler on this node must wait (drain, or drain
    /// admissions not yet recorded in the store).
    pub fn holds_scheduler(&self) -> bool {
        self.holding.load(Ordering::Acquire)
    }

    /// Moves on the time rank notes carry (the refresher, twice a second).
    pub fn stamp_notes(&self, now_ms: i64) {
        self.noted_at_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Remembers what the store said about `member` (position/enter answers).
    pub fn note(&self, member: &str, state: &MemberState) {
        match state {
            MemberState::Waiting { rank, .. } => {
                self.ranks
                    .note_at(member, *rank, self.noted_at_ms.load(Ordering::Relaxed));
            }
            _ => self.ranks.forget(member),
        }
    }

    /// Enters drain mode (idempotent); `used` is active + outstanding as last
    /// known. Returns `true` for the call that switched it on.
    pub fn enter(&self, now_ms: i64, used: u64, used_as_of_ms: i64) -> bool {
        let mut inner = lock(&self.inner);
        self.holding.store(true, Ordering::Release);
        if self.draining.swap(true, Ordering::AcqRel) {
            return false;
        }
        inner.since_ms = Some(now_ms);
        inner.used_at_entry = used;
        inner.used_as_of_ms = used_as_of_ms;
        true
    }

    /// Remembers that moving `member`'s session end to `until_us` failed
    /// while the event drains: the gate renewed the pass on this node, but
    /// the store's end stood still, and the first sweep after the store's
    /// return would end a session its holder was using all along. The drain's
    /// end sends these again before the scheduler resumes
    /// ([`Self::take_unextended`]).
    pub fn unextended(&self, member: &str, session_start_us: i64, until_us: i64) {
        if !self.is_draining() {
            return;
        }
        let mut inner = lock(&self.inner);
        if inner.unextended.len() >= MAX_UNEXTENDED && !inner.unextended.contains_key(member) {
            return;
        }
        let entry = inner
            .unextended
            .entry(member.to_owned())
            .or_insert((session_start_us, until_us));
        if until_us > entry.1 {
            *entry = (session_start_us, until_us);
        }
    }

    /// Forgets the session end [`Self::unextended`] remembered for
    /// `member` (a release): sent at the drain's end it would keep a
    /// released session in the store past its old end.
    pub fn forget_unextended(&self, member: &str) {
        let mut inner = lock(&self.inner);
        if !inner.unextended.is_empty() {
            inner.unextended.remove(member);
        }
    }

    /// The session ends [`Self::unextended`] remembered, forgotten here.
    pub fn take_unextended(&self) -> HashMap<String, (i64, i64)> {
        std::mem::take(&mut lock(&self.inner).unextended)
    }

    /// How much longer than `queue_idle_timeout` a waiter may go unseen
    /// before the idle sweep drops them, at `now_ms`: the length of the
    /// drain that ended less than one `queue_idle_timeout` ago, else 0.
    /// While the event drained, this node answered the polls itself and
    /// no seen mark reached the store, so without it the first sweep after
    /// an outage longer than `queue_idle_timeout` dropped every waiter the
    /// drain had kept in place.
    pub fn forgiven_idle_ms(&self, now_ms: i64) -> i64 {
        match lock(&self.inner).forgive {
            Some((until, lasted)) if now_ms < until => lasted,
            _ => 0,
        }
    }

    /// How long the current drain has lasted, if draining.
    pub fn since_ms(&self) -> Option<i64> {
        lock(&self.inner).since_ms
    }

    /// `now_ms` is read only when this node holds drain admissions.
    pub fn local_answer(&self, member: &str, now_ms: impl FnOnce() -> i64) -> Option<MemberState> {
        if !self.any_local.load(Ordering::Acquire) {
            return None;
        }
        let now_ms = now_ms();
        let inner = lock(&self.inner);
        let nonce = inner.by_member.get(member)?;
        let local = inner.local.get(nonce)?;
        match local.redeemed_until_ms {
            None if now_ms < local.token_expires_at_ms => Some(MemberState::Admitted {
                nonce: *nonce,
                expires_at_us: local.token_expires_at_ms.saturating_mul(1000),
            }),
            // Once redeemed and recorded, the store knows the session.
            Some(until) if !local.reconciled && now_ms < until => Some(MemberState::Active {
                expires_at_us: until.saturating_mul(1000),
            }),
            _ => None,
        }
    }
}

impl DrainState {
    /// Whether `member` holds a session this node opened while draining,
    /// not over at `now_ms`. (Once over, the visitor may join and be
    /// admitted again: that admission is theirs to redeem.)
    pub fn redeemed_locally(&self, member: &str, now_ms: impl FnOnce() -> i64) -> bool {
        if !self.any_local.load(Ordering::Acquire) {
            return false;
        }
        let now_ms = now_ms();
        let inner = lock(&self.inner);
        inner
            .by_member
            .get(member)
            .and_then(|n| inner.local.get(n))
            .and_then(|l| l.redeemed_until_ms)
            .is_some_and(|until| until > now_ms)
    }

    /// Ends at `now_ms` the session `member` holds from a drain admission
    /// of this node, if any (a release): it is recorded as over, and the
    /// token stays spent.
    pub fn end_session(&self, member: &str, now_ms: i64) {
        if !self.any_local.load(Ordering::Acquire) {
            return;
        }
        let mut inner = lock(&self.inner);
        let Some(nonce) = inner.by_member.get(member).copied() else {
            return;
        };
        if let Some(local) = inner.local.get_mut(&nonce)
            && let Some(until) = local.redeemed_until_ms.as_mut()
        {
            *until = (*until).min(now_ms);
            // Over for good: recorded with this end, never an idle time
            // from the recording (see `drain::task`).
            local.session_start_ms = None;
        }
    }
}

impl DrainState {
    /// Redeems a token this node signed while draining. `None` when the nonce
    /// is not a drain admission of this node (the store decides then). The
    /// redemption is journaled before it is answered, so a replay stays
    /// refused after a crash; an error when the journal cannot be written
    /// within `limit` (the redeem is refused then and the token stays
    /// unspent), or while another redeem of the token is being written.
    pub async fn redeem_local(
        &self,
        member: &str,
        nonce: &Nonce,
        session_end_ms: i64,
        now_us: i64,
        limit: std::time::Duration,
    ) -> Option<Result<RedeemOutcome, LocalRedeemError>> {
        let journal = {
            let mut inner = lock(&self.inner);
            let local = inner.local.get(nonce)?;
            if local.member != member {
                return Some(Ok(RedeemOutcome::NotAdmitted));
            }
            if local.redeemed_until_ms.is_some() {
                return Some(Ok(RedeemOutcome::AlreadyUsed));
            }
            // Once the store recorded the admission the session is known there.
            let journal = if local.reconciled {
                None
            } else {
                self.journal.get()
            };
            if inner.redeeming.contains(nonce) {
                return Some(Err(LocalRedeemError::InFlight));
            }
            let Some(journal) = journal else {
                // Nothing to write: taken under this one lock, so two
                // redeems of the token at once never both succeed.
                let local = inner.local.get_mut(nonce)?;
                local.redeemed_until_ms = Some(session_end_ms);
                local.session_start_ms = Some(now_us.div_euclid(1000));
                return Some(Ok(RedeemOutcome::Redeemed { at_us: now_us }));
            };
            inner.redeeming.insert(*nonce);
            journal
        };
        // Taken off the list however this ends: a request dropped while it
        // waits (its client gone) must not leave the token refused for good.
        let _redeeming = Redeeming {
            drain: self,
            nonce: *nonce,
        };
        let record = Record::Redeemed {
            nonce: *nonce,
            until_ms: session_end_ms,
        };
        if let Err(error) = journal.append_within(vec![record], limit).await {
            return Some(Err(LocalRedeemError::Journal(JournalFailed {
                error,
                path: journal.path().to_owned(),
            })));
        }
        let mut inner = lock(&self.inner);
        let local = inner.local.get_mut(nonce)?;
        if local.redeemed_until_ms.is_some() {
            return Some(Ok(RedeemOutcome::AlreadyUsed));
        }
        local.redeemed_until_ms = Some(session_end_ms);
        local.session_start_ms = Some(now_us.div_euclid(1000));
        Some(Ok(RedeemOutcome::Redeemed { at_us: now_us }))
    }
}

/// A token whose redemption is being written (see `Inner::redeeming`).
struct Redeeming<'a> {
    drain: &'a DrainState,
    nonce: Nonce,
}

impl Drop for Redeeming<'_> {
    fn drop(&mut self) {
        lock(&self.drain.inner).redeeming.remove(&self.nonce);
    }
}

/// Why a redeem of this node's own admission was refused (`503 draining`,
/// to be retried).
#[derive(Debug)]
pub enum LocalRedeemError {
    /// The journal could not take the redemption.
    Journal(JournalFailed),
    /// Another redeem of the token is being written.
    InFlight,
}

/// The longest a drain journal write is waited for: the store's timeout,
/// but never less than a second, as a Redis node's store timeout may be a
/// few hundred milliseconds while a local `fdatasync` under load can take
/// longer.
pub fn journal_timeout(store_timeout: std::time::Duration) -> std::time::Duration {
    store_timeout.max(std::time::Duration::from_secs(1))
}

/// Counts a write of the event's drain journal that failed or did not
/// finish within the store's timeout (`anteroom_drain_journal_failures_total`):
/// while it fails, the node admits nobody on its own and refuses the
/// redeems of its own admissions.
pub fn journal_failed(event: &anteroom_store::EventId) {
    metrics::counter!("anteroom_drain_journal_failures_total", "event" => event.to_string())
        .increment(1);
}

/// The drain journal refused a write: the answer that needed it is refused.
#[derive(Debug)]
pub struct JournalFailed {
    pub error: std::io::Error,
    pub path: std::path::PathBuf,
}

/// How long after its last renewal a node that lost the store may still
/// admit on its own. The store keeps the hold this long plus the longest a
/// drain admission can last (token, then session), so the hold outlives
/// every admission made against it, and a node that is gone for good stops
/// holding capacity after that.
pub const ADMIT_WINDOW: Duration = Duration::from_secs(60);

/// What this node knows about its hold, per event.
#[derive(Debug, Default)]
pub struct ShareState {
    /// The least the store may hold as this node's reserve.
    pub(crate) floor: u64,
    /// When the store last confirmed a reserve.
    pub(crate) confirmed_at: Option<Instant>,
    /// The same, in node ms.
    pub(crate) confirmed_at_ms: i64,
}

impl ShareState {
    /// What the node may admit on its own now, in all (drain admissions not
    /// yet recorded in the store count against it).
    pub fn budget(&self) -> u64 {
        match self.confirmed_at {
            Some(at) if at.elapsed() < ADMIT_WINDOW => self.floor,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use futures::FutureExt as _;
    use std::time::Duration;

    const IDLE: i64 = 300_000;

    /// A redeem dropped while its journal write waits (its client went
    /// away) leaves the token free for the next try, on a disk that hangs
    /// for real.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_redeem_dropped_while_its_journal_waits_leaves_the_token_free() {
        let disk = anteroom_store::testing::HungDisk::mount()
            .expect("a FUSE mount (apt-get install bindfs fuse3; run as root)");
        let dir = crate::journal::JournalDir::open(&disk.path().join("journal")).unwrap();
        let drain = DrainState::default();
        let event = anteroom_store::EventId::new("e").unwrap();
        drain.journal.set(dir.event(&event)).unwrap();
        lock(&drain.inner).local.insert(
            [7; 16],
            LocalAdmission {
                member: "m".into(),
                token_expires_at_ms: 60_000,
                redeemed_until_ms: None,
                session_start_ms: None,
                reconciled: false,
                reconciled_at_ms: 0,
            },
        );
        let limit = Duration::from_secs(30);
        {
            let frozen = disk.freeze().unwrap();
            let mut first = Box::pin(drain.redeem_local("m", &[7; 16], 10_000, 0, limit));
            assert!((&mut first).now_or_never().is_none(), "the write waits");
            assert!(matches!(
                drain
                    .redeem_local("m", &[7; 16], 10_000, 0, limit)
                    .now_or_never(),
                Some(Some(Err(LocalRedeemError::InFlight)))
            ));
            drop(first);
            assert!(lock(&drain.inner).redeeming.is_empty());
            frozen.thaw();
        }
        let again = drain.redeem_local("m", &[7; 16], 10_000, 0, limit).await;
        assert!(
            matches!(again, Some(Ok(RedeemOutcome::Redeemed { .. }))),
            "{again:?}"
        );
    }

    #[test]
    fn a_drain_forgives_waiters_its_length_for_one_idle_timeout() {
        let d = DrainState::default();
        assert_eq!(d.forgiven_idle_ms(0), 0, "no drain, nothing forgiven");
        lock(&d.inner).drain_ended(10_000, 600_000, IDLE);
        assert_eq!(d.forgiven_idle_ms(10_000), 600_000);
        assert_eq!(d.forgiven_idle_ms(10_000 + IDLE - 1), 600_000);
        assert_eq!(d.forgiven_idle_ms(10_000 + IDLE), 0);
    }

    /// A second drain soon after a long one: the next sweep must not drop
    /// the waiters the first one kept, unseen since it began.
    #[test]
    fn a_drain_soon_after_another_forgives_from_the_first_ones_start() {
        let d = DrainState::default();
        lock(&d.inner).drain_ended(610_000, 600_000, IDLE);
        // 20 s later, a drain of 3 s.
        lock(&d.inner).drain_ended(633_000, 3_000, IDLE);
        assert_eq!(d.forgiven_idle_ms(633_000), 600_000 + 23_000);
        assert_eq!(d.forgiven_idle_ms(633_000 + IDLE), 0);
        // Long after: a drain forgives its own length alone.
        lock(&d.inner).drain_ended(2_000_000, 3_000, IDLE);
        assert_eq!(d.forgiven_idle_ms(2_000_000), 3_000);
    }

    #[test]
    fn session_ends_not_sent_while_draining_are_kept_latest_and_a_release_forgets_one() {
        let d = DrainState::default();
        d.unextended("a", 1, 5);
        assert!(d.take_unextended().is_empty(), "only while draining");
        d.enter(0, 0, 0);
        for (member, until) in [("a", 5), ("a", 9), ("a", 7), ("b", 3)] {
            d.unextended(member, 1, until);
        }
        d.forget_unextended("b");
        assert_eq!(
            d.take_unextended(),
            HashMap::from([("a".to_owned(), (1, 9))])
        );
        assert!(d.take_unextended().is_empty(), "taken once");
    }

    /// A drain state holding one admission of `member` (nonce 7s), redeemed
    /// until `until_ms`.
    fn redeemed(member: &str, until_ms: i64) -> DrainState {
        let drain = DrainState::default();
        {
            let mut inner = lock(&drain.inner);
            inner.local.insert(
                [7; 16],
                LocalAdmission {
                    member: member.to_owned(),
                    token_expires_at_ms: until_ms,
                    redeemed_until_ms: None,
                    session_start_ms: None,
                    reconciled: false,
                    reconciled_at_ms: 0,
                },
            );
            inner.by_member.insert(member.to_owned(), [7; 16]);
        }
        drain.any_local.store(true, Ordering::Release);
        // No journal: the redeem never waits.
        let redeemed = drain
            .redeem_local(member, &[7; 16], until_ms, 0, Duration::from_secs(1))
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(matches!(redeemed, Ok(RedeemOutcome::Redeemed { .. })));
        drain
    }

    #[test]
    fn a_drain_session_masks_a_store_admission_only_until_it_is_over() {
        let drain = redeemed("m", 10_000);
        assert!(drain.redeemed_locally("m", || 9_999));
        assert!(matches!(
            drain.local_answer("m", || 9_999),
            Some(MemberState::Active { .. })
        ));
        // Over: a later admission by the store is the visitor's to redeem,
        // not shown as ACTIVE for ever (the page looped between the gate and
        // "you have access").
        assert!(!drain.redeemed_locally("m", || 10_000));
        assert_eq!(drain.local_answer("m", || 10_000), None);
    }

    #[test]
    fn a_released_drain_session_is_over_and_its_token_stays_spent() {
        let drain = redeemed("m", 10_000);
        drain.end_session("m", 4_000);
        assert!(!drain.redeemed_locally("m", || 4_001));
        let inner = lock(&drain.inner);
        assert_eq!(inner.local[&[7; 16]].redeemed_until_ms, Some(4_000));
        assert_eq!(inner.local[&[7; 16]].session_start_ms, None);
        drop(inner);
        assert!(matches!(
            drain
                .redeem_local("m", &[7; 16], 10_000, 0, Duration::from_secs(1))
                .now_or_never()
                .unwrap(),
            Some(Ok(RedeemOutcome::AlreadyUsed))
        ));
        // Another member's release ends nothing of it.
        let drain = redeemed("m", 10_000);
        drain.end_session("n", 4_000);
        assert!(drain.redeemed_locally("m", || 4_001));
    }
}

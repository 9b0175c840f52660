//! The per-event drain task: probes the store, enters drain mode, admits
//! from the local rank cache while draining, and reconciles on the way out.
//!
//! It runs in the same task as the event's scheduler ([`supervise`]), which
//! it simply stops polling while drain admissions are not yet recorded in the
//! store: a scheduler tick cut off mid-way never reaches its `admit` call.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use anteroom_core::phase::Phase;
use anteroom_store::{EventId, MemberState, Nonce, Touch, UnavailableKind};
use rand::RngCore;

use super::health::{self, Health, Probe, Verdict};
use super::of;
use crate::journal;
use crate::locks::lock;
use crate::state::drain::{DrainState, Inner, LocalAdmission};
use crate::state::{AppState, EventRuntime};

/// How often the store is probed for each event (and at once when a request
/// saw it fail): a refused store drains within this, a hung one within
/// `server.drain_after`, and leaving takes [`health::LEAVE_AFTER`] of these.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);

/// Runs the event's drain task beside its `scheduler`, polling the scheduler
/// only while drain does not hold it.
pub async fn supervise(
    state: Arc<AppState>,
    id: EventId,
    seen: Option<Arc<crate::state::Live>>,
    scheduler: impl Future<Output = ()>,
) {
    let mut drain = pin!(watch(state.clone(), id.clone(), seen));
    let mut scheduler = pin!(scheduler);
    std::future::poll_fn(|cx| {
        if drain.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        // The event's live state as it is now: an event created again
        // under its id has new live state, which the drain task watches.
        // A scheduler held when its event went stays held: the drain task
        // ends with the event, and this with it.
        let held = state
            .event(&id)
            .is_none_or(|rt| rt.live.drain.holds_scheduler());
        if !held && scheduler.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        Poll::Pending
    })
    .await;
}

async fn watch(state: Arc<AppState>, id: EventId, mut seen: Option<Arc<crate::state::Live>>) {
    let settings = state.server.drain;
    let window = settings.drain_after;
    let probe_timeout = health::probe_timeout(settings.store_timeout, window);
    let mut health = Health::default();
    let mut every = tokio::time::interval(PROBE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(rt) = state.event_for_task(&id, &mut seen).await else {
            return;
        };
        tokio::select! {
            _ = every.tick() => {}
            _ = of(&rt).wake.notified() => {}
        }
        let (probe, kind) = probe(&state, &id, probe_timeout).await;
        if probe.0 == Probe::Answered {
            // A late tick fires at once; after an answer wait the full period
            // so the successes that end a drain span real time (a flapping
            // store must answer twice, 100 ms apart). After a failure the
            // next probe may follow at once: a hang's probes tile the window.
            every.reset();
        }
        let drain = of(&rt);
        match health.observe(probe.0, probe.1, Instant::now(), window) {
            Verdict::Leave if drain.holds_scheduler() => leave(&state, &rt).await,
            Verdict::Drain => {
                let why = match (probe.0, kind) {
                    (Probe::Hard, Some(UnavailableKind::Disk)) => "store disk failed",
                    (Probe::Hard, Some(UnavailableKind::Stopped)) => "store stopped",
                    (Probe::Hard, _) => "store refused",
                    _ => "store silent for server.drain_after",
                };
                super::enter_drain(&state, &rt, why, kind);
                admit_locally(&state, &rt).await;
            }
            // Still failing while already draining: keep admitting the front.
            Verdict::Hold if probe.0 != Probe::Answered && drain.is_draining() => {
                admit_locally(&state, &rt).await;
            }
            _ => {}
        }
        // A journal write given up on that may have landed, which the
        // drain's end could not empty (its disk still held): emptied once
        // the disk takes it, so a restart never takes back admissions
        // nobody was told of. Safe once the drain's admissions are all in
        // the store (nothing holds the scheduler).
        if !drain.holds_scheduler()
            && let Some(j) = super::journal(&state, &rt)
            && j.abandoned()
            && j.clear_within(journal_timeout(&state)).await.is_err()
        {
            crate::state::drain::journal_failed(rt.id());
        }
        gauge(&rt);
    }
}

/// Pings the event's store once; returns what it found and when it started,
/// and why the store was unavailable if it said so.
async fn probe(
    state: &AppState,
    id: &EventId,
    timeout: Duration,
) -> ((Probe, Instant), Option<UnavailableKind>) {
    let started = Instant::now();
    let (found, kind) = match tokio::time::timeout(timeout, state.store.ping(id)).await {
        Ok(Ok(())) => (Probe::Answered, None),
        Ok(Err(e)) => {
            let kind = e.unavailable_kind();
            (health::classify(kind, started.elapsed(), timeout), kind)
        }
        Err(_) => (Probe::Slow, Some(UnavailableKind::TimedOut)),
    };
    if let Some(k) = kind {
        unavailable_counter(id, k);
    }
    ((found, started), kind)
}

/// Counts a probe that found the store unavailable, by why:
/// `anteroom_store_unavailable_total{event, kind}` (a handful of kinds, so
/// the series stay few).
fn unavailable_counter(id: &EventId, kind: UnavailableKind) {
    metrics::counter!(
        "anteroom_store_unavailable_total",
        "event" => id.to_string(),
        "kind" => kind.as_str()
    )
    .increment(1);
}

/// Sets `anteroom_draining{event}` to whether the event drains now.
pub fn gauge(rt: &EventRuntime) {
    let draining = of(rt).is_draining();
    metrics::gauge!("anteroom_draining", "event" => rt.id().to_string()).set(if draining {
        1.0
    } else {
        0.0
    });
}

/// Records this node's drain admissions in the store, then leaves drain mode.
/// A failed reconcile keeps the node draining; the next probe retries.
async fn leave(state: &AppState, rt: &EventRuntime) {
    // In turn with the node's admin writes: a delete cannot land between
    // the look below and the recording, so the store never hears of a
    // deleted event's drain sessions (it forgot that event; the next event
    // of its id would begin with them, slots taken by nobody).
    let _turn = state.admin_writes.lock().await;
    if let Some(recorded) = record(state, rt).await {
        close(state, rt, &recorded).await;
    }
}

/// Tells the store of the drain sessions not yet recorded, each with the
/// end it has now: `None` when it failed (the node goes on draining) or the
/// event is gone; otherwise what it recorded.
async fn record(state: &AppState, rt: &EventRuntime) -> Option<Vec<(String, i64)>> {
    let drain = of(rt);
    if rt.live.is_gone() {
        // Deleted (or made again in place elsewhere) while draining: its
        // admissions are over with it, and a restart must not replay them
        // into the next event of its id.
        if let Some(j) = super::journal(state, rt)
            && let Err(e) = j.clear_within(journal_timeout(state)).await
        {
            tracing::warn!(event = %rt.id(), error = %e, path = %j.path().display(), "drain journal of a deleted event not emptied");
            crate::state::drain::journal_failed(rt.id());
        }
        return None;
    }
    let pending = pending_sessions(drain, rt, state.now_ms());
    if !pending.is_empty() {
        let members: Vec<(String, i64)> = pending
            .iter()
            .map(|(m, until_ms)| (m.clone(), until_ms.saturating_mul(1000)))
            .collect();
        match crate::metrics::timed_store(
            "reconcile_active",
            state.store.reconcile_active(rt.id(), &members),
        )
        .await
        {
            Ok(n) => {
                tracing::info!(event = %rt.id(), recorded = n, "drain admissions reconciled");
                if (n as usize) < members.len() {
                    take_over_store_tokens(state, rt, &members).await;
                }
            }
            Err(e) => {
                tracing::warn!(event = %rt.id(), error = e.kind(), "reconcile failed; still draining");
                return None;
            }
        }
    }
    // The store holds them now: the journal can forget them, and with them
    // any write given up on during the drain that landed later (admissions
    // nobody was told of, which a restart would otherwise take back). Should
    // this fail, a restart records them again: sessions that ended early are
    // counted until their planned end (fewer admitted, never more).
    if let Some(j) = super::journal(state, rt)
        && (!pending.is_empty() || j.abandoned())
        && let Err(e) = j.clear_within(journal_timeout(state)).await
    {
        tracing::warn!(event = %rt.id(), error = %e, path = %j.path().display(), "drain journal not emptied");
        crate::state::drain::journal_failed(rt.id());
    }
    Some(pending)
}

/// Leaves drain mode once `recorded` (sessions and the ends the store was
/// told) is in the store. A session released on this node since the list
/// was taken (its end lowered here, while the store, not holding it yet,
/// had nothing to release) is released in the store now: it would
/// otherwise hold its slot to the end it was recorded with.
async fn close(state: &AppState, rt: &EventRuntime, recorded: &[(String, i64)]) {
    let drain = of(rt);
    // The store holds the recorded admissions from here on: capacity figures
    // read from now on count them (see `admit_locally`).
    let recorded_at = state.now_ms();
    // The session ends the gate moved during the drain, before the
    // scheduler's first sweep could end those sessions by the old ones.
    extend_again(state, rt, drain.take_unextended()).await;
    // Fresh stats and admin state before the first answer after the drain.
    crate::refresh::refresh_once(state, rt).await;
    let now = state.now_ms();
    let ended_since: Vec<String> = {
        let mut inner = lock(&drain.inner);
        let mut ended_since = Vec::new();
        for (member, end) in recorded {
            if let Some(nonce) = inner.by_member.get(member).copied()
                && let Some(local) = inner.local.get_mut(&nonce)
            {
                local.reconciled = true;
                local.reconciled_at_ms = recorded_at;
                let over = local.session_start_ms.is_none()
                    && local.redeemed_until_ms.is_some_and(|until| until < *end);
                if over {
                    ended_since.push(member.clone());
                }
            }
        }
        // Keep what still matters: unexpired drain tokens (replays stay
        // refused) and sessions not yet over (see `queue::Queue::seen`).
        let Inner {
            local, by_member, ..
        } = &mut *inner;
        local.retain(|_, l| {
            l.token_expires_at_ms > now || l.redeemed_until_ms.is_some_and(|until| until > now)
        });
        by_member.retain(|_, n| local.contains_key(n));
        drain
            .any_local
            .store(!local.is_empty(), std::sync::atomic::Ordering::Release);
        let lasted = inner.since_ms.take().map(|s| now - s);
        if let Some(lasted) = lasted {
            // For one idle timeout from now the sweep forgives waiters the
            // drain's length (`DrainState::forgiven_idle_ms`).
            let idle = i64::try_from(rt.config.queue_idle_timeout.as_millis()).unwrap_or(i64::MAX);
            inner.drain_ended(now, lasted, idle);
        }
        drain
            .draining
            .store(false, std::sync::atomic::Ordering::Release);
        drain
            .holding
            .store(false, std::sync::atomic::Ordering::Release);
        tracing::info!(event = %rt.id(), lasted_ms = ?lasted, "queue store back; drain over");
        ended_since
    };
    for member in ended_since {
        let released =
            crate::metrics::timed_store("release", state.store.release(rt.id(), &member)).await;
        if let Err(e) = released {
            tracing::warn!(event = %rt.id(), error = e.kind(), "a drain session released during the drain's end is still recorded; it ends at its recorded end");
        }
    }
}

/// Sends the session ends of [`DrainState::unextended`] to the store, a few
/// at a time. A session the store no longer has is ended here as a failed
/// renewal's would be. Once one call fails the rest are not sent (the store
/// is out again: each would wait for it, holding the drain's end); those
/// keep their old ends.
async fn extend_again(
    state: &AppState,
    rt: &EventRuntime,
    ends: std::collections::HashMap<String, (i64, i64)>,
) {
    use futures::StreamExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    let now = state.now_ms();
    let failed = &AtomicBool::new(false);
    futures::stream::iter(ends)
        .for_each_concurrent(16, |(member, (start_us, until_us))| async move {
            if failed.load(Ordering::Relaxed) {
                return;
            }
            match state.store.extend(rt.id(), &member, until_us).await {
                Ok(true) => {}
                Ok(false) => crate::passes::store_says_gone_at(rt, &member, start_us, now),
                Err(_) => failed.store(true, Ordering::Relaxed),
            }
        })
        .await;
}

/// A visitor this node admitted while draining whom the store admitted as
/// well (another node's scheduler went on through the store, or a tick ran
/// just before the outage) holds the store's token, which `reconcile_active`
/// leaves alone. That token would expire while the visitor's drain session
/// goes on, and the slot would count as free: redeem it for them, with the
/// drain session's end, so the store counts the session they hold.
async fn take_over_store_tokens(state: &AppState, rt: &EventRuntime, members: &[(String, i64)]) {
    for (member, until_us) in members {
        let Ok(MemberState::Admitted { nonce, .. }) =
            state.store.status(rt.id(), member, Touch::Peek).await
        else {
            continue;
        };
        // Not a redeem: the visitor's session is open already (a pause
        // stored since must not leave its slot to be swept as a no-show).
        if let Err(e) = state
            .store
            .take_over_token(rt.id(), member, &nonce, *until_us)
            .await
        {
            tracing::warn!(event = %rt.id(), error = e.kind(), "store token of a drain admission not taken over");
        }
    }
}

/// `(member, session end ms)` of drain admissions not yet recorded, as of
/// node time `now`.
fn pending_sessions(drain: &DrainState, rt: &EventRuntime, now: i64) -> Vec<(String, i64)> {
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let lives = Lives {
        session_ttl_ms: ms(rt.config.session_ttl),
        idle_ms: ms(rt.config.session_idle_timeout),
    };
    lock(&drain.inner)
        .local
        .values()
        .filter(|l| !l.reconciled)
        .map(|l| (l.member.clone(), lives.recorded_end(l, now)))
        .collect()
}

/// The admissions of this node that count against a share computed from
/// figures read at `as_of_ms`: those the store has not recorded, and those
/// it recorded since (the figures do not count them yet). A drain's end
/// used to stop counting what it recorded at once, while the share and the
/// capacity taken stayed as the last figures read before it said: a store
/// that dropped again before new figures came let the node hand out its
/// whole share a second time, past `max_active`.
fn taken_from_share(inner: &Inner, as_of_ms: i64) -> u64 {
    inner
        .local
        .values()
        .filter(|l| !l.reconciled || l.reconciled_at_ms >= as_of_ms)
        .count() as u64
}

/// How long an event's sessions last (`session_ttl`, `session_idle_timeout`).
#[derive(Clone, Copy, Debug)]
struct Lives {
    session_ttl_ms: i64,
    idle_ms: i64,
}

impl Lives {
    /// The end a drain admission is recorded with at `now_ms`. An
    /// unredeemed token counts as a session from its expiry onwards, so the
    /// slot stays taken whether or not the visitor comes back for it. A
    /// redeemed one ends where its redeem put it, or a whole idle time from
    /// now if that is later (within its lifetime): its passes were renewed
    /// on this node all through the outage, which the store never heard
    /// of, and a visitor browsing through a long drain must not be ended
    /// by the store's sweep the moment it returns.
    fn recorded_end(self, l: &LocalAdmission, now_ms: i64) -> i64 {
        match (l.redeemed_until_ms, l.session_start_ms) {
            (None, _) => l.token_expires_at_ms.saturating_add(self.session_ttl_ms),
            (Some(until), None) => until,
            (Some(until), Some(start)) => {
                let idle_end = now_ms.saturating_add(self.idle_ms);
                let life_end = start.saturating_add(self.session_ttl_ms);
                until.max(idle_end.min(life_end))
            }
        }
    }
}

/// Admits remembered visitors, front first, within this node's share of the
/// capacity left at drain entry; never while the event was last seen paused
/// or closed (or before it opens).
async fn admit_locally(state: &AppState, rt: &EventRuntime) {
    if state.phase_of(rt) != Phase::Open {
        return;
    }
    let drain = of(rt);
    let Some(admitted) = front_to_admit(state, rt) else {
        return;
    };
    // The journal's write waits for the disk with the drain's lock
    // released: only this task admits for the event, so nothing else takes
    // the room meanwhile, and those taken from the front are in no list
    // until then.
    let journal = super::journal(state, rt);
    // On disk before anybody is told: a crash must not forget them.
    if let Some(j) = journal {
        let records: Vec<journal::Record> = admitted
            .iter()
            .map(|(nonce, l)| journal::Record::Admitted {
                member: l.member.clone(),
                nonce: *nonce,
                token_expires_at_ms: l.token_expires_at_ms,
            })
            .collect();
        if let Err(e) = j.append_within(records, journal_timeout(state)).await {
            tracing::error!(event = %rt.id(), error = %e, path = %j.path().display(),
                "drain journal write failed; admitting nobody");
            crate::state::drain::journal_failed(rt.id());
            // Back to the front, in the same order, for the next try.
            for (i, (_, l)) in admitted.iter().enumerate() {
                drain.ranks.note(&l.member, i as u64);
            }
            return;
        }
    }
    let n = admitted.len() as u64;
    let mut inner = lock(&drain.inner);
    for (nonce, local) in admitted {
        inner.by_member.insert(local.member.clone(), nonce);
        inner.local.insert(nonce, local);
    }
    if n > 0 {
        drain
            .any_local
            .store(true, std::sync::atomic::Ordering::Release);
    }
    metrics::counter!("anteroom_drain_admissions_total", "event" => rt.id().to_string())
        .increment(n);
}

/// How long the drain's journal writes are waited for.
fn journal_timeout(state: &AppState) -> Duration {
    crate::state::drain::journal_timeout(state.server.drain.store_timeout)
}

/// Takes the visitors this node may admit now off the front of its ranks,
/// each with a fresh nonce: `None` when there is no room or nobody.
fn front_to_admit(state: &AppState, rt: &EventRuntime) -> Option<Vec<(Nonce, LocalAdmission)>> {
    let drain = of(rt);
    let nodes = state.server.drain.gateway_nodes.max(1);
    let now = state.now_ms();
    let token_ttl = i64::try_from(rt.config.token_ttl.as_millis()).unwrap_or(i64::MAX);
    let inner = lock(&drain.inner);
    // Several nodes: what the store holds for this node (the others admit
    // around it). One node: the capacity left at entry, nobody else admits.
    // The share and when the figures it comes from were read.
    let (share, as_of_ms) = if super::share::shared(state) {
        (inner.share.budget(), inner.share.confirmed_at_ms)
    } else {
        (
            rt.config.max_active.saturating_sub(inner.used_at_entry) / nodes,
            inner.used_as_of_ms,
        )
    };
    let taken = taken_from_share(&inner, as_of_ms);
    let room = usize::try_from(share.saturating_sub(taken)).unwrap_or(0);
    if room == 0 {
        return None;
    }
    // Not heard of for a queue idle timeout before the drain began (the
    // store could note nobody since): swept by the store, or moved on
    // through another node.
    let idle = i64::try_from(rt.config.queue_idle_timeout.as_millis()).unwrap_or(i64::MAX);
    let since = inner.since_ms.unwrap_or(now).saturating_sub(idle);
    let front: Vec<String> = drain
        .ranks
        .take_front_since(room, since)
        .into_iter()
        .filter(|m| !inner.by_member.contains_key(m))
        .collect();
    if front.is_empty() {
        return None;
    }
    let admitted = front
        .into_iter()
        .map(|member| {
            let mut nonce = [0u8; 16];
            rand::rng().fill_bytes(&mut nonce);
            let local = LocalAdmission {
                member,
                token_expires_at_ms: now.saturating_add(token_ttl),
                redeemed_until_ms: None,
                session_start_ms: None,
                reconciled: false,
                reconciled_at_ms: 0,
            };
            (nonce, local)
        })
        .collect();
    Some(admitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node whose `tickets` drains, with one visitor admitted on its own.
    async fn draining_with_one_admission(
        dir: &std::path::Path,
    ) -> (Arc<AppState>, Arc<EventRuntime>) {
        let state = crate::state::testing::one_node(dir).await;
        let rt = state.event(&EventId::new("tickets").unwrap()).unwrap();
        let drain = of(&rt);
        drain.enter(state.now_ms(), 0, 0);
        drain.note(
            "visitor",
            &anteroom_store::MemberState::Waiting {
                rank: 0,
                queue_length: 1,
            },
        );
        admit_locally(&state, &rt).await;
        (state, rt)
    }

    /// A drain session its visitor released while the drain's end recorded
    /// it (the release's store call found nothing yet, its end lowered here
    /// after the list was taken) is released in the store too, not left to
    /// hold its slot to the end it was recorded with.
    #[tokio::test]
    async fn a_session_released_while_the_drain_ends_is_not_left_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let (state, rt) = draining_with_one_admission(dir.path()).await;
        let (id, drain) = (rt.id().clone(), of(&rt));
        let nonce = *lock(&drain.inner).by_member.get("visitor").unwrap();
        let now = state.now_ms();
        drain
            .redeem_local(
                "visitor",
                &nonce,
                now + 60_000,
                now * 1000,
                state.server.drain.store_timeout,
            )
            .await
            .unwrap()
            .unwrap();
        let recorded = record(&state, &rt).await.unwrap();
        assert_eq!(state.store.stats(&id).await.unwrap().active, 1);
        drain.end_session("visitor", state.now_ms());
        close(&state, &rt, &recorded).await;
        let stats = state.store.stats(&id).await.unwrap();
        assert_eq!(stats.active, 0, "{stats:?}");
        assert!(!drain.is_draining());
    }

    /// A drain that ends after its event was deleted records none of its
    /// admissions in the store, which forgot that event.
    #[tokio::test]
    async fn a_drain_ended_after_its_event_was_deleted_records_nothing_in_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let (state, rt) = draining_with_one_admission(dir.path()).await;
        let (id, drain) = (rt.id().clone(), of(&rt));
        assert_eq!(pending_sessions(drain, &rt, state.now_ms()).len(), 1);
        // Deleted as the admin API does, before the drain's end.
        state.remove_event(&id);
        state.store.delete_event(&id).await.unwrap();
        rt.live.delete();
        leave(&state, &rt).await;
        let stats = state.store.stats(&id).await.unwrap();
        assert_eq!((stats.active, stats.outstanding), (0, 0), "{stats:?}");
    }

    /// A store that comes back and drops again before the node reads new
    /// figures: the share was computed from figures read before the first
    /// drain, so the admissions it recorded still count against it, and the
    /// second drain hands out nothing more (it handed the whole share out
    /// again: 4 sessions on a `max_active` of 2).
    #[tokio::test]
    async fn a_store_that_drops_again_before_new_figures_gets_no_second_share() {
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::testing::one_node(dir.path()).await;
        let rt = state.event(&EventId::new("tickets").unwrap()).unwrap();
        let drain = of(&rt);
        let note = |members: [&str; 2]| {
            for (rank, m) in (0u64..).zip(members) {
                drain.note(
                    m,
                    &anteroom_store::MemberState::Waiting {
                        rank,
                        queue_length: 4,
                    },
                );
            }
        };
        let figures_at = state.now_ms() - 1;
        drain.enter(state.now_ms(), 0, figures_at);
        note(["a", "b"]);
        admit_locally(&state, &rt).await;
        assert_eq!(lock(&drain.inner).local.len(), 2, "the share: max_active 2");
        let recorded = record(&state, &rt).await.unwrap();
        close(&state, &rt, &recorded).await;
        // Out again, the last figures still those from before.
        drain.enter(state.now_ms(), 0, figures_at);
        note(["c", "d"]);
        admit_locally(&state, &rt).await;
        let inner = lock(&drain.inner);
        assert!(
            !inner.by_member.contains_key("c") && !inner.by_member.contains_key("d"),
            "a second share past max_active"
        );
        assert_eq!(taken_from_share(&inner, figures_at), 2);
        assert_eq!(
            taken_from_share(&inner, state.now_ms() + 1),
            0,
            "figures read after the record count it themselves"
        );
    }

    /// A visitor last heard of a queue idle timeout before the drain began
    /// (gone by the store's rule, or moved on through another node) is not
    /// handed a drain admission; one heard of since is.
    #[tokio::test]
    async fn a_drain_passes_over_visitors_not_heard_of_for_an_idle_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::testing::one_node(dir.path()).await;
        let rt = state.event(&EventId::new("tickets").unwrap()).unwrap();
        let drain = of(&rt);
        let start = state.now_ms();
        let idle = i64::try_from(rt.config.queue_idle_timeout.as_millis()).unwrap();
        drain.enter(start, 0, start);
        drain.ranks.note_at("gone", 0, start - idle - 1);
        drain.ranks.note_at("here", 1, start - idle);
        admit_locally(&state, &rt).await;
        let inner = lock(&drain.inner);
        assert!(inner.by_member.contains_key("here"));
        assert!(
            !inner.by_member.contains_key("gone"),
            "a stale rank admitted"
        );
    }

    /// Rank notes carry the time of the last refresh.
    #[tokio::test]
    async fn a_refresh_moves_the_time_rank_notes_carry() {
        let dir = tempfile::tempdir().unwrap();
        let state = crate::state::testing::one_node(dir.path()).await;
        let rt = state.event(&EventId::new("tickets").unwrap()).unwrap();
        let drain = of(&rt);
        crate::refresh::refresh_once(&state, &rt).await;
        let stamped = drain.noted_at_ms.load(std::sync::atomic::Ordering::Relaxed);
        assert!(stamped > 0 && stamped <= state.now_ms(), "{stamped}");
        drain.note(
            "v",
            &anteroom_store::MemberState::Waiting {
                rank: 0,
                queue_length: 1,
            },
        );
        assert!(drain.ranks.take_front_since(1, stamped + 1).is_empty());
        assert_eq!(drain.ranks.take_front_since(1, stamped), ["v"]);
    }

    fn admission(redeemed_until_ms: Option<i64>, session_start_ms: Option<i64>) -> LocalAdmission {
        LocalAdmission {
            member: "m".to_owned(),
            token_expires_at_ms: 5_000,
            redeemed_until_ms,
            session_start_ms,
            reconciled: false,
            reconciled_at_ms: 0,
        }
    }

    #[test]
    fn a_session_browsed_through_a_long_drain_is_recorded_with_an_idle_time_ahead() {
        // A 10-minute lifetime, 2 minutes idle; redeemed at 1 s, so its
        // first end was 121 s.
        let lives = Lives {
            session_ttl_ms: 600_000,
            idle_ms: 120_000,
        };
        let redeemed = admission(Some(121_000), Some(1_000));
        // Recorded within its first idle time: as redeemed.
        assert_eq!(lives.recorded_end(&redeemed, 60_000), 180_000);
        assert_eq!(lives.recorded_end(&redeemed, 0), 121_000);
        // After a 5-minute drain: an idle time from now, not already over.
        assert_eq!(lives.recorded_end(&redeemed, 300_000), 420_000);
        // Never past its lifetime.
        assert_eq!(lives.recorded_end(&redeemed, 590_000), 601_000);
        // A session replayed from the journal (no start): as redeemed.
        assert_eq!(
            lives.recorded_end(&admission(Some(121_000), None), 300_000),
            121_000
        );
        // An unredeemed token: a session from its expiry on.
        assert_eq!(lives.recorded_end(&admission(None, None), 300_000), 605_000);
        // A session released at 50 s (`DrainState::end_session` forgets
        // its start) is not brought back.
        let released = admission(Some(50_000), None);
        assert_eq!(lives.recorded_end(&released, 300_000), 50_000);
    }
}

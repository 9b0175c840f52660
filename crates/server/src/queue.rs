//! The queue store as the request path sees it: every store call a request
//! makes for an event (join, status, redeem, release, the session's
//! extension) goes through [`Queue`], and drain mode is applied here, once,
//! instead of at each call site (the bot defence's own challenge records
//! aside: `bots` is handed the store for those):
//!
//! - a visitor this node admitted on its own while draining is answered from
//!   this node's records, and while the event drains everybody else is told
//!   DRAINING ([`Queue::drain_answer`]);
//! - every member state the store returns is noted in the rank cache and
//!   seen through the drain records ([`Queue::seen`]);
//! - a call that finds the store unreachable wakes the drain probe
//!   ([`Queue::store_failed`]), which decides whether the whole event drains.
//!
//! Handlers build their answers from what these methods return; none of them
//! reaches into drain mode's records itself.

use anteroom_core::score::JoinScoring;
use anteroom_store::{MemberState, Nonce, RedeemOutcome, StoreError, Touch};

use crate::error::ApiError;
use crate::metrics::timed_store;
use crate::passes;
use crate::position::{Answer, QueuePosition};
use crate::state::drain::{DrainState, LocalRedeemError, RETRY_AFTER_SECS};
use crate::state::{AppState, EventRuntime};

/// Whether a status read counts as the visitor being there: the visitor's
/// own poll keeps the waiting place alive, a look on their behalf (the
/// gate's answer to a queued request) does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The visitor's own poll: marks them seen.
    Poll,
    /// A look that leaves the visitor's idle clock alone.
    Look,
}

impl Read {
    fn touch(self) -> Touch {
        match self {
            Read::Poll => Touch::Seen,
            Read::Look => Touch::Peek,
        }
    }
}

/// Whether the store knows a member (in line, admitted or active).
/// `NOT_OPEN` hides that from the position, and the waiting page needs it to
/// join, inside the pre-window, a visitor whose first load came before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Known,
    Unknown,
}

/// A join's result, already seen through the drain records.
#[derive(Debug)]
pub struct Joined {
    /// This call put the member in the queue (it was not there before).
    pub new: bool,
    pub state: MemberState,
}

/// The store calls of one request for one event.
#[derive(Clone, Copy)]
pub struct Queue<'r> {
    state: &'r AppState,
    rt: &'r EventRuntime,
}

impl<'r> Queue<'r> {
    pub fn new(state: &'r AppState, rt: &'r EventRuntime) -> Self {
        Self { state, rt }
    }

    fn drain(&self) -> &'r DrainState {
        &self.rt.live.drain
    }

    /// The answer this node gives `member` from its own drain records, if
    /// any: a drain admission (ADMITTED with the locally signed token, or
    /// ACTIVE), or DRAINING for everybody else while the event drains.
    pub fn drain_answer(&self, member: &str, answer: Answer<'_>) -> Option<QueuePosition> {
        let drain = self.drain();
        if let Some(s) = drain.local_answer(member, || self.state.now_ms()) {
            return Some(QueuePosition::build(
                self.state, self.rt, member, &s, answer,
            ));
        }
        drain
            .is_draining()
            .then(|| QueuePosition::draining(self.state, self.rt))
    }

    /// Joins `member` (insert-if-absent). A store that cannot be reached
    /// fails the join with `503 draining` and wakes the probe.
    pub async fn join(&self, member: &str, scoring: &JoinScoring) -> Result<Joined, ApiError> {
        let outcome = timed_store("join", self.state.store.join(self.rt.id(), member, scoring))
            .await
            .map_err(|e| self.store_error(e))?;
        if outcome.new {
            // Always told, not only while the scheduler idles: its view of
            // the queue is a snapshot up to half a second old, so it may go
            // idle after this join; the permit then wakes it at once.
            self.rt.live.arrivals.notify_one();
        }
        Ok(Joined {
            new: outcome.new,
            state: self.seen(member, outcome.state),
        })
    }

    /// The position of `member`, and whether the store knows them: from the
    /// drain records when they answer, else one status read; DRAINING when
    /// the store cannot answer. A drain-mode answer counts as known: this
    /// node cannot join anybody then.
    pub async fn position(
        &self,
        member: &str,
        read: Read,
        answer: Answer<'_>,
    ) -> (QueuePosition, Presence) {
        if let Some(p) = self.drain_answer(member, answer) {
            return (p, Presence::Known);
        }
        let status = self.state.store.status(self.rt.id(), member, read.touch());
        match timed_store("status", status).await {
            Ok(s) => {
                let s = self.seen(member, s);
                let presence = match s {
                    MemberState::None => Presence::Unknown,
                    _ => Presence::Known,
                };
                let p = QueuePosition::build(self.state, self.rt, member, &s, answer);
                (p, presence)
            }
            Err(e) => {
                tracing::warn!(event = %self.rt.id(), error = e.kind(), "position read failed; draining");
                if matches!(e, StoreError::Unavailable(_)) {
                    self.store_failed();
                }
                (
                    QueuePosition::draining(self.state, self.rt),
                    Presence::Known,
                )
            }
        }
    }

    /// Whether `member`'s session is active in the store and ends after
    /// `now_ms` (the gate's check before renewing an expired pass). `None`
    /// when the store cannot tell.
    pub async fn active_until(&self, member: &str) -> Result<Option<i64>, StoreError> {
        match self
            .state
            .store
            .status(self.rt.id(), member, Touch::Peek)
            .await?
        {
            MemberState::Active { expires_at_us } => Ok(Some(expires_at_us)),
            _ => Ok(None),
        }
    }

    /// Redeems `member`'s admission token `nonce`, opening a session that
    /// ends at `session_end_us` at first, and says when the session started
    /// (the identity its passes carry): a token this node signed while
    /// draining is redeemed against its local single-use set (the store
    /// never saw that nonce) and starts on this node's clock; any other is
    /// redeemed by the store, whose canonical clock dates it in the same
    /// atomic step, so no revocation made before the redeem can end it and
    /// every one made after it does.
    ///
    /// `now_ms` is this node's clock as the redeem began.
    pub async fn redeem(
        &self,
        member: &str,
        nonce: &Nonce,
        session_end_us: i64,
        now_ms: i64,
    ) -> Result<i64, ApiError> {
        let local = self
            .drain()
            .redeem_local(
                member,
                nonce,
                session_end_us.div_euclid(1000),
                now_ms.saturating_mul(1000),
                crate::state::drain::journal_timeout(self.state.server.drain.store_timeout),
            )
            .await;
        let outcome = match local {
            Some(Ok(outcome)) => outcome,
            Some(Err(LocalRedeemError::Journal(failed))) => {
                tracing::error!(event = %self.rt.id(), error = %failed.error, path = %failed.path.display(), "drain journal write failed; redeem refused");
                crate::state::drain::journal_failed(self.rt.id());
                return Err(draining_error());
            }
            Some(Err(LocalRedeemError::InFlight)) => return Err(draining_error()),
            None => {
                let call = self
                    .state
                    .store
                    .redeem(self.rt.id(), member, nonce, session_end_us);
                timed_store("redeem", call)
                    .await
                    .map_err(|e| self.store_error(e))?
            }
        };
        match outcome {
            RedeemOutcome::Redeemed { at_us } => Ok(at_us),
            RedeemOutcome::AlreadyUsed => Err(ApiError::TokenUsed),
            RedeemOutcome::NotAdmitted => Err(ApiError::InvalidToken),
            // Paused or closed since this node last read the admin state:
            // the store refused in the redeem's own step, the token kept.
            RedeemOutcome::Paused => Err(ApiError::EventPaused {
                retry_after_secs: 5,
            }),
            RedeemOutcome::Closed => Err(ApiError::EventClosed),
        }
    }

    /// Moves the end of `member`'s session (started at `session_start_us`)
    /// to `until_us` in the background: the request never waits for the
    /// store. A session the store no longer has (released, evicted or
    /// expired since the pass check) is ended on this node at once, so the
    /// pass just issued does not work here either.
    ///
    /// Within a quarter pass life of this node's last extension of the same
    /// session, nothing is sent (`state::renewals`): a burst of requests
    /// carrying one pass makes one durable write. Says whether it sent one.
    pub fn extend_in_background(&self, member: &str, session_start_us: i64, until_us: i64) -> bool {
        let window_ms = i64::try_from(self.rt.config.pass_ttl.as_millis() / 4).unwrap_or(i64::MAX);
        let now_ms = self.state.now_ms();
        if !crate::locks::lock(&self.rt.live.renewals).should_send(
            member,
            session_start_us,
            now_ms,
            window_ms,
        ) {
            return false;
        }
        let store = self.state.store.clone();
        let event = self.rt.id().clone();
        let member = member.to_owned();
        let now = now_ms;
        let events = self.state.events();
        tokio::spawn(async move {
            match store.extend(&event, &member, until_us).await {
                Ok(true) => {}
                Ok(false) => {
                    if let Some(rt) = events.get(&event) {
                        passes::store_says_gone_at(rt, &member, session_start_us, now);
                    }
                }
                Err(e) => {
                    tracing::debug!(event = %event, error = e.kind(), "session extend failed");
                    if let Some(rt) = events.get(&event) {
                        rt.live
                            .drain
                            .unextended(&member, session_start_us, until_us);
                    }
                }
            }
        });
        true
    }

    /// Ends `member`'s presence in the event (waiting, admitted or active)
    /// and frees the slot: the store release, which records the revocation
    /// every node's cache picks up, then, for the session that started at
    /// `local_session_start_us`, this node's own revocation so its passes
    /// stop here at once. The one path for the release call and the
    /// origin's `Anteroom-Command: release`. The local revocation is made
    /// even when the store fails, the event draining: whoever asked for the
    /// end should not find the session still open on this node.
    pub async fn release(
        &self,
        member: &str,
        local_session_start_us: Option<i64>,
    ) -> Result<bool, StoreError> {
        let released = timed_store("release", self.state.store.release(self.rt.id(), member)).await;
        if let Some(start) = local_session_start_us {
            // Asked for, not inferred from the store: ended here even while
            // the event drains.
            passes::end_here(self.state, self.rt, member, start);
        }
        // A session this node opened while draining is over too: recorded
        // so (its slot free once the store hears of it), and no longer
        // masking a later admission; nor is the visitor's old rank kept
        // for the next drain to admit.
        let drain = self.drain();
        drain.end_session(member, self.state.now_ms());
        drain.ranks.forget(member);
        drain.forget_unextended(member);
        if let Err(StoreError::Unavailable(_)) = &released {
            self.store_failed();
        }
        released
    }

    /// What the store said about `member`, noted for drain mode (the rank
    /// cache) and seen through this node's drain records: a visitor who
    /// redeemed a drain token is ACTIVE even if the store admitted them too
    /// (a tick that ran just before the outage, on a rank this node had not
    /// seen yet); they are never offered a second token while that session
    /// lasts.
    pub fn seen(&self, member: &str, state: MemberState) -> MemberState {
        let drain = self.drain();
        drain.note(member, &state);
        match state {
            MemberState::Admitted { expires_at_us, .. }
                if drain.redeemed_locally(member, || self.state.now_ms()) =>
            {
                MemberState::Active { expires_at_us }
            }
            other => other,
        }
    }

    /// A store call of a request for the event failed as unreachable: probe
    /// the store now. The request alone does not drain the event: under load
    /// one call can time out while the store is alive, and drain turns every
    /// new arrival away. The probe drains at once if the store refuses, and
    /// after `server.drain_after` if it only stays silent (`drain::health`).
    pub fn store_failed(&self) {
        self.drain().wake.notify_one();
    }

    /// Maps a store error of a request. An unreachable store fails this
    /// request with `503 draining` (it cannot be served) and wakes the
    /// probe, which decides whether the whole event drains.
    fn store_error(&self, e: StoreError) -> ApiError {
        if matches!(e, StoreError::Unavailable(_)) {
            self.store_failed();
            return draining_error();
        }
        ApiError::from(e)
    }
}

/// The `503 draining` answer for new arrivals.
pub fn draining_error() -> ApiError {
    ApiError::Draining {
        retry_after_secs: RETRY_AFTER_SECS,
    }
}

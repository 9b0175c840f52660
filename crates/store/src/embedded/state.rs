//! One event's state in memory, and the rules every operation applies to it.
//!
//! Only the event's actor mutates it durably: each operation changes memory
//! and records the matching [`Write`]s, which the actor commits as a batch
//! before anybody hears the answer. Reads (status, stats) take the same lock
//! and see the same memory.

use std::collections::{HashMap, VecDeque};

use anteroom_core::phase::AdminState;
use anteroom_core::score::{JoinScoring, arrival_score};

use super::disk::{Counters, USED_CANCELLED, USED_POW, USED_TOKEN};
use super::index::Order;
use super::table::MemberTable;
use super::writes::Writes;
use crate::{
    Admission, AdmitRequest, EventStats, Expired, JoinOutcome, MemberState, Nonce, RedeemOutcome,
    Revocation, StoreError, Touch, Unavailable, check_member,
};

const MINUTE_US: i64 = 60_000_000;
/// Revocations are kept this long (see [`crate::REVOCATION_RETENTION_US`]).
const REVOCATION_KEEP_US: i64 = crate::REVOCATION_RETENTION_US;

/// A member's outstanding admission token.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token {
    pub(crate) nonce: Nonce,
    pub(crate) expires_at_us: i64,
}

/// One grant row on disk (see [`super::disk::GRANTS`]): every token of one
/// admit call, which share their expiry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    pub(crate) id: u64,
    pub(crate) expires_at_us: i64,
}

/// A nonce recorded as used, by what used it ([`USED_TOKEN`], [`USED_POW`],
/// [`USED_CANCELLED`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Used {
    pub(crate) kind: u8,
    pub(crate) nonce: Nonce,
}

/// A revocation as kept in memory and on disk, numbered in order.
#[derive(Clone, Debug)]
pub(crate) struct Revoked {
    pub(crate) seq: u64,
    pub(crate) at_us: i64,
    pub(crate) member: Box<str>,
}

/// How many things (admissions, ended presences, no-shows) happened at one
/// instant, for the stats windows.
#[derive(Clone, Copy, Debug)]
struct Tally {
    at_us: i64,
    count: u64,
}

/// Where an idle sweep in steps stands.
#[derive(Default)]
pub(crate) struct Sweep {
    pub(crate) cursor: usize,
    pub(crate) idle: u64,
}

/// The hasher of the admitted, active and used maps, which a redeem looks
/// up and changes six times: foldhash (randomly seeded per map) hashes a
/// 32-byte id several times faster than the standard SipHash. A visitor
/// chooses its session id, but an id enters these maps only once the queue
/// admitted it, so an attacker places no more keys than the admission rate
/// lets in; the used map's nonces are drawn by this node. (The waiting
/// members' table, which anyone fills by joining, keeps SipHash.)
pub(crate) type Fast = foldhash::fast::RandomState;

pub(crate) struct EventState {
    pub(crate) table: MemberTable,
    pub(crate) order: Order,
    pub(crate) admitted: HashMap<Box<str>, Token, Fast>,
    /// Grant rows on disk, oldest first.
    pub(crate) grants: Vec<Grant>,
    pub(crate) next_grant: u64,
    /// Active sessions: member → session end (µs).
    pub(crate) active: HashMap<Box<str>, i64, Fast>,
    /// Used nonces → until when the record is kept (µs).
    pub(crate) used: HashMap<Used, i64, Fast>,
    pub(crate) revocations: VecDeque<Revoked>,
    pub(crate) counters: Counters,
    pub(crate) admin: AdminState,
    /// Admissions, ended presences and no-shows over time, for stats.
    admit_log: VecDeque<Tally>,
    churn_log: VecDeque<Tally>,
    noshow_log: VecDeque<Tally>,
    /// Changes of the batch being applied, not yet committed.
    pub(crate) writes: Writes,
    /// Set from a failed commit until memory has been rebuilt from the
    /// reopened file: meanwhile memory may show what the disk lacks, so every
    /// read and command is refused as unavailable.
    pub(crate) down: Option<Unavailable>,
    /// Bumped each time a commit fails, so a batch applied to the memory
    /// before the rebuild is never committed after it.
    pub(crate) generation: u64,
    /// The actor let reads in between two steps of one of its operations
    /// (a sweep, a repack): operations applied on callers' threads go to
    /// the actor meanwhile, so a step's writes are never split by another's.
    pub(crate) actor_paused: bool,
}

impl EventState {
    pub(crate) fn new() -> Self {
        Self {
            table: MemberTable::new(),
            order: Order::default(),
            admitted: HashMap::default(),
            grants: Vec::new(),
            next_grant: 0,
            active: HashMap::default(),
            used: HashMap::default(),
            revocations: VecDeque::new(),
            counters: Counters::default(),
            admin: AdminState::Running,
            admit_log: VecDeque::new(),
            churn_log: VecDeque::new(),
            noshow_log: VecDeque::new(),
            writes: Writes::default(),
            down: None,
            generation: 0,
            actor_paused: false,
        }
    }

    /// The next arrival instant: the clock, made strictly monotonic (and
    /// kept across restarts) so that arrival order is commit order even if
    /// the clock steps back. Only what is ordered by it takes one: a new
    /// waiter's score and a revocation's stamp, which nodes read on from the
    /// last they saw, and a session's start, which a revocation stamped
    /// before it must not end. Everything that ends (tokens, sessions, idle waiters)
    /// is judged by the clock as it is, as Redis judges by `TIME`: a clock
    /// that was an hour ahead and is set right must not hold this clock an
    /// hour ahead, where every session opened meanwhile would already be
    /// over and every batch of admissions would wait for time to catch up.
    pub(crate) fn next_instant(&mut self, now_us: i64) -> i64 {
        let at_us = now_us.max(self.counters.last_us.saturating_add(1));
        self.counters.last_us = at_us;
        at_us
    }

    fn waiting_state(&self, slot: u32) -> MemberState {
        MemberState::Waiting {
            rank: self.order.rank(&self.table, slot),
            queue_length: self.order.len() as u64,
        }
    }

    /// Waiters ahead of `member`, if it is waiting.
    pub(crate) fn rank(&self, member: &str) -> Option<u64> {
        let slot = self.table.find(member)?;
        Some(self.order.rank(&self.table, slot))
    }

    fn non_waiting(&self, member: &str) -> Option<MemberState> {
        if let Some(&Token {
            nonce,
            expires_at_us,
        }) = self.admitted.get(member)
        {
            return Some(MemberState::Admitted {
                nonce,
                expires_at_us,
            });
        }
        self.active
            .get(member)
            .map(|&expires_at_us| MemberState::Active { expires_at_us })
    }

    pub(crate) fn join(
        &mut self,
        member: &str,
        s: &JoinScoring,
        now_us: i64,
    ) -> Result<JoinOutcome, StoreError> {
        check_member(member)?;
        if let Some(state) = self.non_waiting(member) {
            return Ok(JoinOutcome { new: false, state });
        }
        let probe = self.table.probe(member);
        if let Some(slot) = self.table.find_probe(&probe) {
            self.table.set_seen(slot, now_us);
            self.writes.waiting(self.table.score(slot), member, now_us);
            return Ok(JoinOutcome {
                new: false,
                state: self.waiting_state(slot),
            });
        }
        let score = arrival_score(self.next_instant(now_us), s);
        let slot = self
            .table
            .insert_probe(&probe, score, now_us)
            .map_err(StoreError::InvalidInput)?;
        self.order.insert(&mut self.table, slot);
        self.writes.waiting(score, member, now_us);
        Ok(JoinOutcome {
            new: true,
            state: self.waiting_state(slot),
        })
    }

    pub(crate) fn status(
        &mut self,
        member: &str,
        touch: Touch,
        now_us: i64,
    ) -> Result<MemberState, StoreError> {
        check_member(member)?;
        if let Some(slot) = self.table.find(member) {
            // Memory only: see `load` for why a poll writes nothing.
            if touch == Touch::Seen {
                self.table.set_seen(slot, now_us);
            }
            return Ok(self.waiting_state(slot));
        }
        Ok(self.non_waiting(member).unwrap_or(MemberState::None))
    }

    pub(crate) fn admit(&mut self, req: &AdmitRequest, now_us: i64) -> Vec<Admission> {
        if self.admin != AdminState::Running {
            return Vec::new();
        }
        let taken = (self.active.len() + self.admitted.len()) as u64;
        let n = req
            .max
            .min(req.max_active.saturating_sub(taken))
            .min(req.nonces.len() as u64)
            .min(self.order.len() as u64) as usize;
        let slots = self.order.pop_front(&mut self.table, n);
        let mut out = Vec::with_capacity(slots.len());
        let mut grant = Vec::with_capacity(slots.len() * 50);
        let exp = now_us.saturating_add(req.token_ttl_us);
        for (slot, nonce) in slots.into_iter().zip(&req.nonces) {
            let name = self.table.member(slot);
            let member: &str = &name;
            self.writes.unwait(self.table.score(slot), member);
            grant.extend_from_slice(nonce);
            // Members are 1..=256 bytes (checked at join).
            grant.push((member.len() - 1) as u8);
            grant.extend_from_slice(member.as_bytes());
            self.admitted.insert(
                member.into(),
                Token {
                    nonce: *nonce,
                    expires_at_us: exp,
                },
            );
            out.push(Admission {
                member: member.to_owned(),
                nonce: *nonce,
            });
            self.table.remove(slot);
        }
        if !out.is_empty() {
            let id = self.next_grant;
            self.next_grant += 1;
            self.grants.push(Grant {
                id,
                expires_at_us: exp,
            });
            self.writes.grant(id, exp, &grant);
            self.counters.admitted_total += out.len() as u64;
            self.admit_log.push_back(Tally {
                at_us: now_us,
                count: out.len() as u64,
            });
        }
        out
    }

    pub(crate) fn redeem(
        &mut self,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
        opens: bool,
        now_us: i64,
    ) -> Result<RedeemOutcome, StoreError> {
        check_member(member)?;
        // Under the event's lock, which a stored pause takes too: once it is
        // stored, no redeem opens a session, whatever a node last read. (A
        // drain session taken over is open already.)
        match self.admin {
            _ if !opens => {}
            AdminState::Running => {}
            AdminState::Paused => return Ok(RedeemOutcome::Paused),
            AdminState::Closed => return Ok(RedeemOutcome::Closed),
        }
        let used = Used {
            kind: USED_TOKEN,
            nonce: *nonce,
        };
        if self.used.contains_key(&used) {
            return Ok(RedeemOutcome::AlreadyUsed);
        }
        let token_exp = match self.admitted.get(member) {
            Some(t) if t.nonce == *nonce && t.expires_at_us > now_us => t.expires_at_us,
            _ => return Ok(RedeemOutcome::NotAdmitted),
        };
        self.admitted.remove(member);
        self.set_active(member, session_expires_at_us);
        // Kept until the token would have expired anyway: after that the
        // token itself is refused, so the record has done its job.
        self.mark_used(used, token_exp);
        self.counters.redeemed_total += 1;
        Ok(RedeemOutcome::Redeemed {
            at_us: self.next_instant(now_us),
        })
    }

    pub(crate) fn extend(&mut self, member: &str, expires_at_us: i64) -> Result<bool, StoreError> {
        check_member(member)?;
        match self.active.get(member) {
            Some(&exp) => {
                if expires_at_us > exp {
                    self.set_active(member, expires_at_us);
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Sets a member's session end in memory and on disk, where the row is
    /// keyed by the end: a row under an older end is removed.
    fn set_active(&mut self, member: &str, ends_at_us: i64) {
        let old = match self.active.get_mut(member) {
            Some(e) => Some(std::mem::replace(e, ends_at_us)),
            None => {
                self.active.insert(member.into(), ends_at_us);
                None
            }
        };
        match old {
            Some(o) if o == ends_at_us => return,
            Some(o) => self.writes.deactivate(member, o),
            None => {}
        }
        self.writes.active(member, ends_at_us);
    }

    /// Records a used nonce until `kept_until_us`, in memory and on disk,
    /// where the row is keyed by that instant: a row under an older one
    /// (an expired record not swept yet) is removed.
    fn mark_used(&mut self, k: Used, kept_until_us: i64) {
        match self.used.insert(k, kept_until_us) {
            Some(o) if o == kept_until_us => return,
            Some(o) => self.writes.unuse(k.kind, &k.nonce, o),
            None => {}
        }
        self.writes.used(k.kind, &k.nonce, kept_until_us);
    }

    /// Takes a member out of the queue (not out of admitted/active).
    fn unwait(&mut self, member: &str) -> bool {
        let Some(slot) = self.table.find(member) else {
            return false;
        };
        let score = self.table.score(slot);
        self.order.remove(&mut self.table, slot);
        self.table.remove(slot);
        self.writes.unwait(score, member);
        true
    }

    fn revoke(&mut self, member: Box<str>, now_us: i64) {
        let now_us = self.next_instant(now_us);
        let seq = self.revocations.back().map_or(1, |r| r.seq + 1);
        self.writes.revoked(seq, now_us, &member);
        self.revocations.push_back(Revoked {
            seq,
            at_us: now_us,
            member,
        });
    }

    pub(crate) fn release(&mut self, member: &str, now_us: i64) -> Result<bool, StoreError> {
        check_member(member)?;
        let mut present = self.unwait(member);
        if let Some(t) = self.admitted.remove(member) {
            // The grant row still lists the member: this marks it gone.
            let cancelled = Used {
                kind: USED_CANCELLED,
                nonce: t.nonce,
            };
            self.mark_used(cancelled, t.expires_at_us);
            present = true;
        }
        if let Some(ends) = self.active.remove(member) {
            self.writes.deactivate(member, ends);
            present = true;
        }
        if present {
            self.revoke(member.into(), now_us);
            self.churn_log.push_back(Tally {
                at_us: now_us,
                count: 1,
            });
        }
        Ok(present)
    }

    pub(crate) fn reconcile(&mut self, members: &[(String, i64)]) -> Result<u64, StoreError> {
        for (m, _) in members {
            check_member(m)?;
        }
        let mut n = 0;
        for (m, exp) in members {
            if self.active.contains_key(m.as_str()) || self.admitted.contains_key(m.as_str()) {
                continue;
            }
            self.unwait(m);
            self.set_active(m, *exp);
            n += 1;
        }
        Ok(n)
    }

    /// One bounded step of the idle sweep: looks at up to `scan` slots from
    /// `sweep.cursor` and takes out at most `remove` waiters not seen since
    /// `seen_before_us`; `true` while slots are left. Between two steps the
    /// actor lets reads in (see [`super::actor`]), so a sweep of millions
    /// never holds the event for long; nothing is inserted meanwhile, so the
    /// cursor stays valid.
    pub(crate) fn sweep_idle_step(
        &mut self,
        seen_before_us: i64,
        sweep: &mut Sweep,
        scan: usize,
        remove: usize,
    ) -> bool {
        let end = self.table.slot_count();
        let stop = sweep.cursor.saturating_add(scan).min(end);
        let mut removed = 0;
        while sweep.cursor < stop && removed < remove {
            let slot = sweep.cursor as u32;
            sweep.cursor += 1;
            if !self.table.is_live(slot) || self.table.seen(slot) >= seen_before_us {
                continue;
            }
            let score = self.table.score(slot);
            self.order.remove(&mut self.table, slot);
            self.writes.unwait(score, &self.table.member(slot));
            self.table.remove(slot);
            removed += 1;
        }
        sweep.idle += removed as u64;
        sweep.cursor < end
    }

    /// The rest of an expiry, after the idle sweep ([`Self::sweep_idle_step`])
    /// took `idle` waiters out: tokens, sessions, nonces and revocations,
    /// each bounded by the event's capacity, not by its waiters.
    pub(crate) fn expire(&mut self, idle: u64, now_us: i64) -> Expired {
        let tokens: Vec<Box<str>> = self
            .admitted
            .iter()
            .filter(|(_, t)| t.expires_at_us <= now_us)
            .map(|(m, _)| m.clone())
            .collect();
        for m in &tokens {
            self.admitted.remove(m);
        }
        // Every token of a grant shares its expiry: the row goes with them.
        let writes = &mut self.writes;
        self.grants.retain(|g| {
            if g.expires_at_us <= now_us {
                writes.ungrant(g.id);
            }
            g.expires_at_us > now_us
        });
        let sessions: Vec<(Box<str>, i64)> = self
            .active
            .iter()
            .filter(|(_, exp)| **exp <= now_us)
            .map(|(m, exp)| (m.clone(), *exp))
            .collect();
        for (m, ends) in sessions.iter().cloned() {
            self.active.remove(&m);
            self.writes.deactivate(&m, ends);
            self.revoke(m, now_us);
        }
        let stale: Vec<(Used, i64)> = self
            .used
            .iter()
            .filter(|(_, e)| **e <= now_us)
            .map(|(k, e)| (*k, *e))
            .collect();
        for (k, kept_until) in stale {
            self.used.remove(&k);
            self.writes.unuse(k.kind, &k.nonce, kept_until);
        }
        while let Some(r) = self.revocations.front() {
            if r.at_us >= now_us - REVOCATION_KEEP_US {
                break;
            }
            let seq = r.seq;
            self.revocations.pop_front();
            self.writes.unrevoke(seq);
        }
        let ended = idle + sessions.len() as u64;
        if ended > 0 {
            self.churn_log.push_back(Tally {
                at_us: now_us,
                count: ended,
            });
        }
        if !tokens.is_empty() {
            self.noshow_log.push_back(Tally {
                at_us: now_us,
                count: tokens.len() as u64,
            });
        }
        self.prune_logs(now_us);
        Expired {
            idle_waiters: idle,
            unredeemed_tokens: tokens.len() as u64,
            sessions: sessions.len() as u64,
        }
    }

    pub(crate) fn consume_once(&mut self, nonce: &Nonce, expires_at_us: i64, now_us: i64) -> bool {
        let pow = Used {
            kind: USED_POW,
            nonce: *nonce,
        };
        match self.used.get(&pow) {
            Some(exp) if *exp > now_us => false,
            _ => {
                self.mark_used(pow, expires_at_us);
                true
            }
        }
    }

    fn prune_logs(&mut self, now_us: i64) {
        for log in [
            &mut self.admit_log,
            &mut self.churn_log,
            &mut self.noshow_log,
        ] {
            while log
                .front()
                .is_some_and(|t| t.at_us < now_us - 5 * MINUTE_US)
            {
                log.pop_front();
            }
        }
    }

    pub(crate) fn stats(&mut self, now_us: i64) -> EventStats {
        self.prune_logs(now_us);
        let since = |log: &VecDeque<Tally>, window: i64| -> u64 {
            log.iter()
                .rev()
                .take_while(|t| t.at_us >= now_us - window)
                .map(|t| t.count)
                .sum()
        };
        EventStats {
            waiting: self.order.len() as u64,
            active: self.active.len() as u64,
            outstanding: self.admitted.len() as u64,
            admitted_total: self.counters.admitted_total,
            redeemed_total: self.counters.redeemed_total,
            admitted_last_1m: since(&self.admit_log, MINUTE_US),
            admitted_last_5m: since(&self.admit_log, 5 * MINUTE_US),
            churn_last_1m: since(&self.churn_log, MINUTE_US),
            no_shows_last_5m: since(&self.noshow_log, 5 * MINUTE_US),
        }
    }

    pub(crate) fn revocations_since(&self, since_us: i64) -> Vec<Revocation> {
        self.revocations
            .iter()
            .filter(|r| r.at_us >= since_us)
            .map(|r| Revocation {
                member: r.member.to_string(),
                at_us: r.at_us,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;

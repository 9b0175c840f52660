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
    Revocation, StoreError, Unavailable, check_member,
};

const MINUTE_US: i64 = 60_000_000;
/// Revocations are kept this long: far beyond any pass lifetime, and every
/// node refreshes its revocation set about once a second.
const REVOCATION_KEEP_US: i64 = 3600 * 1_000_000;

/// Where an idle sweep in steps stands.
#[derive(Default)]
pub(crate) struct Sweep {
    pub(crate) cursor: usize,
    pub(crate) idle: u64,
}

pub(crate) struct EventState {
    pub(crate) table: MemberTable,
    pub(crate) order: Order,
    pub(crate) admitted: HashMap<Box<str>, (Nonce, i64)>,
    /// Grant rows on disk (see [`super::disk::GRANTS`]): id and token expiry.
    pub(crate) grants: Vec<(u64, i64)>,
    pub(crate) next_grant: u64,
    pub(crate) active: HashMap<Box<str>, i64>,
    pub(crate) used: HashMap<(u8, Nonce), i64>,
    pub(crate) revocations: VecDeque<(u64, i64, Box<str>)>,
    pub(crate) counters: Counters,
    pub(crate) admin: AdminState,
    /// (time, count) of admissions, ended presences and no-shows, for stats.
    admit_log: VecDeque<(i64, u64)>,
    churn_log: VecDeque<(i64, u64)>,
    noshow_log: VecDeque<(i64, u64)>,
    /// Members whose last-seen moved by a status poll, persisted with the next commit.
    pub(crate) dirty_seen: Vec<Box<str>>,
    /// Changes of the batch being applied, not yet committed.
    pub(crate) writes: Writes,
    /// Set from a failed commit until memory has been rebuilt from the
    /// reopened file: meanwhile memory may show what the disk lacks, so every
    /// read and command is refused as unavailable.
    pub(crate) down: Option<Unavailable>,
    /// Bumped each time a commit fails, so a batch applied to the memory
    /// before the rebuild is never committed after it.
    pub(crate) generation: u64,
}

impl EventState {
    pub(crate) fn new() -> Self {
        Self {
            table: MemberTable::new(),
            order: Order::default(),
            admitted: HashMap::new(),
            grants: Vec::new(),
            next_grant: 0,
            active: HashMap::new(),
            used: HashMap::new(),
            revocations: VecDeque::new(),
            counters: Counters::default(),
            admin: AdminState::Running,
            admit_log: VecDeque::new(),
            churn_log: VecDeque::new(),
            noshow_log: VecDeque::new(),
            dirty_seen: Vec::new(),
            writes: Writes::default(),
            down: None,
            generation: 0,
        }
    }

    /// The next canonical instant: the node's clock, made strictly monotonic
    /// so that arrival order is commit order even if the clock steps back.
    pub(crate) fn tick(&mut self, clock_us: i64) -> i64 {
        let now = clock_us.max(self.counters.last_us.saturating_add(1));
        self.counters.last_us = now;
        now
    }

    /// The canonical time for reads, without consuming an instant.
    pub(crate) fn peek(&self, clock_us: i64) -> i64 {
        clock_us.max(self.counters.last_us)
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
        if let Some(&(nonce, expires_at_us)) = self.admitted.get(member) {
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
        now: i64,
    ) -> Result<JoinOutcome, StoreError> {
        check_member(member)?;
        if let Some(state) = self.non_waiting(member) {
            return Ok(JoinOutcome { new: false, state });
        }
        let probe = self.table.probe(member);
        if let Some(slot) = self.table.find_probe(&probe) {
            self.table.set_seen(slot, now);
            self.writes.waiting(self.table.score(slot), member, now);
            return Ok(JoinOutcome {
                new: false,
                state: self.waiting_state(slot),
            });
        }
        let score = arrival_score(now, s);
        let slot = self
            .table
            .insert_probe(&probe, score, now)
            .map_err(StoreError::InvalidInput)?;
        self.order.insert(&mut self.table, slot);
        self.writes.waiting(score, member, now);
        Ok(JoinOutcome {
            new: true,
            state: self.waiting_state(slot),
        })
    }

    pub(crate) fn status(
        &mut self,
        member: &str,
        touch: bool,
        now: i64,
    ) -> Result<MemberState, StoreError> {
        check_member(member)?;
        if let Some(slot) = self.table.find(member) {
            if touch {
                self.table.set_seen(slot, now);
                self.dirty_seen.push(member.into());
            }
            return Ok(self.waiting_state(slot));
        }
        Ok(self.non_waiting(member).unwrap_or(MemberState::None))
    }

    /// Persists the last-seen times moved by status polls since the last commit.
    pub(crate) fn flush_seen(&mut self) {
        for m in std::mem::take(&mut self.dirty_seen) {
            if let Some(slot) = self.table.find(&m) {
                let (score, seen) = (self.table.score(slot), self.table.seen(slot));
                self.writes.waiting(score, &m, seen);
            }
        }
    }

    pub(crate) fn admit(&mut self, req: &AdmitRequest, now: i64) -> Vec<Admission> {
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
        let exp = req.token_expires_at_us;
        for (slot, nonce) in slots.into_iter().zip(&req.nonces) {
            let name = self.table.member(slot);
            let member: &str = &name;
            self.writes.unwait(self.table.score(slot), member);
            grant.extend_from_slice(nonce);
            // Members are 1..=256 bytes (checked at join).
            grant.push((member.len() - 1) as u8);
            grant.extend_from_slice(member.as_bytes());
            self.admitted.insert(member.into(), (*nonce, exp));
            out.push(Admission {
                member: member.to_owned(),
                nonce: *nonce,
            });
            self.table.remove(slot);
        }
        if !out.is_empty() {
            let id = self.next_grant;
            self.next_grant += 1;
            self.grants.push((id, exp));
            self.writes.grant(id, exp, &grant);
            self.counters.admitted_total += out.len() as u64;
            self.admit_log.push_back((now, out.len() as u64));
        }
        out
    }

    pub(crate) fn redeem(
        &mut self,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
        now: i64,
    ) -> Result<RedeemOutcome, StoreError> {
        check_member(member)?;
        if self.used.contains_key(&(USED_TOKEN, *nonce)) {
            return Ok(RedeemOutcome::AlreadyUsed);
        }
        let token_exp = match self.admitted.get(member) {
            Some((n, exp)) if n == nonce && *exp > now => *exp,
            _ => return Ok(RedeemOutcome::NotAdmitted),
        };
        let m: Box<str> = member.into();
        self.admitted.remove(member);
        self.active.insert(m.clone(), session_expires_at_us);
        // Kept until the token would have expired anyway: after that the
        // token itself is refused, so the record has done its job.
        self.used.insert((USED_TOKEN, *nonce), token_exp);
        self.counters.redeemed_total += 1;
        self.writes.active(&m, session_expires_at_us);
        self.writes.used(USED_TOKEN, nonce, token_exp);
        Ok(RedeemOutcome::Redeemed)
    }

    pub(crate) fn extend(&mut self, member: &str, expires_at_us: i64) -> Result<bool, StoreError> {
        check_member(member)?;
        match self.active.get_mut(member) {
            Some(exp) => {
                *exp = expires_at_us;
                self.writes.active(member, expires_at_us);
                Ok(true)
            }
            None => Ok(false),
        }
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

    fn revoke(&mut self, member: Box<str>, now: i64) {
        let seq = self.revocations.back().map_or(1, |r| r.0 + 1);
        self.writes.revoked(seq, now, &member);
        self.revocations.push_back((seq, now, member));
    }

    pub(crate) fn release(&mut self, member: &str, now: i64) -> Result<bool, StoreError> {
        check_member(member)?;
        let mut present = self.unwait(member);
        if let Some((nonce, exp)) = self.admitted.remove(member) {
            // The grant row still lists the member: this marks it gone.
            self.used.insert((USED_CANCELLED, nonce), exp);
            self.writes.used(USED_CANCELLED, &nonce, exp);
            present = true;
        }
        if self.active.remove(member).is_some() {
            self.writes.deactivate(member);
            present = true;
        }
        if present {
            self.revoke(member.into(), now);
            self.churn_log.push_back((now, 1));
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
            self.active.insert(m.as_str().into(), *exp);
            self.writes.active(m, *exp);
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
    pub(crate) fn expire(&mut self, idle: u64, now: i64) -> Expired {
        let tokens: Vec<Box<str>> = self
            .admitted
            .iter()
            .filter(|(_, (_, exp))| *exp <= now)
            .map(|(m, _)| m.clone())
            .collect();
        for m in &tokens {
            self.admitted.remove(m);
        }
        // Every token of a grant shares its expiry: the row goes with them.
        let writes = &mut self.writes;
        self.grants.retain(|&(id, exp)| {
            if exp <= now {
                writes.ungrant(id);
            }
            exp > now
        });
        let sessions: Vec<Box<str>> = self
            .active
            .iter()
            .filter(|(_, exp)| **exp <= now)
            .map(|(m, _)| m.clone())
            .collect();
        for m in sessions.iter().cloned() {
            self.active.remove(&m);
            self.writes.deactivate(&m);
            self.revoke(m, now);
        }
        let stale: Vec<(u8, Nonce)> = self
            .used
            .iter()
            .filter(|(_, e)| **e <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            self.used.remove(&k);
            self.writes.unuse(k.0, &k.1);
        }
        while let Some(&(seq, at, _)) = self.revocations.front() {
            if at >= now - REVOCATION_KEEP_US {
                break;
            }
            self.revocations.pop_front();
            self.writes.unrevoke(seq);
        }
        let ended = idle + sessions.len() as u64;
        if ended > 0 {
            self.churn_log.push_back((now, ended));
        }
        if !tokens.is_empty() {
            self.noshow_log.push_back((now, tokens.len() as u64));
        }
        self.prune_logs(now);
        Expired {
            idle_waiters: idle,
            unredeemed_tokens: tokens.len() as u64,
            sessions: sessions.len() as u64,
        }
    }

    pub(crate) fn consume_once(&mut self, nonce: &Nonce, expires_at_us: i64, now: i64) -> bool {
        match self.used.get(&(USED_POW, *nonce)) {
            Some(exp) if *exp > now => false,
            _ => {
                self.used.insert((USED_POW, *nonce), expires_at_us);
                self.writes.used(USED_POW, nonce, expires_at_us);
                true
            }
        }
    }

    fn prune_logs(&mut self, now: i64) {
        for log in [
            &mut self.admit_log,
            &mut self.churn_log,
            &mut self.noshow_log,
        ] {
            while log.front().is_some_and(|(at, _)| *at < now - 5 * MINUTE_US) {
                log.pop_front();
            }
        }
    }

    pub(crate) fn stats(&mut self, now: i64) -> EventStats {
        self.prune_logs(now);
        let since = |log: &VecDeque<(i64, u64)>, window: i64| -> u64 {
            log.iter()
                .rev()
                .take_while(|(at, _)| *at >= now - window)
                .map(|(_, n)| n)
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
            .filter(|(_, at, _)| *at >= since_us)
            .map(|(_, at, m)| Revocation {
                member: m.to_string(),
                at_us: *at,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;

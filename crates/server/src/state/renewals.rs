//! The session extensions this node lately sent the store, per member, so
//! that a burst of renewals of one session makes one durable write.
//!
//! The gate renews a pass past half its life and moves the session's end
//! forward in the store with it (`gate::renew`). A browser then carries the
//! new pass, so it renews once per half pass life; but the requests it has
//! in flight when the pass crosses that line (a page's assets, loaded in
//! parallel) all carry the old pass, and a client that ignores `Set-Cookie`
//! carries it on every request. Each of those would be a durable write of
//! the same session: a write per request for anyone who holds one pass.
//! Within a quarter of a pass life of the last extension this node sent for
//! the same session, the gate still issues the renewed pass but sends no
//! new extension. The session's end then counts from the first renewal of
//! the burst, up to a quarter pass life before its last request: an idle
//! session is still ended within the half pass life `admission::lifecycle`
//! documents, and the visitor's next renewal moves the end again.

use std::collections::HashMap;

/// Entries kept at least, before stale ones are dropped.
const MIN_PRUNE_AT: usize = 1024;

#[derive(Debug)]
pub struct Renewals {
    by_member: HashMap<Box<str>, Sent>,
    /// The size at which entries older than the window are dropped: twice
    /// what was left after the last pruning, so a pruning's cost is spread
    /// over as many insertions.
    prune_at: usize,
}

impl Default for Renewals {
    fn default() -> Self {
        Self {
            by_member: HashMap::new(),
            prune_at: MIN_PRUNE_AT,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Sent {
    session_start_us: i64,
    at_ms: i64,
}

impl Renewals {
    /// Whether to send the store an extension of `member`'s session that
    /// started at `session_start_us`, now: not when this node sent one for
    /// that session less than `window_ms` ago. A yes is recorded.
    pub fn should_send(
        &mut self,
        member: &str,
        session_start_us: i64,
        now_ms: i64,
        window_ms: i64,
    ) -> bool {
        let recent = |s: &Sent| (0..window_ms).contains(&now_ms.saturating_sub(s.at_ms));
        let sent = Sent {
            session_start_us,
            at_ms: now_ms,
        };
        if let Some(last) = self.by_member.get_mut(member) {
            if last.session_start_us == session_start_us && recent(last) {
                return false;
            }
            *last = sent;
            return true;
        }
        if self.by_member.len() >= self.prune_at {
            self.by_member.retain(|_, s| recent(s));
            self.prune_at = (self.by_member.len() * 2).max(MIN_PRUNE_AT);
        }
        self.by_member.insert(member.into(), sent);
        true
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_member.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_one_session_sends_once_per_window() {
        let mut r = Renewals::default();
        assert!(r.should_send("a", 1, 1_000, 15_000));
        for t in [1_000, 1_001, 9_000, 15_999] {
            assert!(!r.should_send("a", 1, t, 15_000), "at {t}");
        }
        // A window later, the next renewal goes to the store again.
        assert!(r.should_send("a", 1, 16_000, 15_000));
        assert!(!r.should_send("a", 1, 16_001, 15_000));
        // Another member, or a new session of the same one, is its own.
        assert!(r.should_send("b", 1, 16_001, 15_000));
        assert!(r.should_send("a", 2, 16_002, 15_000));
        // A clock that stepped back does not silence a session for long.
        assert!(r.should_send("a", 2, 1_000, 15_000));
    }

    #[test]
    fn stale_entries_are_dropped_as_new_ones_come() {
        let mut r = Renewals::default();
        for i in 0..10_000 {
            // Each member renews once, a second apart: at any moment only
            // the last 15 are within the window.
            assert!(r.should_send(&i.to_string(), 0, i * 1_000, 15_000));
            assert!(r.len() <= 2 * MIN_PRUNE_AT, "{} entries", r.len());
        }
    }
}

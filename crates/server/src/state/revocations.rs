//! The revocation cache of one event: which sessions are over on this node.
//! Refreshed from the store in the background and kept as it is while the
//! store is unreachable (see `passes`), so a pass check never waits on it.

use std::collections::HashMap;

use anteroom_store::Revocation;

/// Ended sessions of one event. A session is identified by its member and
/// its start (the store's canonical time of its redeem, carried in
/// the signed pass): a revocation of a member at canonical time `t` ends
/// every session of that member that started at or before `t`, whatever its
/// passes' issue times, while a later session of the same member (after
/// queueing again, which can only start after `t`) is untouched.
#[derive(Debug, Default)]
pub struct Revocations {
    by_member: HashMap<String, Revoked>,
    /// The next refresh asks for revocations at or after this time.
    pub since_us: Option<i64>,
}

#[derive(Clone, Copy, Debug)]
struct Revoked {
    /// Sessions that started at or before this canonical µs are over.
    started_until_us: i64,
    /// When this node last raised this entry, on its own clock (it is
    /// forgotten as long after as a pass it ends could still be honoured).
    recorded_us: i64,
}

impl Revocations {
    /// Whether the session of `member` that started at `session_start_us` is over.
    pub fn revokes(&self, member: &str, session_start_us: i64) -> bool {
        self.by_member
            .get(member)
            .is_some_and(|r| session_start_us <= r.started_until_us)
    }

    /// Records fetched revocations and forgets those recorded before
    /// `keep_after_us`, on this node's clock. A revocation's time is the
    /// store's: `store_ahead_us` (how far the store's clock runs ahead of
    /// this node's, as the scheduler measures it) puts it on this node's.
    /// Compared as it was, a node whose clock ran a pass life ahead of the
    /// store's forgot each revocation as it arrived, and a released
    /// session's pass went on working there.
    pub fn apply(&mut self, list: &[Revocation], store_ahead_us: i64, keep_after_us: i64) {
        for r in list {
            self.raise(&r.member, r.at_us, r.at_us.saturating_sub(store_ahead_us));
            self.since_us = Some(self.since_us.map_or(r.at_us, |s| s.max(r.at_us)));
        }
        self.by_member.retain(|_, r| r.recorded_us >= keep_after_us);
    }

    /// The store said this session is gone (a renewal found it not active):
    /// its passes stop here at once, before the revocation arrives.
    pub fn end_locally(&mut self, member: &str, session_start_us: i64, now_us: i64) {
        self.raise(member, session_start_us, now_us);
    }

    fn raise(&mut self, member: &str, started_until_us: i64, recorded_us: i64) {
        let entry = self.by_member.entry(member.to_owned()).or_insert(Revoked {
            started_until_us,
            recorded_us,
        });
        entry.started_until_us = entry.started_until_us.max(started_until_us);
        entry.recorded_us = entry.recorded_us.max(recorded_us);
    }

    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_ends_the_sessions_started_before_it_not_later_ones() {
        let mut r = Revocations::default();
        r.apply(
            &[Revocation {
                member: "m".into(),
                at_us: 5_000_000,
            }],
            0,
            0,
        );
        assert!(r.revokes("m", 4_000_000));
        assert!(r.revokes("m", 5_000_000));
        assert!(!r.revokes("m", 5_000_001), "a later session of the member");
        assert!(!r.revokes("other", 0));
        assert_eq!(r.since_us, Some(5_000_000));
        r.apply(&[], 0, 6_000_000);
        assert!(r.is_empty());
    }

    /// Kept on this node's clock: a node 45 s ahead of the store's clock,
    /// keeping revocations 40 s, forgot each one as it arrived.
    #[test]
    fn a_revocation_is_kept_on_this_nodes_clock() {
        let mut r = Revocations::default();
        let store_at = 100_000_000;
        let ahead = -45_000_000;
        let node_at = store_at + 45_000_000;
        r.apply(
            &[Revocation {
                member: "m".into(),
                at_us: store_at,
            }],
            ahead,
            node_at - 40_000_000,
        );
        assert!(r.revokes("m", store_at));
        r.apply(&[], ahead, node_at);
        assert!(r.revokes("m", store_at), "kept 40 s from its time");
        r.apply(&[], ahead, node_at + 1);
        assert!(r.is_empty());
    }

    #[test]
    fn a_session_ended_locally_is_kept_a_pass_life_from_now_not_from_its_start() {
        let mut r = Revocations::default();
        r.end_locally("m", 1_000_000, 9_000_000);
        assert!(r.revokes("m", 1_000_000));
        assert!(!r.revokes("m", 1_000_001));
        r.apply(&[], 0, 8_000_000);
        assert!(r.revokes("m", 1_000_000), "recorded at 9 s, kept");
        r.apply(&[], 0, 9_000_001);
        assert!(r.is_empty());
    }
}

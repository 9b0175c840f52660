//! Key layout of the Redis backend.
//!
//! Every key of event `E` is `anteroom:{E}:<name>`: the hash tag `{E}` puts all
//! of an event's keys in one Redis Cluster slot (so its Lua scripts are legal
//! there) while different events spread across the cluster. The cross-event
//! keys are [`CONFIGS`] with its [`GENERATION`], and [`AUDITED`]; `@` cannot
//! appear in an event id, so they never collide.
//! Nothing outside the `anteroom:` prefix is ever read or written; the one
//! pub/sub channel (the admission news between nodes, `news::CHANNEL`) is
//! under it too.

use crate::{EventId, Nonce};

/// Hash of event id → configuration JSON, for every event.
pub(crate) const CONFIGS: &str = "anteroom:{@config}:events";
/// The generation of [`CONFIGS`], moved on by every change of any
/// document. A key of its own in the same slot (so one script reads or
/// changes both), not a field of the hash, where a node of an earlier
/// version would read it as an event id and refuse the whole hash.
pub(crate) const GENERATION: &str = "anteroom:{@config}:generation";
/// Set of the event ids that have an audit trail (deleted events included).
pub(crate) const AUDITED: &str = "anteroom:{@audit}:events";

/// The keys of one event, in the order the scripts expect them.
pub(crate) struct EventKeys {
    prefix: String,
}

impl EventKeys {
    pub(crate) fn new(event: &EventId) -> Self {
        Self {
            prefix: format!("anteroom:{{{}}}:", event.as_str()),
        }
    }

    fn key(&self, name: &str) -> String {
        let mut k = String::with_capacity(self.prefix.len() + name.len());
        k.push_str(&self.prefix);
        k.push_str(name);
        k
    }

    /// Waiting members, scored by arrival score (lower is served first).
    pub(crate) fn queue(&self) -> String {
        self.key("q")
    }
    /// Sightings of waiters after their join (polls, refreshing joins), and
    /// a mark for each member that left the queue or a slot, scored by time:
    /// with [`Self::join_batches`], when each waiter was last seen (idle expiry).
    pub(crate) fn seen(&self) -> String {
        self.key("seen")
    }
    /// Join batches by the time of their join (batch id scored by TIME): a
    /// new waiter is seen at its join through its batch, not its own entry.
    pub(crate) fn join_batches(&self) -> String {
        self.key("jb")
    }
    /// The members each join batch inserted (batch id → msgpack list), and
    /// the next batch id (field `next`).
    pub(crate) fn join_batch_members(&self) -> String {
        self.key("jm")
    }
    /// One join batch driver's order (`<last batch number>:<its instant>`),
    /// so its batches run in the order it formed them.
    pub(crate) fn join_order(&self, driver: u64) -> String {
        self.key(&format!("jo:{driver:016x}"))
    }

    /// Active sessions, scored by expiry: the slot count is a range count over
    /// it, so no counter can drift after a crash.
    pub(crate) fn active(&self) -> String {
        self.key("active")
    }
    /// Every member holding a slot: `t`, its token nonce and the token's
    /// expiry in decimal, or `s` for an active session followed by the exact
    /// end in decimal only when the f64 score in [`Self::active`] cannot carry
    /// it (beyond 2^53 µs). One hash, so a join checks both in one lookup,
    /// and its size is the number of slots held (tokens + sessions).
    pub(crate) fn held(&self) -> String {
        self.key("held")
    }
    /// Slots held per gateway node (drain reserve and pending admissions):
    /// node id → `reserve:pending:expiry_us`.
    pub(crate) fn shares(&self) -> String {
        self.key("shares")
    }
    /// Admit batches by the expiry of their tokens (batch id scored by the
    /// expiry), so the sweep finds expired tokens without one sorted-set
    /// entry per token.
    pub(crate) fn token_batches(&self) -> String {
        self.key("tokb")
    }
    /// The members each admit batch gave a token to (batch id → msgpack list).
    pub(crate) fn token_batch_members(&self) -> String {
        self.key("tokm")
    }
    /// Redeemed nonces, scored by their token's expiry (replay guard).
    pub(crate) fn used(&self) -> String {
        self.key("used")
    }
    /// Revoked passes: member scored by revocation time.
    pub(crate) fn revocations(&self) -> String {
        self.key("rev")
    }
    /// Admin state: `running`, `paused` or `closed`.
    pub(crate) fn state(&self) -> String {
        self.key("state")
    }
    /// The event's anchor: the canonical µs its arrival scores count from
    /// when it has no opening time, set once (`anchor.lua`).
    pub(crate) fn anchor(&self) -> String {
        self.key("anchor")
    }
    /// What the batch under way still owes (`<start ms>:<owed>`), as the
    /// node that began it last counted (`batch_owed.lua`), with a TTL.
    pub(crate) fn batch_owed(&self) -> String {
        self.key("owed")
    }
    /// The readiness probe's write (`probe.lua`), lapsing after a second.
    pub(crate) fn probe(&self) -> String {
        self.key("probe")
    }
    /// Lifetime totals (`admitted`, `redeemed`).
    pub(crate) fn totals(&self) -> String {
        self.key("totals")
    }
    /// Per-second histories for the rates in `stats`.
    pub(crate) fn admitted_per_s(&self) -> String {
        self.key("h:admitted")
    }
    pub(crate) fn churn_per_s(&self) -> String {
        self.key("h:churn")
    }
    pub(crate) fn no_shows_per_s(&self) -> String {
        self.key("h:noshow")
    }
    /// Admin audit trail, newest first (a capped list).
    pub(crate) fn audit(&self) -> String {
        self.key("audit")
    }
    /// Every long-lived key of the event except its audit trail: what
    /// deleting the event removes. Tick and proof-of-work guards expire on
    /// their own. A key added above must be listed here too.
    pub(crate) fn all_but_audit(&self) -> Vec<String> {
        vec![
            self.queue(),
            self.seen(),
            self.join_batches(),
            self.join_batch_members(),
            self.active(),
            self.held(),
            self.token_batches(),
            self.token_batch_members(),
            self.used(),
            self.revocations(),
            self.state(),
            self.anchor(),
            self.batch_owed(),
            self.probe(),
            self.totals(),
            self.admitted_per_s(),
            self.churn_per_s(),
            self.no_shows_per_s(),
        ]
    }
    /// Guard of one admission tick.
    pub(crate) fn tick(&self, tick: u64) -> String {
        self.key(&format!("tick:{tick}"))
    }
    /// Guard of one single-use proof-of-work nonce.
    pub(crate) fn once(&self, nonce: &Nonce) -> String {
        let mut name = String::with_capacity(5 + 32);
        name.push_str("once:");
        for b in nonce {
            name.push(char::from(HEX[usize::from(b >> 4)]));
            name.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        self.key(&name)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_event_hash_tag() {
        let k = EventKeys::new(&EventId::new("drop-1").unwrap());
        assert_eq!(k.queue(), "anteroom:{drop-1}:q");
        assert_eq!(k.tick(7), "anteroom:{drop-1}:tick:7");
        assert_eq!(
            k.once(&[0xab; 16]),
            format!("anteroom:{{drop-1}}:once:{}", "ab".repeat(16))
        );
    }
}

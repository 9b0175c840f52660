//! One virtual visitor's state, kept small (about 60 bytes) so a million of
//! them fit in tens of megabytes: no task, no buffers, no strings of its own.
//! Its life (enter, solving proof-of-work when asked, wait polling as told,
//! redeem, browse the origin through the gate, release or abandon) is a
//! [`Step`] the scheduler ([`super::fleet`]) advances one answer at a time.
//! The rare long values (a token between admission and redeem, a pass while
//! browsing) live in the scheduler's side tables, not here.

use crate::report::VisitorRecord;

/// Where a visitor is in its life: the request its next turn sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Step {
    /// Not arrived yet, or about to send (or resend) its enter.
    #[default]
    Enter,
    /// Solving a proof-of-work challenge off the scheduler.
    Solving,
    Poll,
    /// Following the push stream (no turn of its own until it ends).
    Stream,
    Redeem,
    Browse,
    Release,
    /// Lived its whole plan.
    Done,
    /// Gave up (counted in the report's `gave_up`).
    Failed,
}

pub const BOT: u8 = 1;
/// Leaves without releasing, so the slot is freed only by idling out.
pub const ABANDON: u8 = 2;
pub const PRE_OPEN: u8 = 4;
pub const REDEEMED: u8 = 8;
pub const RELEASED: u8 = 16;
/// `sid` holds the session id (32 hex digits, as Anteroom makes them).
pub const HAS_SID: u8 = 32;
/// The server's cookies carry the `__Host-` prefix.
pub const HOST_PREFIX: u8 = 64;
/// Counted in the live `waiting` gauge.
pub const WAITING: u8 = 128;

/// Times are kept in ticks of 10 µs (`u32`: 11.9 hours of run), with
/// [`NEVER`] for "not yet".
pub const TICK_US: u64 = 10;
pub const NEVER: u32 = u32::MAX;

/// A send time in ticks, rounded down; an answer time, rounded up: the
/// intervals the fairness judge reads only widen, so a pair it calls
/// certainly inverted still is.
pub fn tick_down(us: u64) -> u32 {
    u32::try_from(us / TICK_US).unwrap_or(NEVER - 1)
}

pub fn tick_up(us: u64) -> u32 {
    u32::try_from(us.div_ceil(TICK_US)).unwrap_or(NEVER - 1)
}

fn us(t: u32) -> Option<u64> {
    (t != NEVER).then(|| u64::from(t) * TICK_US)
}

#[derive(Debug, Clone, Copy)]
pub struct Visitor {
    /// The session id's 16 bytes (when `HAS_SID`).
    pub sid: [u8; 16],
    pub arrival_sent: u32,
    pub arrival_received: u32,
    pub last_waiting_sent: u32,
    pub admitted_seen: u32,
    /// When its admission was made (the token's issue time, server clock).
    pub admitted_at: u32,
    /// When its slot was given back: the release answered, or (abandoning)
    /// its last page answered.
    pub ended_at: u32,
    /// When the first estimate was received, and the estimate (NaN: none yet).
    pub eta_at: u32,
    pub eta_s: f32,
    /// The latest estimate shown (NaN: none yet), to catch one that rises.
    pub last_eta_s: f32,
    pub polls: u32,
    pub step: Step,
    pub flags: u8,
    /// Failed requests in a row (or challenges answered).
    pub failures: u8,
    pub pages_left: u8,
    pub challenges: u8,
    /// The target node that answered its joining enter.
    pub node: u8,
}

impl Visitor {
    pub fn new(flags: u8) -> Self {
        Self {
            sid: [0; 16],
            arrival_sent: NEVER,
            arrival_received: NEVER,
            last_waiting_sent: NEVER,
            admitted_seen: NEVER,
            admitted_at: NEVER,
            ended_at: NEVER,
            eta_at: NEVER,
            eta_s: f32::NAN,
            last_eta_s: f32::NAN,
            polls: 0,
            step: Step::Enter,
            flags,
            failures: 0,
            pages_left: 0,
            challenges: 0,
            node: 0,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    pub fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    /// Whether its life is over (either way).
    pub fn settled(&self) -> bool {
        matches!(self.step, Step::Done | Step::Failed)
    }

    /// Stores a session id; `false` when it is not 32 hex digits.
    pub fn set_sid(&mut self, sid: &str) -> bool {
        let b = sid.as_bytes();
        if b.len() != 32 {
            return false;
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 16];
        for (i, pair) in b.chunks(2).enumerate() {
            match (nibble(pair[0]), nibble(pair[1])) {
                (Some(h), Some(l)) => out[i] = (h << 4) | l,
                _ => return false,
            }
        }
        self.sid = out;
        self.set(HAS_SID, true);
        true
    }

    /// The session id as the cookie carries it.
    pub fn sid_hex(&self, out: &mut String) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for b in self.sid {
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }

    /// What the judge reads of this visitor.
    pub fn record(&self) -> VisitorRecord {
        VisitorRecord {
            bot: self.has(BOT),
            pre_open: self.has(PRE_OPEN),
            arrival: us(self.arrival_sent).zip(us(self.arrival_received)),
            first_eta: us(self.eta_at)
                .filter(|_| !self.eta_s.is_nan())
                .map(|at| (at, f64::from(self.eta_s))),
            last_waiting_sent: us(self.last_waiting_sent),
            admitted_seen: us(self.admitted_seen),
            admitted_at: us(self.admitted_at),
            admitted_clamped_from: None,
            ended_at: us(self.ended_at),
            redeemed: self.has(REDEEMED),
            released: self.has(RELEASED),
            node: self.node,
            polls: self.polls,
            challenges: u32::from(self.challenges),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_visitor_is_small() {
        assert!(
            std::mem::size_of::<Visitor>() <= 64,
            "{}",
            std::mem::size_of::<Visitor>()
        );
    }

    #[test]
    fn session_ids_round_trip_and_odd_ones_are_refused() {
        let mut v = Visitor::new(0);
        assert!(v.set_sid("0123456789abcdef0123456789abcdef"));
        let mut s = String::new();
        v.sid_hex(&mut s);
        assert_eq!(s, "0123456789abcdef0123456789abcdef");
        let mut w = Visitor::new(0);
        assert!(!w.set_sid("not-a-hex-session"));
        assert!(!w.set_sid("0123456789ABCDEF0123456789abcdef"));
        assert!(!w.has(HAS_SID));
    }

    #[test]
    fn ticks_round_outwards() {
        assert_eq!(tick_down(19), 1);
        assert_eq!(tick_up(11), 2);
        assert_eq!(tick_up(10), 1);
    }
}

//! Property test: random join/admit/redeem/release/extend/expire sequences
//! against a tiny in-memory model, comparing every answer.
//!
//! Cases are drawn with proptest's strategies but run by hand (no shrinking),
//! because the store is async; a failure prints the whole sequence.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use super::{Ctx, open_scoring};
use crate::{
    AdmitRequest, EventId, ExpireRequest, Expired, MemberState, Nonce, QueueStore, RedeemOutcome,
    Touch,
};

/// A token or session end that is already over, and one that never is.
const PAST: i64 = 1;
const FUTURE: i64 = i64::MAX / 2;
/// A token lifetime that outlives any test run, either way: the store stamps
/// a token's expiry from its own clock, so the model knows only which side of
/// the case's start the expiry falls on (see [`canonical`]).
const LONG_US: i64 = 50 * 365 * 24 * 3_600 * 1_000_000;

#[derive(Clone, Debug)]
enum Action {
    Join(u8),
    Status(u8, Touch),
    Admit {
        max: u64,
        max_active: u64,
        expired: bool,
    },
    /// `member` redeems the last token issued to `of`.
    Redeem {
        member: u8,
        of: u8,
        session_over: bool,
    },
    Release(u8),
    Extend(u8),
    /// Expire with every waiter idle (`true`) or none.
    Expire(bool),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (0u8..8).prop_map(Action::Join),
        2 => (0u8..8, any::<bool>()).prop_map(|(m, seen)| {
            Action::Status(m, if seen { Touch::Seen } else { Touch::Peek })
        }),
        2 => (0u64..4, 0u64..6, prop::bool::weighted(0.2))
            .prop_map(|(max, max_active, expired)| Action::Admit { max, max_active, expired }),
        3 => (0u8..8, 0u8..8, prop::bool::weighted(0.2))
            .prop_map(|(member, of, session_over)| Action::Redeem { member, of, session_over }),
        1 => (0u8..8).prop_map(Action::Release),
        1 => (0u8..8).prop_map(Action::Extend),
        1 => prop::bool::weighted(0.2).prop_map(Action::Expire),
    ]
}

/// What the trait promises, in the plainest data structures.
#[derive(Default)]
struct Model {
    /// Waiting members by arrival sequence.
    queue: BTreeMap<u64, String>,
    seq_of: HashMap<String, u64>,
    next_seq: u64,
    admitted: HashMap<String, (Nonce, i64)>,
    active: HashMap<String, i64>,
    used: HashSet<Nonce>,
    /// Last token issued to each member, for redeem attempts.
    issued: HashMap<String, Nonce>,
}

impl Model {
    fn state(&self, m: &str) -> MemberState {
        if let Some(seq) = self.seq_of.get(m) {
            let rank = self.queue.range(..seq).count() as u64;
            return MemberState::Waiting {
                rank,
                queue_length: self.queue.len() as u64,
            };
        }
        if let Some(&(nonce, expires_at_us)) = self.admitted.get(m) {
            return MemberState::Admitted {
                nonce,
                expires_at_us,
            };
        }
        match self.active.get(m) {
            Some(&expires_at_us) => MemberState::Active { expires_at_us },
            None => MemberState::None,
        }
    }

    fn join(&mut self, m: &str) -> (bool, MemberState) {
        let absent = matches!(self.state(m), MemberState::None);
        if absent {
            self.queue.insert(self.next_seq, m.to_owned());
            self.seq_of.insert(m.to_owned(), self.next_seq);
            self.next_seq += 1;
        }
        (absent, self.state(m))
    }

    fn unwait(&mut self, m: &str) -> bool {
        match self.seq_of.remove(m) {
            Some(seq) => self.queue.remove(&seq).is_some(),
            None => false,
        }
    }
}

fn member(i: u8) -> String {
    format!("v{i}")
}

/// Runs `cases` random sequences against `store`, each in a fresh event.
/// Panics with the failing sequence and step.
pub async fn model_check(store: Arc<dyn QueueStore>, cases: u32) {
    let ctx = Ctx::new();
    let mut runner = TestRunner::deterministic();
    let strategy = prop::collection::vec(action(), 1..60);
    for case in 0..cases {
        let actions = strategy.new_tree(&mut runner).expect("strategy").current();
        let ev = ctx.event(&format!("model{case}"));
        run_case(&*store, &ev, &actions).await;
    }
}

/// The store's answer as the model writes it: a token's expiry is `FUTURE`
/// or `PAST` by which side of the case's start (`start_us`) it falls on.
fn canonical(st: MemberState, start_us: i64) -> MemberState {
    match st {
        MemberState::Admitted {
            nonce,
            expires_at_us,
        } => MemberState::Admitted {
            nonce,
            expires_at_us: if expires_at_us > start_us {
                FUTURE
            } else {
                PAST
            },
        },
        other => other,
    }
}

async fn run_case(s: &dyn QueueStore, ev: &EventId, actions: &[Action]) {
    let mut model = Model::default();
    let sc = open_scoring(s, ev).await;
    let start_us = s.now_us(ev).await.unwrap();
    let mut nonce_seq: u128 = rand::random::<u64>().into();
    for (step, a) in actions.iter().enumerate() {
        let ctx = || format!("model check, step {step} ({a:?}) of {actions:?}");
        match a {
            Action::Join(i) => {
                let got = s.join(ev, &member(*i), &sc).await.unwrap();
                let (new, state) = model.join(&member(*i));
                assert_eq!(
                    (got.new, canonical(got.state, start_us)),
                    (new, state),
                    "{}",
                    ctx()
                );
            }
            Action::Status(i, touch) => {
                let got = s.status(ev, &member(*i), *touch).await.unwrap();
                assert_eq!(
                    canonical(got, start_us),
                    model.state(&member(*i)),
                    "{}",
                    ctx()
                );
            }
            Action::Admit {
                max,
                max_active,
                expired,
            } => {
                let nonces: Vec<Nonce> = (0..*max)
                    .map(|_| {
                        nonce_seq += 1;
                        nonce_seq.to_be_bytes()
                    })
                    .collect();
                let exp = if *expired { PAST } else { FUTURE };
                let req = AdmitRequest {
                    max: *max,
                    max_active: *max_active,
                    nonces: nonces.clone(),
                    token_ttl_us: if *expired { -LONG_US } else { LONG_US },
                };
                let got = s.admit(ev, &req).await.unwrap();
                let taken = (model.admitted.len() + model.active.len()) as u64;
                let n = (*max).min(max_active.saturating_sub(taken)) as usize;
                let heads: Vec<(u64, String)> = model
                    .queue
                    .iter()
                    .take(n)
                    .map(|(k, m)| (*k, m.clone()))
                    .collect();
                let mut want = Vec::new();
                for ((_, m), nonce) in heads.into_iter().zip(nonces) {
                    model.unwait(&m);
                    model.admitted.insert(m.clone(), (nonce, exp));
                    model.issued.insert(m.clone(), nonce);
                    want.push(crate::Admission { member: m, nonce });
                }
                assert_eq!(got, want, "{}", ctx());
            }
            Action::Redeem {
                member: i,
                of,
                session_over,
            } => {
                let m = member(*i);
                let nonce = model
                    .issued
                    .get(&member(*of))
                    .copied()
                    .unwrap_or([0xee; 16]);
                let sess = if *session_over { PAST } else { FUTURE };
                let got = s.redeem(ev, &m, &nonce, sess).await.unwrap();
                let want = if model.used.contains(&nonce) {
                    RedeemOutcome::AlreadyUsed
                } else if model
                    .admitted
                    .get(&m)
                    .is_some_and(|(n, exp)| *n == nonce && *exp == FUTURE)
                {
                    model.admitted.remove(&m);
                    model.active.insert(m.clone(), sess);
                    model.used.insert(nonce);
                    // The model keeps no clock: the time is the store's.
                    RedeemOutcome::Redeemed { at_us: 0 }
                } else {
                    RedeemOutcome::NotAdmitted
                };
                assert_eq!(
                    std::mem::discriminant(&got),
                    std::mem::discriminant(&want),
                    "{got:?} {want:?} {}",
                    ctx()
                );
            }
            Action::Release(i) => {
                let m = member(*i);
                let got = s.release(ev, &m).await.unwrap();
                let w = model.unwait(&m);
                let a = model.admitted.remove(&m).is_some();
                let s_ = model.active.remove(&m).is_some();
                assert_eq!(got, w || a || s_, "{}", ctx());
            }
            Action::Extend(i) => {
                let m = member(*i);
                let got = s.extend(ev, &m, FUTURE).await.unwrap();
                let want = model.active.get_mut(&m).map(|e| *e = FUTURE).is_some();
                assert_eq!(got, want, "{}", ctx());
            }
            Action::Expire(all_idle) => {
                let cutoff = if *all_idle { i64::MAX } else { i64::MIN };
                let got = s
                    .expire(
                        ev,
                        &ExpireRequest {
                            waiting_seen_before_us: cutoff,
                        },
                    )
                    .await
                    .unwrap();
                let idle = if *all_idle {
                    model.queue.len() as u64
                } else {
                    0
                };
                if *all_idle {
                    model.queue.clear();
                    model.seq_of.clear();
                }
                let before = (model.admitted.len(), model.active.len());
                model.admitted.retain(|_, (_, exp)| *exp == FUTURE);
                model.active.retain(|_, exp| *exp == FUTURE);
                let want = Expired {
                    idle_waiters: idle,
                    unredeemed_tokens: (before.0 - model.admitted.len()) as u64,
                    sessions: (before.1 - model.active.len()) as u64,
                };
                assert_eq!(got, want, "{}", ctx());
            }
        }
        let st = s.stats(ev).await.unwrap();
        let want = (
            model.queue.len() as u64,
            model.active.len() as u64,
            model.admitted.len() as u64,
        );
        assert_eq!(
            (st.waiting, st.active, st.outstanding),
            want,
            "stats after {}",
            ctx()
        );
    }
}

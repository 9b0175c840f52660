//! Sans-IO domain logic of Anteroom: everything that decides, nothing that waits.
//!
//! Architecture invariant: this crate never does I/O. No tokio, no sockets, no
//! disk, no `SystemTime::now()`: the clock and randomness are parameters, so the
//! rules of fairness and admission are tested without a server
//! (`tests/sans_io.rs`; clippy.toml refuses the clock calls here).
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod decimal;
pub mod eta;
pub mod phase;
pub mod policy;
pub mod pow;
pub mod risk;
pub mod score;
pub mod token;

//! The simulator's integration tests, one test binary with a module per
//! area and the set-up they share in `support` (an in-process Anteroom, its
//! config, the crowd's defaults).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod crowd_fake;
mod crowd_limits;
mod distant;
mod smoke;
mod smoke_nodes;
mod stats;
mod tokens;

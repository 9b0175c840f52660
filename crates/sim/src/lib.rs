//! `anteroom-sim` as a library: the crowd simulator, the instrumented origin,
//! the report and the HTTP benchmark, so tests can drive them in-process and
//! the binary's subcommands stay thin.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod crowd;
pub mod http;
pub mod origin;
pub mod plot;
pub mod report;

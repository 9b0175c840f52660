//! The Anteroom server: gate, queue API, waiting page, admin API, scheduler.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
pub mod error;
pub mod gate;
pub mod identity;
pub mod page;

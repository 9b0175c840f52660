//! The Anteroom server: gate, queue API, waiting page, admin API, scheduler.
//!
//! [`run`] is the one entry point: the binary and every test start the server
//! through it, on listeners they bound themselves (port 0 in tests).
//!
//! The modules form layers (leaves, config, the state's parts, the state,
//! the request path, background tasks, the routers): ARCHITECTURE.md lists
//! which may use which, and the `layers` test holds the code to it.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod access;
pub mod admin;
pub mod admission;
pub mod api;
pub mod app;
pub mod bots;
pub mod client_ip;
pub mod clock;
pub mod config;
pub mod demo;
// Drain mode per event while the queue store is unreachable.
pub mod drain;
pub mod error;
pub mod gate;
pub mod identity;
pub mod journal;
#[cfg(test)]
mod layers;
pub mod locks;
pub mod metrics;
pub mod page;
pub mod passes;
pub mod position;
pub mod proxy;
pub mod push;
pub mod queue;
pub mod refresh;
pub mod routes;
pub mod scheduler;
mod serve;
pub mod state;
pub mod tls;

pub use app::{Listeners, check, open_store, public_router, run, run_listeners, run_with_store};
pub use config::Config;
/// Binds a listener with the accept queue a gateway needs.
pub use serve::connections::bind as bind_listener;
/// The hot-route hook of a listener (the public one's: `app::hot`).
pub use serve::{Answer, HotAnswer, HotRoutes, HotWholeAnswer};
pub use state::AppState;

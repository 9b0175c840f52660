//! What the test modules share: servers (in process and as the real
//! binary), origins, visitors, configs, and the browser, TLS and raw-socket
//! clients.

pub mod admission;
pub mod bots;
pub mod browser;
pub mod config;
pub mod cut;
pub mod origin;
pub mod process;
pub mod proxy;
pub mod raw;
pub mod server;
pub mod tls;
pub mod visitor;
pub mod wired;

//! The Anteroom server: gate, queue API, waiting page, admin API, scheduler.
pub mod gate;

//! The gate.

pub mod normalize;
pub mod routes;

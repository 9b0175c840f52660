//! policy (being written).

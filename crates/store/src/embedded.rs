//! Embedded backend (being written).

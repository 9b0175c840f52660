//! Conformance suite (being written).

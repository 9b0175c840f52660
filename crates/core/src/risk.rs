//! risk (being written).

//! phase (being written).

//! token (being written).

//! eta (being written).

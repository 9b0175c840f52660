//! pow (being written).

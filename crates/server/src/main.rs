//! The `anteroom` binary.
fn main() {}

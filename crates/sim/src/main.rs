//! `anteroom-sim`: flash-crowd simulator and benchmarks.
fn main() {}

//! The QueueStore trait and its backends.

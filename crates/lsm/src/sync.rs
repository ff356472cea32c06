//! The atomics of the lock-free memtable (skiplist links and height, key version chains, point-index slots
//! and, through `memtable::index_cell`, its current generation) and the writer's change counter
//! (`fast_path`): the standard library's, or loom's under `cfg(loom)`, so that the model checks in
//! `loom_tests` and `loom_fast_path` explore every interleaving and weak-memory outcome of exactly this code.
//! Normal builds compile to the same code as with `std::sync::atomic` (these are re-exports, not wrappers).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize};

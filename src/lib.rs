//! keyed-state: a pure-Rust keyed state store for stream processors.
//!
//! Key groups are assigned exactly as Apache Flink assigns them ([`keygroup`]); typed keyed state
//! ([`state`]) lives in a backend behind one trait ([`backend::StateBackend`]); every backend feeds the same
//! savepoint encoder ([`savepoint`]), so a savepoint taken on one backend restores on another, at any
//! parallelism. Entry bytes follow Flink's RocksDB working-state layout exactly ([`layout`]).
//!
//! The public modules, by what a user does with them:
//!
//! * [`state`] — the typed API: [`KeyedStateStore`](state::KeyedStateStore), descriptors, accessors and
//!   their iterators, timers, TTL configuration, restore from savepoints.
//! * [`backend`] — the backend trait and the heap, LSM and (feature `rocksdb`) RocksDB backends.
//! * [`savepoint`] — the unified savepoint format: write, read, verify.
//! * [`checkpoint`] (feature `checkpoints`) — incremental checkpoints on object storage, restore and rescale.
//! * [`env`](mod@env) — one environment per process or slot: shared background threads, memory budget and I/O
//!   runtime for many backends and checkpoint storages.
//! * [`keygroup`], [`serializer`] — Flink's key-group assignment and serializers.
//! * [`meta`], [`layout`], [`ttl`] — what a backend or snapshot implementor works with: state descriptions,
//!   Flink's entry bytes, TTL clocks and the byte-level expiry of stored values.
//!
//! Errors: [`Error`] and [`Result`], with [`ErrorKind`], [`Location`] and the detail types [`SavepointError`]
//! and `CheckpointError` (`design/errors.md`). The hidden module `internals` holds what only the test suites,
//! benchmarks and fuzz targets reach.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
#[cfg(feature = "checkpoints")]
pub mod checkpoint;
pub mod env;
mod error;
#[doc(hidden)]
pub mod internals;
pub mod keygroup;
pub mod layout;
pub mod meta;
pub mod savepoint;
pub mod serializer;
pub mod state;
pub mod ttl;

#[cfg(feature = "checkpoints")]
pub use error::CheckpointError;
pub use error::{Error, ErrorKind, Location, Result, SavepointError};

/// The README's code blocks, compiled and run as doctests so that its API example stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

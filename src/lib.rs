//! keyed-state: a pure-Rust keyed state store for stream processors.
//!
//! Key groups are assigned exactly as Apache Flink assigns them ([`keygroup`]); typed keyed state
//! ([`state`]) lives in a backend behind one trait ([`backend::StateBackend`]); every backend feeds the same
//! savepoint encoder ([`savepoint`]), so a savepoint taken on one backend restores on another, at any
//! parallelism. Entry bytes follow Flink's RocksDB working-state layout exactly ([`layout`]).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
#[cfg(feature = "checkpoints")]
pub mod checkpoint;
pub mod error;
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

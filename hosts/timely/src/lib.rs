//! keyed-state as the state of a distributed stream processor: a host on timely dataflow
//! (`design/timely-host.md`).
//!
//! - [`keyed`] — keyed operators: records exchanged to the worker owning their key group (Flink's
//!   contiguous ranges), state in a keyed-state store, event-time timers fired as the frontier passes.
//! - [`protocol`] — aligned checkpoints: the synchronous part between two epochs on every worker,
//!   uploads in the background, acknowledgements to worker 0, its record of the complete checkpoint, and
//!   confirmations back to every worker.
//! - [`sink`] — exactly-once file output committed when the checkpoint covering it is confirmed.
//! - [`checkpoints`] — every call into keyed-state's checkpoints.
//! - [`process`] and [`launch`] — one process of a job; a job's processes on loopback.
//! - [`queries`] — Nexmark q3, q5, q7, q8 and q11 on the `nexmark` crate's events ([`events`]; q3 reads
//!   them projected on its fields, [`projected`]).

#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod checkpoints;
pub mod context;
pub mod error;
pub mod events;
pub mod keyed;
pub mod launch;
pub mod process;
pub mod projected;
pub mod protocol;
pub mod queries;
pub mod query;
pub mod sink;
pub mod source;
pub mod spec;
pub mod worker;

pub use error::{Error, ErrorKind, Result};

//! Internals that the test suites, benchmarks and fuzz targets reach: the one home of what is public for them
//! only. Hidden from the documentation; not part of the API (no stability promise, may change in any
//! version).
//!
//! * [`heap_table_file`]: the heap backend's table file codec (`backend/heap/table_file.rs`), which the
//!   fuzz target `heap_table_decode` and the fuzz corpus test drive.
//! * [`SmallBytes`], [`UserMap`]: the heap backend's inline byte strings and per-map tables, measured alone
//!   by `benches/heap_map_sizes.rs`.
//! * [`RmwCacheProbe`]: the LSM backend's read-modify-write cache driven without an engine, measured alone
//!   by `benches/rmw_cache_growth.rs`.
//! * `FaultStore` (feature `test-util`): an object store that fails requests where a test tells it to.

/// The heap backend's table file: `begin`, `push_entry`, `decode` (`design/checkpoints.md`, "Heap table
/// files").
pub mod heap_table_file {
    pub use crate::backend::heap::table_file::{begin, decode, push_entry, TABLE_FORMAT};
}

pub use crate::backend::heap::bytes::SmallBytes;
pub use crate::backend::heap::map_table::UserMap;
pub use crate::backend::lsm_cache::probe::RmwCacheProbe;
#[cfg(all(feature = "checkpoints", any(test, feature = "test-util")))]
pub use crate::checkpoint::fault_store::FaultStore;

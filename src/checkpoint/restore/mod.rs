//! Restore and rescale from a checkpoint, one module per backend (`lsm`: adopting the old instances' files
//! with key bounds; `heap`: reading the tables of the key groups owned; `rocksdb`: as Flink's RocksDB
//! backend restores), what they share (`parts`), and `savepoint`: a checkpoint turned into a unified
//! savepoint.

mod heap;
mod lsm;
mod parts;
#[cfg(feature = "rocksdb")]
mod rocksdb;
mod savepoint;

pub use heap::restore_heap;
pub use lsm::{restore_lsm, restore_lsm_temp};
pub use parts::RestoreInfo;
#[cfg(feature = "rocksdb")]
pub use rocksdb::restore_rocksdb;
pub use savepoint::to_savepoint;

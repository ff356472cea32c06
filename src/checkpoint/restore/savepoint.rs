//! A checkpoint (every instance) turned into one unified savepoint, which restores into any backend at
//! any parallelism.

use std::path::Path;

use super::heap::restore_heap;
use super::lsm::restore_lsm_temp;
#[cfg(feature = "rocksdb")]
use super::rocksdb::restore_rocksdb;
use crate::backend::{BackendKind, StateBackend};
use crate::checkpoint::scan::checkpoint_parts;
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::{CheckpointError, Result};
use crate::keygroup::KeyGroupRange;
use crate::savepoint::{write_savepoint, WriteOptions};
use keyed_state_lsm::Options;

/// Writes checkpoint `id` (every instance) as one unified savepoint at `out`, so that it restores into any
/// backend at any parallelism. Returns the savepoint's size.
pub fn to_savepoint(storage: &CheckpointStorage, id: u64, out: &Path) -> Result<u64> {
    let parts = checkpoint_parts(storage, id)?;
    let Some(first) = parts.first() else {
        return Err(CheckpointError::NotFound {
            id,
            detail: "no metadata".into(),
        }
        .into());
    };
    let start = parts
        .iter()
        .filter(|m| !m.key_group_range.is_empty())
        .map(|m| m.key_group_range.start())
        .min();
    let end = parts
        .iter()
        .filter(|m| !m.key_group_range.is_empty())
        .map(|m| m.key_group_range.end())
        .max();
    let mut config = first.backend_config();
    config.key_group_range = match (start, end) {
        (Some(s), Some(e)) => KeyGroupRange::new(s, e),
        _ => KeyGroupRange::EMPTY,
    };
    let snap = match first.backend {
        BackendKind::Heap => restore_heap(storage, id, config)?.0.snapshot()?,
        #[cfg(feature = "rocksdb")]
        BackendKind::RocksDb => restore_rocksdb(storage, id, config, Default::default())?
            .0
            .snapshot()?,
        #[cfg(not(feature = "rocksdb"))]
        BackendKind::RocksDb => {
            return Err(crate::Error::Unsupported {
                backend: "rocksdb",
                what: "restoring its checkpoints in a build without the `rocksdb` feature",
            })
        }
        BackendKind::Lsm => restore_lsm_temp(storage, id, config, Options::default())?
            .0
            .snapshot()?,
    };
    let summary = write_savepoint(out, &*snap, &WriteOptions::default())?;
    Ok(summary.bytes_written)
}

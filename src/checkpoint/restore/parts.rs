//! What every restore from a checkpoint shares: choosing the parts (one per old instance) that hold key
//! groups of the restored backend and checking that they cover it, checking a fetched file against its
//! metadata, and [`RestoreInfo`], what a restore did.

use crate::backend::{BackendConfig, BackendKind};
use crate::checkpoint::format::{CheckpointMetadata, FileRef, ObjectRef};
use crate::checkpoint::metadata_path;
use crate::checkpoint::scan::checkpoint_parts;
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::{CheckpointError, Error, Location, Result};

/// What a restore did.
#[derive(Debug, Clone, Default)]
pub struct RestoreInfo {
    /// The metadata of every instance part that was read, its files rewritten to those the restored
    /// backend was given, numbered as the backend numbers them (an LSM file adopted in several pieces once
    /// per piece; files of copied parts and files with nothing in the new range not listed), so that
    /// [`Checkpointer::restored_from`](crate::checkpoint::Checkpointer::restored_from) in claim mode reuses
    /// exactly the objects whose bytes the backend's files are. A listed number the backend does not use (a
    /// piece the engine found empty) matches nothing.
    pub parts: Vec<CheckpointMetadata>,
    /// Instances whose files were taken as they are (adopted SST files, the RocksDB database opened as
    /// it is, heap tables read).
    pub adopted: Vec<String>,
    /// Instances whose entries were copied (their files could not be adopted safely).
    pub copied: Vec<String>,
    /// Engine files adopted: the LSM backend's SST files (a file holding several states' keys of the new
    /// range counts once per state), or the files of the RocksDB database opened as it is. 0 on the heap
    /// backend, which has no engine files.
    pub files_adopted: usize,
    /// Heap tables read, one per (state, key group) of the new range. 0 on the LSM and RocksDB backends.
    pub tables_read: usize,
    /// Bytes fetched from storage (or linked on a local root).
    pub bytes_fetched: u64,
}

/// The completed parts of checkpoint `id` whose key groups meet `config`'s, after checking that they
/// cover every key group of it with `config`'s max parallelism and that no two overlap.
pub(super) fn select_parts(
    storage: &CheckpointStorage,
    id: u64,
    config: &BackendConfig,
) -> Result<Vec<CheckpointMetadata>> {
    config.validate()?;
    let target = config.key_group_range;
    let parts: Vec<CheckpointMetadata> = checkpoint_parts(storage, id)?
        .into_iter()
        .filter(|m| !m.key_group_range.intersect(&target).is_empty())
        .collect();
    if parts.is_empty() {
        return Err(CheckpointError::NotFound {
            id,
            detail: format!("no instance covers key groups {target}"),
        }
        .into());
    }
    if let Some(m) = parts
        .iter()
        .find(|m| m.max_parallelism != config.max_parallelism)
    {
        return Err(Error::MaxParallelismMismatch {
            backend: config.max_parallelism,
            savepoint: m.max_parallelism,
        });
    }
    // The instances of one checkpoint own disjoint key groups; two parts that overlap come from different
    // runs that wrote the same checkpoint id, and either could hold a key group's state.
    for (i, a) in parts.iter().enumerate() {
        if let Some(b) = parts[i + 1..]
            .iter()
            .find(|b| !a.key_group_range.intersect(&b.key_group_range).is_empty())
        {
            return Err(CheckpointError::OverlappingParts {
                id,
                first: a.instance.clone(),
                first_key_groups: a.key_group_range,
                second: b.instance.clone(),
                second_key_groups: b.key_group_range,
            }
            .into());
        }
    }
    if let Some(kg) = target
        .iter()
        .find(|kg| !parts.iter().any(|m| m.key_group_range.contains(*kg)))
    {
        return Err(CheckpointError::NotFound {
            id,
            detail: format!("key group {kg} of {target} is in no instance's part"),
        }
        .into());
    }
    Ok(parts)
}

/// Checks that every part was written by the backend `restore` restores into.
pub(super) fn check_backend(parts: &[CheckpointMetadata], restore: BackendKind) -> Result<()> {
    match parts.iter().find(|m| m.backend != restore) {
        Some(m) => Err(CheckpointError::WrongBackend {
            id: m.checkpoint_id,
            instance: m.instance.clone(),
            written_by: m.backend.name(),
            restore: restore.name(),
        }
        .into()),
        None => Ok(()),
    }
}

/// The metadata of part `m` has a damaged record: an error naming its metadata file.
pub(super) fn damaged_metadata(m: &CheckpointMetadata, detail: String) -> Error {
    CheckpointError::Metadata {
        at: Location::file(metadata_path(m.checkpoint_id, &m.instance)),
        detail,
    }
    .into()
}

/// The object holding file `f` of part `m`.
pub(super) fn object_of<'m>(m: &'m CheckpointMetadata, f: &FileRef) -> Result<&'m ObjectRef> {
    m.objects.get(f.object as usize).ok_or_else(|| {
        damaged_metadata(
            m,
            format!(
                "file {} names object {} of {}",
                f.number,
                f.object,
                m.objects.len()
            ),
        )
    })
}

/// Checks the fetched bytes of file `f` of part `m` (in `object`) against the checksum the metadata
/// records.
pub(super) fn check_fetched(
    m: &CheckpointMetadata,
    f: &FileRef,
    object: &str,
    data: &[u8],
) -> Result<()> {
    if xxhash_rust::xxh3::xxh3_64(data) == f.checksum {
        return Ok(());
    }
    Err(CheckpointError::Damaged {
        at: Location::at(object, f.offset),
        detail: format!(
            "{} of checkpoint {} ({}) does not match its checksum",
            f.label(),
            m.checkpoint_id,
            m.instance
        ),
    }
    .into())
}

/// Bytes of object ranges a restore holds in memory at once (one range larger than this is fetched alone).
pub(super) const FETCH_BYTES: u64 = 32 << 20;

/// Fetches `ranges` (`(object, offset, length)`) in batches of about [`FETCH_BYTES`] and hands each range's
/// bytes to `each` with its index, in order. Each batch is charged to the budget of the storage's upload
/// buffers (its environment's) while it is held.
pub(super) fn fetch_in_batches(
    storage: &CheckpointStorage,
    ranges: &[(String, u64, u64)],
    mut each: impl FnMut(usize, Vec<u8>) -> Result<()>,
) -> Result<()> {
    let mut start = 0;
    while start < ranges.len() {
        let mut end = start;
        let mut bytes = 0u64;
        while let Some((_, _, len)) = ranges.get(end) {
            if end > start && bytes + len > FETCH_BYTES {
                break;
            }
            bytes += len;
            end += 1;
        }
        let _charge = storage.charge(usize::try_from(bytes).unwrap_or(usize::MAX));
        let data = storage.get_ranges(ranges.get(start..end).unwrap_or_default())?;
        for (i, d) in data.into_iter().enumerate() {
            each(start + i, d)?;
        }
        start = end;
    }
    Ok(())
}

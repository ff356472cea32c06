//! Reading a checkpoint root as a whole: every metadata file, the completed checkpoints, the parts of one,
//! and every object some metadata references (what the sweep must keep).

use std::collections::BTreeSet;

use super::format::CheckpointMetadata;
use super::storage::CheckpointStorage;
use crate::error::{CheckpointError, Error, Result};

/// A metadata file in the root: its path and what decoding it gave.
pub type MetadataEntry = (String, Result<CheckpointMetadata>);

/// The checkpoint id a `chk-<id>/...` path names.
pub fn checkpoint_id_of(path: &str) -> Option<u64> {
    path.strip_prefix("chk-")?.split('/').next()?.parse().ok()
}

/// The largest metadata file read (256 MiB): a larger one is a [`CheckpointError::Metadata`] naming it,
/// never an allocation of its size. The largest the format produces is far below (45 bytes a file: a heap
/// instance at max parallelism 32768 with 10 states is 15 MB).
pub const MAX_METADATA_BYTES: u64 = 256 << 20;

/// Every metadata file of the root (`chk-*/*/_metadata`), decoded, sorted by path (so by id, then instance).
pub fn read_all_metadata(storage: &CheckpointStorage) -> Result<Vec<MetadataEntry>> {
    Ok(scan_metadata(storage)?.0)
}

/// [`read_all_metadata`], awaited.
pub(crate) async fn read_all_metadata_async(
    storage: &CheckpointStorage,
) -> Result<Vec<MetadataEntry>> {
    Ok(scan_metadata_async(storage).await?.0)
}

/// [`read_all_metadata`], and whether a listed file was gone when read (deleted during the scan).
fn scan_metadata(storage: &CheckpointStorage) -> Result<(Vec<MetadataEntry>, bool)> {
    storage.io().block_on(|| scan_metadata_async(storage))?
}

/// [`scan_metadata`], awaited.
async fn scan_metadata_async(storage: &CheckpointStorage) -> Result<(Vec<MetadataEntry>, bool)> {
    let mut out = Vec::new();
    let mut vanished = false;
    for (path, _) in storage.list_async("").await? {
        if !(path.starts_with("chk-") && path.ends_with("/_metadata")) {
            continue;
        }
        let decoded = match storage.get_bounded_async(&path, MAX_METADATA_BYTES).await {
            Ok(Ok(bytes)) => CheckpointMetadata::decode_named(&path, &bytes),
            Ok(Err(size)) => Err(CheckpointError::Metadata {
                at: crate::error::Location::file(&path),
                detail: format!(
                    "{size} bytes, more than the {MAX_METADATA_BYTES} a metadata file may hold; not read"
                ),
            }
            .into()),
            // Deleted between the list and the read: no longer a checkpoint.
            Err(Error::Checkpoint(CheckpointError::MissingObject { .. })) => {
                vanished = true;
                continue;
            }
            Err(e) => return Err(e),
        };
        out.push((path, decoded));
    }
    Ok((out, vanished))
}

/// Every completed checkpoint part whose metadata decodes, by id then instance.
pub fn list_completed(storage: &CheckpointStorage) -> Result<Vec<CheckpointMetadata>> {
    let mut v: Vec<CheckpointMetadata> = read_all_metadata(storage)?
        .into_iter()
        .filter_map(|(_, m)| m.ok())
        .collect();
    v.sort_by(|a, b| {
        (a.checkpoint_id, a.key_group_range.start(), &a.instance).cmp(&(
            b.checkpoint_id,
            b.key_group_range.start(),
            &b.instance,
        ))
    });
    Ok(v)
}

/// Times [`referenced_objects`] scans the root again after a metadata file vanished mid-scan.
const RESCANS: usize = 5;

/// Every object some metadata references, or `None` if a metadata file does not decode (then what it
/// references is unknown, and nothing may be deleted).
///
/// The scan lists the root, then reads each metadata file. A file deleted in between (another instance
/// confirming a newer checkpoint) may have been the only reference to an object that the newer metadata,
/// put before the deletion but after the listing, references too: so a scan that saw a file vanish is
/// repeated, and after five such scans the answer is `None`.
pub fn referenced_objects(storage: &CheckpointStorage) -> Result<Option<BTreeSet<String>>> {
    for _ in 0..RESCANS {
        let (all, vanished) = scan_metadata(storage)?;
        if vanished {
            continue;
        }
        let mut live = BTreeSet::new();
        for (_, m) in all {
            match m {
                Ok(m) => live.extend(m.objects.into_iter().map(|o| o.path)),
                Err(_) => return Ok(None),
            }
        }
        return Ok(Some(live));
    }
    Ok(None)
}

/// The highest checkpoint id with metadata of `instance` in the root (from one listing; nothing is read).
pub(crate) fn newest_id_of(storage: &CheckpointStorage, instance: &str) -> Result<Option<u64>> {
    let suffix = format!("/{instance}/_metadata");
    Ok(storage
        .list("")?
        .iter()
        .filter(|(p, _)| p.starts_with("chk-") && p.ends_with(&suffix))
        .filter_map(|(p, _)| checkpoint_id_of(p))
        .max())
}

/// The completed parts of checkpoint `id` (one per instance). A metadata file of checkpoint `id` that does
/// not decode is an error naming it: restoring without that part would lose its key groups' state.
pub fn checkpoint_parts(storage: &CheckpointStorage, id: u64) -> Result<Vec<CheckpointMetadata>> {
    let mut parts = Vec::new();
    for (path, m) in read_all_metadata(storage)? {
        if checkpoint_id_of(&path) != Some(id) {
            continue;
        }
        parts.push(m?);
    }
    parts.sort_by(|a, b| {
        (a.key_group_range.start(), &a.instance).cmp(&(b.key_group_range.start(), &b.instance))
    });
    Ok(parts)
}

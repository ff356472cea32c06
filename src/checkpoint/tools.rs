//! Reading a checkpoint root as a whole: every metadata file, what they reference, verification and the
//! offline garbage collection the command line runs.

use std::collections::BTreeSet;

use super::format::CheckpointMetadata;
use super::storage::CheckpointStorage;
use super::CheckpointError;

/// A metadata file in the root: its path and what decoding it gave.
pub type MetadataEntry = (String, Result<CheckpointMetadata, CheckpointError>);

/// The checkpoint id a `chk-<id>/...` path names.
pub fn checkpoint_id_of(path: &str) -> Option<u64> {
    path.strip_prefix("chk-")?.split('/').next()?.parse().ok()
}

/// Every metadata file of the root (`chk-*/*/_metadata`), decoded, sorted by path (so by id, then instance).
pub fn read_all_metadata(
    storage: &CheckpointStorage,
) -> Result<Vec<MetadataEntry>, CheckpointError> {
    Ok(scan_metadata(storage)?.0)
}

/// [`read_all_metadata`], and whether a listed file was gone when read (deleted during the scan).
fn scan_metadata(
    storage: &CheckpointStorage,
) -> Result<(Vec<MetadataEntry>, bool), CheckpointError> {
    let mut out = Vec::new();
    let mut vanished = false;
    for (path, _) in storage.list("")? {
        if !(path.starts_with("chk-") && path.ends_with("/_metadata")) {
            continue;
        }
        let decoded = match storage.get(&path) {
            Ok(bytes) => CheckpointMetadata::decode(&bytes),
            // Deleted between the list and the read: no longer a checkpoint.
            Err(CheckpointError::MissingObject(_)) => {
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
pub fn list_completed(
    storage: &CheckpointStorage,
) -> Result<Vec<CheckpointMetadata>, CheckpointError> {
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
pub fn referenced_objects(
    storage: &CheckpointStorage,
) -> Result<Option<BTreeSet<String>>, CheckpointError> {
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

/// One problem `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The checkpoint id (if known).
    pub checkpoint_id: Option<u64>,
    /// The object or metadata file.
    pub path: String,
    /// What is wrong.
    pub detail: String,
}

/// What `verify` checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Metadata files checked.
    pub metadata_files: usize,
    /// Objects read and checked.
    pub objects: usize,
    /// Files checked inside them.
    pub files: usize,
    /// Everything wrong.
    pub problems: Vec<Problem>,
}

/// Checks every metadata file (of checkpoint `id`, or all) and every object and file it references:
/// present, of the recorded size, with the recorded checksums.
pub fn verify(
    storage: &CheckpointStorage,
    id: Option<u64>,
) -> Result<VerifyReport, CheckpointError> {
    let mut rep = VerifyReport::default();
    let mut checked = BTreeSet::new();
    for (path, m) in read_all_metadata(storage)? {
        let cid = checkpoint_id_of(&path);
        if id.is_some() && cid != id {
            continue;
        }
        rep.metadata_files += 1;
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                rep.problems.push(Problem {
                    checkpoint_id: cid,
                    path,
                    detail: e.to_string(),
                });
                continue;
            }
        };
        for (i, o) in m.objects.iter().enumerate() {
            let fail = |detail: String| Problem {
                checkpoint_id: Some(m.checkpoint_id),
                path: o.path.clone(),
                detail,
            };
            let bytes = match storage.get(&o.path) {
                Ok(b) => b,
                Err(CheckpointError::MissingObject(_)) => {
                    rep.problems.push(fail("missing".into()));
                    continue;
                }
                Err(e) => {
                    rep.problems.push(fail(e.to_string()));
                    continue;
                }
            };
            if bytes.len() as u64 != o.size {
                rep.problems.push(fail(format!(
                    "size {} but the metadata records {}",
                    bytes.len(),
                    o.size
                )));
                continue;
            }
            let sum = xxhash_rust::xxh3::xxh3_64(&bytes);
            if sum != o.checksum {
                rep.problems.push(fail(format!(
                    "checksum {sum:#018x} but the metadata records {:#018x}",
                    o.checksum
                )));
                continue;
            }
            if checked.insert(o.path.clone()) {
                rep.objects += 1;
            }
            for f in m.files.iter().filter(|f| f.object as usize == i) {
                rep.files += 1;
                let part = usize::try_from(f.offset)
                    .ok()
                    .zip(usize::try_from(f.offset + f.length).ok())
                    .and_then(|(a, b)| bytes.get(a..b));
                match part.map(xxhash_rust::xxh3::xxh3_64) {
                    Some(s) if s == f.checksum => {}
                    _ => rep.problems.push(fail(format!(
                        "{} at {}+{}: checksum does not match",
                        file_label(f),
                        f.offset,
                        f.length
                    ))),
                }
            }
        }
    }
    Ok(rep)
}

/// How a report names a file of a checkpoint.
fn file_label(f: &super::FileRef) -> String {
    match &f.kind {
        super::FileKind::Sst | super::FileKind::BoundedSst(_) => {
            format!("file {:06}.sst", f.number)
        }
        super::FileKind::Table { state, key_group } => {
            format!(
                "table of state {state} key group {key_group} (file {})",
                f.number
            )
        }
        super::FileKind::Named(name) => format!("file {name}"),
    }
}

/// What `gc` deleted (or, dry, would delete).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Checkpoint ids kept.
    pub kept: Vec<u64>,
    /// Metadata files deleted.
    pub metadata: Vec<String>,
    /// Objects deleted.
    pub objects: Vec<String>,
}

/// Offline garbage collection: keeps the newest `retain` checkpoint ids, deletes the metadata of older
/// ones, then every object that no kept metadata references (uploads of unfinished checkpoints included)
/// and the claim markers of runs left without objects.
/// Must not run while a job writes to the root. A metadata file that does not decode stops it.
pub fn gc(
    storage: &CheckpointStorage,
    retain: usize,
    dry_run: bool,
) -> Result<GcReport, CheckpointError> {
    let all = read_all_metadata(storage)?;
    if let Some((path, Err(e))) = all.iter().find(|(_, m)| m.is_err()) {
        return Err(CheckpointError::Invalid(format!(
            "{path} does not decode ({e}); nothing deleted"
        )));
    }
    let ids: BTreeSet<u64> = all
        .iter()
        .filter_map(|(p, _)| checkpoint_id_of(p))
        .collect();
    let kept: BTreeSet<u64> = ids.iter().rev().take(retain).copied().collect();
    let mut rep = GcReport {
        kept: kept.iter().copied().collect(),
        ..GcReport::default()
    };
    let mut live = BTreeSet::new();
    for (path, m) in &all {
        let Ok(m) = m else { continue };
        if checkpoint_id_of(path).is_some_and(|i| kept.contains(&i)) {
            live.extend(m.objects.iter().map(|o| o.path.clone()));
        } else {
            rep.metadata.push(path.clone());
        }
    }
    for (path, _) in storage.list("")? {
        if !(path.starts_with("shared/") || path.starts_with("chk-")) {
            continue;
        }
        let is_kept_meta = checkpoint_id_of(&path).is_some_and(|i| kept.contains(&i))
            && path.ends_with("/_metadata");
        if is_kept_meta || live.contains(&path) || rep.metadata.contains(&path) {
            continue;
        }
        rep.objects.push(path);
    }
    // A claim marker (`claimed/<owner>/<instance>/<run>`) goes with the last object of its run.
    for (marker, _) in storage.list("claimed/")? {
        let run = marker.splitn(3, '/').nth(2).unwrap_or_default();
        let prefix = format!("shared/{run}/");
        if !live.iter().any(|p| p.starts_with(&prefix)) {
            rep.objects.push(marker);
        }
    }
    if !dry_run {
        // Metadata first: an interrupted gc leaves unreferenced objects, never a checkpoint missing objects.
        for p in rep.metadata.iter().chain(&rep.objects) {
            storage.delete(p)?;
        }
    }
    Ok(rep)
}

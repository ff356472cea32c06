//! Offline maintenance of a checkpoint root, as the command line runs it (`keyed-state checkpoint verify |
//! gc`): [`verify`] reads every object a metadata file references and checks sizes and checksums; [`gc`]
//! keeps the newest checkpoints and deletes the rest.
//!
//! Not part of the library's API (hidden from the docs, no stability promise). It stays in this crate,
//! not in `keyed-state-cli`, because the checkpoint test suites use [`verify`] and
//! [`referenced_objects`] as the oracle of every run: moving it would make the library's tests depend on
//! the command line crate and its features (S3, clap).

use std::collections::BTreeSet;

use super::scan::checkpoint_id_of;
pub use super::scan::{read_all_metadata, referenced_objects, MetadataEntry};
use super::storage::CheckpointStorage;
use crate::error::{CheckpointError, Error, Result};

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
pub fn verify(storage: &CheckpointStorage, id: Option<u64>) -> Result<VerifyReport> {
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
                Err(Error::Checkpoint(CheckpointError::MissingObject { .. })) => {
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
                        f.label(),
                        f.offset,
                        f.length
                    ))),
                }
            }
        }
    }
    Ok(rep)
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
pub fn gc(storage: &CheckpointStorage, retain: usize, dry_run: bool) -> Result<GcReport> {
    let mut all = Vec::new();
    for (path, m) in read_all_metadata(storage)? {
        // The metadata file's error (it names the file): nothing is deleted.
        all.push((path, Ok::<_, Error>(m?)));
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

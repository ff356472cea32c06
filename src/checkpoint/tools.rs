//! Offline maintenance of a checkpoint root, as the command line runs it (`keyed-state checkpoint verify |
//! gc`): [`verify`] reads every object a metadata file references and checks sizes and checksums; [`gc`]
//! keeps the newest checkpoints and deletes the rest.
//!
//! Not part of the library's API (hidden from the docs, no stability promise). It stays in this crate,
//! not in `keyed-state-cli`, because the checkpoint test suites use [`verify`] and
//! [`referenced_objects`] as the oracle of every run: moving it would make the library's tests depend on
//! the command line crate and its features (S3, clap).

use std::collections::{BTreeMap, BTreeSet};

use super::fence::{attempt_of_run, newest_attempts_async, run_of, take_attempt_async};
use super::format::CheckpointMetadata;
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
    /// Objects no kept checkpoint references that were left in place: a live attempt may still use them
    /// (uploads of the newest attempt of an instance name, runs a claim marker names). Their writer's
    /// next sweep, or [`gc_fencing`] once the job is stopped, deletes them.
    pub spared: Vec<String>,
}

/// Garbage collection of one job's part of a root (`storage` as [`CheckpointStorage::job`] gives it),
/// safe beside live writers: keeps the newest `retain` checkpoint ids and the newest checkpoint of every
/// instance name (a live writer's incremental base), deletes the metadata of the others, then every
/// object that no kept metadata references **and** that no live attempt may still use: objects of runs
/// written by a fenced attempt (one older than the newest of its instance name) or named before runs named
/// their attempt, and not named by a claim marker. The rest is reported as [`GcReport::spared`]. Claim
/// markers of runs left without objects go. A metadata file that does not decode stops it.
pub fn gc(storage: &CheckpointStorage, retain: usize, dry_run: bool) -> Result<GcReport> {
    collect_blocking(storage, retain, dry_run, false)
}

/// [`gc`] for a stopped job: first takes a new attempt of every instance name in the job's part of the
/// root (each a create-only marker, `design/checkpoint-fencing.md`), which fences every writer still
/// running (it commits and deletes nothing more), then keeps only the newest `retain` checkpoint ids and
/// deletes every object no kept metadata references, whatever attempt wrote it. A dry run takes no
/// attempt.
pub fn gc_fencing(storage: &CheckpointStorage, retain: usize, dry_run: bool) -> Result<GcReport> {
    collect_blocking(storage, retain, dry_run, true)
}

/// [`gc`], awaited: its listings, reads and deletions are tasks of the storage's I/O runtime.
pub(crate) async fn gc_async(
    storage: &CheckpointStorage,
    retain: usize,
    dry_run: bool,
) -> Result<GcReport> {
    collect(storage, retain, dry_run, false).await
}

fn collect_blocking(
    storage: &CheckpointStorage,
    retain: usize,
    dry_run: bool,
    fence: bool,
) -> Result<GcReport> {
    storage
        .io()
        .block_on(|| collect(storage, retain, dry_run, fence))?
}

async fn collect(
    storage: &CheckpointStorage,
    retain: usize,
    dry_run: bool,
    fence: bool,
) -> Result<GcReport> {
    let mut all = Vec::new();
    for (path, m) in super::scan::read_all_metadata_async(storage).await? {
        // The metadata file's error (it names the file): nothing is deleted.
        all.push((path, m?));
    }
    let listed = storage.list_async("").await?;
    // The attempt each instance name's runs are judged against: objects of runs older than it are no
    // live writer's. Fencing: the attempt gc takes itself (every older writer is fenced by it).
    let mut newest = newest_attempts_async(storage).await?;
    if fence {
        let mut names: BTreeSet<String> = newest.keys().cloned().collect();
        names.extend(all.iter().map(|(_, m)| m.instance.clone()));
        names.extend(
            listed
                .iter()
                .filter_map(|(p, _)| run_of(p))
                .filter_map(|r| r.split('/').next())
                .map(str::to_string),
        );
        for name in names {
            let taken = if dry_run {
                newest.get(&name).copied().unwrap_or(0).saturating_add(1)
            } else {
                take_attempt_async(storage, &name, None).await?
            };
            newest.insert(name, taken);
        }
    }
    let ids: BTreeSet<u64> = all
        .iter()
        .filter_map(|(p, _)| checkpoint_id_of(p))
        .collect();
    let mut kept: BTreeSet<u64> = ids.iter().rev().take(retain).copied().collect();
    // Beside live writers, each instance name's newest checkpoint stays: it may be a writer's base.
    let mut newest_of: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, m) in &all {
        let e = newest_of.entry(m.instance.as_str()).or_insert(0);
        *e = (*e).max(m.checkpoint_id);
    }
    let keep_meta = |path: &str, m: &CheckpointMetadata| {
        checkpoint_id_of(path).is_some_and(|i| kept.contains(&i))
            || (!fence && newest_of.get(m.instance.as_str()) == Some(&m.checkpoint_id))
    };
    let mut rep = GcReport::default();
    let mut live = BTreeSet::new();
    let mut kept_meta = BTreeSet::new();
    for (path, m) in &all {
        if keep_meta(path, m) {
            live.extend(m.objects.iter().map(|o| o.path.clone()));
            kept_meta.insert(path.clone());
        } else {
            rep.metadata.push(path.clone());
        }
    }
    kept.extend(kept_meta.iter().filter_map(|p| checkpoint_id_of(p)));
    rep.kept = kept.iter().copied().collect();
    let claim_markers = storage.list_async("claimed/").await?;
    // `<instance>/<run>` of every run a claim marker (`claimed/<owner>/<instance>/<run>`) names.
    let claimed: BTreeSet<&str> = claim_markers
        .iter()
        .filter_map(|(m, _)| m.splitn(3, '/').nth(2))
        .collect();
    let metadata_doomed: BTreeSet<&String> = rep.metadata.iter().collect();
    let mut runs_left: BTreeSet<String> = BTreeSet::new();
    for (path, _) in &listed {
        if !(path.starts_with("shared/") || path.starts_with("chk-")) {
            continue;
        }
        if kept_meta.contains(path) || metadata_doomed.contains(path) {
            continue;
        }
        let run = run_of(path);
        if live.contains(path) {
            runs_left.extend(run.map(str::to_string));
            continue;
        }
        let in_use = !fence
            && run.is_some_and(|r| {
                let inst = r.split('/').next().unwrap_or_default();
                let by_live_attempt =
                    attempt_of_run(r).is_some_and(|a| a >= newest.get(inst).copied().unwrap_or(0));
                by_live_attempt || claimed.contains(r)
            });
        let by_newer = fence
            && run.is_some_and(|r| {
                let inst = r.split('/').next().unwrap_or_default();
                attempt_of_run(r).is_some_and(|a| a >= newest.get(inst).copied().unwrap_or(0))
            });
        if in_use || by_newer {
            runs_left.extend(run.map(str::to_string));
            rep.spared.push(path.clone());
        } else {
            rep.objects.push(path.clone());
        }
    }
    // A claim marker goes with the last object of its run.
    for (marker, _) in &claim_markers {
        let run = marker.splitn(3, '/').nth(2).unwrap_or_default();
        if !runs_left.contains(run) {
            rep.objects.push(marker.clone());
        }
    }
    if !dry_run {
        // Metadata first: an interrupted gc leaves unreferenced objects, never a checkpoint missing objects.
        for p in rep.metadata.iter().chain(&rep.objects) {
            storage.delete_async(p).await?;
        }
    }
    Ok(rep)
}

//! Restore and rescale from a checkpoint into an LSM backend by adopting the old instances' files with
//! key bounds (`design/checkpoints.md`, "Restore"), and turning a checkpoint into a unified savepoint.

use std::path::{Path, PathBuf};

use super::format::{CheckpointMetadata, FileKind};
use super::storage::CheckpointStorage;
use super::tools::{checkpoint_id_of, list_completed, read_all_metadata};
use super::CheckpointError;
use crate::backend::lsm::{LsmBackend, STATE_PREFIX_LEN};
use crate::backend::BackendKind;
use crate::backend::{BackendConfig, StateBackend};
use crate::keygroup::{key_group_prefix_len, write_key_group_prefix, KeyGroupRange};
use crate::savepoint::{write_savepoint, WriteOptions};
use keyed_state_lsm::storage::Storage;
use keyed_state_lsm::{
    adopt_sst_files, prefix_successor, summarize_sst, AdoptFile, KeyBounds, Options, SstSummary,
};

/// What a restore did.
#[derive(Debug, Clone, Default)]
pub struct RestoreInfo {
    /// The metadata of every instance part that was read, its files rewritten to those the restored
    /// backend was given, numbered as the backend numbers them (an LSM file adopted in several pieces once
    /// per piece; files of copied parts and files with nothing in the new range not listed), so that
    /// [`Checkpointer::restored_from`](super::Checkpointer::restored_from) in claim mode reuses exactly the
    /// objects whose bytes the backend's files are. A listed number the backend does not use (a piece the
    /// engine found empty) matches nothing.
    pub parts: Vec<CheckpointMetadata>,
    /// Instances whose files were adopted as they are.
    pub adopted: Vec<String>,
    /// Instances whose entries were copied (their files could not be adopted safely).
    pub copied: Vec<String>,
    /// Engine files adopted (a file holding several states' keys of the new range counts once per state).
    pub files_adopted: usize,
    /// Bytes fetched from storage (or linked on a local root).
    pub bytes_fetched: u64,
}

/// The completed parts of checkpoint `id` (one per instance). A metadata file of checkpoint `id` that does
/// not decode is an error naming it: restoring without that part would lose its key groups' state.
pub fn checkpoint_parts(
    storage: &CheckpointStorage,
    id: u64,
) -> Result<Vec<CheckpointMetadata>, CheckpointError> {
    for (path, m) in read_all_metadata(storage)? {
        if let Err(e) = m {
            if checkpoint_id_of(&path) == Some(id) {
                return Err(CheckpointError::Damaged(format!("{path}: {e}")));
            }
        }
    }
    Ok(list_completed(storage)?
        .into_iter()
        .filter(|m| m.checkpoint_id == id)
        .collect())
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> CheckpointError {
    move |source| CheckpointError::Io { context, source }
}

/// A new file `dst` of `fs` holding `data` (not synced: a restore's directory is rebuilt from the checkpoint
/// after a crash, never reopened).
fn write_file(fs: &dyn Storage, dst: &Path, data: &[u8]) -> Result<(), CheckpointError> {
    fs.create(dst)
        .and_then(|mut f| f.write_all(data))
        .map_err(io(format!("writing {}", dst.display())))
}

/// A second name `dst` for file `src` of `fs`: a hard link, else a copy (streamed on the real file system).
fn link_or_copy(fs: &dyn Storage, src: &Path, dst: &Path) -> Result<(), CheckpointError> {
    if fs.hard_link(src, dst).is_err() {
        keyed_state_lsm::util::copy_file_on(fs, src, dst)?;
    }
    Ok(())
}

/// Removes the files of directory `dir` of `fs` (best effort: what is left goes with the restore's temporary
/// directory).
fn remove_files(fs: &dyn Storage, dir: &Path) {
    for name in fs.list(dir).unwrap_or_default() {
        let _ = fs.remove(&dir.join(name));
    }
}

/// Fetches the files of `m` into `dir` of `fs` as `NNNNNN.sst` with the numbers `numbers` gives; returns
/// bytes.
fn fetch_files(
    storage: &CheckpointStorage,
    m: &CheckpointMetadata,
    dir: &Path,
    numbers: &[u64],
    fs: &dyn Storage,
) -> Result<u64, CheckpointError> {
    fs.create_dir_all(dir)
        .map_err(io(format!("creating {}", dir.display())))?;
    let mut ranged = Vec::new();
    let mut targets = Vec::new();
    let mut bytes = 0;
    for (f, &n) in m.files.iter().zip(numbers) {
        let dst = dir.join(format!("{n:06}.sst"));
        let o = m.objects.get(f.object as usize).ok_or_else(|| {
            CheckpointError::Damaged(format!("file {} names no object", f.number))
        })?;
        bytes += f.length;
        let whole = f.offset == 0 && f.length == o.size;
        if let (true, Some(src)) = (whole, storage.local_path(&o.path)) {
            if !src.exists() {
                return Err(CheckpointError::MissingObject(o.path.clone()));
            }
            fs.import(&src, &dst)
                .map_err(io(format!("copying {}", src.display())))?;
            continue;
        }
        ranged.push((o.path.clone(), f.offset, f.length));
        targets.push((dst, f.checksum, f.number));
    }
    let parts = storage.get_ranges(&ranged)?;
    for ((dst, sum, number), data) in targets.iter().zip(parts) {
        if xxhash_rust::xxh3::xxh3_64(&data) != *sum {
            return Err(CheckpointError::Damaged(format!(
                "file {number:06}.sst of checkpoint {} ({}) does not match its checksum",
                m.checkpoint_id, m.instance
            )));
        }
        write_file(fs, dst, &data)?;
    }
    Ok(bytes)
}

/// The completed parts of checkpoint `id` whose key groups meet `config`'s, after checking that they
/// cover every key group of it with `config`'s max parallelism.
pub(crate) fn select_parts(
    storage: &CheckpointStorage,
    id: u64,
    config: &BackendConfig,
) -> Result<Vec<CheckpointMetadata>, CheckpointError> {
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
        });
    }
    if let Some(m) = parts
        .iter()
        .find(|m| m.max_parallelism != config.max_parallelism)
    {
        return Err(CheckpointError::Backend(
            crate::Error::MaxParallelismMismatch {
                backend: config.max_parallelism,
                savepoint: m.max_parallelism,
            },
        ));
    }
    // The instances of one checkpoint own disjoint key groups; two parts that overlap come from different
    // runs that wrote the same checkpoint id, and either could hold a key group's state.
    for (i, a) in parts.iter().enumerate() {
        if let Some(b) = parts[i + 1..]
            .iter()
            .find(|b| !a.key_group_range.intersect(&b.key_group_range).is_empty())
        {
            return Err(CheckpointError::Damaged(format!(
                "checkpoint {id}: instances {} (key groups {}) and {} (key groups {}) both hold key groups {}; \
                 they come from different runs that wrote the same checkpoint id",
                a.instance,
                a.key_group_range,
                b.instance,
                b.key_group_range,
                a.key_group_range.intersect(&b.key_group_range)
            )));
        }
    }
    if let Some(kg) = target
        .iter()
        .find(|kg| !parts.iter().any(|m| m.key_group_range.contains(*kg)))
    {
        return Err(CheckpointError::NotFound {
            id,
            detail: format!("key group {kg} of {target} is in no instance's part"),
        });
    }
    Ok(parts)
}

/// A part written by another backend than the restore's.
pub(crate) fn other_backend(m: &CheckpointMetadata, restore: &str) -> CheckpointError {
    CheckpointError::Invalid(format!(
        "checkpoint {} of instance {} was taken by the {} backend; a {restore} restore reads only its own \
         backend's checkpoints (`to_savepoint` turns any checkpoint into a savepoint for every backend)",
        m.checkpoint_id,
        m.instance,
        m.backend.name()
    ))
}

/// `[lo, hi)` engine keys of state `sid` within key groups `range`.
fn state_interval(sid: usize, range: KeyGroupRange, prefix_len: usize) -> (Vec<u8>, Vec<u8>) {
    let s = (sid as u16).to_be_bytes().to_vec();
    let mut lo = s.clone();
    write_key_group_prefix(&mut lo, range.start(), prefix_len);
    let mut last = s.clone();
    write_key_group_prefix(&mut last, range.end(), prefix_len);
    let hi = prefix_successor(&last)
        .or_else(|| prefix_successor(&s))
        .unwrap_or_else(|| vec![0xFF; STATE_PREFIX_LEN + prefix_len + 1]);
    (lo, hi)
}

/// Whether anything of `s` (keys or range tombstones) lies in `[lo, hi)`.
fn file_meets(s: &SstSummary, lo: &[u8], hi: &[u8]) -> bool {
    let keys = s.smallest.as_slice() < hi && lo <= s.largest.as_slice();
    keys || s
        .range_dels
        .iter()
        .any(|(a, b)| a.as_slice() < hi && lo < b.as_slice())
}

/// The bounds under which file `s` of an instance is adopted for key groups `range` of `states` states:
/// one per state that the file holds something of there (a file is cut at state boundaries, so nearly
/// always one), each the state's interval of `range` cut to the file's recorded bounds `recorded`.
fn adoption_bounds(
    s: &SstSummary,
    recorded: Option<&KeyBounds>,
    range: KeyGroupRange,
    prefix_len: usize,
    states: usize,
) -> Vec<KeyBounds> {
    if range.is_empty() {
        return Vec::new();
    }
    (0..states)
        .filter_map(|sid| {
            let (lo, hi) = state_interval(sid, range, prefix_len);
            let b = match recorded {
                Some(r) => r.intersect(&lo, &hi),
                None => KeyBounds::new(lo, hi),
            };
            (!b.is_empty() && file_meets(s, &b.lo, &b.hi)).then_some(b)
        })
        .collect()
}

fn same_states(a: &CheckpointMetadata, b: &CheckpointMetadata) -> bool {
    a.states.len() == b.states.len()
        && a.states
            .iter()
            .zip(&b.states)
            .all(|(x, y)| x.name == y.name && x.kind == y.kind)
}

/// Restores the key groups of `config` from checkpoint `id` into a new LSM backend in a temporary directory:
/// the files of every old instance whose range meets `config`'s are adopted as they are, each with bounds
/// to the instance's key groups that `config` keeps (so nothing of other key groups is visible and the new
/// instance holds no foreign data); an instance whose states differ from the base's is copied instead.
pub fn restore_lsm(
    storage: &CheckpointStorage,
    id: u64,
    config: BackendConfig,
    options: Options,
) -> Result<(LsmBackend, RestoreInfo), CheckpointError> {
    let target = config.key_group_range;
    let mut parts = select_parts(storage, id, &config)?;
    if let Some(m) = parts.iter().find(|m| m.backend != BackendKind::Lsm) {
        return Err(other_backend(m, "lsm"));
    }
    // The base: the largest overlap.
    parts.sort_by_key(|m| std::cmp::Reverse(m.key_group_range.intersect(&target).len()));
    let prefix_len = key_group_prefix_len(config.max_parallelism);
    let tmp = tempfile::Builder::new()
        .prefix("keyed-state-restore-")
        .tempdir()
        .map_err(io("creating a restore directory".into()))?;
    let db_dir = tmp.path().join("db");
    // The engine's storage: the real file system, or a test's fault-injecting one.
    let fs: &dyn Storage = &*options.storage;
    let mut info = RestoreInfo {
        parts: parts.clone(),
        ..RestoreInfo::default()
    };

    // Every part's files into its own staging directory, numbered 1.. there; summaries for the bounds.
    let mut staged: Vec<(PathBuf, Vec<SstSummary>)> = Vec::new();
    for (i, m) in parts.iter().enumerate() {
        let dir = tmp.path().join(format!("part-{i}"));
        let numbers: Vec<u64> = (1..=m.files.len() as u64).collect();
        info.bytes_fetched += fetch_files(storage, m, &dir, &numbers, fs)?;
        let mut sums = Vec::with_capacity(numbers.len());
        for n in &numbers {
            sums.push(summarize_sst(fs, &dir.join(format!("{n:06}.sst")))?);
        }
        staged.push((dir, sums));
    }
    let base = &parts[0];
    let nstates = base.states.len();
    // The state id is the engine-key prefix: instances with other state lists cannot share one engine.
    let (adopt_parts, copy_parts): (Vec<usize>, Vec<usize>) =
        (0..parts.len()).partition(|&i| same_states(base, &parts[i]));
    fs.create_dir_all(&db_dir)
        .map_err(io(format!("creating {}", db_dir.display())))?;
    let mut next = 1u64;
    let mut placed: Vec<AdoptFile> = Vec::new();
    let mut last_seqno = 0;
    for &i in &adopt_parts {
        let m = &parts[i];
        let keep = m.key_group_range.intersect(&target);
        last_seqno = last_seqno.max(m.seqno);
        // The part as the new engine holds it (see `RestoreInfo::parts`).
        let mut held = Vec::with_capacity(m.files.len());
        for (k, f) in m.files.iter().enumerate() {
            let recorded = match &f.kind {
                FileKind::BoundedSst(b) => Some(b),
                _ => None,
            };
            let src = staged[i].0.join(format!("{:06}.sst", k + 1));
            let bounds = adoption_bounds(&staged[i].1[k], recorded, keep, prefix_len, nstates);
            // One engine file per bounded piece; the pieces of one file share its bytes (hard links).
            let mut first: Option<PathBuf> = None;
            for b in bounds {
                let dst = db_dir.join(format!("{next:06}.sst"));
                match &first {
                    None => fs
                        .rename(&src, &dst)
                        .map_err(io(format!("moving {}", src.display())))?,
                    Some(p) => link_or_copy(fs, p, &dst)?,
                }
                first.get_or_insert(dst);
                held.push(super::FileRef {
                    number: next,
                    kind: FileKind::BoundedSst(b.clone()),
                    ..f.clone()
                });
                placed.push(AdoptFile {
                    level: usize::from(f.level),
                    number: next,
                    bounds: Some(b),
                });
                next += 1;
            }
        }
        info.parts[i].files = held;
        info.adopted.push(m.instance.clone());
        // What was not adopted (files holding nothing of the new range) goes now, not with the backend.
        remove_files(fs, &staged[i].0);
    }
    info.files_adopted = adopt_sst_files(fs, &db_dir, &placed, last_seqno, options.num_levels)?;
    let mut backend = LsmBackend::open_adopted_in_temp(
        tmp,
        &db_dir,
        config.clone(),
        base.states.clone(),
        options.clone(),
    )?;
    for i in copy_parts {
        info.parts[i].files.clear();
        copy_part(&mut backend, &parts[i], &staged[i].0, target, &options)?;
        info.copied.push(parts[i].instance.clone());
    }
    backend.finish_load()?;
    Ok((backend, info))
}

/// Opens part `m` (staged in `dir`) on its own and loads its entries of `target` into `backend`.
fn copy_part(
    backend: &mut LsmBackend,
    m: &CheckpointMetadata,
    dir: &Path,
    target: KeyGroupRange,
    options: &Options,
) -> Result<(), CheckpointError> {
    // The part's files as its instance read them: with their recorded bounds.
    let placed: Vec<AdoptFile> = m
        .files
        .iter()
        .enumerate()
        .map(|(k, f)| AdoptFile {
            level: usize::from(f.level),
            number: k as u64 + 1,
            bounds: match &f.kind {
                FileKind::BoundedSst(b) => Some(b.clone()),
                _ => None,
            },
        })
        .collect();
    adopt_sst_files(&*options.storage, dir, &placed, m.seqno, options.num_levels)?;
    let range = m.key_group_range.intersect(&target);
    let mut cfg = m.backend_config();
    cfg.key_group_range = range;
    let mut src = LsmBackend::open_checkpoint(dir, cfg, m.states.clone(), options.clone())?;
    let snap = src.snapshot()?;
    let mut ids = Vec::with_capacity(m.states.len());
    for meta in &m.states {
        let id = match backend.states().iter().position(|s| s.name == meta.name) {
            Some(id) => id,
            None => backend.register_state(meta.clone())?,
        };
        ids.push(id);
    }
    for kg in range.iter() {
        for (sid, &tid) in ids.iter().enumerate() {
            let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            snap.visit(sid, kg, &mut |k, v| {
                entries.push((k.to_vec(), v.to_vec()));
                Ok(())
            })?;
            for (k, v) in entries {
                backend.load_entry(tid, kg, &k, &v)?;
            }
        }
    }
    Ok(())
}

/// Writes checkpoint `id` (every instance) as one unified savepoint at `out`, so that it restores into any
/// backend at any parallelism. Returns the savepoint's size.
pub fn to_savepoint(
    storage: &CheckpointStorage,
    id: u64,
    out: &Path,
) -> Result<u64, CheckpointError> {
    let parts = checkpoint_parts(storage, id)?;
    let Some(first) = parts.first() else {
        return Err(CheckpointError::NotFound {
            id,
            detail: "no metadata".into(),
        });
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
        BackendKind::Heap => super::restore_heap(storage, id, config)?.0.snapshot()?,
        #[cfg(feature = "rocksdb")]
        BackendKind::RocksDb => super::restore_rocksdb(storage, id, config, Default::default())?
            .0
            .snapshot()?,
        #[cfg(not(feature = "rocksdb"))]
        BackendKind::RocksDb => {
            return Err(CheckpointError::Invalid(format!(
            "checkpoint {id} was taken by the RocksDB variant: this build has no `rocksdb` feature"
        )))
        }
        _ => restore_lsm(storage, id, config, Options::default())?
            .0
            .snapshot()?,
    };
    let summary = write_savepoint(out, &*snap, &WriteOptions::default())?;
    Ok(summary.bytes_written)
}

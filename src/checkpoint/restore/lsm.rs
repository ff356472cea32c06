//! Restore and rescale from a checkpoint into an LSM backend by adopting the old instances' files with
//! key bounds (`design/checkpoints.md`, "Restore").

use std::path::{Path, PathBuf};

use super::parts::{check_backend, check_fetched, object_of, select_parts, RestoreInfo};
use crate::backend::lsm::{LsmBackend, STATE_PREFIX_LEN};
use crate::backend::{BackendConfig, BackendKind, StateBackend};
use crate::checkpoint::format::{CheckpointMetadata, FileKind, FileRef};
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::{CheckpointError, Error, Location, Result};
use crate::keygroup::{key_group_prefix_len, write_key_group_prefix, KeyGroupRange};
use keyed_state_lsm::storage::Storage;
use keyed_state_lsm::{
    adopt_sst_files, prefix_successor, summarize_sst, AdoptFile, KeyBounds, Options, SstSummary,
};

/// A new file `dst` of `fs` holding `data` (not synced: a restore's directory is rebuilt from the checkpoint
/// after a crash, never reopened).
fn write_file(fs: &dyn Storage, dst: &Path, data: &[u8]) -> Result<()> {
    fs.create(dst)
        .and_then(|mut f| f.write_all(data))
        .map_err(Error::io_at("writing", dst))
}

/// A second name `dst` for file `src` of `fs`: a hard link, else a copy (streamed on the real file system).
fn link_or_copy(fs: &dyn Storage, src: &Path, dst: &Path) -> Result<()> {
    if fs.hard_link(src, dst).is_err() {
        keyed_state_lsm::util::copy_file_on(fs, src, dst)?;
    }
    Ok(())
}

/// Whether a restore (or the engine it opens) creates files named `name` in its directory: staged
/// fetches, engine files, `CURRENT`, `LOCK`. What a failed restore removes is limited to these: a name it
/// cannot have created stays.
fn restore_made(name: &str) -> bool {
    let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    name.starts_with("staged-")
        || name.strip_suffix(".sst").is_some_and(number)
        || name.strip_suffix(".log").is_some_and(number)
        || name.strip_prefix("MANIFEST-").is_some_and(number)
        || matches!(name, "CURRENT" | "CURRENT.tmp" | "LOCK")
}

/// Removes the files the restore made in directory `dir` of `fs` ([`restore_made`]), and the directory
/// itself where the storage is the real file system and nothing else is left in it (best effort).
fn remove_dir(fs: &dyn Storage, dir: &Path) {
    for name in fs.list(dir).unwrap_or_default() {
        if restore_made(&name) {
            let _ = fs.remove(&dir.join(name));
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Fetches file `f` of part `m` to `dst` of `fs`: an object holding exactly the file on a local root is
/// imported (a hard link, else a copy), anything else is read by range and checked against its checksum
/// with the other files of `ranged`. Returns the file's length.
fn fetch_file(
    storage: &CheckpointStorage,
    m: &CheckpointMetadata,
    f: &FileRef,
    dst: PathBuf,
    fs: &dyn Storage,
    ranged: &mut Vec<(String, u64, u64)>,
    targets: &mut Vec<(PathBuf, FileRef, String)>,
) -> Result<u64> {
    let o = object_of(m, f)?;
    let whole = f.offset == 0 && f.length == o.size;
    if let (true, Some(src)) = (whole, storage.local_path(&o.path)) {
        if !src.exists() {
            return Err(CheckpointError::MissingObject {
                at: Location::file(&o.path),
            }
            .into());
        }
        fs.import(&src, &dst)
            .map_err(Error::io_at("importing", &src))?;
        return Ok(f.length);
    }
    ranged.push((o.path.clone(), f.offset, f.length));
    targets.push((dst, f.clone(), o.path.clone()));
    Ok(f.length)
}

/// Fetches the files of `m` to `paths` (one per file) of `fs`; returns bytes.
fn fetch_files(
    storage: &CheckpointStorage,
    m: &CheckpointMetadata,
    paths: &[PathBuf],
    fs: &dyn Storage,
) -> Result<u64> {
    let mut ranged = Vec::new();
    let mut targets = Vec::new();
    let mut bytes = 0;
    for (f, dst) in m.files.iter().zip(paths) {
        bytes += fetch_file(storage, m, f, dst.clone(), fs, &mut ranged, &mut targets)?;
    }
    super::parts::fetch_in_batches(storage, &ranged, |i, data| {
        let Some((dst, f, object)) = targets.get(i) else {
            return Ok(());
        };
        check_fetched(m, f, object, &data)?;
        write_file(fs, dst, &data)
    })?;
    Ok(bytes)
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

/// Restores the key groups of `config` from checkpoint `id` into a new LSM backend whose engine lives in
/// `dir` (created if missing; it must hold no files): the files of every old instance whose range meets
/// `config`'s are fetched into `dir` and adopted as they are, each with bounds to the instance's key groups
/// that `config` keeps (so nothing of other key groups is visible and the new instance holds no foreign
/// data); an instance whose states differ from the base's is fetched into a directory of its own inside
/// `dir`, copied in entry by entry, and removed. `dir` then is the backend's working directory, as with
/// [`LsmBackend::open`], and stays when the backend is dropped. A failed restore removes what it put into
/// `dir`.
pub fn restore_lsm(
    storage: &CheckpointStorage,
    id: u64,
    dir: &Path,
    config: BackendConfig,
    options: Options,
) -> Result<(LsmBackend, RestoreInfo)> {
    let fs: &dyn Storage = &*options.storage;
    fs.create_dir_all(dir)
        .map_err(Error::io_at("creating the directory", dir))?;
    let left = fs.list(dir).map_err(Error::io_at("listing", dir))?;
    if let Some(name) = left.first() {
        return Err(Error::InvalidArgument(format!(
            "restore directory {} is not empty (it holds {name}): a restore builds a new database",
            dir.display()
        )));
    }
    let fs = options.storage.clone();
    let restored = restore_lsm_into(storage, id, dir, None, config, options);
    if restored.is_err() {
        // What the failed restore fetched goes, so that the directory can take the next attempt; only names
        // the restore makes (the directory was empty when it began).
        for name in fs.list(dir).unwrap_or_default() {
            let path = dir.join(&name);
            if name.starts_with("restore-part-") {
                remove_dir(&*fs, &path);
            } else if restore_made(&name) {
                let _ = fs.remove(&path);
            }
        }
    }
    restored
}

/// [`restore_lsm`] into a new temporary directory (of the system's temporary directory), removed when the
/// backend and its snapshots are gone: for tests, tools and [`to_savepoint`](super::to_savepoint).
pub fn restore_lsm_temp(
    storage: &CheckpointStorage,
    id: u64,
    config: BackendConfig,
    options: Options,
) -> Result<(LsmBackend, RestoreInfo)> {
    let tmp = tempfile::Builder::new()
        .prefix("keyed-state-restore-")
        .tempdir()
        .map_err(Error::io_at(
            "creating a temporary directory in",
            std::env::temp_dir(),
        ))?;
    let dir = tmp.path().join("db");
    options
        .storage
        .create_dir_all(&dir)
        .map_err(Error::io_at("creating the directory", &dir))?;
    restore_lsm_into(storage, id, &dir, Some(tmp), config, options)
}

/// The restore into the empty directory `dir` (inside `tmp`, which the backend then owns, if given).
fn restore_lsm_into(
    storage: &CheckpointStorage,
    id: u64,
    dir: &Path,
    tmp: Option<tempfile::TempDir>,
    config: BackendConfig,
    options: Options,
) -> Result<(LsmBackend, RestoreInfo)> {
    let target = config.key_group_range;
    let _span =
        tracing::debug_span!("checkpoint_restore", id, backend = "lsm", key_groups = %target)
            .entered();
    let mut parts = select_parts(storage, id, &config)?;
    check_backend(&parts, BackendKind::Lsm)?;
    // The base: the largest overlap.
    parts.sort_by_key(|m| std::cmp::Reverse(m.key_group_range.intersect(&target).len()));
    let prefix_len = key_group_prefix_len(config.max_parallelism);
    // The engine's storage: the real file system, or a test's fault-injecting one.
    let fs: &dyn Storage = &*options.storage;
    let mut info = RestoreInfo {
        parts: parts.clone(),
        ..RestoreInfo::default()
    };
    let base = &parts[0];
    let nstates = base.states.len();
    // The state id is the engine-key prefix: instances with other state lists cannot share one engine.
    let (adopt_parts, copy_parts): (Vec<usize>, Vec<usize>) =
        (0..parts.len()).partition(|&i| same_states(base, &parts[i]));

    // The files of the parts adopted are fetched into `dir` under staging names the engine does not read
    // (`staged-<part>-<file>`); the bounds need their summaries. A copied part is fetched into a directory
    // of its own inside `dir`, as the engine files of a database of its own.
    let mut staged: Vec<Vec<(PathBuf, SstSummary)>> = vec![Vec::new(); parts.len()];
    for &i in &adopt_parts {
        let m = &parts[i];
        let paths: Vec<PathBuf> = (0..m.files.len())
            .map(|k| dir.join(format!("staged-{i}-{k}")))
            .collect();
        info.bytes_fetched += fetch_files(storage, m, &paths, fs)?;
        for p in paths {
            let summary = summarize_sst(fs, &p)?;
            staged[i].push((p, summary));
        }
    }
    let copy_dirs: Vec<(usize, PathBuf)> = copy_parts
        .iter()
        .map(|&i| (i, dir.join(format!("restore-part-{i}"))))
        .collect();
    for (i, d) in &copy_dirs {
        let m = &parts[*i];
        fs.create_dir_all(d)
            .map_err(Error::io_at("creating the directory", d))?;
        let paths: Vec<PathBuf> = (1..=m.files.len() as u64)
            .map(|n| d.join(format!("{n:06}.sst")))
            .collect();
        info.bytes_fetched += fetch_files(storage, m, &paths, fs)?;
    }

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
            let (src, summary) = &staged[i][k];
            let bounds = adoption_bounds(summary, recorded, keep, prefix_len, nstates);
            // One engine file per bounded piece; the pieces of one file share its bytes (hard links).
            let mut first: Option<PathBuf> = None;
            for b in bounds {
                let dst = dir.join(format!("{next:06}.sst"));
                match &first {
                    None => fs
                        .rename(src, &dst)
                        .map_err(Error::io_at("renaming the fetched file", src))?,
                    Some(p) => link_or_copy(fs, p, &dst)?,
                }
                first.get_or_insert(dst);
                held.push(FileRef {
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
            if first.is_none() {
                // Nothing of the new range: the file goes now, not with the backend.
                let _ = fs.remove(src);
            }
        }
        info.parts[i].files = held;
        info.adopted.push(m.instance.clone());
    }
    info.files_adopted = adopt_sst_files(fs, dir, &placed, last_seqno, options.num_levels)?;
    let mut backend = LsmBackend::open_adopted(
        dir,
        tmp,
        config.clone(),
        base.states.clone(),
        options.clone(),
    )?;
    for (i, d) in copy_dirs {
        info.parts[i].files.clear();
        let copied = copy_part(&mut backend, &parts[i], &d, target, &options);
        remove_dir(fs, &d);
        copied?;
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
) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::restore_made;

    #[test]
    fn a_failed_restore_removes_only_names_a_restore_or_its_engine_makes() {
        for made in [
            "staged-0-3",
            "000007.sst",
            "000012.log",
            "MANIFEST-000009",
            "CURRENT",
            "CURRENT.tmp",
            "LOCK",
        ] {
            assert!(restore_made(made), "{made}");
        }
        for foreign in [
            "notes.txt",
            "backup.sst.bak",
            "x.sst",
            ".sst",
            "MANIFEST-",
            "MANIFEST-old",
            "current",
        ] {
            assert!(!restore_made(foreign), "{foreign}");
        }
    }
}

//! Opening a database: the directory lock, manifest replay, a scan of the directory (file numbers in use,
//! files the manifest proves obsolete), opening the live files, WAL replay into L0, then a fresh WAL and
//! manifest, registration with the environment's background pool, and only then the obsolete files' deletion.
//!
//! An open never deletes what it cannot prove obsolete (`design/durability.md`, "What an open deletes"): a
//! directory without `CURRENT` that holds engine files is [`LsmError::MissingCurrent`] unless every one of
//! them is a manifest naming no file (the leftover of a creation a crash interrupted), and leftovers go only
//! after the open has succeeded, and only those the new manifest does not name.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::cache::BlockCache;
use crate::cache_pool::CachePool;
use crate::env::SharedEnv;
use crate::flush;
use crate::inner::DbInner;
use crate::io::io_err;
use crate::manifest::{self, ManifestWriter};
use crate::options::Options;
use crate::storage::{DirLock, Storage};
use crate::version::{FileInfo, FileMeta, Version};
use crate::wal::{self, WalWriter};
use crate::{Location, LsmError};

use super::{background, recovery, Db, Result};

/// Takes the exclusive lock of `dir/LOCK`, failing if another handle holds it.
fn lock_dir(storage: &dyn Storage, dir: &Path) -> Result<Box<dyn DirLock>> {
    let path = dir.join("LOCK");
    storage.lock(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => LsmError::Locked {
            dir: dir.to_path_buf(),
        },
        _ => io_err(&path, e),
    })
}

/// Whether `name` is an engine file (`NNNNNN.sst`, `NNNNNN.log`, `MANIFEST-NNNNNN`): its number then.
fn engine_file_number(name: &str) -> Option<u64> {
    name.strip_suffix(".sst")
        .or_else(|| name.strip_suffix(".log"))
        .or_else(|| name.strip_prefix("MANIFEST-"))
        .and_then(|n| n.parse::<u64>().ok())
}

/// A directory without `CURRENT` (`names` its entries): fine when it holds no engine file, or only
/// manifests that name no file (a creation a crash cut off between its manifest and `CURRENT`: nothing of
/// a database can be in them); [`LsmError::MissingCurrent`] otherwise, naming what it holds. With
/// `create_if_missing` off, a directory holding no database is [`LsmError::Io`] with `NotFound` on
/// `CURRENT`.
fn check_without_current(
    storage: &dyn Storage,
    dir: &Path,
    names: &[String],
    create_if_missing: bool,
) -> Result<()> {
    let mut found: Vec<String> = names
        .iter()
        .filter(|n| engine_file_number(n).is_some())
        .cloned()
        .collect();
    found.sort();
    let missing = || LsmError::MissingCurrent {
        at: Location::file(dir),
        found: found.clone(),
    };
    for name in &found {
        if !name.starts_with("MANIFEST-") {
            return Err(missing());
        }
        let path = dir.join(name);
        let bytes = storage.read(&path).map_err(|e| io_err(&path, e))?;
        match manifest::decode_manifest(&bytes, &path) {
            Ok(edits) if edits.iter().all(|e| e.added.is_empty()) => {}
            _ => return Err(missing()),
        }
    }
    if !create_if_missing {
        return Err(io_err(
            &dir.join("CURRENT"),
            std::io::ErrorKind::NotFound.into(),
        ));
    }
    Ok(())
}

/// Opens (or creates) the database in `dir` (see [`Db::open`]).
pub(super) fn open(dir: &Path, opts: Options) -> Result<Db> {
    let dir = dir.to_path_buf();
    if opts.num_levels < 2 {
        return Err(LsmError::InvalidArgument(
            "num_levels must be at least 2".into(),
        ));
    }
    // At least the row cache's doorkeeper (1/32 of the capacity), which it cannot evict: a smaller share
    // would let the two caches together hold more than `block_cache_size`.
    if !(1.0 / 32.0..=1.0).contains(&opts.row_cache_min_share) {
        return Err(LsmError::InvalidArgument(format!(
            "row_cache_min_share {} is not in [1/32, 1]",
            opts.row_cache_min_share
        )));
    }
    let storage = opts.storage.clone();
    if !storage.exists(&dir) {
        if !opts.create_if_missing {
            return Err(io_err(&dir, std::io::ErrorKind::NotFound.into()));
        }
        storage.create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
    }
    let lock = lock_dir(&*storage, &dir)?;
    let env = match &opts.env {
        Some(env) => env.clone(),
        None => SharedEnv::private(&opts)?,
    };
    // A block cache of the engine's own shares its capacity with the engine's default row cache.
    let cache = env.block_cache().cloned().unwrap_or_else(|| {
        if opts.row_cache_size.is_none() {
            BlockCache::pooled(CachePool::new(
                opts.block_cache_size,
                opts.row_cache_min_share,
            ))
        } else {
            BlockCache::new(opts.block_cache_size)
        }
    });
    let entries = storage.list(&dir).map_err(|e| io_err(&dir, e))?;
    // Replay the manifest.
    let current = manifest::read_current(&*storage, &dir)?;
    if current.is_none() {
        check_without_current(&*storage, &dir, &entries, opts.create_if_missing)?;
    }
    let mut files: BTreeMap<u64, (usize, FileInfo)> = BTreeMap::new();
    let (mut next_file, mut last_seqno, mut log_number) = (1u64, 0u64, 0u64);
    if let Some(num) = current {
        let mpath = manifest::manifest_path(&dir, num);
        let bytes = storage.read(&mpath).map_err(|e| io_err(&mpath, e))?;
        let edits = manifest::decode_manifest(&bytes, &mpath)?;
        if edits.is_empty() {
            return Err(LsmError::Corruption {
                at: Location::file(&mpath),
                detail: "manifest holds no record".into(),
            });
        }
        for e in edits {
            for (l, n) in &e.deleted {
                if files.get(n).is_some_and(|(fl, _)| *fl == *l as usize) {
                    files.remove(n);
                }
            }
            for (l, f) in e.added {
                if l as usize >= opts.num_levels {
                    return Err(LsmError::Corruption {
                        at: Location::file(&mpath),
                        detail: format!("file {} at level {l} beyond num_levels", f.number),
                    });
                }
                files.insert(f.number, (l as usize, f));
            }
            next_file = next_file.max(e.next_file_number.unwrap_or(0));
            last_seqno = last_seqno.max(e.last_seqno.unwrap_or(0));
            log_number = log_number.max(e.log_number.unwrap_or(0));
        }
        next_file = next_file.max(num + 1);
    }
    // Scan the directory: never reuse a number seen on disk. Obsolete: logs below the manifest's log
    // number (their writes are in its files), SSTs it does not name, manifests other than the current one.
    let mut logs = Vec::new();
    let mut orphans = Vec::new();
    for name in entries {
        let Some(num) = engine_file_number(&name) else {
            continue;
        };
        next_file = next_file.max(num + 1);
        if name.ends_with(".log") {
            if num >= log_number {
                logs.push(num);
            } else {
                orphans.push(dir.join(&name));
            }
        } else if (name.ends_with(".sst") && !files.contains_key(&num))
            || (name.starts_with("MANIFEST-") && Some(num) != current)
        {
            orphans.push(dir.join(&name));
        }
    }
    logs.sort_unstable();
    let inner = Arc::new(DbInner::new(
        dir.clone(),
        opts,
        env,
        Arc::clone(&cache),
        next_file,
        last_seqno,
    ));
    // Open the live files.
    let mut levels: Vec<Vec<Arc<FileMeta>>> = vec![Vec::new(); inner.opts.num_levels];
    for (number, (level, info)) in &files {
        let f = flush::open_recorded(&inner, *number, info.size, Some(info))?;
        last_seqno = last_seqno.max(f.info.max_seqno);
        levels[*level].push(f);
    }
    inner.last_seqno.fetch_max(last_seqno, Ordering::SeqCst);
    let version = Version::from_levels(levels);
    if let Some(num) = current {
        version
            .check_invariants()
            .map_err(|detail| LsmError::Corruption {
                at: Location::file(manifest::manifest_path(&dir, num)),
                detail: detail.to_string(),
            })?;
    }
    {
        let mut st = inner.state.lock();
        st.version = Arc::new(version);
        st.refresh_super_version();
    }
    // Replay WAL files into a memtable and flush it to L0.
    let replay = recovery::replay_wals(&*storage, &dir, &logs, inner.opts.wal_recovery)?;
    recovery::check_point_in_time(&replay, &inner.state.lock().version)?;
    inner
        .last_seqno
        .fetch_max(replay.max_seqno_seen, Ordering::SeqCst);
    let mem = inner.new_memtable(0, 0);
    for (seq, b) in &replay.batches {
        for (i, op) in b.ops.iter().enumerate() {
            mem.add(seq + i as u64, op.kind, &op.key, &op.value);
        }
    }
    let mut added = Vec::new();
    if !mem.is_empty() {
        for f in flush::write_memtable(&inner, &mem)? {
            added.push((0usize, f));
        }
    }
    // A fresh WAL and a fresh manifest holding the full state.
    let wal_number = if inner.opts.wal {
        inner.new_file_number()
    } else {
        0
    };
    {
        let mut st = inner.state.lock();
        let v = st.version.apply(&[], &added);
        st.version = Arc::new(v);
        st.mem = Arc::new(inner.new_memtable(wal_number, 0));
        st.refresh_super_version();
        st.flushed_seqno = inner.last_seqno.load(Ordering::SeqCst);
    }
    let version = Arc::clone(&inner.state.lock().version);
    let man_number = inner.new_file_number();
    let base = inner.snapshot_edit(&version, Some(wal_number));
    inner.manifest.lock().writer =
        Some(ManifestWriter::create(&*storage, &dir, man_number, &base)?);
    if inner.opts.wal {
        inner.writer.lock().wal = Some(WalWriter::create(
            &*storage,
            &dir,
            wal_number,
            inner.opts.wal_sync,
        )?);
    }
    background::register(&inner);
    // The open succeeded: the new manifest holds the whole state (the replayed logs' writes included), so
    // the old manifest, the replayed logs and the leftovers of the scan are obsolete. Best effort: what a
    // failed deletion leaves, the next open finds again.
    let replaced = current.map(|old| manifest::manifest_path(&dir, old));
    let replayed = logs.iter().map(|n| wal::wal_path(&dir, *n));
    for p in replaced.into_iter().chain(replayed).chain(orphans) {
        let _ = storage.remove(&p);
    }
    Ok(Db {
        inner,
        open: Mutex::new(true),
        recovery: replay.report,
        _lock: lock,
    })
}

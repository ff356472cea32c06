//! Checkpoints of the RocksDB variant, as Flink's RocksDB backend takes them (`design/checkpoints.md`,
//! "The RocksDB variant"): the synchronous part is RocksDB's own checkpoint (a memtable flush, then hard
//! links of the live SST files and a fresh MANIFEST, OPTIONS and CURRENT in a directory of its own); the
//! asynchronous part uploads the SST files the incremental base lacks and the named files every time.
//! Restore at the same key-group range opens the downloaded files; a rescale opens each old instance's
//! database and copies its key groups into the new one, except the largest overlap, which is opened as the
//! new database and clipped by range deletion (Flink's `RocksDBIncrementalRestoreOperation`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::ColumnFamilyDescriptor;

use super::{column_family_name, rdb_error, Db, DbHolder, RocksDbBackend, RocksDbOptions};
use crate::backend::{
    BackendConfig, CapturedFile, CapturedFiles, CheckpointCapture, FileSource, StateBackend,
};
use crate::checkpoint::restore::{other_backend, select_parts};
use crate::checkpoint::{
    BackendKind, CheckpointError, CheckpointMetadata, CheckpointStorage, FileKind, RestoreInfo,
};
use crate::error::{Error, Result};
use crate::keygroup::{write_key_group_prefix, KeyGroupRange};
use keyed_state_lsm::prefix_successor;

/// Where the synchronous parts put RocksDB's checkpoint directories (inside the database directory, so
/// hard links work; RocksDB ignores directories it did not create).
fn checkpoints_dir(db: &Db) -> PathBuf {
    db.path().join("keyed-state-checkpoints")
}

/// The synchronous part: RocksDB's checkpoint of the database into a new directory.
pub(super) fn capture(b: &mut RocksDbBackend) -> Result<Box<dyn CheckpointCapture>> {
    let db = &b.holder.db;
    let parent = checkpoints_dir(db);
    std::fs::create_dir_all(&parent)
        .map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
    let tmp = tempfile::Builder::new()
        .prefix("chk-")
        .tempdir_in(&parent)
        .map_err(|e| Error::io(format!("creating a directory in {}", parent.display()), e))?;
    let dir = tmp.path().join("db");
    rocksdb::checkpoint::Checkpoint::new(db)
        .and_then(|c| c.create_checkpoint(&dir))
        .map_err(|e| rdb_error(format!("RocksDB checkpoint into {}", dir.display()), e))?;
    let mut files = Vec::new();
    let entries =
        std::fs::read_dir(&dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let size = entry
            .metadata()
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
            .len();
        let number = name
            .strip_suffix(".sst")
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| format!("{n:06}.sst") == name);
        let (number, source) = match number {
            Some(n) => (n, FileSource::Sst(path)),
            None => (0, FileSource::Named { name, path }),
        };
        files.push(CapturedFile {
            number,
            level: 0,
            size,
            source,
        });
    }
    files.sort_by_key(|f| {
        let name = match &f.source {
            FileSource::Named { name, .. } => name.clone(),
            _ => String::new(),
        };
        (f.number, name)
    });
    let seqno = b.holder.db.latest_sequence_number();
    Ok(Box::new(RocksCapture {
        files,
        seqno,
        tmp,
        _holder: Arc::clone(&b.holder),
    }))
}

/// RocksDB's checkpoint directory, removed when the capture's files are dropped.
struct RocksCapture {
    files: Vec<CapturedFile>,
    seqno: u64,
    tmp: tempfile::TempDir,
    _holder: Arc<DbHolder>,
}

impl CheckpointCapture for RocksCapture {
    fn wait(self: Box<Self>, _cancelled: &std::sync::atomic::AtomicBool) -> Result<CapturedFiles> {
        let RocksCapture {
            files,
            seqno,
            tmp,
            _holder,
        } = *self;
        Ok(CapturedFiles {
            backend: BackendKind::RocksDb,
            files,
            storage: keyed_state_lsm::storage::StorageHandle::os(),
            seqno,
            tables: None,
            keep_alive: Box::new((tmp, _holder)),
        })
    }
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> CheckpointError {
    move |source| CheckpointError::Io { context, source }
}

/// Fetches every file of `m` into `dir` under its RocksDB name (`NNNNNN.sst`, `MANIFEST-…`); on a local
/// root an object holding exactly one file is hard-linked. Returns the bytes.
fn fetch(
    storage: &CheckpointStorage,
    m: &CheckpointMetadata,
    dir: &Path,
) -> std::result::Result<u64, CheckpointError> {
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let mut ranged = Vec::new();
    let mut targets = Vec::new();
    let mut bytes = 0;
    for f in &m.files {
        let name = match &f.kind {
            FileKind::Sst => format!("{:06}.sst", f.number),
            FileKind::Named(n) => n.clone(),
            FileKind::Table { .. } | FileKind::BoundedSst(_) => {
                return Err(CheckpointError::Damaged(format!(
                    "checkpoint {} of {}: a heap table or bounded SST in a RocksDB checkpoint",
                    m.checkpoint_id, m.instance
                )))
            }
        };
        let dst = dir.join(&name);
        let o = m
            .objects
            .get(f.object as usize)
            .ok_or_else(|| CheckpointError::Damaged(format!("file {name} names no object")))?;
        bytes += f.length;
        let whole = f.offset == 0 && f.length == o.size;
        if let (true, Some(src)) = (whole, storage.local_path(&o.path)) {
            if !src.exists() {
                return Err(CheckpointError::MissingObject(o.path.clone()));
            }
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).map_err(io(format!("copying {}", src.display())))?;
            }
            continue;
        }
        ranged.push((o.path.clone(), f.offset, f.length));
        targets.push((dst, f.checksum, name));
    }
    for (chunk, tchunk) in ranged.chunks(16).zip(targets.chunks(16)) {
        let parts = storage.get_ranges(chunk)?;
        for ((dst, sum, name), data) in tchunk.iter().zip(parts) {
            if xxhash_rust::xxh3::xxh3_64(&data) != *sum {
                return Err(CheckpointError::Damaged(format!(
                    "file {name} of checkpoint {} ({}) does not match its checksum",
                    m.checkpoint_id, m.instance
                )));
            }
            std::fs::write(dst, &data).map_err(io(format!("writing {}", dst.display())))?;
        }
    }
    Ok(bytes)
}

/// Opens the RocksDB database of part `m` fetched into `dir` as a backend for `config` (its column
/// families are `m`'s states); `temp` is removed with the backend.
fn open_fetched(
    dir: &Path,
    temp: Option<tempfile::TempDir>,
    config: BackendConfig,
    m: &CheckpointMetadata,
    options: &RocksDbOptions,
) -> std::result::Result<RocksDbBackend, CheckpointError> {
    let cache = rocksdb::Cache::new_lru_cache(options.block_cache_size);
    let cf_options = options.column_options(&cache);
    let names: Vec<String> = m
        .states
        .iter()
        .map(|s| column_family_name(&s.name))
        .collect();
    // TTL states get their compaction filter at open, as `register_state` gives it to new ones.
    let mut ttl = super::ttl_filter::TtlSlots::default();
    let cfs: Vec<ColumnFamilyDescriptor> = names
        .iter()
        .zip(&m.states)
        .map(|(n, meta)| {
            let opts = ttl
                .column_options(&cf_options, meta)
                .unwrap_or_else(|| cf_options.clone());
            ColumnFamilyDescriptor::new(n, opts)
        })
        .collect();
    let db = Db::open_cf_descriptors(&options.db_options()?, dir, cfs)
        .map_err(|e| rdb_error(format!("opening the restored {}", dir.display()), e))?;
    let mut write_opts = rocksdb::WriteOptions::default();
    write_opts.disable_wal(options.disable_wal);
    write_opts.set_sync(false);
    Ok(RocksDbBackend {
        holder: Arc::new(DbHolder {
            db,
            cf_options,
            cf_names: parking_lot::Mutex::new(names.clone()),
            _dir: temp,
        }),
        prefix_len: crate::keygroup::key_group_prefix_len(config.max_parallelism),
        config,
        options: options.clone(),
        states: m.states.clone(),
        cf_names: names,
        read_opts: rocksdb::ReadOptions::default(),
        write_opts,
        value_buf: Vec::new(),
        key_buf: Vec::new(),
        loader: super::load::Loader::default(),
        ttl,
    })
}

/// Deletes every key of `b` outside `keep`, per column family, by range deletion.
fn clip(b: &RocksDbBackend, keep: KeyGroupRange) -> std::result::Result<(), CheckpointError> {
    let max = b.config.max_parallelism;
    let p = b.prefix_len;
    let db = &b.holder.db;
    for state in 0..b.cf_names.len() {
        let cf = super::cf_handle(db, &b.cf_names, state)?;
        let mut lo = Vec::new();
        write_key_group_prefix(&mut lo, keep.start(), p);
        if keep.start() > 0 {
            db.delete_range_cf(&cf, Vec::new(), lo.clone())
                .map_err(|e| rdb_error("clipping restored key groups", e))?;
        }
        if u32::from(keep.end()) + 1 < max {
            let mut last = Vec::new();
            write_key_group_prefix(&mut last, keep.end(), p);
            if let Some(hi) = prefix_successor(&last) {
                db.delete_range_cf(&cf, hi, vec![0xFF; p + 1])
                    .map_err(|e| rdb_error("clipping restored key groups", e))?;
            }
        }
    }
    Ok(())
}

/// Restores the key groups of `config` from RocksDB checkpoint `id`, as Flink's RocksDB backend does: one
/// old instance of the same range is opened as it is; otherwise the old instance with the largest overlap is
/// opened and clipped to `config`'s key groups, and every other one is opened on its own and its entries of
/// those key groups are copied in.
pub fn restore_rocksdb(
    storage: &CheckpointStorage,
    id: u64,
    config: BackendConfig,
    options: RocksDbOptions,
) -> std::result::Result<(RocksDbBackend, RestoreInfo), CheckpointError> {
    let target = config.key_group_range;
    let mut parts = select_parts(storage, id, &config)?;
    if let Some(m) = parts.iter().find(|m| m.backend != BackendKind::RocksDb) {
        return Err(other_backend(m, "rocksdb"));
    }
    parts.sort_by_key(|m| std::cmp::Reverse(m.key_group_range.intersect(&target).len()));
    let mut info = RestoreInfo {
        parts: parts.clone(),
        ..RestoreInfo::default()
    };
    let tmp = tempfile::Builder::new()
        .prefix("keyed-state-rocksdb-restore-")
        .tempdir()
        .map_err(io("creating a restore directory".into()))?;
    let dir = tmp.path().join("db");
    let base = &parts[0];
    info.bytes_fetched += fetch(storage, base, &dir)?;
    info.files_adopted = base.files.len();
    let path = dir.clone();
    let mut backend = open_fetched(&path, Some(tmp), config, base, &options)?;
    info.adopted.push(base.instance.clone());
    if base.key_group_range != target {
        clip(&backend, target)?;
    }
    for m in parts.iter().skip(1) {
        let t = tempfile::Builder::new()
            .prefix("keyed-state-rocksdb-rescale-")
            .tempdir()
            .map_err(io("creating a restore directory".into()))?;
        let d = t.path().join("db");
        info.bytes_fetched += fetch(storage, m, &d)?;
        let mut cfg = m.backend_config();
        cfg.key_group_range = m.key_group_range;
        let mut src = open_fetched(&d, None, cfg, m, &options)?;
        let range = m.key_group_range.intersect(&target);
        let mut ids = Vec::with_capacity(m.states.len());
        for meta in &m.states {
            ids.push(backend.register_state(meta.clone())?);
        }
        let snap = src.snapshot()?;
        for kg in range.iter() {
            for (sid, &tid) in ids.iter().enumerate() {
                let mut err = None;
                snap.visit(sid, kg, &mut |k, v| {
                    if let Err(e) = backend.load_entry(tid, kg, k, v) {
                        err = Some(e.to_string());
                    }
                    Ok(())
                })?;
                if let Some(e) = err {
                    return Err(CheckpointError::Invalid(e));
                }
            }
        }
        drop(snap);
        drop(src);
        drop(t);
        info.copied.push(m.instance.clone());
    }
    // The copied parts' files are not the restored database's (`RestoreInfo::parts`).
    for p in info.parts.iter_mut().skip(1) {
        p.files.clear();
    }
    backend.finish_load()?;
    Ok((backend, info))
}

//! Restore from a checkpoint of the RocksDB variant, as Flink's RocksDB backend restores
//! (`design/checkpoints.md`, "The RocksDB variant"): at the same key-group range the downloaded files are
//! opened as they are; a rescale opens each old instance's database and copies its key groups into the new
//! one, except the largest overlap, which is opened as the new database and clipped by range deletion
//! (Flink's `RocksDBIncrementalRestoreOperation`).

use std::path::Path;

use super::parts::{
    check_backend, check_fetched, damaged_metadata, object_of, select_parts, RestoreInfo,
};
use crate::backend::rocksdb::{RocksDbBackend, RocksDbOptions};
use crate::backend::{BackendConfig, BackendKind, StateBackend};
use crate::checkpoint::format::{CheckpointMetadata, FileKind};
use crate::checkpoint::storage::CheckpointStorage;
use crate::error::{CheckpointError, Error, Location, Result};

/// Fetches every file of `m` into `dir` under its RocksDB name (`NNNNNN.sst`, `MANIFEST-…`); on a local
/// root an object holding exactly one file is hard-linked. Returns the bytes.
fn fetch(storage: &CheckpointStorage, m: &CheckpointMetadata, dir: &Path) -> Result<u64> {
    std::fs::create_dir_all(dir).map_err(Error::io_at("creating the directory", dir))?;
    let mut ranged = Vec::new();
    let mut targets = Vec::new();
    let mut bytes = 0;
    for f in &m.files {
        let name = match &f.kind {
            FileKind::Sst => format!("{:06}.sst", f.number),
            FileKind::Named(n) => n.clone(),
            FileKind::Table { .. } | FileKind::BoundedSst(_) => {
                return Err(damaged_metadata(
                    m,
                    format!(
                        "file {}: a heap table or bounded SST in a RocksDB checkpoint",
                        f.number
                    ),
                ))
            }
        };
        let dst = dir.join(&name);
        let o = object_of(m, f)?;
        bytes += f.length;
        let whole = f.offset == 0 && f.length == o.size;
        if let (true, Some(src)) = (whole, storage.local_path(&o.path)) {
            if !src.exists() {
                return Err(CheckpointError::MissingObject {
                    at: Location::file(&o.path),
                }
                .into());
            }
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).map_err(Error::io_at("copying", &src))?;
            }
            continue;
        }
        ranged.push((o.path.clone(), f.offset, f.length));
        targets.push((dst, f, o.path.as_str()));
    }
    super::parts::fetch_in_batches(storage, &ranged, |i, data| {
        let Some((dst, f, object)) = targets.get(i) else {
            return Ok(());
        };
        check_fetched(m, f, object, &data)?;
        std::fs::write(dst, &data).map_err(Error::io_at("writing", dst))
    })?;
    Ok(bytes)
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
) -> Result<(RocksDbBackend, RestoreInfo)> {
    let target = config.key_group_range;
    let mut parts = select_parts(storage, id, &config)?;
    check_backend(&parts, BackendKind::RocksDb)?;
    parts.sort_by_key(|m| std::cmp::Reverse(m.key_group_range.intersect(&target).len()));
    let mut info = RestoreInfo {
        parts: parts.clone(),
        ..RestoreInfo::default()
    };
    let tmp = tempfile::Builder::new()
        .prefix("keyed-state-rocksdb-restore-")
        .tempdir()
        .map_err(Error::io_at(
            "creating a temporary directory in",
            std::env::temp_dir(),
        ))?;
    let dir = tmp.path().join("db");
    let base = &parts[0];
    info.bytes_fetched += fetch(storage, base, &dir)?;
    info.files_adopted = base.files.len();
    let path = dir.clone();
    let mut backend =
        RocksDbBackend::open_restored(&path, Some(tmp), config, base.states.clone(), &options)?;
    info.adopted.push(base.instance.clone());
    if base.key_group_range != target {
        backend.clip_to(target)?;
    }
    for m in parts.iter().skip(1) {
        let t = tempfile::Builder::new()
            .prefix("keyed-state-rocksdb-rescale-")
            .tempdir()
            .map_err(Error::io_at(
                "creating a temporary directory in",
                std::env::temp_dir(),
            ))?;
        let d = t.path().join("db");
        info.bytes_fetched += fetch(storage, m, &d)?;
        let mut cfg = m.backend_config();
        cfg.key_group_range = m.key_group_range;
        let mut src = RocksDbBackend::open_restored(&d, None, cfg, m.states.clone(), &options)?;
        let range = m.key_group_range.intersect(&target);
        let mut ids = Vec::with_capacity(m.states.len());
        for meta in &m.states {
            ids.push(backend.register_state(meta.clone())?);
        }
        let snap = src.snapshot()?;
        for kg in range.iter() {
            for (sid, &tid) in ids.iter().enumerate() {
                snap.visit(sid, kg, &mut |k, v| backend.load_entry(tid, kg, k, v))?;
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

//! The synchronous part of a checkpoint of the RocksDB variant, as Flink's RocksDB backend takes it
//! (`design/checkpoints.md`, "The RocksDB variant"): RocksDB's own checkpoint (a memtable flush, then hard
//! links of the live SST files and a fresh MANIFEST, OPTIONS and CURRENT in a directory of its own), handed
//! to the checkpointer as the captured files. Restoring them is the checkpoint module's
//! (`checkpoint::restore_rocksdb`), through `RocksDbBackend::open_restored`.

use std::path::PathBuf;
use std::sync::Arc;

use super::{rdb_error, Db, DbHolder};
use crate::backend::{BackendKind, CapturedFile, CapturedFiles, CheckpointCapture, FileSource};
use crate::error::{Error, Result};

/// Where the synchronous parts put RocksDB's checkpoint directories (inside the database directory, so
/// hard links work; RocksDB ignores directories it did not create).
fn checkpoints_dir(db: &Db) -> PathBuf {
    db.path().join("keyed-state-checkpoints")
}

/// The synchronous part: RocksDB's checkpoint of the database `holder` holds into a new directory.
pub(super) fn capture(holder: &Arc<DbHolder>) -> Result<Box<dyn CheckpointCapture>> {
    let db = &holder.db;
    let parent = checkpoints_dir(db);
    std::fs::create_dir_all(&parent).map_err(Error::io_at("creating the directory", &parent))?;
    let tmp = tempfile::Builder::new()
        .prefix("chk-")
        .tempdir_in(&parent)
        .map_err(Error::io_at("creating a directory in", &parent))?;
    let dir = tmp.path().join("db");
    rocksdb::checkpoint::Checkpoint::new(db)
        .and_then(|c| c.create_checkpoint(&dir))
        .map_err(|e| rdb_error(format!("RocksDB checkpoint into {}", dir.display()), e))?;
    let mut files = Vec::new();
    let entries = std::fs::read_dir(&dir).map_err(Error::io_at("listing", &dir))?;
    for entry in entries {
        let entry = entry.map_err(Error::io_at("listing", &dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let size = entry
            .metadata()
            .map_err(Error::io_at("reading the metadata of", &path))?
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
    let seqno = holder.db.latest_sequence_number();
    Ok(Box::new(RocksCapture {
        files,
        seqno,
        tmp,
        _holder: Arc::clone(holder),
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
            view: keyed_state_lsm::CaptureView::Off,
            tables: None,
            keep_alive: Box::new((tmp, _holder)),
        })
    }
}

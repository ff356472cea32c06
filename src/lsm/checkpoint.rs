//! Checkpoints: flush, then hard-link (or copy) the live SST files of one version into a directory and
//! write a manifest of that moment there. The directory opens as a [`Db`].

use super::io::io_err;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::db::Db;
use super::io;
use super::manifest::{manifest_path, ManifestWriter};
use super::version::sst_path;
use super::LsmError;

/// One file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFile {
    /// The file number (file names are `NNNNNN.sst`; numbers are never reused, so equal numbers mean
    /// identical files — the base for incremental checkpoints).
    pub number: u64,
    /// The level the file sits in.
    pub level: usize,
    /// Size in bytes.
    pub size: u64,
    /// Path inside the checkpoint directory.
    pub path: PathBuf,
    /// Whether it was hard-linked (false: copied).
    pub linked: bool,
}

/// What a checkpoint holds.
#[derive(Debug, Clone)]
pub struct CheckpointInfo {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// The live immutable files.
    pub files: Vec<CheckpointFile>,
    /// The manifest written into the directory.
    pub manifest: PathBuf,
    /// Every write with a sequence number up to this one is in the checkpoint, and no other.
    pub seqno: u64,
}

impl Db {
    /// Flushes, then captures the live files and a manifest into `target` (which must not exist or be
    /// empty). Files are hard-linked where the filesystem allows, copied otherwise.
    pub fn checkpoint(&self, target: impl AsRef<Path>) -> Result<CheckpointInfo, LsmError> {
        let target = target.as_ref().to_path_buf();
        if target.exists() {
            let mut rd = std::fs::read_dir(&target).map_err(|e| io_err(&target, e))?;
            if rd.next().is_some() {
                return Err(LsmError::InvalidArgument(format!(
                    "checkpoint directory {} is not empty",
                    target.display()
                )));
            }
        } else {
            std::fs::create_dir_all(&target).map_err(|e| io_err(&target, e))?;
        }
        self.flush()?;
        let inner = self.inner();
        // The manifest lock keeps the version and the flushed seqno consistent with each other.
        let (version, seqno) = {
            let _m = inner.manifest.lock();
            let st = inner.state.lock();
            (Arc::clone(&st.version), st.flushed_seqno)
        };
        let mut files = Vec::new();
        for (level, f) in version.files() {
            let dst = sst_path(&target, f.info.number);
            let linked = std::fs::hard_link(&f.path, &dst).is_ok();
            if !linked {
                io::copy_file(&f.path, &dst, inner.opts.io_mode)?;
            }
            files.push(CheckpointFile {
                number: f.info.number,
                level,
                size: f.info.size,
                path: dst,
                linked,
            });
        }
        let mut edit = inner.snapshot_edit(&version, Some(0));
        edit.last_seqno = Some(seqno);
        let number = inner.new_file_number();
        ManifestWriter::create(&target, number, &edit)?;
        io::sync_dir(&target)?;
        Ok(CheckpointInfo {
            dir: target.clone(),
            files,
            manifest: manifest_path(&target, number),
            seqno,
        })
    }
}

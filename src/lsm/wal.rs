//! The write-ahead log (optional): one file per memtable, one framed record per write batch.
//!
//! Records are framed as described in [`record_log`](super::record_log), each payload an encoded
//! [`WriteBatch`](super::batch::WriteBatch). Replay stops at the first record that is cut short or fails
//! its checksum: that is a torn tail from a crash during an unacknowledged write.

use std::path::{Path, PathBuf};

use super::batch::WriteBatch;
use super::io::io_err;
use super::record_log::{frame, read_frame, Frame};
use super::storage::{NewFile, Storage};
use super::LsmError;

/// The path of WAL `number` in `dir`.
pub(crate) fn wal_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.log"))
}

/// Appends batches to one WAL file.
pub(crate) struct WalWriter {
    file: NewFile,
    path: PathBuf,
    sync: bool,
    /// A write or sync failed: the log's tail is unknown and nothing more is appended to it.
    failed: bool,
}

impl WalWriter {
    /// Creates WAL `number` in `dir` (durably: the directory is synced); `sync` makes every append durable.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        number: u64,
        sync: bool,
    ) -> Result<Self, LsmError> {
        let path = wal_path(dir, number);
        let file = storage.create(&path).map_err(|e| io_err(&path, e))?;
        super::io::sync_dir_on(storage, dir)?;
        Ok(Self {
            file,
            path,
            sync,
            failed: false,
        })
    }

    /// Appends one encoded batch; with `sync`, returns only once it is on stable storage. After a failed
    /// write or sync every later append fails (a failed fsync is never retried on the same file).
    pub fn append(&mut self, payload: &[u8]) -> Result<(), LsmError> {
        if self.failed {
            return Err(io_err(
                &self.path,
                std::io::Error::other("an earlier write or sync of this log failed"),
            ));
        }
        let rec = frame(payload);
        let res =
            self.file.write_all(&rec).and_then(
                |_| {
                    if self.sync {
                        self.file.sync()
                    } else {
                        Ok(())
                    }
                },
            );
        res.map_err(|e| {
            self.failed = true;
            io_err(&self.path, e)
        })
    }
}

/// Reads the batches of a WAL file; returns them with the number of trailing bytes ignored.
pub(crate) fn read_wal(
    storage: &dyn Storage,
    path: &Path,
) -> Result<(Vec<(u64, WriteBatch)>, usize), LsmError> {
    let buf = storage.read(path).map_err(|e| io_err(path, e))?;
    let mut out = Vec::new();
    let mut pos = 0;
    while let Frame::Record(payload, next) = read_frame(&buf, pos) {
        match WriteBatch::decode(payload) {
            Ok(b) => out.push(b),
            Err(_) => break,
        }
        pos = next;
    }
    Ok((out, buf.len() - pos))
}

//! The write-ahead log (optional): one file per memtable, one framed record per write batch.
//!
//! Records are framed as described in [`record_log`](super::record_log), each payload an encoded
//! [`WriteBatch`](super::batch::WriteBatch). Replay stops at the first record that is cut short or fails
//! its checksum: that is a torn tail from a crash during an unacknowledged write.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::batch::WriteBatch;
use super::record_log::{frame, read_frame, Frame};
use super::LsmError;

/// The path of WAL `number` in `dir`.
pub(crate) fn wal_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.log"))
}

/// Appends batches to one WAL file.
pub(crate) struct WalWriter {
    file: File,
    path: PathBuf,
    sync: bool,
}

impl WalWriter {
    /// Creates WAL `number` in `dir` (durably: the directory is synced); `sync` makes every append durable.
    pub fn create(dir: &Path, number: u64, sync: bool) -> Result<Self, LsmError> {
        let path = wal_path(dir, number);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| LsmError::Io {
                path: path.display().to_string(),
                source: e,
            })?;
        super::io::sync_dir(dir)?;
        Ok(Self { file, path, sync })
    }

    /// Appends one encoded batch; with `sync`, returns only once it is on stable storage.
    pub fn append(&mut self, payload: &[u8]) -> Result<(), LsmError> {
        let rec = frame(payload);
        let res = self.file.write_all(&rec).and_then(|_| {
            if self.sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        res.map_err(|e| LsmError::Io {
            path: self.path.display().to_string(),
            source: e,
        })
    }
}

/// Reads the batches of a WAL file; returns them with the number of trailing bytes ignored.
pub(crate) fn read_wal(path: &Path) -> Result<(Vec<(u64, WriteBatch)>, usize), LsmError> {
    let buf = std::fs::read(path).map_err(|e| LsmError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
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

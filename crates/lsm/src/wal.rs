//! The write-ahead log (optional): one file per memtable, one framed record per write batch.
//!
//! A WAL file is a record log ([`record_log`](super::record_log), [`LogKind::Wal`]), each payload an encoded
//! [`WriteBatch`](super::batch::WriteBatch). [`read_wal`] returns the batches up to the first record that is
//! not whole, and how the log ends there ([`WalEnd`]); what that means across the sequence of logs is the
//! replay's decision (`db::recovery`, `design/durability.md`).

use std::path::{Path, PathBuf};

use super::batch::WriteBatch;
use super::io::io_err;
use super::record_log::{file_header, frame, read_file_header, read_frame, Frame, LogKind};
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
        let mut w = Self {
            file,
            path,
            sync,
            failed: false,
        };
        w.write_synced(&file_header(LogKind::Wal), sync)?;
        super::io::sync_dir_on(storage, dir)?;
        Ok(w)
    }

    /// Makes everything appended so far durable (called before the writer is replaced by a newer log, so
    /// that only the newest log can end in a torn record).
    pub fn sync(&mut self) -> Result<(), LsmError> {
        self.check_usable()?;
        self.file.sync().map_err(|e| {
            self.failed = true;
            io_err(&self.path, e)
        })
    }

    /// Appends one encoded batch; with `sync`, returns only once it is on stable storage. After a failed
    /// write or sync every later append fails (a failed fsync is never retried on the same file).
    pub fn append(&mut self, payload: &[u8]) -> Result<(), LsmError> {
        self.write_synced(&frame(payload), self.sync)
    }

    /// Fails if an earlier write or sync of this log failed.
    fn check_usable(&self) -> Result<(), LsmError> {
        if self.failed {
            return Err(io_err(
                &self.path,
                std::io::Error::other("an earlier write or sync of this log failed"),
            ));
        }
        Ok(())
    }

    /// Writes `bytes`; with `sync`, returns only once they are on stable storage.
    fn write_synced(&mut self, bytes: &[u8], sync: bool) -> Result<(), LsmError> {
        self.check_usable()?;
        let mut res = self.file.write_all(bytes);
        if sync && res.is_ok() {
            res = self.file.sync();
        }
        res.map_err(|e| {
            self.failed = true;
            io_err(&self.path, e)
        })
    }
}

/// How a WAL file ends after its last whole record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WalEnd {
    /// Exactly after a record (or an empty log).
    Clean,
    /// A record cut off by a crash at the end of the file, starting at `offset`.
    Torn {
        /// Where the cut record starts.
        offset: u64,
    },
    /// Bytes at `offset` that are neither a record nor a torn tail, or a record that does not decode.
    Damaged {
        /// Where the damaged record (or file header) starts.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
}

/// What [`read_wal`] found in one WAL file.
#[derive(Debug)]
pub(crate) struct WalContents {
    /// The batches of the whole records before `end`: (first seqno, batch, offset of the record).
    pub batches: Vec<(u64, WriteBatch, u64)>,
    /// How the file ends after them.
    pub end: WalEnd,
    /// The file's length.
    pub len: u64,
}

/// Reads the batches of a WAL file (format 1 or 2) up to the first record that is not whole.
pub(crate) fn read_wal(storage: &dyn Storage, path: &Path) -> Result<WalContents, LsmError> {
    let buf = storage.read(path).map_err(|e| io_err(path, e))?;
    Ok(decode_wal(&buf))
}

/// Decodes a WAL file's bytes; total (never panics), see [`read_wal`].
pub(crate) fn decode_wal(buf: &[u8]) -> WalContents {
    let len = buf.len() as u64;
    let (format, mut pos) = match read_file_header(buf, LogKind::Wal) {
        Ok(h) => h,
        Err(detail) => {
            return WalContents {
                batches: Vec::new(),
                end: WalEnd::Damaged { offset: 0, detail },
                len,
            }
        }
    };
    let mut batches = Vec::new();
    let end = loop {
        match read_frame(buf, pos, format) {
            Frame::Record(payload, next) => match WriteBatch::decode(payload) {
                Ok((seq, b)) => {
                    batches.push((seq, b, pos as u64));
                    pos = next;
                }
                Err(e) => {
                    break WalEnd::Damaged {
                        offset: pos as u64,
                        detail: format!("write batch does not decode: {e}"),
                    }
                }
            },
            Frame::End => break WalEnd::Clean,
            Frame::Torn => break WalEnd::Torn { offset: pos as u64 },
            Frame::Damaged(what) => {
                break WalEnd::Damaged {
                    offset: pos as u64,
                    detail: what.to_string(),
                }
            }
        }
    };
    WalContents { batches, end, len }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record_log::file_header;

    fn log_of(batches: &[(&[u8], u64)]) -> Vec<u8> {
        let mut buf = file_header(LogKind::Wal).to_vec();
        for (key, seq) in batches {
            let mut b = WriteBatch::new();
            b.put(key, b"v");
            buf.extend_from_slice(&frame(&b.encode(*seq)));
        }
        buf
    }

    #[test]
    fn a_record_whose_batch_does_not_decode_is_damage_at_its_offset() {
        let mut buf = log_of(&[(b"a", 1)]);
        let at = buf.len() as u64;
        buf.extend_from_slice(&frame(b"not a batch"));
        let c = decode_wal(&buf);
        assert_eq!(c.batches.len(), 1);
        assert!(matches!(c.end, WalEnd::Damaged { offset, .. } if offset == at));
    }

    #[test]
    fn decoding_is_total_over_damaged_and_random_bytes() {
        let good = log_of(&[(b"a", 1), (b"bb", 2), (b"ccc", 3)]);
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = good.clone();
            let n = (x % 4 + 1) as usize;
            for k in 0..n {
                let i = ((x >> (k * 8)) as usize) % b.len();
                b[i] = (x >> 32) as u8 ^ k as u8;
            }
            b.truncate((x >> 40) as usize % (good.len() + 1));
            let c = decode_wal(&b);
            assert!(c.batches.len() <= 3);
            let _ = decode_wal(&b[..b.len().min(20)]);
        }
    }
}

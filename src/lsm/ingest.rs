//! Bulk ingestion: sorted key-value pairs written straight into SST files, bypassing the memtable.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::db::Db;
use super::flush::Outputs;
use super::ikey::{self, ValueKind};
use super::version::{FileMeta, VersionEdit};
use super::LsmError;

/// What an ingestion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestInfo {
    /// Number of entries ingested.
    pub entries: u64,
    /// Number of SST files written.
    pub files: usize,
    /// The level they were placed in (the last level when nothing overlapped, else L0).
    pub level: usize,
    /// The sequence number all ingested entries carry.
    pub seqno: u64,
}

impl Db {
    /// Ingests `(user key, value)` pairs in strictly ascending key order as puts, writing SST files directly.
    ///
    /// Memtables are flushed first, and writes wait while the files are written. The files go to the last
    /// level when their key range overlaps no existing file or range tombstone, otherwise to L0 (newest);
    /// either way they carry one fresh seqno, so they shadow older values of the same keys. Snapshots taken
    /// before the call do not see them.
    pub fn ingest_sorted<I, K, V>(&self, entries: I) -> Result<IngestInfo, LsmError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let inner = self.inner();
        let mut w = inner.writer.lock();
        inner.make_room(&mut w, true)?;
        inner.wait_flushed()?;
        let seqno = inner.last_seqno.load(Ordering::SeqCst) + 1;
        let mut out = Outputs::new(inner, Some(inner.opts.target_file_size));
        let mut prev: Vec<u8> = Vec::new();
        let mut count = 0u64;
        let mut ikey_buf = Vec::new();
        let mut bytes = 0u64;
        for (k, v) in entries {
            let (k, v) = (k.as_ref(), v.as_ref());
            if count > 0 && prev.as_slice() >= k {
                return Err(LsmError::InvalidArgument(
                    "ingest_sorted: keys must be strictly ascending".into(),
                ));
            }
            ikey_buf.clear();
            ikey::encode(&mut ikey_buf, k, seqno, ValueKind::Put);
            out.add(&ikey_buf, v)?;
            bytes += (k.len() + v.len()) as u64;
            count += 1;
            prev.clear();
            prev.extend_from_slice(k);
        }
        let files = out.finish()?;
        if files.is_empty() {
            return Ok(IngestInfo {
                entries: 0,
                files: 0,
                level: 0,
                seqno: inner.last_seqno.load(Ordering::SeqCst),
            });
        }
        let lo = files
            .iter()
            .map(|f| f.info.smallest_user())
            .min()
            .unwrap_or_default()
            .to_vec();
        let hi = files
            .iter()
            .map(|f| f.info.largest_user())
            .max()
            .unwrap_or_default()
            .to_vec();
        let level = {
            // The compaction lock keeps the level layout stable until the edit is applied.
            let _c = inner.compaction_lock.lock();
            let version = Arc::clone(&inner.state.lock().version);
            let overlaps = version.files().any(|(_, f)| f.info.overlaps(&lo, &hi))
                || version.range_dels.iter().any(|t| t.overlaps(&lo, &hi));
            let level = if overlaps {
                0
            } else {
                version.levels.len() - 1
            };
            let added: Vec<(usize, Arc<FileMeta>)> =
                files.iter().map(|f| (level, Arc::clone(f))).collect();
            inner.last_seqno.store(seqno, Ordering::SeqCst);
            inner.log_and_apply(VersionEdit::default(), &[], &added, false)?;
            inner.state.lock().flushed_seqno = seqno;
            level
        };
        inner
            .counters
            .user_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        drop(w);
        Ok(IngestInfo {
            entries: count,
            files: files.len(),
            level,
            seqno,
        })
    }
}

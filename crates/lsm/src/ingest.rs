//! Bulk ingestion: sorted key-value pairs written straight into SST files, bypassing the memtable.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::compaction::key_range;
use super::db::Db;
use super::flush::Outputs;
use super::ikey::{self, ValueKind};
use super::inner::{DbInner, WriterState};
use super::version::{FileMeta, VersionEdit};
use super::LsmError;
use crate::util::panic_message;

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
    /// before the call do not see them. Keys not strictly ascending fail with [`LsmError::NotAscending`], and
    /// nothing is ingested.
    pub fn ingest_sorted<I, K, V>(&self, entries: I) -> Result<IngestInfo, LsmError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let inner = self.inner();
        let (w, seqno) = begin(inner)?;
        let run = write_run(inner, entries, seqno)?;
        let info = install(inner, vec![run], seqno)?;
        drop(w);
        Ok(info)
    }

    /// As [`ingest_sorted`](Self::ingest_sorted), for `runs` that follow one another in key order (every
    /// key of a run below every key of the next), each written into its own files by its own thread (one
    /// thread per run besides the caller's). A run out of order inside, runs that overlap, an I/O error or a
    /// panic in a writer thread: nothing is installed and the files written are deleted (a panic of the
    /// caller's own run goes on unwinding after that; the others are reported as errors). On an error the
    /// other runs still write to their end before their files go.
    pub fn ingest_sorted_runs<I, K, V>(&self, runs: Vec<I>) -> Result<IngestInfo, LsmError>
    where
        I: IntoIterator<Item = (K, V)> + Send,
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let inner = self.inner();
        let (w, seqno) = begin(inner)?;
        let mut runs = runs.into_iter();
        let first = runs.next();
        let written: Vec<Result<Run, LsmError>> = std::thread::scope(|scope| {
            let others: Vec<_> = runs
                .map(|run| scope.spawn(move || write_run(inner, run, seqno)))
                .collect();
            let mut out =
                vec![first.map_or_else(|| Ok(Run::default()), |r| write_run(inner, r, seqno))];
            for h in others {
                out.push(h.join().unwrap_or_else(|panic| {
                    Err(LsmError::InvalidArgument(format!(
                        "ingest_sorted_runs: a writer thread panicked: {}",
                        panic_message(&*panic)
                    )))
                }));
            }
            out
        });
        let mut done = Vec::with_capacity(written.len());
        let mut failed = None;
        for r in written {
            match r {
                Ok(run) => done.push(run),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        // Dropping `done` on an error below deletes every run's files (`Run`'s drop).
        let out_of_order = done
            .iter()
            .filter(|r| r.entries > 0)
            .zip(done.iter().filter(|r| r.entries > 0).skip(1))
            .find(|(a, b)| a.last >= b.first);
        if let (None, Some((_, b))) = (&failed, out_of_order) {
            failed = Some(LsmError::NotAscending {
                key: b.first.clone(),
            });
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let info = install(inner, done, seqno)?;
        drop(w);
        Ok(info)
    }
}

/// Starts an ingestion: takes the write lock (writes wait until the files are in), flushes the memtables,
/// and picks the ingested entries' seqno.
fn begin(inner: &DbInner) -> Result<(MutexGuard<'_, WriterState>, u64), LsmError> {
    let mut w = inner.writer.lock();
    inner.make_room(&mut w, true)?;
    inner.wait_flushed()?;
    let seqno = inner.last_seqno.load(Ordering::SeqCst) + 1;
    Ok((w, seqno))
}

/// The files one run of an ingestion was written into. Dropped before [`install`] took its files (another
/// run failed, the runs overlap, a panic), it marks them obsolete: they are deleted with their last reference.
#[derive(Default)]
struct Run {
    files: Vec<Arc<FileMeta>>,
    entries: u64,
    bytes: u64,
    first: Vec<u8>,
    last: Vec<u8>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for f in &self.files {
            f.mark_obsolete();
        }
    }
}

/// Writes strictly ascending `entries` as puts at `seqno` into new SST files (not yet part of the tree).
fn write_run<I, K, V>(inner: &DbInner, entries: I, seqno: u64) -> Result<Run, LsmError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let mut out = Outputs::new(inner, Some(inner.opts.target_file_size), true);
    let mut run = Run::default();
    let mut ikey_buf = Vec::new();
    let result = (|| -> Result<(), LsmError> {
        for (k, v) in entries {
            let (k, v) = (k.as_ref(), v.as_ref());
            if run.entries > 0 && run.last.as_slice() >= k {
                return Err(LsmError::NotAscending { key: k.to_vec() });
            }
            ikey_buf.clear();
            ikey::encode(&mut ikey_buf, k, seqno, ValueKind::Put);
            out.add(&ikey_buf, v)?;
            run.bytes += (k.len() + v.len()) as u64;
            if run.entries == 0 {
                run.first = k.to_vec();
            }
            run.entries += 1;
            run.last.clear();
            run.last.extend_from_slice(k);
        }
        Ok(())
    })();
    // On an error `out` is dropped unfinished and deletes what it wrote.
    result?;
    run.files = out.finish()?;
    Ok(run)
}

/// Makes the files of `runs` (written at `seqno`) part of the tree: in the last level when their key range
/// overlaps no existing file or range tombstone, otherwise in L0. The caller holds the writer lock.
fn install(inner: &DbInner, runs: Vec<Run>, seqno: u64) -> Result<IngestInfo, LsmError> {
    let entries: u64 = runs.iter().map(|r| r.entries).sum();
    let bytes: u64 = runs.iter().map(|r| r.bytes).sum();
    // Taken out of the runs: from here on (the edit may become durable even if `log_and_apply` fails), the
    // files are the tree's.
    let files: Vec<Arc<FileMeta>> = runs
        .into_iter()
        .flat_map(|mut r| std::mem::take(&mut r.files))
        .collect();
    let Some((lo, hi)) = key_range(&files) else {
        return Ok(IngestInfo {
            entries: 0,
            files: 0,
            level: 0,
            seqno: inner.last_seqno.load(Ordering::SeqCst),
        });
    };
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
    // A compaction job that found the lock held meanwhile is asked for again.
    inner.request_jobs();
    inner
        .counters
        .user_bytes
        .fetch_add(bytes, Ordering::Relaxed);
    Ok(IngestInfo {
        entries,
        files: files.len(),
        level,
        seqno,
    })
}

//! The database handle, [`Db`]: an embedded LSM key-value store with merge operands, range deletes,
//! snapshots, and background flush and compaction.
//!
//! This module holds the handle and its public API; the work is in the submodules: `open` (opening and
//! recovery), `write` (the write path), `read` (the read path), `background` (the flush and compaction
//! jobs the environment's pool runs, waiting for them, shutdown) and `stats` ([`DbStats`]). What they share with the flush and
//! compaction jobs is `DbInner`, in `inner.rs`.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use super::batch::WriteBatch;
use super::compaction;
use super::ikey::ValueKind;
use super::inner::DbInner;
use super::iter::DbIter;
use super::options::{Options, ReadOptions};
use super::slice::ValueSlice;
use super::snapshot::Snapshot;
use super::LsmError;

mod background;
mod open;
mod read;
mod recovery;
mod resume;
mod stats;
mod write;

pub use recovery::{DroppedWrites, RecoveryReport};
pub use stats::{DbStats, Metric};

type Result<T> = std::result::Result<T, LsmError>;

/// An embedded LSM key-value store. `Send + Sync`: share it through an `Arc`.
pub struct Db {
    inner: Arc<DbInner>,
    /// Whether the engine is open: registered with its pool, not yet shut down.
    open: Mutex<bool>,
    /// What opening recovered from the write-ahead logs.
    recovery: RecoveryReport,
    /// The `LOCK` file, exclusively `flock`ed while the database is open.
    _lock: Box<dyn super::storage::DirLock>,
}

impl Db {
    /// Opens (or creates) the database in `path`, replaying WAL files if any.
    ///
    /// A directory without `CURRENT` is a new database only if it holds no engine file (`NNNNNN.sst`,
    /// `NNNNNN.log`, `MANIFEST-NNNNNN`) other than manifests naming no file (a creation a crash
    /// interrupted); otherwise the open fails with [`LsmError::MissingCurrent`] and deletes nothing, with or
    /// without [`Options::create_if_missing`]. Files the manifest proves obsolete (SSTs it does not name,
    /// older manifests, logs whose writes it holds) are deleted only once the open has succeeded.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        open::open(path.as_ref(), opts)
    }

    /// What opening recovered from the write-ahead logs: records replayed, a torn tail ignored, and what
    /// [`WalRecovery::PointInTime`](super::options::WalRecovery) dropped at a damaged record.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The shared state, for the handle's extensions (ingestion, checkpoints).
    pub(crate) fn inner(&self) -> &Arc<DbInner> {
        &self.inner
    }

    /// Applies a batch atomically: all its updates get consecutive seqnos and become visible together. A batch
    /// holding a merge operand, in a database opened without a merge operator, is refused whole
    /// ([`LsmError::NoMergeOperator`], naming the operand's key).
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_seq(batch).map(|_| ())
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write_one(ValueKind::Put, key, value)
    }

    /// Deletes `key`.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.write_one(ValueKind::Delete, key, &[])
    }

    /// Adds a merge operand for `key`, combined with the value and the other operands by the
    /// [`merge_operator`](Options::merge_operator) on read and in compactions. Without a merge operator it is
    /// refused ([`LsmError::NoMergeOperator`]) and nothing is written.
    pub fn merge(&self, key: &[u8], operand: &[u8]) -> Result<()> {
        self.write_one(ValueKind::Merge, key, operand)
    }

    /// Deletes every key in `[start, end)` with one range tombstone.
    pub fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        let mut b = WriteBatch::new();
        b.delete_range(start, end);
        let seqno = self.write_seq(&b)?;
        self.inner.drop_files_in_range(start, end, seqno)
    }

    /// Reads the latest value of `key` (zero-copy when it sits in an uncompressed SST block).
    pub fn get(&self, key: &[u8]) -> Result<Option<ValueSlice>> {
        self.inner.get_at_seqno(key, None)
    }

    /// Reads the latest value of `key` into `out` (cleared first); returns whether `key` has a value.
    /// Cheaper than [`Db::get`] for values in memtables: they are copied into `out`, never allocated.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.inner.get_into_at_seqno(key, None, out)
    }

    /// Reads every key of `keys` (the latest values), results in the order of `keys`; the same values as
    /// [`Db::get`] of each key, read at one sequence number. On state that is not in memory the blocks of
    /// the batch are read from the disk concurrently (`design/decisions/0007-cold-reads.md`).
    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<ValueSlice>>> {
        self.inner.multi_get_at_seqno(keys, None)
    }

    /// [`Db::multi_get`] as of `snapshot`.
    pub fn multi_get_at(
        &self,
        keys: &[&[u8]],
        snapshot: &Snapshot,
    ) -> Result<Vec<Option<ValueSlice>>> {
        self.inner.multi_get_at_seqno(keys, Some(snapshot.seqno()))
    }

    /// Reads `key` as of `snapshot`.
    pub fn get_at(&self, key: &[u8], snapshot: &Snapshot) -> Result<Option<ValueSlice>> {
        self.inner.get_at_seqno(key, Some(snapshot.seqno()))
    }

    /// A snapshot of the current state.
    pub fn snapshot(&self) -> Snapshot {
        // Register under the writer lock so no write is half-visible relative to the seqno.
        let _w = self.inner.writer.lock();
        let seq = self.inner.last_seqno.load(Ordering::SeqCst);
        self.inner.snapshots.acquire(seq)
    }

    /// Whether the database may hold a key starting with `prefix` (as of now, any snapshot): false only when
    /// no memtable holds such a key (one skiplist search each) and no file can, by its key range and its
    /// prefix filter (when the prefix extractor gives `prefix`'s filter prefix). A scan of `prefix` that
    /// gets false finds nothing, and it costs no iterator: no allocation, no block read. Entries a range
    /// tombstone deletes count as held. The check of [`prefix_iter`](Self::prefix_iter), alone for tests.
    #[cfg(test)]
    pub(crate) fn may_hold_prefix(&self, prefix: &[u8]) -> bool {
        self.inner.may_hold_prefix(prefix)
    }

    /// An iterator over the keys starting with `prefix`, bounded to `[prefix | from, successor(prefix))`
    /// (unpositioned: call `seek_to_first`), or `None` when the database cannot hold such a key: no memtable
    /// holds one (one skiplist search each) and no file can, by its key range and its prefix filter (when
    /// the prefix extractor gives `prefix`'s filter prefix); entries a range tombstone deletes count as
    /// held. The check and the iterator share one read view (the tables and the latest seqno, both taken
    /// before the check): a scan of a prefix the database does not hold builds nothing (no allocation, no
    /// block read). The iterator leaves out the memtables that hold no key of `prefix` and no range
    /// tombstone.
    pub fn prefix_iter(&self, prefix: &[u8], from: &[u8]) -> Option<DbIter> {
        self.inner.prefix_iter(prefix, from)
    }

    /// An iterator (unpositioned: call `seek` or `seek_to_first`).
    pub fn iter(&self, ro: ReadOptions<'_>) -> DbIter {
        self.inner.iter(ro)
    }

    /// Flushes all memtables to L0 and waits for it.
    pub fn flush(&self) -> Result<()> {
        {
            let mut w = self.inner.writer.lock();
            self.inner.make_room(&mut w, true)?;
        }
        self.inner.wait_flushed()
    }

    /// Waits until pending flushes are done and automatic compaction is idle (RocksDB's `WaitForCompact`).
    pub fn wait_for_background_work(&self) -> Result<()> {
        self.inner.wait_for_background_work()
    }

    /// Flushes, then compacts all files into one level (the last with dynamic level sizing, else the deepest
    /// non-empty one), and waits for it. No automatic compaction starts from the call until it returns.
    pub fn compact_all(&self) -> Result<()> {
        let _exclusive = background::ManualCompaction::start(&self.inner);
        self.flush()?;
        self.stop_on_io_error(compaction::run_manual(&self.inner, None))
    }

    /// Flushes, then compacts the files overlapping `[start, end]` level by level, and waits for it. No
    /// automatic compaction starts from the call until it returns.
    pub fn compact_range(&self, start: &[u8], end: &[u8]) -> Result<()> {
        let _exclusive = background::ManualCompaction::start(&self.inner);
        self.flush()?;
        self.stop_on_io_error(compaction::run_manual(&self.inner, Some((start, end))))
    }

    /// An I/O error of a manual compaction stops writes as one of a background compaction does (until
    /// [`Db::resume`]).
    fn stop_on_io_error(&self, res: Result<()>) -> Result<()> {
        match res {
            Err(e @ LsmError::Io { .. }) => Err(LsmError::Background(self.inner.set_bg_error(e))),
            r => r,
        }
    }

    /// Counters and sizes.
    pub fn stats(&self) -> DbStats {
        self.inner.stats()
    }

    /// The directory of the database.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// The environment the database runs in (shared with other engines, or its private one).
    pub fn env(&self) -> &crate::env::SharedEnv {
        &self.inner.env
    }

    /// The storage the database's files are on.
    pub fn storage(&self) -> &super::storage::StorageHandle {
        &self.inner.opts.storage
    }

    /// Flushes the memtables (without a WAL they would be lost), stops the background jobs and closes.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// Stops the background jobs *without* flushing, as if the process died here: what survives is what
    /// the manifest and (if on) the WAL hold. For crash tests.
    pub fn abandon(self) {
        self.stop_without_flush()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

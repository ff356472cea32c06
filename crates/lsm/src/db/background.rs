//! The background jobs of one engine, run by its environment's pool (`crate::env::pool`): the flush job
//! (the oldest immutable memtable into L0), the compaction job (one automatic compaction while a level
//! scores over its target), the write-buffer manager's hooks (the size of the active memtable, a switch to
//! free memory), waiting for them, manual compactions holding automatic ones back, and shutdown. A job's
//! error is recorded once ([`DbInner::set_bg_error`]) and stops writes and further jobs.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::compaction;
use crate::env::pool::{BackgroundWork, JobKind};
use crate::flush;
use crate::inner::DbInner;
use crate::version::{FileMeta, VersionEdit};
use crate::wal;
use crate::LsmError;

use super::{Db, Result};

/// Registers the engine with its environment's pool and asks for its first jobs.
pub(super) fn register(inner: &Arc<DbInner>) {
    let weak: Weak<DbInner> = Arc::downgrade(inner);
    let work: Weak<dyn BackgroundWork> = weak;
    let id = inner.env.pool().register(work);
    inner.pool_id.store(id, Ordering::Relaxed);
    if let Some(rows) = &inner.row_cache {
        // A deleted file's queued rows are erased by a compaction job (not a flush's: it would wait).
        let pool = Arc::downgrade(inner.env.pool());
        rows.wake_with(Box::new(move || {
            if let Some(p) = pool.upgrade() {
                p.request(id, JobKind::Compaction);
            }
        }));
    }
    inner.request_jobs();
}

impl BackgroundWork for DbInner {
    fn flush_job(&self) -> bool {
        // First the next memtable's index, so that the switch after this one finds it ready.
        self.refill_spare_index();
        {
            let st = self.state.lock();
            if st.imm.is_empty() || st.bg_error.is_some() {
                return false;
            }
        }
        let flushed = {
            let _span = tracing::debug_span!("lsm.flush", dir = %self.dir.display()).entered();
            self.flush_one()
        };
        if let Err(e) = flushed {
            self.set_bg_error(e);
            return false;
        }
        let st = self.state.lock();
        !st.imm.is_empty() && st.bg_error.is_none()
    }

    fn compaction_job(&self) -> bool {
        if !self.compaction_due() {
            // A compaction's version change erases the queue with its own files.
            self.erase_queued_rows();
            return false;
        }
        let ran = {
            let _span = tracing::debug_span!("lsm.compaction", dir = %self.dir.display()).entered();
            compaction::run_auto(self)
        };
        match ran {
            Ok(true) => self.compaction_due(),
            // The compaction lock was busy: whoever holds it wakes the engine when done.
            Ok(false) => false,
            Err(e) => {
                self.set_bg_error(e);
                false
            }
        }
    }

    fn writes_wait_for_compaction(&self) -> bool {
        self.writes_stopped_by_l0.load(Ordering::Relaxed)
    }

    fn active_memtable_bytes(&self) -> usize {
        let st = self.state.lock();
        if st.shutting_down
            || st.bg_error.is_some()
            || st.mem.is_empty()
            || st.imm.len() >= self.opts.max_immutable_memtables
        {
            return 0;
        }
        st.mem.approximate_bytes()
    }

    fn switch_for_memory(&self) {
        match self.writer.try_lock() {
            Some(mut w) => {
                if self.make_room(&mut w, true).is_ok() {
                    self.wb.switches_for_memory.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                let st = self.state.lock();
                let bytes = st.mem.approximate_bytes().max(1);
                if self
                    .memory_switch_requested
                    .compare_exchange(0, bytes, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    self.wb.note_requested(bytes);
                    // The writer's fast path notices the change and takes the slow path, which switches.
                    st.note_change();
                }
            }
        }
    }
}

impl DbInner {
    /// Erases the rows of deleted files that readers dropped last (queued by their drops, so that no
    /// reader erases on its own thread; each drop asks for a compaction job, which runs this when no
    /// compaction is due).
    fn erase_queued_rows(&self) {
        if let Some(rows) = &self.row_cache {
            rows.erase_queued();
        }
    }

    /// Flushes the oldest immutable memtable; returns false if there was none.
    fn flush_one(&self) -> Result<bool> {
        let mem = match self.state.lock().imm.back() {
            Some(m) => Arc::clone(m),
            None => return Ok(false),
        };
        let files = flush::write_memtable(self, &mem)?;
        let bytes: u64 = files.iter().map(|f| f.info.size).sum();
        let added: Vec<(usize, Arc<FileMeta>)> = files.into_iter().map(|f| (0, f)).collect();
        let wal_on = self.opts.wal;
        self.log_and_apply(VersionEdit::default(), &[], &added, true)?;
        self.counters
            .flush_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        if wal_on && mem.wal_number != 0 {
            let p = wal::wal_path(&self.dir, mem.wal_number);
            let _ = self.opts.storage.remove(&p);
        }
        Ok(true)
    }

    /// Whether an automatic compaction is due and may start now.
    fn compaction_due(&self) -> bool {
        let st = self.state.lock();
        !st.shutting_down
            && st.bg_error.is_none()
            && !self.auto_compaction_paused(&st)
            && compaction::needs_compaction(&st.version, &self.opts)
    }

    /// Waits until no immutable memtable is left.
    pub(crate) fn wait_flushed(&self) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if let Some(e) = &st.bg_error {
                return Err(LsmError::Background(Arc::clone(e)));
            }
            if st.imm.is_empty() {
                return Ok(());
            }
            if st.shutting_down {
                return Err(LsmError::Closed);
            }
            self.wait_for_change(&mut st);
        }
    }

    /// Waits until no immutable memtable is left and automatic compaction has nothing to do and is not
    /// running (RocksDB's `WaitForCompact`). Writes arriving meanwhile may start new work.
    pub(super) fn wait_for_background_work(&self) -> Result<()> {
        loop {
            self.wait_flushed()?;
            // A compaction in progress holds this lock; taking it waits for that compaction to finish.
            let _idle = self.compaction_lock.lock();
            let mut st = self.state.lock();
            if let Some(e) = &st.bg_error {
                return Err(LsmError::Background(Arc::clone(e)));
            }
            if st.imm.is_empty() && !compaction::needs_compaction(&st.version, &self.opts) {
                return Ok(());
            }
            drop(_idle);
            // A compaction job that found the lock held here is asked for again.
            self.wait_for_change(&mut st);
        }
    }
}

impl Db {
    /// Stops the engine's jobs without flushing (see [`Db::abandon`]).
    pub(super) fn stop_without_flush(&self) {
        let mut open = self.open.lock();
        {
            let mut st = self.inner.state.lock();
            if st.bg_error.is_none() {
                st.bg_error = Some(Arc::new(LsmError::Closed));
            }
            st.shutting_down = true;
            st.note_change();
        }
        self.inner.cv.notify_all();
        if std::mem::take(&mut *open) {
            self.deregister();
        }
    }

    /// Flushes the memtables, then stops the engine's jobs (nothing once they are stopped).
    pub(super) fn shutdown(&self) -> Result<()> {
        let mut open = self.open.lock();
        if !*open {
            return Ok(());
        }
        let res = self.flush();
        {
            let mut st = self.inner.state.lock();
            st.shutting_down = true;
            st.note_change();
        }
        self.inner.cv.notify_all();
        *open = false;
        self.deregister();
        res
    }

    /// Removes the engine from its pool, waiting for its running jobs, and takes back a pending request to
    /// switch its memtable.
    fn deregister(&self) {
        let id = self.inner.pool_id.swap(0, Ordering::Relaxed);
        if id != 0 {
            self.inner.env.pool().deregister(id);
        }
        let requested = self
            .inner
            .memory_switch_requested
            .swap(0, Ordering::Relaxed);
        if requested > 0 {
            self.inner.wb.clear_requested(requested);
        }
    }
}

/// A manual compaction in progress: counted in `DbInner::manual_compactions` while it lives.
pub(super) struct ManualCompaction<'a>(&'a DbInner);

impl<'a> ManualCompaction<'a> {
    /// Counts a manual compaction until the returned guard drops.
    pub(super) fn start(inner: &'a DbInner) -> Self {
        inner.manual_compactions.fetch_add(1, Ordering::SeqCst);
        ManualCompaction(inner)
    }
}

impl Drop for ManualCompaction<'_> {
    fn drop(&mut self) {
        // Under the state lock, so that the compaction thread, which checks the count under it, is either
        // before its check or already waiting for this notification.
        let st = self.0.state.lock();
        self.0.manual_compactions.fetch_sub(1, Ordering::SeqCst);
        drop(st);
        self.0.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ikey::ValueKind;
    use crate::options::Options;
    use crate::row_cache::RowRecorder;
    use std::time::{Duration, Instant};

    /// A deleted file's row cached by a reader still on the old version is erased, once the reader drops
    /// the file, by a background job its drop asks for: no write or flush has to come first.
    #[test]
    fn rows_a_reader_cached_of_a_deleted_file_are_erased_after_its_drop_without_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            row_cache_size: Some(1 << 20),
            auto_compaction: false,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        for i in 0..100u32 {
            db.put(&i.to_be_bytes(), b"v1").unwrap();
        }
        db.flush().unwrap();
        db.inner.wait_flushed().unwrap();
        // A reader's version, holding the flushed file past the compaction that deletes it.
        let (_, old) = db.inner.super_version();
        db.compact_all().unwrap();
        let usage = || db.stats().row_cache_usage;
        // The jobs the compaction asked for have run: nothing erases on its own from here.
        let idle = Instant::now();
        while db.inner.env.pool().queued() != (0, 0) && idle.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(usage(), 0);
        // The reader caches a row of the deleted file and notes it, as a lookup does.
        let file = old.levels.iter().flatten().next().map(Arc::clone).unwrap();
        let rows = db.inner.row_cache.as_ref().unwrap();
        let mut rec = RowRecorder::new(&7u32.to_be_bytes());
        rec.push(7, ValueKind::Put, b"v1");
        assert!(rows.insert(file.info.number, rec));
        file.row_cached();
        assert!(usage() > 0);
        // The reader lets the version go: the file's drop queues its rows and asks for a job.
        drop(file);
        drop(old);
        let dropped = Instant::now();
        while usage() > 0 && dropped.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(usage(), 0, "the queued rows were left for the next write");
    }
}

//! The background jobs: the flush thread (immutable memtables into L0 files), the compaction thread
//! (automatic compactions while any level scores over its target), waiting for them, manual compactions
//! holding automatic ones back, and shutdown. A job's error is recorded once ([`DbInner::set_bg_error`]) and
//! stops writes and both threads.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::compaction;
use crate::flush;
use crate::inner::DbInner;
use crate::io::io_err;
use crate::version::{FileMeta, VersionEdit};
use crate::wal;
use crate::LsmError;

use super::{Db, Result};

/// Starts the flush and compaction threads of `inner`, at its options' background policy and nice value.
pub(super) fn start_threads(inner: &Arc<DbInner>) -> Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let nice = inner.opts.background_nice;
    let batch = inner.opts.background_batch_policy;
    let spawn = |name: &str, f: fn(Arc<DbInner>)| {
        let i = Arc::clone(inner);
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                if batch {
                    use_batch_policy();
                }
                lower_thread_priority(nice);
                f(i)
            })
            .map_err(|e| io_err(&inner.dir, e))
    };
    threads.push(spawn("lsm-flush", DbInner::flush_thread)?);
    threads.push(spawn("lsm-compact", DbInner::compaction_thread)?);
    Ok(threads)
}

/// Moves the calling thread to `SCHED_BATCH`, keeping its nice value (Linux; elsewhere, or if the kernel
/// refuses, the thread keeps its policy: this only affects scheduling, never correctness). The scheduler
/// does not let a waking batch thread preempt the running one.
fn use_batch_policy() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the duration of the call; pid 0 is the calling thread.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        }
    }
}

/// Raises the calling thread's nice value by `increment` (Linux; elsewhere, or if the kernel refuses, the
/// thread keeps its priority: this only affects scheduling, never correctness).
fn lower_thread_priority(increment: i32) {
    #[cfg(target_os = "linux")]
    if increment > 0 {
        // SAFETY: plain system calls on the calling thread, with no pointers.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(
                libc::PRIO_PROCESS,
                tid,
                current.saturating_add(increment).min(19),
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = increment;
}

impl DbInner {
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

    /// The flush thread: flushes immutable memtables, oldest first, until shutdown or an error.
    fn flush_thread(self: Arc<Self>) {
        self.refill_spare_index();
        loop {
            {
                let mut st = self.state.lock();
                while (st.imm.is_empty() || st.bg_error.is_some()) && !st.shutting_down {
                    self.cv.wait(&mut st);
                }
                if st.shutting_down && (st.imm.is_empty() || st.bg_error.is_some()) {
                    return;
                }
            }
            // First the next memtable's index, so that the switch after this one finds it ready.
            self.refill_spare_index();
            if let Err(e) = self.flush_one() {
                self.set_bg_error(e);
            }
        }
    }

    /// The compaction thread: runs automatic compactions while one is needed and none is paused, until
    /// shutdown or an error.
    fn compaction_thread(self: Arc<Self>) {
        loop {
            {
                let mut st = self.state.lock();
                loop {
                    if st.shutting_down {
                        return;
                    }
                    if st.bg_error.is_none()
                        && !self.auto_compaction_paused(&st)
                        && compaction::needs_compaction(&st.version, &self.opts)
                    {
                        break;
                    }
                    self.cv.wait(&mut st);
                }
            }
            if let Err(e) = compaction::run_auto(&self) {
                self.set_bg_error(e);
            }
        }
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
            self.cv.wait(&mut st);
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
            self.cv.wait(&mut st);
        }
    }
}

impl Db {
    /// Stops the background threads without flushing (see [`Db::abandon`]).
    pub(super) fn stop_without_flush(&self) {
        {
            let mut st = self.inner.state.lock();
            if st.bg_error.is_none() {
                st.bg_error = Some(Arc::new(LsmError::Closed));
            }
            st.shutting_down = true;
            st.note_change();
        }
        self.inner.cv.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }

    /// Flushes the memtables, then stops the background threads (nothing once they are stopped).
    pub(super) fn shutdown(&self) -> Result<()> {
        let mut threads = self.threads.lock();
        if threads.is_empty() {
            return Ok(());
        }
        let res = self.flush();
        {
            let mut st = self.inner.state.lock();
            st.shutting_down = true;
            st.note_change();
        }
        self.inner.cv.notify_all();
        for t in threads.drain(..) {
            let _ = t.join();
        }
        res
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
        self.0.cv.notify_all();
    }
}

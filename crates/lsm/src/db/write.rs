//! The write path: batches and single updates into the WAL and the memtable, the writer's fast path past
//! the state lock, and making room (memtable switches, stalls on a deep L0 or too many immutable memtables,
//! and the environment's write-buffer manager: switching the largest memtable of any engine when memtables
//! near their share of the budget, stalling when flushes cannot keep up).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::batch::WriteBatch;
use crate::ikey::ValueKind;
use crate::inner::{DbInner, State, WriterState};
use crate::memtable::MemTable;
use crate::version::{FileMeta, VersionEdit};
use crate::wal::{self, WalWriter};
use crate::LsmError;

use super::{Db, Result};

impl Db {
    /// Applies a batch and returns the seqno of its last update (0 for an empty batch).
    pub(super) fn write_seq(&self, batch: &WriteBatch) -> Result<u64> {
        if batch.is_empty() {
            return self.inner.check_bg_error().map(|_| 0);
        }
        if let Some(key) = batch.first_merge_key() {
            self.refuse_merge_without_operator(key)?;
        }
        let inner = &self.inner;
        let mut w = inner.writer.lock();
        inner.room_for_write(&mut w)?;
        let seq = inner.last_seqno.load(Ordering::SeqCst) + 1;
        if let Some(wal) = &mut w.wal {
            if let Err(e) = wal.append(&batch.encode(seq)) {
                // Writes stop until `resume` (or reopening) moves on to a fresh log.
                return Err(LsmError::Background(inner.set_bg_error(e)));
            }
        }
        let mem = w.memtable()?;
        for (i, op) in batch.ops.iter().enumerate() {
            mem.add(seq + i as u64, op.kind, &op.key, &op.value);
        }
        inner
            .counters
            .user_bytes
            .fetch_add(batch.approximate_size() as u64, Ordering::Relaxed);
        let last = seq + batch.len() as u64 - 1;
        inner.last_seqno.store(last, Ordering::SeqCst);
        Ok(last)
    }

    /// Applies one update. Without a WAL it goes straight into the memtable (no batch is built); with a
    /// WAL it is logged as a one-entry batch.
    pub(super) fn write_one(&self, kind: ValueKind, key: &[u8], value: &[u8]) -> Result<()> {
        let inner = &self.inner;
        if kind == ValueKind::Merge {
            self.refuse_merge_without_operator(key)?;
        }
        if inner.opts.wal {
            let mut b = WriteBatch::new();
            match kind {
                ValueKind::Put => b.put(key, value),
                ValueKind::Merge => b.merge(key, value),
                ValueKind::Delete => b.delete(key),
                ValueKind::RangeDelete => b.delete_range(key, value),
            };
            return self.write(&b);
        }
        let mut w = inner.writer.lock();
        inner.room_for_write(&mut w)?;
        let mem = w.memtable()?;
        let seq = inner.last_seqno.load(Ordering::SeqCst) + 1;
        mem.add(seq, kind, key, value);
        inner
            .counters
            .user_bytes
            // The same size a one-entry `WriteBatch` reports.
            .fetch_add((key.len() + value.len() + 9) as u64, Ordering::Relaxed);
        inner.last_seqno.store(seq, Ordering::SeqCst);
        Ok(())
    }
}

impl Db {
    /// A merge operand for `key` is refused when no merge operator is configured: it could never be read.
    #[inline]
    fn refuse_merge_without_operator(&self, key: &[u8]) -> Result<()> {
        if self.inner.opts.merge_operator.is_none() {
            return Err(LsmError::NoMergeOperator { key: key.to_vec() });
        }
        Ok(())
    }
}

impl DbInner {
    /// Drops files that lie entirely inside `[start, end)` and hold only data older than the range
    /// tombstone `seqno`, when no snapshot could still read them. Skipped if a compaction runs for longer
    /// than 200 ms (the tombstone alone is correct; this only reclaims space early).
    pub(super) fn drop_files_in_range(&self, start: &[u8], end: &[u8], seqno: u64) -> Result<()> {
        let res = self.drop_files_in_range_locked(start, end, seqno);
        // A compaction job that found the lock held meanwhile is asked for again.
        self.request_jobs();
        res
    }

    /// [`drop_files_in_range`](Self::drop_files_in_range) under the compaction lock.
    fn drop_files_in_range_locked(&self, start: &[u8], end: &[u8], seqno: u64) -> Result<()> {
        let Some(_c) = self
            .compaction_lock
            .try_lock_for(std::time::Duration::from_millis(200))
        else {
            return Ok(());
        };
        if self.snapshots.seqnos().iter().any(|s| *s < seqno) {
            return Ok(());
        }
        let version = Arc::clone(&self.state.lock().version);
        let doomed: Vec<(usize, Arc<FileMeta>)> = version
            .files()
            .filter(|(_, f)| {
                f.info.smallest_user() >= start
                    && f.info.largest_user() < end
                    && f.info.max_seqno < seqno
                    && f.range_dels
                        .iter()
                        .all(|t| t.start.as_slice() >= start && t.end.as_slice() <= end)
            })
            .map(|(l, f)| (l, Arc::clone(f)))
            .collect();
        if doomed.is_empty() {
            return Ok(());
        }
        self.log_and_apply(VersionEdit::default(), &doomed, &[], false)?;
        self.counters
            .files_dropped
            .fetch_add(doomed.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The writer's fast path: the memtable the last unforced [`make_room`](Self::make_room) recorded, if
    /// nothing it checks has changed since (no flush or compaction installed, no error, no shutdown: see
    /// [`State::changes`](crate::inner::State::changes)) and the table is not full. Then a write
    /// needs neither the state lock nor a reference count, which measurably speeds up random puts and
    /// merges (`lsm_vs_rocksdb`). A change that lands just after the check is seen by the next write, as a
    /// write that took the lock just before the change would have missed it too.
    #[inline]
    pub(crate) fn fast_mem<'w>(&self, w: &'w WriterState) -> Option<&'w MemTable> {
        let mem = w.mem.as_ref()?.get(&self.state_changes)?;
        (mem.approximate_bytes() < self.opts.memtable_size && !self.wb.flush_wanted())
            .then_some(mem)
    }

    /// Makes sure `w.mem` holds the memtable the next write goes into: the recorded one if
    /// [`fast_mem`](Self::fast_mem) accepts it, else the one an unforced [`make_room`](Self::make_room)
    /// records. Read it with [`WriterState::memtable`].
    #[inline]
    fn room_for_write(&self, w: &mut WriterState) -> Result<()> {
        if self.fast_mem(w).is_none() {
            self.make_room(w, false)?;
        }
        Ok(())
    }

    /// Makes room in the memtable for a write, switching memtables and stalling as needed; records the
    /// memtable to write into in `w.mem` (taken under the same state lock), unless `force_switch`.
    pub(crate) fn make_room(&self, w: &mut WriterState, force_switch: bool) -> Result<()> {
        let mut stalled: Option<std::time::Instant> = None;
        let mut memory_stalled: Option<std::time::Instant> = None;
        let res = if force_switch {
            self.make_room_or_stall(w, true, &mut stalled)
        } else {
            self.write_buffer_room(w, &mut memory_stalled)
                .and_then(|()| self.make_room_or_stall(w, false, &mut stalled))
        };
        let micros =
            |t: std::time::Instant| u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        if let Some(t) = memory_stalled {
            let m = micros(t);
            self.wb.stall_micros.fetch_add(m, Ordering::Relaxed);
            self.counters.stall_micros.fetch_add(m, Ordering::Relaxed);
            self.counters
                .stall_memory_micros
                .fetch_add(m, Ordering::Relaxed);
        }
        if let Some(t) = stalled {
            self.counters
                .stall_micros
                .fetch_add(micros(t), Ordering::Relaxed);
        }
        res
    }

    /// The write-buffer manager's part of making room: switches this engine's memtable when another engine's
    /// writer asked for it, switches the largest memtable of any engine when memtables near their share of
    /// the budget, and waits while memtables taking writes or waiting for flush fill the share (flushes not
    /// keeping up). Sets `stalled` to when it first waited.
    fn write_buffer_room(
        &self,
        w: &mut WriterState,
        stalled: &mut Option<std::time::Instant>,
    ) -> Result<()> {
        let wb = &self.wb;
        if wb.limit().is_none() {
            return Ok(());
        }
        loop {
            let requested = self.memory_switch_requested.swap(0, Ordering::Relaxed);
            if requested > 0 {
                wb.clear_requested(requested);
                self.switch_own_for_memory(w)?;
            }
            if wb.flush_wanted() {
                self.switch_largest_for_memory(w)?;
            }
            if !wb.must_stall() {
                return Ok(());
            }
            {
                let st = self.state.lock();
                if let Some(e) = &st.bg_error {
                    return Err(LsmError::Background(Arc::clone(e)));
                }
                if st.shutting_down {
                    return Err(LsmError::Closed);
                }
            }
            if stalled.is_none() {
                *stalled = Some(std::time::Instant::now());
                self.counters.stalls.fetch_add(1, Ordering::Relaxed);
                wb.stalls.fetch_add(1, Ordering::Relaxed);
            }
            // Flushes free the memory; ask again for this engine's, in case a request was dropped.
            self.request_jobs();
            wb.wait_freed(std::time::Duration::from_millis(10));
        }
    }

    /// Switches the largest active memtable of the environment's engines (this one's through `w`, another's
    /// at once if its writer is idle, else by asking its writer).
    fn switch_largest_for_memory(&self, w: &mut WriterState) -> Result<()> {
        let me = self.pool_id.load(Ordering::Relaxed);
        let largest = self
            .env
            .pool()
            .engines()
            .into_iter()
            .map(|(id, e)| (e.active_memtable_bytes(), id, e))
            .filter(|(bytes, _, _)| *bytes > 0)
            .max_by_key(|(bytes, _, _)| *bytes);
        match largest {
            Some((_, id, _)) if id == me => self.switch_own_for_memory(w),
            Some((_, _, e)) => {
                e.switch_for_memory();
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Switches this engine's active memtable out (unless it is empty) to free memory.
    fn switch_own_for_memory(&self, w: &mut WriterState) -> Result<()> {
        let mut ignored = None;
        let empty = self.state.lock().mem.is_empty();
        if !empty {
            self.make_room_or_stall(w, true, &mut ignored)?;
            self.wb.switches_for_memory.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// [`make_room`](Self::make_room); sets `stalled` to when it first had to wait.
    fn make_room_or_stall(
        &self,
        w: &mut WriterState,
        force_switch: bool,
        stalled: &mut Option<std::time::Instant>,
    ) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if let Some(e) = &st.bg_error {
                return Err(LsmError::Background(Arc::clone(e)));
            }
            if st.shutting_down {
                return Err(LsmError::Closed);
            }
            let l0_deep = self.writes_stopped_by_l0(&st);
            self.writes_stopped_by_l0
                .store(!force_switch && l0_deep, Ordering::Relaxed);
            let full = st.mem.approximate_bytes() >= self.opts.memtable_size;
            if !force_switch && l0_deep {
                if stalled.is_none() {
                    *stalled = Some(std::time::Instant::now());
                    self.counters.stalls.fetch_add(1, Ordering::Relaxed);
                }
                self.timed_wait(&mut st, &self.counters.stall_l0_micros);
                continue;
            }
            if !(full || force_switch) {
                w.mem = st.fast_path_entry(force_switch);
                return Ok(());
            }
            if !force_switch && st.imm.len() >= self.opts.max_immutable_memtables {
                if stalled.is_none() {
                    *stalled = Some(std::time::Instant::now());
                    self.counters.stalls.fetch_add(1, Ordering::Relaxed);
                }
                self.timed_wait(&mut st, &self.counters.stall_memtables_micros);
                continue;
            }
            if st.mem.is_empty() {
                w.mem = st.fast_path_entry(force_switch);
                return Ok(());
            }
            self.switch_memtable(&mut st, w, true)?;
            w.mem = st.fast_path_entry(force_switch);
            drop(st);
            self.wake();
            return Ok(());
        }
    }

    /// [`wait_for_change`](Self::wait_for_change), its time added to `cause` (a stall counter by cause).
    fn timed_wait(
        &self,
        st: &mut parking_lot::MutexGuard<'_, State>,
        cause: &std::sync::atomic::AtomicU64,
    ) {
        let t = std::time::Instant::now();
        self.wait_for_change(st);
        let waited = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        cause.fetch_add(waited, Ordering::Relaxed);
    }

    /// Switches to a new memtable, the old one joining the immutable ones, and (with the WAL) to a new log;
    /// without `create_wal` the new log's number is taken but the file is left for the caller to create,
    /// and the writer has no log until then. Returns the new log's number (0 without the WAL).
    pub(crate) fn switch_memtable(
        &self,
        st: &mut State,
        w: &mut WriterState,
        create_wal: bool,
    ) -> Result<u64> {
        let wal_number = if self.opts.wal {
            let n = self.new_file_number();
            w.wal = if create_wal {
                // The log being closed is made durable first: only the newest log may end torn. A failed
                // sync or a log that cannot be created stops writes until `Db::resume` (which flushes the
                // memtables and starts a fresh log) or a reopen; a partly written new log is removed.
                let created = match w.wal.as_mut().map_or(Ok(()), |old| old.sync()) {
                    Ok(()) => {
                        WalWriter::create(&*self.opts.storage, &self.dir, n, self.opts.wal_sync)
                            .inspect_err(|_| {
                                let _ = self.opts.storage.remove(&wal::wal_path(&self.dir, n));
                            })
                    }
                    Err(e) => Err(e),
                };
                match created {
                    Ok(wal) => Some(wal),
                    Err(e) => {
                        let recorded = st.record_bg_error(e);
                        self.wake();
                        return Err(LsmError::Background(recorded));
                    }
                }
            } else {
                None
            };
            n
        } else {
            0
        };
        let index_slots = st.mem.index_slots();
        let old = std::mem::replace(
            &mut st.mem,
            Arc::new(self.new_memtable(wal_number, index_slots)),
        );
        if let Some(c) = old.wb_charge() {
            c.switched();
        }
        st.imm.push_front(old);
        st.refresh_super_version();
        Ok(wal_number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

    fn opts() -> Options {
        Options {
            memtable_size: 1 << 20,
            l0_compaction_trigger: 1,
            l0_stop_writes_trigger: 1,
            ..Options::default()
        }
    }

    /// The flush thread allocates the next memtable's point index after a switch, and the next switch of a
    /// table of the same index size takes it instead of allocating one.
    #[test]
    fn a_switch_takes_the_index_the_flush_thread_allocated_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        for round in 0..3u8 {
            for i in 0..2000u32 {
                db.put(&[&i.to_be_bytes()[..], &[round]].concat(), b"v")
                    .unwrap();
            }
            db.flush().unwrap();
            db.inner.wait_flushed().unwrap();
            // The flush thread refilled before it flushed: a spare sized as the current index is ready.
            let now = db.inner.state.lock().mem.index_slots();
            let spare = db.inner.spare_index.lock().as_ref().map(|s| s.slots());
            assert_eq!(spare, Some(now), "round {round}");
        }
        for i in 0..2000u32 {
            db.put(&i.to_be_bytes(), b"w").unwrap();
        }
        let before = db.inner.state.lock().mem.index_slots();
        db.flush().unwrap();
        // Taken by the switch (the new table starts at the old one's size) ...
        assert_eq!(db.inner.state.lock().mem.index_slots(), before);
        db.inner.wait_flushed().unwrap();
        // ... and replaced.
        assert!(db.inner.spare_index.lock().is_some());
        assert_eq!(
            db.get(&5u32.to_be_bytes()).unwrap().as_deref(),
            Some(&b"w"[..])
        );
    }

    /// The writer's cached memtable is only used while nothing `make_room` checks has changed: an error
    /// recorded by a background thread stops the very next write, although the table has room.
    #[test]
    fn a_background_error_stops_the_next_write_despite_the_cached_memtable() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        db.put(b"a", b"1").unwrap();
        db.put(b"b", b"2").unwrap();
        assert!(db.inner.fast_mem(&db.inner.writer.lock()).is_some());
        db.inner.set_bg_error(LsmError::Closed);
        assert!(db.inner.fast_mem(&db.inner.writer.lock()).is_none());
        assert!(matches!(db.put(b"c", b"3"), Err(LsmError::Background(_))));
        assert!(matches!(db.put(b"d", b"4"), Err(LsmError::Background(_))));
    }

    /// A forced switch (a flush) skips the checks, so it leaves nothing for the fast path: with L0 at the
    /// stop trigger and compaction held back, the next write waits even though the memtable has room.
    #[test]
    fn a_write_after_a_flush_still_waits_for_a_deep_l0() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), opts()).unwrap());
        let hold = db.inner.compaction_lock.lock();
        db.put(b"a", b"1").unwrap();
        db.flush().unwrap(); // L0: 1 file, the stop trigger.
        db.flush().unwrap(); // An empty memtable: a forced `make_room` that switches nothing.
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (db, done) = (Arc::clone(&db), Arc::clone(&done));
            std::thread::spawn(move || {
                db.put(b"x", b"2").unwrap();
                done.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!done.load(Ordering::SeqCst), "a write skipped the L0 stop");
        drop(hold);
        writer.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(db.get(b"x").unwrap().as_deref(), Some(&b"2"[..]));
    }

    /// With the WAL on, writes through the fast path land in the WAL of the table they go into: every key
    /// survives a crash (no flush on close) across many switches.
    #[test]
    fn wal_writes_across_switches_survive_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let wal_opts = Options {
            wal: true,
            memtable_size: 16 << 10,
            l0_stop_writes_trigger: 64,
            ..opts()
        };
        let key = |i: u32| format!("k{i:05}").into_bytes();
        {
            let db = Db::open(dir.path(), wal_opts.clone()).unwrap();
            for i in 0..3000 {
                db.put(&key(i), &i.to_be_bytes()).unwrap();
            }
            assert!(db.stats().flushes > 5);
            db.abandon();
        }
        let db = Db::open(dir.path(), wal_opts).unwrap();
        for i in 0..3000 {
            assert_eq!(
                db.get(&key(i)).unwrap().as_deref(),
                Some(&i.to_be_bytes()[..]),
                "key {i}"
            );
        }
    }

    /// A flush installed by the flush thread is a change: after a switch made by a write (the table was
    /// full), the install sends the next write to the slow path (which is where a deep L0 would stop it),
    /// and that write records the table again.
    #[test]
    fn an_installed_flush_sends_the_next_write_to_the_slow_path() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(
            dir.path(),
            Options {
                memtable_size: 16 << 10,
                auto_compaction: false,
                ..opts()
            },
        )
        .unwrap();
        // Write until the memtable switches, and not one write more: a write after the flush is installed
        // would record the new state and rightly take the fast path. The switch is seen under the state
        // lock, where the install moves the memtable from `imm` into L0 in one step.
        let switched = || {
            let st = db.inner.state.lock();
            !st.imm.is_empty() || st.version.files().next().is_some()
        };
        let mut i = 0u32;
        while !switched() {
            db.put(&i.to_be_bytes(), &[7; 100]).unwrap();
            i += 1;
        }
        db.inner.wait_flushed().unwrap();
        assert!(
            switched() && db.inner.state.lock().imm.is_empty(),
            "the flush is installed"
        );
        assert!(db.inner.fast_mem(&db.inner.writer.lock()).is_none());
        db.put(b"b", b"2").unwrap();
        assert!(db.inner.fast_mem(&db.inner.writer.lock()).is_some());
        assert_eq!(
            db.get(&0u32.to_be_bytes()).unwrap().as_deref(),
            Some(&[7u8; 100][..])
        );
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    }
}

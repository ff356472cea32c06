//! Loom model checks of the writer's fast path ([`crate::fast_path`], used by `DbInner::fast_mem` and
//! `make_room` in `db/write.rs`). Built only with `--cfg loom` (see `loom_tests` for the command).
//!
//! What runs as the real code: the change counter (a loom atomic under `cfg(loom)`), its bump
//! ([`note_change`]) and the writer's entry ([`FastPathEntry`]: `record` under the state lock, `get` on the
//! fast path), with the orderings the engine uses ([`fast_path::NOTE`], [`fast_path::CHECK`],
//! [`fast_path::RECORD`]). What is a model of the engine, written here after `db/write.rs`, `inner.rs` and the
//! flush: the state lock and the writer lock (loom `Mutex`es standing for the engine's parking_lot ones),
//! `make_room` (error check, switch when full or forced, recording the entry), a memtable switch (the old
//! table joins the immutable ones, the count is bumped), the flush (takes the oldest immutable table, reads
//! it without the lock, then retires it and bumps the count) and the recording of a background error (set
//! and bumped under the state lock). A model memtable holds its writes in a loom `UnsafeCell`, so loom reports
//! any write into a table that is not ordered before the flush's read of it, and a write ordered after that
//! read fails an assertion (it would be lost). Not modelled: the memtable's own atomics (the other models),
//! the WAL, stalls on a deep L0 (a condition variable wait; a forced switch leaves no entry, so the write
//! after it takes the slow path where the stall is, which `make_room` here keeps), `Db::resume`, and the
//! real `State`/`DbInner` types (their file I/O and threads do not run under loom).
//!
//! The properties: every write that returned Ok is in exactly one table (flushed, immutable or active), none
//! went into a table after its flush read it; and a write that starts after a background error was recorded
//! (the recorder announces it through a loom atomic, Release/Acquire) fails.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicBool;
use loom::sync::Mutex;
use loom::thread;

use super::fast_path::{self, note_change, FastPathEntry};
use super::loom_tests::model;
use super::sync::AtomicU64;

/// The writes a model memtable holds, and whether its flush has read them.
#[derive(Default)]
struct Rows {
    writes: Vec<u64>,
    flushed: bool,
}

/// A model memtable: full at `CAPACITY` writes.
struct Table {
    rows: UnsafeCell<Rows>,
}

// SAFETY: the rows are only reached through loom's `UnsafeCell`, which reports any two accesses from different
// threads that are not ordered (the property the models check), as a real memtable's atomics order its own.
unsafe impl Send for Table {}
// SAFETY: as for `Send`.
unsafe impl Sync for Table {}

impl Table {
    fn new() -> Arc<Self> {
        Arc::new(Table {
            rows: UnsafeCell::new(Rows::default()),
        })
    }

    fn len(&self) -> usize {
        self.rows.with(|r| {
            // SAFETY: loom's `UnsafeCell` checks that no write to the rows is concurrent with this read.
            unsafe { (*r).writes.len() }
        })
    }

    /// Applies write `v` (the writer only).
    fn apply(&self, v: u64) {
        self.rows.with_mut(|r| {
            // SAFETY: loom's `UnsafeCell` checks that no other access to the rows is concurrent with this one.
            let r = unsafe { &mut *r };
            assert!(
                !r.flushed,
                "write {v} went into a table its flush already read"
            );
            r.writes.push(v);
        });
    }

    /// The flush's read: the writes, and the table marked as read.
    fn flush(&self) -> Vec<u64> {
        self.rows.with_mut(|r| {
            // SAFETY: as in `apply`.
            let r = unsafe { &mut *r };
            r.flushed = true;
            r.writes.clone()
        })
    }
}

/// The model's `State`, under the state lock.
struct State {
    mem: Arc<Table>,
    imm: VecDeque<Arc<Table>>,
    bg_error: bool,
    /// The writes of the flushed tables (the model's SST files).
    flushed: Vec<u64>,
}

/// The model's `DbInner`.
struct Db {
    capacity: usize,
    state: Mutex<State>,
    /// The writer lock and what it guards (`WriterState::mem`).
    writer: Mutex<Option<FastPathEntry<Table>>>,
    /// The change counter (`State::changes`, `DbInner::state_changes`).
    changes: Arc<AtomicU64>,
}

impl Db {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Db {
            capacity,
            state: Mutex::new(State {
                mem: Table::new(),
                imm: VecDeque::new(),
                bg_error: false,
                flushed: Vec::new(),
            }),
            writer: Mutex::new(None),
            changes: fast_path::new_counter(),
        })
    }

    /// `Db::write_one` without a WAL: the fast path, else `make_room`, then the write.
    fn write(&self, v: u64) -> Result<(), ()> {
        let mut w = self.writer.lock().unwrap();
        let fast = w
            .as_ref()
            .and_then(|e| e.get(&self.changes))
            .is_some_and(|m| m.len() < self.capacity);
        if !fast {
            self.make_room(&mut w, false)?;
        }
        w.as_ref().ok_or(())?.mem().apply(v);
        Ok(())
    }

    /// `DbInner::make_room` (without stalls).
    fn make_room(
        &self,
        w: &mut Option<FastPathEntry<Table>>,
        force_switch: bool,
    ) -> Result<(), ()> {
        let mut st = self.state.lock().unwrap();
        if st.bg_error {
            return Err(());
        }
        let full = st.mem.len() >= self.capacity;
        if (full || force_switch) && st.mem.len() > 0 {
            // `switch_memtable`.
            let old = std::mem::replace(&mut st.mem, Table::new());
            st.imm.push_back(old);
            note_change(&self.changes);
        }
        *w = (!force_switch).then(|| FastPathEntry::record(&self.changes, &st.mem));
        Ok(())
    }

    /// `Db::flush`'s switch: a forced `make_room` under the writer lock.
    fn force_switch(&self) {
        let mut w = self.writer.lock().unwrap();
        let _ = self.make_room(&mut w, true);
    }

    /// The flush thread's round: the oldest immutable table is read without the lock, then retired (the
    /// install bumps the count). Returns whether there was one.
    fn flush_one(&self) -> bool {
        let Some(m) = self.state.lock().unwrap().imm.front().cloned() else {
            return false;
        };
        let rows = m.flush();
        let mut st = self.state.lock().unwrap();
        st.imm.pop_front();
        st.flushed.extend(rows);
        note_change(&self.changes);
        true
    }

    /// `State::record_bg_error`.
    fn record_bg_error(&self) {
        let mut st = self.state.lock().unwrap();
        if !st.bg_error {
            st.bg_error = true;
            note_change(&self.changes);
        }
    }

    /// Every write in the tables, flushed ones first, in order.
    fn all_writes(&self) -> Vec<u64> {
        let st = self.state.lock().unwrap();
        let mut all = st.flushed.clone();
        for t in st.imm.iter().chain(std::iter::once(&st.mem)) {
            t.rows.with(|r| {
                // SAFETY: as in `Table::len` (every thread has been joined).
                all.extend(unsafe { &(*r).writes });
            });
        }
        all
    }
}

#[test]
fn loom_fast_path_never_writes_into_a_table_after_its_flush_read_it() {
    // Tables hold one write: the writer's second and third writes each switch memtables (the write after
    // the fast path's check finds the table full), a flush thread flushes what it finds, and `Db::flush`
    // forces a switch from a third thread.
    model("fast_path_switch_flush", || {
        let db = Db::new(1);
        let flusher = {
            let db = Arc::clone(&db);
            thread::spawn(move || {
                for _ in 0..2 {
                    db.flush_one();
                }
            })
        };
        let switcher = {
            let db = Arc::clone(&db);
            thread::spawn(move || db.force_switch())
        };
        for v in 1..=3 {
            db.write(v).unwrap();
        }
        flusher.join().unwrap();
        switcher.join().unwrap();
        while db.flush_one() {}
        assert_eq!(db.all_writes(), vec![1, 2, 3], "writes lost or misplaced");
    });
}

#[test]
fn loom_fast_path_write_after_a_recorded_background_error_fails() {
    // Tables hold two writes (the third write switches); a flush thread installs a flush (a bump of its
    // own) while another thread records a background error and announces it.
    model("fast_path_bg_error", || {
        let db = Db::new(2);
        let announced = Arc::new(AtomicBool::new(false));
        let recorder = {
            let (db, announced) = (Arc::clone(&db), Arc::clone(&announced));
            thread::spawn(move || {
                db.record_bg_error();
                announced.store(true, Release);
            })
        };
        let flusher = {
            let db = Arc::clone(&db);
            thread::spawn(move || {
                db.flush_one();
            })
        };
        let mut ok = Vec::new();
        for v in 1..=3 {
            let after_error = announced.load(Acquire);
            let res = db.write(v);
            assert!(
                !(after_error && res.is_ok()),
                "write {v} succeeded after the error was recorded"
            );
            if res.is_ok() {
                ok.push(v);
            }
        }
        recorder.join().unwrap();
        flusher.join().unwrap();
        assert!(db.write(4).is_err(), "a write after the join succeeded");
        assert_eq!(db.all_writes(), ok, "writes lost or misplaced");
    });
}

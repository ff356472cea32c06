//! [`DbInner`], what a database's handle ([`Db`](super::db::Db)), its writer and its background flush and
//! compaction jobs share: the memtables and version under one lock, the writer's WAL, the manifest,
//! counters, and the operations on them that every part uses (installing a version edit, allocating file
//! numbers, recording a background error). The flush and compaction modules depend on this one, not on the
//! database handle that drives them.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::cache::BlockCache;
use super::checkpoint_view::{self, ViewEdit};
use super::env::pool::JobKind;
use super::env::write_buffer::WriteBuffers;
use super::env::SharedEnv;
use super::fast_path::{self, FastPathEntry};
use super::manifest::{self, ManifestWriter};
use super::memtable::{MemTable, SpareIndex};
use super::options::Options;
use super::row_cache::{EngineRows, RowCache};
use super::snapshot::SnapshotList;
use super::version::{FileMeta, Version, VersionEdit};
use super::wal::WalWriter;
use super::LsmError;

type Result<T> = std::result::Result<T, LsmError>;

/// Roll the manifest over to a fresh one (a single full-state record) past this size.
const MANIFEST_ROLL_BYTES: u64 = 4 << 20;

/// The running totals behind [`DbStats`](super::db::DbStats), updated without locks.
#[derive(Default)]
pub(crate) struct Counters {
    /// Bytes of user keys and values accepted by writes.
    pub user_bytes: AtomicU64,
    /// Bytes of SST files written by flushes.
    pub flush_bytes: AtomicU64,
    /// Bytes of SST files read as compaction inputs.
    pub compaction_read: AtomicU64,
    /// Bytes of SST files written by compactions.
    pub compaction_written: AtomicU64,
    /// Number of flushes.
    pub flushes: AtomicU64,
    /// Number of (non-trivial) compactions.
    pub compactions: AtomicU64,
    /// Number of trivial moves.
    pub trivial_moves: AtomicU64,
    /// Number of writes that waited for flush or compaction.
    pub stalls: AtomicU64,
    /// Microseconds writes spent stalled.
    pub stall_micros: AtomicU64,
    /// Of those, microseconds waiting for compaction because L0 reached its stop trigger.
    pub stall_l0_micros: AtomicU64,
    /// Of those, microseconds waiting for a flush because the immutable memtables reached their count.
    pub stall_memtables_micros: AtomicU64,
    /// Of those, microseconds waiting for flushes because the environment's memtables reached their share of
    /// the budget.
    pub stall_memory_micros: AtomicU64,
    /// Index growths of the memtables flushed so far (a live table reports its own).
    pub index_growths: AtomicU64,
    /// Microseconds spent in the index growths of the memtables flushed so far.
    pub index_growth_micros: AtomicU64,
    /// Number of files dropped whole by `delete_range`.
    pub files_dropped: AtomicU64,
    /// Number of SST files reads skipped by their prefix filter.
    pub prefix_skips: AtomicU64,
    /// Number of wholly expired files removed without being read.
    pub expired_files_dropped: AtomicU64,
}

/// What a read needs: the memtables (newest first) and the version, shared by every read until one of them
/// changes (one `Arc` clone per `get` instead of a vector of clones).
pub(crate) struct SuperVersion {
    /// The active memtable, then the immutable ones, newest first.
    pub mems: Vec<Arc<MemTable>>,
    /// The files.
    pub version: Arc<Version>,
}

/// Mutable in-memory state, guarded by `DbInner::state`.
pub(crate) struct State {
    /// The active memtable, which writes go into.
    pub mem: Arc<MemTable>,
    /// Immutable memtables, newest first.
    pub imm: VecDeque<Arc<MemTable>>,
    /// The files of the tree.
    pub version: Arc<Version>,
    /// The first error of a background job; once set, writes fail with it.
    pub bg_error: Option<Arc<LsmError>>,
    /// Set when the database closes; the background threads then stop.
    pub shutting_down: bool,
    /// Every write up to this seqno is in the version's files.
    pub flushed_seqno: u64,
    /// `mem`, `imm` and `version` as of their last change; rebuilt by [`State::refresh_super_version`].
    pub sv: Arc<SuperVersion>,
    /// Counts the changes a writer's fast path must notice (see [`WriterState::mem`]): bumped, under this
    /// lock, by every change of `mem`, `imm` or `version`, and by `bg_error` and `shutting_down`. Shared with
    /// [`DbInner::state_changes`], which writers read without the lock.
    pub changes: Arc<crate::sync::AtomicU64>,
    /// Checkpoints waiting for the version installed by the flush of one memtable
    /// ([`Db::begin_checkpoint`](super::db::Db::begin_checkpoint)).
    pub captures: Vec<Capture>,
    /// The checkpoint view ([`Options::checkpoint_view`](crate::Options::checkpoint_view)): the files the
    /// last capture took plus those flushed since (`None`: the next capture takes the whole version).
    pub view: Option<Arc<Version>>,
    /// The files appended to the view since a background materialization in flight took its version.
    pub view_tail: Option<checkpoint_view::Tail>,
    /// Whether a host took a background materialization of the view (since opening): from then on the
    /// view's L0 bound is the hard one ([`Options::checkpoint_view_hard_l0_runs`](crate::Options::checkpoint_view_hard_l0_runs)).
    pub view_background: bool,
}

impl State {
    /// The view and the tail, borrowed together.
    pub(crate) fn view_state(&mut self) -> checkpoint_view::ViewState<'_> {
        checkpoint_view::ViewState {
            view: &mut self.view,
            tail: &mut self.view_tail,
            background: self.view_background,
        }
    }
}

/// A checkpoint's request for the version installed by the flush of `mem` (filled in by `log_and_apply`).
pub(crate) struct Capture {
    /// Identifies the request.
    pub id: u64,
    /// The memtable whose flush the checkpoint waits for.
    pub mem: Arc<MemTable>,
    /// The files of the capture at that flush (the version it installed, or the checkpoint view), and what
    /// they are.
    pub version: Option<(Arc<Version>, crate::checkpoint_view::CaptureView)>,
}

impl State {
    /// Rebuilds the shared read view after `mem`, `imm` or `version` changed.
    pub fn refresh_super_version(&mut self) {
        self.note_change();
        let mut mems = Vec::with_capacity(1 + self.imm.len());
        mems.push(Arc::clone(&self.mem));
        mems.extend(self.imm.iter().cloned());
        self.sv = Arc::new(SuperVersion {
            mems,
            version: Arc::clone(&self.version),
        });
    }

    /// Records a change that may stop writes or change the memtable (call with the lock held).
    pub fn note_change(&self) {
        fast_path::note_change(&self.changes);
    }

    /// Records `e` as the error that stops writes until `Db::resume` (the first one recorded stays), and
    /// returns the recorded error. The caller wakes waiters ([`DbInner::set_bg_error`] does both).
    pub fn record_bg_error(&mut self, e: LsmError) -> Arc<LsmError> {
        if let Some(first) = &self.bg_error {
            return Arc::clone(first);
        }
        let e = Arc::new(e);
        self.bg_error = Some(Arc::clone(&e));
        self.note_change();
        e
    }

    /// What `make_room` leaves for the writer's fast path (see [`WriterState::mem`]): the current memtable
    /// and change count; nothing after a forced switch, which skips the checks (a deep L0 does not stop a
    /// flush), so the next write takes the slow path and makes them.
    pub(crate) fn fast_path_entry(&self, force_switch: bool) -> Option<FastPathEntry<MemTable>> {
        (!force_switch).then(|| FastPathEntry::record(&self.changes, &self.mem))
    }
}

/// What the single writer holds, guarded by [`DbInner::writer`].
pub(crate) struct WriterState {
    /// The WAL of the active memtable (None without a WAL).
    pub wal: Option<WalWriter>,
    /// The memtable the last unforced [`DbInner::make_room`] let a write into, and [`State::changes`] as it
    /// was then (read under the state lock); None after a forced switch, which skips the checks. Until that
    /// count moves, nothing `make_room` checks has changed but the memtable's size, and only the writer (who
    /// holds this) switches memtables: a write that finds the count unchanged and the table not full goes
    /// straight into it, without the state lock ([`DbInner::fast_mem`]).
    pub mem: Option<FastPathEntry<MemTable>>,
}

impl WriterState {
    /// The memtable [`DbInner::room_for_write`] left for the write.
    #[inline]
    pub(crate) fn memtable(&self) -> Result<&MemTable> {
        self.mem
            .as_ref()
            .map(FastPathEntry::mem)
            .ok_or(LsmError::Closed)
    }
}

/// The manifest being appended to, guarded by [`DbInner::manifest`]; holding that lock serializes
/// version changes.
pub(crate) struct ManifestState {
    /// The open manifest (None only while the database is being opened).
    pub writer: Option<ManifestWriter>,
}

/// Shared internals of a [`Db`](super::db::Db).
pub(crate) struct DbInner {
    /// The database directory.
    pub dir: PathBuf,
    /// The options the database was opened with.
    pub opts: Options,
    /// The block cache of its SST readers.
    pub cache: Arc<BlockCache>,
    /// Memtables, version and background status.
    pub state: Mutex<State>,
    /// Notified, with `state` held or just released, on every change writers or background jobs wait for.
    pub cv: Condvar,
    /// The single writer's state: writes take this lock for their whole duration.
    pub writer: Mutex<WriterState>,
    /// The next memtable's point index, allocated by the flush thread after each switch so that a switch
    /// (a checkpoint's synchronous part among them) does not allocate and zero it.
    pub spare_index: Mutex<Option<SpareIndex>>,
    /// The manifest.
    pub manifest: Mutex<ManifestState>,
    /// Held by a running compaction (and by what must not overlap one); holds the round-robin compaction
    /// pointer of each level.
    pub compaction_lock: Mutex<Vec<Vec<u8>>>,
    /// Manual compactions waiting or running: automatic compactions do not start meanwhile (RocksDB's
    /// `exclusive_manual_compaction`), so that they do not rewrite data the manual one rewrites anyway.
    pub manual_compactions: AtomicUsize,
    next_file: AtomicU64,
    /// The last sequence number written.
    pub last_seqno: AtomicU64,
    /// The live snapshots.
    pub snapshots: Arc<SnapshotList>,
    /// Running totals for [`DbStats`](super::db::DbStats).
    pub counters: Counters,
    /// The same counter as [`State::changes`], read by writers without the state lock.
    pub state_changes: Arc<crate::sync::AtomicU64>,
    /// The environment: background pool and memory budget (shared with other engines, or private).
    pub env: SharedEnv,
    /// The environment's write-buffer manager (read by every write's fast path).
    pub wb: Arc<WriteBuffers>,
    /// This engine's tag in the block cache (`crate::cache::file_key`): the cache may be shared.
    pub cache_owner: u64,
    /// The row cache of point lookups ([`Options::row_cache_size`]; `None`: off): the engine's own or the
    /// environment's.
    pub row_cache: Option<EngineRows>,
    /// This engine's id in the environment's pool (0 until registered).
    pub pool_id: AtomicU64,
    /// Bytes of the active memtable another engine's writer asked this one to switch out for memory (0:
    /// no request); the writer's next write does it (`db/write.rs`).
    pub memory_switch_requested: AtomicUsize,
    /// Whether the writer waits for a compaction because L0 reached its stop trigger: the pool then runs
    /// this engine's compaction before those of engines whose writers still write.
    pub writes_stopped_by_l0: std::sync::atomic::AtomicBool,
}

/// The row cache an engine opened with `opts` on `env` with the block cache `cache` uses
/// ([`Options::row_cache_size`]): none, one of its own (of the size asked, or by default one sharing the
/// capacity of its block cache when that is its own: [`BlockCache::pooled`]), or the environment's.
fn engine_row_cache(opts: &Options, env: &SharedEnv, cache: &BlockCache) -> Option<Arc<RowCache>> {
    let budget = || Some(Arc::clone(env.memory()));
    match opts.row_cache_size {
        Some(0) => None,
        Some(bytes) => Some(Arc::new(RowCache::new(bytes, budget()))),
        None if env.block_cache().is_some() => env.row_cache().cloned(),
        None => cache
            .pool()
            .filter(|p| p.capacity() > 0)
            .map(|p| RowCache::pooled(Arc::clone(p), budget())),
    }
}

impl DbInner {
    /// A database with an empty memtable and an empty version, which opening fills in; file numbers are
    /// allocated from `next_file`.
    pub(crate) fn new(
        dir: PathBuf,
        opts: Options,
        env: SharedEnv,
        cache: Arc<BlockCache>,
        next_file: u64,
        last_seqno: u64,
    ) -> DbInner {
        // On an environment with a memory budget, one memtable takes at most a quarter of the memtables'
        // share (see `WriteBuffers::memtable_size_for`).
        let mut opts = opts;
        opts.memtable_size = env.write_buffers().memtable_size_for(opts.memtable_size);
        let state_changes = fast_path::new_counter();
        let cache_owner = cache.new_owner();
        let row_cache =
            engine_row_cache(&opts, &env, &cache).map(|rc| EngineRows::new(rc, cache_owner));
        DbInner {
            row_cache,
            wb: Arc::clone(env.write_buffers()),
            env,
            pool_id: AtomicU64::new(0),
            cache_owner,
            memory_switch_requested: AtomicUsize::new(0),
            writes_stopped_by_l0: std::sync::atomic::AtomicBool::new(false),
            dir,
            cache,
            state: Mutex::new(State {
                mem: Arc::new(MemTable::new(0)),
                imm: VecDeque::new(),
                version: Arc::new(Version::empty(opts.num_levels)),
                bg_error: None,
                shutting_down: false,
                flushed_seqno: 0,
                sv: Arc::new(SuperVersion {
                    mems: Vec::new(),
                    version: Arc::new(Version::empty(opts.num_levels)),
                }),
                changes: Arc::clone(&state_changes),
                captures: Vec::new(),
                view: None,
                view_tail: None,
                view_background: false,
            }),
            cv: Condvar::new(),
            writer: Mutex::new(WriterState {
                wal: None,
                mem: None,
            }),
            spare_index: Mutex::new(None),
            manifest: Mutex::new(ManifestState { writer: None }),
            compaction_lock: Mutex::new(vec![Vec::new(); opts.num_levels]),
            manual_compactions: AtomicUsize::new(0),
            next_file: AtomicU64::new(next_file),
            last_seqno: AtomicU64::new(last_seqno),
            snapshots: Arc::new(SnapshotList::default()),
            counters: Counters::default(),
            state_changes,
            opts,
        }
    }

    /// A fresh memtable logging to WAL `wal_number`, whose point index starts at `index_slots` slots (the
    /// size the previous memtable's index grew to, so that a steady workload never rebuilds it), at most
    /// 1/4 of the memtable budget.
    pub fn new_memtable(&self, wal_number: u64, index_slots: usize) -> MemTable {
        let slots = self.capped_index_slots(index_slots);
        let spare = self.spare_index.lock().take();
        let mem = match spare {
            Some(spare) => {
                let (mem, unused) =
                    MemTable::with_spare_index(wal_number, self.opts.memtable_size, slots, spare);
                // One of another size stays for the next switch (the flush job replaces it).
                if unused.is_some() {
                    *self.spare_index.lock() = unused;
                }
                mem
            }
            None => MemTable::with_capacity(wal_number, self.opts.memtable_size, slots),
        };
        mem.charge_to(&self.wb)
    }

    /// `index_slots` capped at 1/4 of the memtable's budget (8-byte slots): a single large batch can grow one
    /// table's index past its budget, and a successor inheriting that would be full before its first write.
    fn capped_index_slots(&self, index_slots: usize) -> usize {
        index_slots.min((self.opts.memtable_size / 32).max(1))
    }

    /// Allocates the next memtable's point index ahead of time, sized as the current memtable's index is now,
    /// unless a spare of that size is there (called by the flush thread, without the state lock).
    pub fn refill_spare_index(&self) {
        let now = self.state.lock().mem.index_slots();
        let slots =
            MemTable::index_slots_for(self.opts.memtable_size, self.capped_index_slots(now));
        if self
            .spare_index
            .lock()
            .as_ref()
            .is_some_and(|s| s.slots() == slots)
        {
            return;
        }
        let spare = SpareIndex::new(slots, Some(&self.wb));
        *self.spare_index.lock() = Some(spare);
    }

    /// Wakes everything waiting for a change of the state (writers, `wait_flushed`, ...) and asks the pool
    /// for a flush and a compaction job (each does nothing when it finds no work).
    pub fn wake(&self) {
        self.cv.notify_all();
        self.request_jobs();
    }

    /// Asks the pool for a flush and a compaction job of this engine.
    pub fn request_jobs(&self) {
        let id = self.pool_id.load(Ordering::Relaxed);
        if id != 0 {
            let pool = self.env.pool();
            pool.request(id, JobKind::Flush);
            pool.request(id, JobKind::Compaction);
        }
    }

    /// Waits on the state's condition variable for a change, asking the pool for jobs first and at most
    /// every 10 ms meanwhile: a job that found its engine busy (a compaction while another holds the
    /// compaction lock) is asked for again, so no waiter depends on a single wake-up.
    pub fn wait_for_change(&self, st: &mut parking_lot::MutexGuard<'_, State>) {
        self.request_jobs();
        let _ = self.cv.wait_for(st, std::time::Duration::from_millis(10));
    }

    /// Allocates a never-reused file number.
    pub fn new_file_number(&self) -> u64 {
        self.next_file.fetch_add(1, Ordering::SeqCst)
    }

    /// The background error, if a background job failed.
    pub fn check_bg_error(&self) -> Result<()> {
        match &self.state.lock().bg_error {
            Some(e) => Err(LsmError::Background(Arc::clone(e))),
            None => Ok(()),
        }
    }

    /// Records the error of a background job, or of a log write (the first one wins), wakes every waiter
    /// and returns the recorded error.
    pub fn set_bg_error(&self, e: LsmError) -> Arc<LsmError> {
        if let LsmError::Background(recorded) = e {
            // Recorded where it arose (and perhaps cleared by `Db::resume` since): never again.
            return recorded;
        }
        let recorded = self.state.lock().record_bg_error(e);
        self.wake();
        recorded
    }

    /// The current memtables (newest first) and version.
    pub fn super_version(&self) -> (Vec<Arc<MemTable>>, Arc<Version>) {
        let sv = self.current_sv();
        (sv.mems.clone(), Arc::clone(&sv.version))
    }

    /// The current read view (one `Arc` clone under the state lock).
    #[inline]
    pub fn current_sv(&self) -> Arc<SuperVersion> {
        Arc::clone(&self.state.lock().sv)
    }

    /// Durably records `edit` (which adds `added` and deletes `deleted`) and installs the new version;
    /// with `pop_imm` it also retires the oldest immutable memtable (a flush). Deleted files are marked
    /// obsolete only once the edit is durable.
    pub fn log_and_apply(
        &self,
        edit: VersionEdit,
        deleted: &[(usize, Arc<FileMeta>)],
        added: &[(usize, Arc<FileMeta>)],
        pop_imm: bool,
    ) -> Result<()> {
        self.log_and_apply_as(edit, deleted, added, pop_imm, ViewEdit::Infer)
    }

    /// [`log_and_apply`](Self::log_and_apply), changing the checkpoint view as `view` says.
    pub fn log_and_apply_as(
        &self,
        mut edit: VersionEdit,
        deleted: &[(usize, Arc<FileMeta>)],
        added: &[(usize, Arc<FileMeta>)],
        pop_imm: bool,
        view: ViewEdit,
    ) -> Result<()> {
        // All version changes hold the manifest lock, so the version cannot change underneath.
        let mut man = self.manifest.lock();
        let del: Vec<(usize, u64)> = deleted.iter().map(|(l, f)| (*l, f.info.number)).collect();
        let newv = {
            let st = self.state.lock();
            if pop_imm && self.opts.wal {
                // The oldest memtable still unflushed after this one; later switches only add newer ones.
                let n = st.imm.len();
                let oldest = if n >= 2 {
                    st.imm[n - 2].wal_number
                } else {
                    st.mem.wal_number
                };
                edit.log_number = Some(oldest);
            }
            st.version.apply(&del, added)
        };
        let flushed_max = added
            .iter()
            .map(|(_, f)| f.info.max_seqno)
            .max()
            .unwrap_or(0);
        edit.last_seqno = Some(self.last_seqno.load(Ordering::SeqCst).max(flushed_max));
        edit.next_file_number = Some(self.next_file.load(Ordering::SeqCst));
        edit.deleted = del.iter().map(|(l, n)| (*l as u32, *n)).collect();
        edit.added = added
            .iter()
            .map(|(l, f)| (*l as u32, f.info.clone()))
            .collect();
        if !added.is_empty() {
            // The new files' directory entries must be durable before a manifest record names them.
            super::io::sync_dir_on(&*self.opts.storage, &self.dir)?;
        }
        let writer = man.writer.as_mut().ok_or(LsmError::Closed)?;
        if let Err(e) = writer.append(&edit) {
            // The manifest cannot take another record: stop writes until `resume` rolls to a fresh one.
            return Err(LsmError::Background(self.set_bg_error(e)));
        }
        {
            let mut st = self.state.lock();
            st.version = Arc::new(newv);
            checkpoint_view::on_install(st.view_state(), view, pop_imm, deleted, added);
            if pop_imm {
                if let Some(m) = st.imm.pop_back() {
                    if st.captures.iter().any(|c| Arc::ptr_eq(&c.mem, &m)) {
                        let st = &mut *st;
                        let version = Arc::clone(&st.version);
                        let (files, what) =
                            checkpoint_view::capture(st.view_state(), &version, &self.opts);
                        for c in st.captures.iter_mut().filter(|c| Arc::ptr_eq(&c.mem, &m)) {
                            c.version = Some((Arc::clone(&files), what));
                        }
                    }
                    st.flushed_seqno = st.flushed_seqno.max(m.max_seqno());
                    if let Some(c) = m.wb_charge() {
                        c.flushed();
                    }
                    let (growths, micros) = m.index_growth_stats();
                    self.counters
                        .index_growths
                        .fetch_add(growths, Ordering::Relaxed);
                    self.counters
                        .index_growth_micros
                        .fetch_add(micros, Ordering::Relaxed);
                }
            }
            st.refresh_super_version();
        }
        let readded: Vec<u64> = added.iter().map(|(_, f)| f.info.number).collect();
        let mut rows = None;
        let mut cached = Vec::new();
        for (_, f) in deleted {
            if !readded.contains(&f.info.number) {
                f.mark_obsolete();
                if let Some(r) = f.take_cached_rows() {
                    rows = Some(r);
                    cached.push(f.info.number);
                }
            }
        }
        self.wake();
        let rolled = if man
            .writer
            .as_ref()
            .is_some_and(|w| w.size > MANIFEST_ROLL_BYTES)
        {
            self.roll_manifest(&mut man)
        } else {
            Ok(())
        };
        drop(man);
        // The deleted files' rows, in one pass for all of them, outside the manifest lock (a reader still
        // on the old version that caches a row of one again leaves it to the file's drop).
        if let Some(rows) = rows {
            rows.erase(&cached);
        }
        rolled
    }

    /// A full-state edit of `version`.
    pub fn snapshot_edit(&self, version: &Version, log_number: Option<u64>) -> VersionEdit {
        VersionEdit {
            next_file_number: Some(self.next_file.load(Ordering::SeqCst)),
            last_seqno: Some(self.last_seqno.load(Ordering::SeqCst)),
            log_number,
            deleted: Vec::new(),
            added: version
                .files()
                .map(|(l, f)| (l as u32, f.info.clone()))
                .collect(),
        }
    }

    /// Replaces the manifest with a fresh one holding the full state, deleting the old one.
    pub(crate) fn roll_manifest(&self, man: &mut ManifestState) -> Result<()> {
        let number = self.new_file_number();
        let (version, log) = {
            let st = self.state.lock();
            let oldest_log = st.imm.back().map_or(st.mem.wal_number, |m| m.wal_number);
            (Arc::clone(&st.version), oldest_log)
        };
        let base = self.snapshot_edit(&version, Some(log));
        let old = man.writer.as_ref().map(|w| w.number);
        man.writer = Some(ManifestWriter::create(
            &*self.opts.storage,
            &self.dir,
            number,
            &base,
        )?);
        if let Some(old) = old {
            let _ = self
                .opts
                .storage
                .remove(&manifest::manifest_path(&self.dir, old));
        }
        Ok(())
    }

    /// Whether automatic compactions wait for a manual one. Not while writes are stopped by a deep L0: a
    /// stalled writer holds the write lock that the manual compaction's own flush needs, so only an automatic
    /// L0 compaction can let both go on.
    pub(crate) fn auto_compaction_paused(&self, st: &State) -> bool {
        self.manual_compactions.load(Ordering::SeqCst) > 0 && !self.writes_stopped_by_l0(st)
    }

    /// Whether L0 is deep enough that writes wait for compaction (see [`DbInner::make_room`]).
    pub(crate) fn writes_stopped_by_l0(&self, st: &State) -> bool {
        self.opts.auto_compaction
            && st.version.l0_runs
                >= self
                    .opts
                    .l0_stop_writes_trigger
                    .max(self.opts.l0_compaction_trigger)
    }
}

//! The database: write path, read path, background flush and compaction threads, open and recovery.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::batch::WriteBatch;
use super::cache::BlockCache;
use super::compaction;
use super::flush;
use super::ikey::ValueKind;
use super::iter::{full_merge, DbIter, IterParts};
use super::manifest::{self, ManifestWriter};
use super::memtable::{epoch, key_hash, with_lookup_key, MemTable};
use super::options::{Options, ReadOptions};
use super::rangedel::max_covering;
use super::slice::ValueSlice;
use super::snapshot::{Snapshot, SnapshotList};
use super::sst::PrefixProbe;
use super::version::{FileMeta, Version, VersionEdit};
use super::wal::{self, WalWriter};
use super::LsmError;

type Result<T> = std::result::Result<T, LsmError>;

/// Roll the manifest over to a fresh one (a single full-state record) past this size.
const MANIFEST_ROLL_BYTES: u64 = 4 << 20;

/// Counters and sizes of a database.
#[derive(Debug, Clone, Default)]
pub struct DbStats {
    /// Bytes of user keys and values accepted by writes.
    pub user_bytes_written: u64,
    /// Bytes of SST files written by flushes.
    pub flush_bytes_written: u64,
    /// Bytes of SST files read as compaction inputs.
    pub compaction_bytes_read: u64,
    /// Bytes of SST files written by compactions.
    pub compaction_bytes_written: u64,
    /// Number of flushes.
    pub flushes: u64,
    /// Number of (non-trivial) compactions.
    pub compactions: u64,
    /// Number of trivial moves.
    pub trivial_moves: u64,
    /// Number of times a write waited for flush or compaction.
    pub write_stalls: u64,
    /// Microseconds writes spent stalled: from a write's first wait for flush or compaction until it
    /// proceeds (including the memtable switch that may end the wait).
    pub write_stall_micros: u64,
    /// Number of times a memtable's point index grew (each a rebuild by the writer, which waits for it).
    pub memtable_index_growths: u64,
    /// Microseconds writes spent growing memtable point indexes.
    pub memtable_index_growth_micros: u64,
    /// Number of files dropped whole by `delete_range`.
    pub files_dropped_by_range_delete: u64,
    /// Number of SST files that reads (point lookups and scans within one prefix) left unread because their
    /// prefix filter ruled the prefix out.
    pub prefix_filter_skips: u64,
    /// Files per level.
    pub level_files: Vec<usize>,
    /// Bytes per level.
    pub level_bytes: Vec<u64>,
    /// The level L0 compacts into: 1 with static level targets; with
    /// [`Options::dynamic_level_bytes`] the shallowest level the tree needs (the last one while it is small).
    pub base_level: usize,
    /// Bytes in the active and immutable memtables.
    pub memtable_bytes: usize,
    /// Number of immutable memtables waiting for flush.
    pub immutable_memtables: usize,
    /// The last sequence number.
    pub last_seqno: u64,
}

impl DbStats {
    /// (flush + compaction bytes written) / user bytes written.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            return 0.0;
        }
        (self.flush_bytes_written + self.compaction_bytes_written) as f64
            / self.user_bytes_written as f64
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub user_bytes: AtomicU64,
    pub flush_bytes: AtomicU64,
    pub compaction_read: AtomicU64,
    pub compaction_written: AtomicU64,
    pub flushes: AtomicU64,
    pub compactions: AtomicU64,
    pub trivial_moves: AtomicU64,
    pub stalls: AtomicU64,
    pub stall_micros: AtomicU64,
    /// Index growths of the memtables flushed so far (a live table reports its own).
    pub index_growths: AtomicU64,
    pub index_growth_micros: AtomicU64,
    pub files_dropped: AtomicU64,
    pub prefix_skips: AtomicU64,
}

/// What a read needs: the memtables (newest first) and the version, shared by every read until one of them
/// changes (one `Arc` clone per `get` instead of a vector of clones).
pub(crate) struct SuperVersion {
    pub mems: Vec<Arc<MemTable>>,
    pub version: Arc<Version>,
}

/// What a point lookup found; memtable bytes are borrowed for the epoch guard's lifetime.
enum Got<'g> {
    Missing,
    Mem(&'g [u8]),
    Slice(ValueSlice),
    Owned(Vec<u8>),
}

/// A merge operand or base value met by a lookup.
enum Operand<'g> {
    Mem(&'g [u8]),
    Slice(ValueSlice),
}

impl AsRef<[u8]> for Operand<'_> {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        match self {
            Operand::Mem(v) => v,
            Operand::Slice(v) => v,
        }
    }
}

/// Mutable in-memory state, guarded by `DbInner::state`.
pub(crate) struct State {
    pub mem: Arc<MemTable>,
    /// Immutable memtables, newest first.
    pub imm: VecDeque<Arc<MemTable>>,
    pub version: Arc<Version>,
    pub bg_error: Option<Arc<LsmError>>,
    pub shutting_down: bool,
    /// Every write up to this seqno is in the version's files.
    pub flushed_seqno: u64,
    /// `mem`, `imm` and `version` as of their last change; rebuilt by [`State::refresh_super_version`].
    pub sv: Arc<SuperVersion>,
    /// Counts the changes a writer's fast path must notice (see [`WriterState::mem`]): bumped, under this
    /// lock, by every change of `mem`, `imm` or `version`, and by `bg_error` and `shutting_down`. Shared with
    /// [`DbInner::state_changes`], which writers read without the lock.
    pub changes: Arc<AtomicU64>,
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
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// What `make_room` leaves for the writer's fast path (see [`WriterState::mem`]): the current memtable
    /// and change count; nothing after a forced switch, which skips the checks (a deep L0 does not stop a
    /// flush), so the next write takes the slow path and makes them.
    fn fast_path_entry(&self, force_switch: bool) -> Option<(u64, Arc<MemTable>)> {
        (!force_switch).then(|| (self.changes.load(Ordering::Relaxed), Arc::clone(&self.mem)))
    }
}

pub(crate) struct WriterState {
    pub wal: Option<WalWriter>,
    /// The memtable the last unforced [`DbInner::make_room`] let a write into, and [`State::changes`] as it
    /// was then (read under the state lock); None after a forced switch, which skips the checks. Until that
    /// count moves, nothing `make_room` checks has changed but the memtable's size, and only the writer (who
    /// holds this) switches memtables: a write that finds the count unchanged and the table not full goes
    /// straight into it, without the state lock ([`DbInner::fast_mem`]).
    pub mem: Option<(u64, Arc<MemTable>)>,
}

impl WriterState {
    /// The memtable [`DbInner::room_for_write`] left for the write.
    #[inline]
    fn memtable(&self) -> Result<&MemTable> {
        self.mem.as_ref().map(|(_, m)| &**m).ok_or(LsmError::Closed)
    }
}

pub(crate) struct ManifestState {
    pub writer: Option<ManifestWriter>,
}

/// Shared internals of a [`Db`].
pub(crate) struct DbInner {
    pub dir: PathBuf,
    pub opts: Options,
    pub cache: Arc<BlockCache>,
    pub state: Mutex<State>,
    pub cv: Condvar,
    pub writer: Mutex<WriterState>,
    pub manifest: Mutex<ManifestState>,
    pub compaction_lock: Mutex<Vec<Vec<u8>>>,
    /// Manual compactions waiting or running: automatic compactions do not start meanwhile (RocksDB's
    /// `exclusive_manual_compaction`), so that they do not rewrite data the manual one rewrites anyway.
    pub manual_compactions: AtomicUsize,
    next_file: AtomicU64,
    pub last_seqno: AtomicU64,
    pub snapshots: Arc<SnapshotList>,
    pub counters: Counters,
    /// The same counter as [`State::changes`], read by writers without the state lock.
    pub state_changes: Arc<AtomicU64>,
}

/// An embedded LSM key-value store. `Send + Sync`: share it through an `Arc`.
pub struct Db {
    inner: Arc<DbInner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The `LOCK` file, exclusively `flock`ed while the database is open.
    _lock: std::fs::File,
}

/// Takes an exclusive advisory lock on `dir/LOCK`, failing if another handle holds it.
fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io_err(&path, e))?;
    // SAFETY: `flock` only reads the descriptor, which `file` owns and keeps open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(LsmError::Locked(path.display().to_string()));
    }
    Ok(file)
}

fn io_err(path: &Path, source: std::io::Error) -> LsmError {
    LsmError::Io {
        path: path.display().to_string(),
        source,
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
    /// A fresh memtable logging to WAL `wal_number`, whose point index starts at `index_slots` slots (the
    /// size the previous memtable's index grew to, so that a steady workload never rebuilds it), at most
    /// 1/4 of the memtable budget.
    pub fn new_memtable(&self, wal_number: u64, index_slots: usize) -> MemTable {
        // Capped at 1/4 of the memtable's budget (8-byte slots): a single large batch can grow one table's
        // index past its budget, and a successor inheriting that would be full before its first write.
        let cap = (self.opts.memtable_size / 32).max(1);
        MemTable::with_capacity(wal_number, self.opts.memtable_size, index_slots.min(cap))
    }

    /// Allocates a never-reused file number.
    pub fn new_file_number(&self) -> u64 {
        self.next_file.fetch_add(1, Ordering::SeqCst)
    }

    pub fn check_bg_error(&self) -> Result<()> {
        match &self.state.lock().bg_error {
            Some(e) => Err(LsmError::Background(Arc::clone(e))),
            None => Ok(()),
        }
    }

    pub fn set_bg_error(&self, e: LsmError) {
        let mut st = self.state.lock();
        if st.bg_error.is_none() {
            st.bg_error = Some(Arc::new(e));
            st.note_change();
        }
        drop(st);
        self.cv.notify_all();
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
        mut edit: VersionEdit,
        deleted: &[(usize, Arc<FileMeta>)],
        added: &[(usize, Arc<FileMeta>)],
        pop_imm: bool,
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
        man.writer.as_mut().ok_or(LsmError::Closed)?.append(&edit)?;
        {
            let mut st = self.state.lock();
            st.version = Arc::new(newv);
            if pop_imm {
                if let Some(m) = st.imm.pop_back() {
                    st.flushed_seqno = st.flushed_seqno.max(m.max_seqno());
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
        for (_, f) in deleted {
            if !readded.contains(&f.info.number) {
                f.mark_obsolete();
            }
        }
        self.cv.notify_all();
        if man
            .writer
            .as_ref()
            .is_some_and(|w| w.size > MANIFEST_ROLL_BYTES)
        {
            self.roll_manifest(&mut man)?;
        }
        Ok(())
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

    fn roll_manifest(&self, man: &mut ManifestState) -> Result<()> {
        let number = self.new_file_number();
        let (version, log) = {
            let st = self.state.lock();
            let oldest_log = st.imm.back().map_or(st.mem.wal_number, |m| m.wal_number);
            (Arc::clone(&st.version), oldest_log)
        };
        let base = self.snapshot_edit(&version, Some(log));
        let old = man.writer.as_ref().map(|w| w.number);
        man.writer = Some(ManifestWriter::create(&self.dir, number, &base)?);
        if let Some(old) = old {
            let _ = std::fs::remove_file(manifest::manifest_path(&self.dir, old));
        }
        Ok(())
    }

    /// The read view and the seqno to read at: `seqno`, or (`None`) the latest one, loaded *after* the view
    /// is taken. In the other order a reader preempted between the two loads could meet a view in which a
    /// flush or compaction already folded versions at or below its seqno into newer ones (a flush's partial
    /// merge of operands, a compaction's dropped shadowed versions), since only registered snapshots are
    /// protected; as RocksDB's `GetImpl` does, the view comes first.
    fn read_view(&self, seqno: Option<u64>) -> (Arc<SuperVersion>, u64) {
        let sv = self.current_sv();
        let seqno = seqno.unwrap_or_else(|| self.last_seqno.load(Ordering::SeqCst));
        (sv, seqno)
    }

    /// Reads `key` as of `seqno` (`None`: the latest).
    pub fn get_at_seqno(&self, key: &[u8], seqno: Option<u64>) -> Result<Option<ValueSlice>> {
        let (sv, seqno) = self.read_view(seqno);
        let guard = epoch::pin();
        Ok(match self.lookup(&sv, &guard, key, seqno)? {
            Got::Missing => None,
            Got::Mem(v) => Some(ValueSlice::from_vec(v.to_vec())),
            Got::Slice(v) => Some(v),
            Got::Owned(v) => Some(ValueSlice::from_vec(v)),
        })
    }

    /// Reads `key` as of `seqno` (`None`: the latest) into `out` (cleared first); returns whether the key has a value. A value
    /// found in a memtable is copied straight into `out`, so a warm buffer means no allocation.
    pub fn get_into_at_seqno(
        &self,
        key: &[u8],
        seqno: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let (sv, seqno) = self.read_view(seqno);
        let guard = epoch::pin();
        out.clear();
        match self.lookup(&sv, &guard, key, seqno)? {
            Got::Missing => return Ok(false),
            Got::Mem(v) => out.extend_from_slice(v),
            Got::Slice(v) => out.extend_from_slice(&v),
            Got::Owned(v) => *out = v,
        }
        Ok(true)
    }

    /// The point lookup behind every `get`: range tombstones, then versions newest first (memtables, L0
    /// newest first, then one file per deeper level), then one full merge if operands were found. Memtable
    /// bytes are borrowed under `guard`, not copied.
    fn lookup<'g>(
        &self,
        sv: &'g SuperVersion,
        guard: &'g epoch::Guard,
        key: &'g [u8],
        seqno: u64,
    ) -> Result<Got<'g>> {
        let (mems, version) = (&sv.mems, &sv.version);
        let mut rd = if version.range_dels.is_empty() {
            0
        } else {
            max_covering(version.range_dels.iter(), key, seqno)
        };
        for m in mems {
            if m.has_range_dels() {
                rd = rd.max(m.with_range_dels(|t| max_covering(t, key, seqno)));
            }
        }
        // Operands, newest first: memtable ones borrowed, SST ones as zero-copy views of their blocks.
        let mut operands: Vec<Operand<'g>> = Vec::new();
        // Hashed once for every memtable's point index (a table without the key answers from its index).
        let hash = key_hash(key);
        for m in mems {
            for (s, kind, value) in m.versions_hashed(key, hash, seqno, guard) {
                if kind == ValueKind::RangeDelete {
                    continue;
                }
                if s < rd {
                    return self.finish_lookup(key, None, operands);
                }
                match kind {
                    ValueKind::Put if operands.is_empty() => return Ok(Got::Mem(value)),
                    ValueKind::Put => {
                        return self.finish_lookup(key, Some(Operand::Mem(value)), operands)
                    }
                    ValueKind::Delete => return self.finish_lookup(key, None, operands),
                    _ => operands.push(Operand::Mem(value)),
                }
            }
        }
        // Some(base) once a put, delete or covering range tombstone ends the search.
        let mut base: Option<Option<ValueSlice>> = None;
        let mut step = |s: u64, kind: ValueKind, value: &dyn Fn() -> ValueSlice| -> bool {
            if kind == ValueKind::RangeDelete {
                return true;
            }
            if s < rd {
                base = Some(None);
                return false;
            }
            match kind {
                ValueKind::Put => {
                    base = Some(Some(value()));
                    false
                }
                ValueKind::Delete => {
                    base = Some(None);
                    false
                }
                _ => {
                    operands.push(Operand::Slice(value()));
                    true
                }
            }
        };
        // The key's prefix, for files whose filter holds prefixes rather than whole keys.
        let probe = self.opts.sst.prefix_extractor.as_ref().and_then(|x| {
            let n = x.prefix_len(key)?;
            Some(PrefixProbe::new(x.name(), key.get(..n)?))
        });
        with_lookup_key(key, seqno, |lk| -> Result<()> {
            for (level, files) in version.levels.iter().enumerate() {
                // L0: every file, newest first; deeper levels: the one file that may hold `key`.
                let candidates: &[Arc<FileMeta>] = if level == 0 {
                    files
                } else {
                    let i = files.partition_point(|f| f.info.largest_user() < key);
                    files.get(i..files.len().min(i + 1)).unwrap_or(&[])
                };
                for f in candidates {
                    if !f.info.overlaps(key, key) || !f.reader.may_contain(key) {
                        continue;
                    }
                    if probe.is_some_and(|p| !f.reader.may_contain_prefix(&p)) {
                        self.counters.prefix_skips.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if !f
                        .reader
                        .get(key, lk, seqno, &mut |s, kind, value| step(s, kind, value))?
                    {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })?;
        let base = base.flatten();
        if operands.is_empty() {
            return Ok(base.map_or(Got::Missing, Got::Slice));
        }
        self.finish_lookup(key, base.map(Operand::Slice), operands)
    }

    /// The result of a lookup that ended at `base` with `operands` (newest first) above it.
    fn finish_lookup<'g>(
        &self,
        key: &[u8],
        base: Option<Operand<'g>>,
        operands: Vec<Operand<'g>>,
    ) -> Result<Got<'g>> {
        if operands.is_empty() {
            return Ok(match base {
                None => Got::Missing,
                Some(Operand::Mem(v)) => Got::Mem(v),
                Some(Operand::Slice(v)) => Got::Slice(v),
            });
        }
        let merged = full_merge(
            self.opts.merge_operator.as_ref(),
            key,
            base.as_ref().map(|b| b.as_ref()),
            &operands,
        )?;
        Ok(Got::Owned(merged))
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
            let _ = std::fs::remove_file(p);
        }
        Ok(true)
    }

    fn flush_thread(self: Arc<Self>) {
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
            if let Err(e) = self.flush_one() {
                self.set_bg_error(e);
            }
        }
    }

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
    pub fn wait_flushed(&self) -> Result<()> {
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
    pub fn wait_for_background_work(&self) -> Result<()> {
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

    /// Drops files that lie entirely inside `[start, end)` and hold only data older than the range
    /// tombstone `seqno`, when no snapshot could still read them. Skipped if a compaction runs for longer
    /// than 200 ms (the tombstone alone is correct; this only reclaims space early).
    fn drop_files_in_range(&self, start: &[u8], end: &[u8], seqno: u64) -> Result<()> {
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

    /// Whether automatic compactions wait for a manual one. Not while writes are stopped by a deep L0: a
    /// stalled writer holds the write lock that the manual compaction's own flush needs, so only an automatic
    /// L0 compaction can let both go on.
    pub(crate) fn auto_compaction_paused(&self, st: &State) -> bool {
        self.manual_compactions.load(Ordering::SeqCst) > 0 && !self.writes_stopped_by_l0(st)
    }

    /// Whether L0 is deep enough that writes wait for compaction (see [`make_room`](Self::make_room)).
    fn writes_stopped_by_l0(&self, st: &State) -> bool {
        self.opts.auto_compaction
            && st.version.levels.first().map_or(0, |l| l.len())
                >= self
                    .opts
                    .l0_stop_writes_trigger
                    .max(self.opts.l0_compaction_trigger)
    }

    /// The writer's fast path: the memtable the last unforced [`make_room`](Self::make_room) recorded, if
    /// nothing it checks has changed since (no flush or compaction installed, no error, no shutdown: see
    /// [`State::changes`]) and the table is not full. Then a write needs neither the state lock nor a
    /// reference count (A/B, `lsm_vs_rocksdb` at 1M keys, ours only, three pairs: random put +2–18 %,
    /// merge +5–15 %). A change that lands just after the check is seen by the next write, as a write that
    /// took the lock just before the change would have missed it too.
    #[inline]
    pub(crate) fn fast_mem<'w>(&self, w: &'w WriterState) -> Option<&'w MemTable> {
        let (seen, mem) = w.mem.as_ref()?;
        (*seen == self.state_changes.load(Ordering::Acquire)
            && mem.approximate_bytes() < self.opts.memtable_size)
            .then_some(&**mem)
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
        let res = self.make_room_or_stall(w, force_switch, &mut stalled);
        if let Some(t) = stalled {
            let micros = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.counters
                .stall_micros
                .fetch_add(micros, Ordering::Relaxed);
        }
        res
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
            let full = st.mem.approximate_bytes() >= self.opts.memtable_size;
            if !force_switch && l0_deep {
                if stalled.is_none() {
                    *stalled = Some(std::time::Instant::now());
                    self.counters.stalls.fetch_add(1, Ordering::Relaxed);
                }
                self.cv.wait(&mut st);
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
                self.cv.wait(&mut st);
                continue;
            }
            if st.mem.is_empty() {
                w.mem = st.fast_path_entry(force_switch);
                return Ok(());
            }
            // Switch: a new WAL and a new memtable.
            let wal_number = if self.opts.wal {
                let n = self.new_file_number();
                w.wal = Some(WalWriter::create(&self.dir, n, self.opts.wal_sync)?);
                n
            } else {
                0
            };
            let index_slots = st.mem.index_slots();
            let old = std::mem::replace(
                &mut st.mem,
                Arc::new(self.new_memtable(wal_number, index_slots)),
            );
            st.imm.push_front(old);
            st.refresh_super_version();
            w.mem = st.fast_path_entry(force_switch);
            drop(st);
            self.cv.notify_all();
            return Ok(());
        }
    }
}

impl Db {
    /// Opens (or creates) the database in `path`, replaying WAL files if any.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let dir = path.as_ref().to_path_buf();
        if opts.num_levels < 2 {
            return Err(LsmError::InvalidArgument(
                "num_levels must be at least 2".into(),
            ));
        }
        if !dir.exists() {
            if !opts.create_if_missing {
                return Err(io_err(&dir, std::io::ErrorKind::NotFound.into()));
            }
            std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        }
        let lock = lock_dir(&dir)?;
        let cache = BlockCache::new(opts.block_cache_size);
        // Replay the manifest.
        let current = manifest::read_current(&dir)?;
        let mut files: BTreeMap<u64, (usize, super::version::FileInfo)> = BTreeMap::new();
        let (mut next_file, mut last_seqno, mut log_number) = (1u64, 0u64, 0u64);
        if let Some(num) = current {
            let mpath = manifest::manifest_path(&dir, num);
            let bytes = std::fs::read(&mpath).map_err(|e| io_err(&mpath, e))?;
            let name = mpath.display().to_string();
            let edits = manifest::decode_manifest(&bytes, &name)?;
            if edits.is_empty() {
                return Err(LsmError::Corruption {
                    file: name,
                    detail: "manifest holds no record".into(),
                });
            }
            for e in edits {
                for (l, n) in &e.deleted {
                    if files.get(n).is_some_and(|(fl, _)| *fl == *l as usize) {
                        files.remove(n);
                    }
                }
                for (l, f) in e.added {
                    if l as usize >= opts.num_levels {
                        return Err(LsmError::Corruption {
                            file: name,
                            detail: format!("file {} at level {l} beyond num_levels", f.number),
                        });
                    }
                    files.insert(f.number, (l as usize, f));
                }
                next_file = next_file.max(e.next_file_number.unwrap_or(0));
                last_seqno = last_seqno.max(e.last_seqno.unwrap_or(0));
                log_number = log_number.max(e.log_number.unwrap_or(0));
            }
            next_file = next_file.max(num + 1);
        }
        // Scan the directory: never reuse a number seen on disk.
        let mut logs = Vec::new();
        let mut orphans = Vec::new();
        let entries = std::fs::read_dir(&dir).map_err(|e| io_err(&dir, e))?;
        for ent in entries {
            let ent = ent.map_err(|e| io_err(&dir, e))?;
            let name = ent.file_name().to_string_lossy().into_owned();
            let num = name
                .strip_suffix(".sst")
                .or_else(|| name.strip_suffix(".log"))
                .or_else(|| name.strip_prefix("MANIFEST-"))
                .and_then(|n| n.parse::<u64>().ok());
            let Some(num) = num else { continue };
            next_file = next_file.max(num + 1);
            if name.ends_with(".log") {
                if num >= log_number {
                    logs.push(num);
                } else {
                    orphans.push(ent.path());
                }
            } else if (name.ends_with(".sst") && !files.contains_key(&num))
                || (name.starts_with("MANIFEST-") && Some(num) != current)
            {
                orphans.push(ent.path());
            }
        }
        logs.sort_unstable();
        let state_changes = Arc::new(AtomicU64::new(0));
        let inner = Arc::new(DbInner {
            dir: dir.clone(),
            cache: Arc::clone(&cache),
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
            }),
            cv: Condvar::new(),
            writer: Mutex::new(WriterState {
                wal: None,
                mem: None,
            }),
            manifest: Mutex::new(ManifestState { writer: None }),
            compaction_lock: Mutex::new(vec![Vec::new(); opts.num_levels]),
            manual_compactions: AtomicUsize::new(0),
            next_file: AtomicU64::new(next_file),
            last_seqno: AtomicU64::new(last_seqno),
            snapshots: Arc::new(SnapshotList::default()),
            counters: Counters::default(),
            state_changes,
            opts,
        });
        // Open the live files.
        let mut levels: Vec<Vec<Arc<FileMeta>>> = vec![Vec::new(); inner.opts.num_levels];
        for (number, (level, info)) in &files {
            let f = flush::open_file(&inner, *number, info.size)?;
            last_seqno = last_seqno.max(f.info.max_seqno);
            levels[*level].push(f);
        }
        inner.last_seqno.fetch_max(last_seqno, Ordering::SeqCst);
        let version = Version::from_levels(levels);
        if let Some(num) = current {
            version
                .check_invariants()
                .map_err(|detail| LsmError::Corruption {
                    file: manifest::manifest_path(&dir, num).display().to_string(),
                    detail: detail.to_string(),
                })?;
        }
        {
            let mut st = inner.state.lock();
            st.version = Arc::new(version);
            st.refresh_super_version();
        }
        for p in orphans {
            let _ = std::fs::remove_file(p);
        }
        // Replay WAL files into a memtable and flush it to L0.
        let replay = inner.new_memtable(0, 0);
        for n in &logs {
            let (batches, _torn) = wal::read_wal(&wal::wal_path(&dir, *n))?;
            for (seq, b) in batches {
                for (i, op) in b.ops.iter().enumerate() {
                    replay.add(seq + i as u64, op.kind, &op.key, &op.value);
                }
                let end = seq + b.ops.len() as u64;
                inner
                    .last_seqno
                    .fetch_max(end.saturating_sub(1), Ordering::SeqCst);
            }
        }
        let mut added = Vec::new();
        if !replay.is_empty() {
            for f in flush::write_memtable(&inner, &replay)? {
                added.push((0usize, f));
            }
        }
        // A fresh WAL and a fresh manifest holding the full state.
        let wal_number = if inner.opts.wal {
            inner.new_file_number()
        } else {
            0
        };
        {
            let mut st = inner.state.lock();
            let v = st.version.apply(&[], &added);
            st.version = Arc::new(v);
            st.mem = Arc::new(inner.new_memtable(wal_number, 0));
            st.refresh_super_version();
            st.flushed_seqno = inner.last_seqno.load(Ordering::SeqCst);
        }
        let version = Arc::clone(&inner.state.lock().version);
        let man_number = inner.new_file_number();
        let base = inner.snapshot_edit(&version, Some(wal_number));
        inner.manifest.lock().writer = Some(ManifestWriter::create(&dir, man_number, &base)?);
        if let Some(old) = current {
            let _ = std::fs::remove_file(manifest::manifest_path(&dir, old));
        }
        for n in &logs {
            let _ = std::fs::remove_file(wal::wal_path(&dir, *n));
        }
        if inner.opts.wal {
            inner.writer.lock().wal =
                Some(WalWriter::create(&dir, wal_number, inner.opts.wal_sync)?);
        }
        let mut threads = Vec::new();
        let nice = inner.opts.background_nice;
        let spawn = |name: &str, f: fn(Arc<DbInner>)| {
            let i = Arc::clone(&inner);
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || {
                    lower_thread_priority(nice);
                    f(i)
                })
                .map_err(|e| io_err(&dir, e))
        };
        threads.push(spawn("lsm-flush", DbInner::flush_thread)?);
        threads.push(spawn("lsm-compact", DbInner::compaction_thread)?);
        Ok(Db {
            inner,
            threads: Mutex::new(threads),
            _lock: lock,
        })
    }

    pub(crate) fn inner(&self) -> &Arc<DbInner> {
        &self.inner
    }

    /// Applies a batch atomically: all its updates get consecutive seqnos and become visible together.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_seq(batch).map(|_| ())
    }

    /// Applies a batch and returns the seqno of its last update (0 for an empty batch).
    fn write_seq(&self, batch: &WriteBatch) -> Result<u64> {
        if batch.is_empty() {
            return self.inner.check_bg_error().map(|_| 0);
        }
        let inner = &self.inner;
        let mut w = inner.writer.lock();
        inner.room_for_write(&mut w)?;
        let seq = inner.last_seqno.load(Ordering::SeqCst) + 1;
        if let Some(wal) = &mut w.wal {
            wal.append(&batch.encode(seq))?;
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
    fn write_one(&self, kind: ValueKind, key: &[u8], value: &[u8]) -> Result<()> {
        let inner = &self.inner;
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

    /// Sets `key` to `value`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write_one(ValueKind::Put, key, value)
    }

    /// Deletes `key`.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.write_one(ValueKind::Delete, key, &[])
    }

    /// Adds a merge operand for `key`.
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

    /// An iterator (unpositioned: call `seek` or `seek_to_first`).
    pub fn iter(&self, ro: ReadOptions<'_>) -> DbIter {
        // The read view before the latest seqno (see `DbInner::read_view`).
        let (mems, version) = self.inner.super_version();
        let (snapshot, hold) = match ro.snapshot {
            Some(s) => (s.seqno(), Some(self.inner.snapshots.acquire(s.seqno()))),
            None => (self.inner.last_seqno.load(Ordering::SeqCst), None),
        };
        let probe = self.inner.opts.sst.prefix_extractor.as_ref().and_then(|x| {
            let p = crate::lsm::prefix::scan_prefix(
                x.as_ref(),
                ro.lower_bound.as_deref(),
                ro.upper_bound.as_deref(),
                ro.prefix.as_deref(),
            )?;
            Some((p.to_vec(), PrefixProbe::new(x.name(), p)))
        });
        let it = DbIter::new(IterParts {
            mems,
            version,
            snapshot,
            merge_op: self.inner.opts.merge_operator.clone(),
            lower: ro.lower_bound,
            upper: ro.upper_bound,
            prefix: ro.prefix,
            hold,
            probe,
        });
        if it.prefix_skips > 0 {
            self.inner
                .counters
                .prefix_skips
                .fetch_add(it.prefix_skips as u64, Ordering::Relaxed);
        }
        it
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
        let _exclusive = ManualCompaction::start(&self.inner);
        self.flush()?;
        compaction::run_manual(&self.inner, None)
    }

    /// Flushes, then compacts the files overlapping `[start, end]` level by level, and waits for it. No
    /// automatic compaction starts from the call until it returns.
    pub fn compact_range(&self, start: &[u8], end: &[u8]) -> Result<()> {
        let _exclusive = ManualCompaction::start(&self.inner);
        self.flush()?;
        compaction::run_manual(&self.inner, Some((start, end)))
    }

    /// Counters and sizes.
    pub fn stats(&self) -> DbStats {
        let c = &self.inner.counters;
        let st = self.inner.state.lock();
        let (live_growths, live_growth_micros) = std::iter::once(&st.mem)
            .chain(st.imm.iter())
            .map(|m| m.index_growth_stats())
            .fold((0, 0), |(g, t), (mg, mt)| (g + mg, t + mt));
        DbStats {
            user_bytes_written: c.user_bytes.load(Ordering::Relaxed),
            flush_bytes_written: c.flush_bytes.load(Ordering::Relaxed),
            compaction_bytes_read: c.compaction_read.load(Ordering::Relaxed),
            compaction_bytes_written: c.compaction_written.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            trivial_moves: c.trivial_moves.load(Ordering::Relaxed),
            write_stalls: c.stalls.load(Ordering::Relaxed),
            write_stall_micros: c.stall_micros.load(Ordering::Relaxed),
            memtable_index_growths: c.index_growths.load(Ordering::Relaxed) + live_growths,
            memtable_index_growth_micros: c.index_growth_micros.load(Ordering::Relaxed)
                + live_growth_micros,
            files_dropped_by_range_delete: c.files_dropped.load(Ordering::Relaxed),
            prefix_filter_skips: c.prefix_skips.load(Ordering::Relaxed),
            level_files: st.version.levels.iter().map(|l| l.len()).collect(),
            level_bytes: st.version.level_bytes(),
            base_level: compaction::base_level(&st.version, &self.inner.opts),
            memtable_bytes: st.mem.approximate_bytes()
                + st.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>(),
            immutable_memtables: st.imm.len(),
            last_seqno: self.inner.last_seqno.load(Ordering::SeqCst),
        }
    }

    /// The directory of the database.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Flushes the memtables (without a WAL they would be lost), stops background threads and closes.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// Stops the background threads *without* flushing, as if the process died here: what survives is what
    /// the manifest and (if on) the WAL hold. For crash tests.
    pub fn abandon(self) {
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

    fn shutdown(&self) -> Result<()> {
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
struct ManualCompaction<'a>(&'a DbInner);

impl<'a> ManualCompaction<'a> {
    fn start(inner: &'a DbInner) -> Self {
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

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

#[cfg(test)]
mod read_view_tests {
    use super::*;
    use crate::lsm::merge::ListAppendOperator;

    /// A latest-value read preempted between taking its view and looking up, while a memtable is switched
    /// and flushed, still sees every operand up to its seqno, although the flush's partial merge moves older
    /// operands to the run's newest seqno, above the reader's. (Loading the seqno before the view, as `get`
    /// did, is shown to lose the operand.)
    #[test]
    fn a_read_at_a_seqno_loaded_before_a_partial_merge_flush_keeps_every_element() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            merge_operator: Some(Arc::new(ListAppendOperator)),
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        db.merge(b"k", b"x").unwrap();
        // The reader takes its view here (`read_view`: the view, then the latest seqno) ...
        let (sv, seq) = db.inner.read_view(None);
        // ... the writer appends and the memtable is flushed (partial merge: `x,y` at the newer seqno) ...
        db.merge(b"k", b"y").unwrap();
        db.flush().unwrap();
        // ... then the reader looks up at its seqno in its view: it still sees `x`.
        let guard = epoch::pin();
        let got = match db.inner.lookup(&sv, &guard, b"k", seq).unwrap() {
            Got::Mem(v) => Some(v.to_vec()),
            Got::Slice(v) => Some(v.to_vec()),
            Got::Owned(v) => Some(v),
            Got::Missing => None,
        };
        assert_eq!(got.as_deref(), Some(&b"x"[..]));
        // The old order (seqno first, view after the flush) loses `x`: the flushed file holds `x,y` at the
        // newer seqno only.
        let late = db.inner.get_at_seqno(b"k", Some(seq)).unwrap();
        assert_eq!(late.map(|v| v.to_vec()), None);
        assert_eq!(
            db.get(b"k").unwrap().map(|v| v.to_vec()),
            Some(b"x,y".to_vec())
        );
    }
}

#[cfg(test)]
mod writer_fast_path_tests {
    use super::*;

    fn opts() -> Options {
        Options {
            memtable_size: 1 << 20,
            l0_compaction_trigger: 1,
            l0_stop_writes_trigger: 1,
            ..Options::default()
        }
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
        let mut i = 0u32;
        while db.stats().flushes == 0 {
            db.put(&i.to_be_bytes(), &[7; 100]).unwrap();
            i += 1;
        }
        db.inner.wait_flushed().unwrap();
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

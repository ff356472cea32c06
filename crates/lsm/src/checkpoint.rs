//! Checkpoints: flush, then hard-link (or copy) the live SST files of one version into a directory and
//! write a manifest of that moment there. The directory opens as a [`Db`].

use super::io::io_err;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint_view::CaptureView;
use super::db::Db;
use super::io;
use super::manifest::{manifest_path, ManifestWriter};
use super::version::sst_path;
use super::LsmError;

/// One file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFile {
    /// The file number (file names are `NNNNNN.sst`; numbers are never reused, so equal numbers mean
    /// identical files — the base for incremental checkpoints).
    pub number: u64,
    /// The level the file sits in.
    pub level: usize,
    /// Size in bytes.
    pub size: u64,
    /// Path inside the checkpoint directory.
    pub path: PathBuf,
    /// Whether it was hard-linked (false: copied).
    pub linked: bool,
    /// The user keys the file is read as holding (`None`: all of it).
    pub bounds: Option<super::bounds::KeyBounds>,
}

/// What a checkpoint holds.
#[derive(Debug, Clone)]
pub struct CheckpointInfo {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// The live immutable files.
    pub files: Vec<CheckpointFile>,
    /// The manifest written into the directory.
    pub manifest: PathBuf,
    /// Every write with a sequence number up to this one is in the checkpoint, and no other.
    pub seqno: u64,
}

impl Db {
    /// Flushes, then captures the live files and a manifest into `target`, which must not exist or be empty
    /// ([`LsmError::DirectoryNotEmpty`] otherwise). Files are hard-linked where the filesystem allows, copied
    /// otherwise.
    pub fn checkpoint(&self, target: impl AsRef<Path>) -> Result<CheckpointInfo, LsmError> {
        let target = target.as_ref().to_path_buf();
        let storage = self.inner().opts.storage.clone();
        if storage.exists(&target) {
            let names = storage.list(&target).map_err(|e| io_err(&target, e))?;
            if !names.is_empty() {
                return Err(LsmError::DirectoryNotEmpty { dir: target });
            }
        } else {
            storage
                .create_dir_all(&target)
                .map_err(|e| io_err(&target, e))?;
        }
        self.flush()?;
        let inner = self.inner();
        // The manifest lock keeps the version and the flushed seqno consistent with each other.
        let (version, seqno) = {
            let _m = inner.manifest.lock();
            let st = inner.state.lock();
            (Arc::clone(&st.version), st.flushed_seqno)
        };
        let mut files = Vec::new();
        for (level, f) in version.files() {
            let dst = sst_path(&target, f.info.number);
            let linked = storage.hard_link(&f.path, &dst).is_ok();
            if !linked {
                io::copy_file_on(&*storage, &f.path, &dst)?;
            }
            files.push(CheckpointFile {
                number: f.info.number,
                level,
                size: f.info.size,
                path: dst,
                linked,
                bounds: f.info.bounds.clone(),
            });
        }
        let mut edit = inner.snapshot_edit(&version, Some(0));
        edit.last_seqno = Some(seqno);
        let number = inner.new_file_number();
        ManifestWriter::create(&*storage, &target, number, &edit)?;
        io::sync_dir_on(&*storage, &target)?;
        Ok(CheckpointInfo {
            dir: target.clone(),
            files,
            manifest: manifest_path(&target, number),
            seqno,
        })
    }
}

/// One file of a [`CapturedCheckpoint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFile {
    /// The file number (never reused: equal numbers mean identical files).
    pub number: u64,
    /// The level the file sits in.
    pub level: usize,
    /// Size in bytes.
    pub size: u64,
    /// Where the file is (kept on disk while the capture lives).
    pub path: PathBuf,
    /// The user keys the file is read as holding (`None`: all of it).
    pub bounds: Option<super::bounds::KeyBounds>,
}

/// The files holding exactly the writes up to a checkpoint's sequence number, kept on disk while this
/// lives (the version is pinned).
pub struct CapturedCheckpoint {
    /// The files, in level order.
    pub files: Vec<CapturedFile>,
    /// Every write with a sequence number up to this one is in the files, and no other.
    pub seqno: u64,
    /// Whether the files are the engine's whole version or its checkpoint view
    /// ([`Options::checkpoint_view`](super::Options::checkpoint_view)).
    pub view: CaptureView,
    _version: Arc<super::version::Version>,
    /// The files [`PendingCheckpoint::wait_with_overlay`] wrote: the capture's own (deleted with it) until
    /// [`adopt_overlay`](CapturedCheckpoint::adopt_overlay) makes them the engine's.
    overlay: OverlayFiles,
}

/// The overlay files of a capture. Unless an adoption was tried, they are marked obsolete when dropped (so
/// they go with their last reference, the capture's); once tried, they are the tree's (the edit naming them
/// may be durable even when installing it failed), and a file no manifest names is removed at the next open.
struct OverlayFiles {
    inner: Arc<super::inner::DbInner>,
    files: Vec<Arc<super::version::FileMeta>>,
    /// Their sequence number (the checkpoint's `S + 1`).
    seqno: u64,
    /// Whether the synchronous part reserved `seqno` ([`Db::begin_checkpoint_for_overlay`]): no engine
    /// write carries it.
    reserved: bool,
    /// An adoption was tried: the files are no longer the capture's alone.
    handed_to_tree: bool,
}

impl Drop for OverlayFiles {
    fn drop(&mut self) {
        if !self.handed_to_tree {
            for f in &self.files {
                f.mark_obsolete();
            }
        }
    }
}

impl std::fmt::Debug for CapturedCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedCheckpoint")
            .field("files", &self.files)
            .field("seqno", &self.seqno)
            .field("view", &self.view)
            .finish()
    }
}

enum Pending {
    Ready((Arc<super::version::Version>, CaptureView)),
    Waiting(u64),
}

/// The synchronous part of a two-part checkpoint ([`Db::begin_checkpoint`]); [`wait`](Self::wait) is the
/// asynchronous part.
pub struct PendingCheckpoint {
    inner: Arc<super::inner::DbInner>,
    seqno: u64,
    /// Whether `seqno + 1` is reserved for the overlay ([`Db::begin_checkpoint_for_overlay`]).
    reserved: bool,
    pending: Option<Pending>,
    _snapshot: super::snapshot::Snapshot,
}

static CAPTURE_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Db {
    /// The synchronous part of a checkpoint: pins the current sequence number `S` (a snapshot, so range
    /// deletes cannot drop files the state at `S` needs) and switches the memtable, without I/O. The engine's
    /// own flush of that memtable installs the version holding exactly the writes up to `S`;
    /// [`PendingCheckpoint::wait`] returns it (`design/checkpoints.md`, "The two parts").
    pub fn begin_checkpoint(&self) -> Result<PendingCheckpoint, LsmError> {
        self.begin_checkpoint_reserving(false)
    }

    /// As [`begin_checkpoint`](Self::begin_checkpoint), and reserves sequence number `S + 1` for the
    /// overlay [`PendingCheckpoint::wait_with_overlay`] writes: no later write of the engine carries it (the
    /// next one gets `S + 2`), so that the overlay's files can become the engine's own
    /// ([`CapturedCheckpoint::adopt_overlay`]).
    pub fn begin_checkpoint_for_overlay(&self) -> Result<PendingCheckpoint, LsmError> {
        self.begin_checkpoint_reserving(true)
    }

    fn begin_checkpoint_reserving(&self, reserve: bool) -> Result<PendingCheckpoint, LsmError> {
        let inner = self.inner();
        let mut w = inner.writer.lock();
        let seqno = inner.last_seqno.load(std::sync::atomic::Ordering::SeqCst);
        if reserve {
            // Every write takes its seqno under the writer lock, from `last_seqno`.
            inner
                .last_seqno
                .store(seqno + 1, std::sync::atomic::Ordering::SeqCst);
        }
        let snapshot = inner.snapshots.acquire(seqno);
        inner.make_room(&mut w, true)?;
        let mut st = inner.state.lock();
        let pending = match st.imm.front() {
            None => {
                let version = Arc::clone(&st.version);
                Pending::Ready(super::checkpoint_view::capture(
                    st.view_state(),
                    &version,
                    &inner.opts,
                ))
            }
            Some(m) => {
                let id = CAPTURE_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mem = Arc::clone(m);
                st.captures.push(super::inner::Capture {
                    id,
                    mem,
                    version: None,
                });
                Pending::Waiting(id)
            }
        };
        drop(st);
        drop(w);
        Ok(PendingCheckpoint {
            inner: Arc::clone(inner),
            seqno,
            reserved: reserve,
            pending: Some(pending),
            _snapshot: snapshot,
        })
    }
}

impl PendingCheckpoint {
    /// The checkpoint's sequence number.
    pub fn seqno(&self) -> u64 {
        self.seqno
    }

    /// Waits for the flush of the switched memtable and returns the files of the state at
    /// [`seqno`](Self::seqno). Fails with the engine's background error, with [`LsmError::Closed`] if the
    /// engine shut down first, or with [`LsmError::Cancelled`] once `cancelled` is set.
    pub fn wait(
        self,
        cancelled: &std::sync::atomic::AtomicBool,
    ) -> Result<CapturedCheckpoint, LsmError> {
        self.wait_with_overlay(cancelled, std::iter::empty::<(&[u8], Option<&[u8]>)>())
    }

    /// As [`wait`](Self::wait), with `overlay` on top of the engine's files: writes newer than every write
    /// up to [`seqno`](Self::seqno) that the engine does not hold (a cache's dirty entries handed over at
    /// the synchronous part), as `(user key, Some(value))` puts and `(user key, None)` deletes in strictly
    /// ascending key order. They are written into new SST files at sequence number `seqno + 1`, placed in
    /// L0 above every captured file (newest first), which belong to the capture alone (not part of the
    /// tree, deleted with the capture, unless [`CapturedCheckpoint::adopt_overlay`] makes them the engine's);
    /// the capture's `seqno` is then `seqno + 1`. Keys not strictly ascending fail with
    /// [`LsmError::NotAscending`].
    pub fn wait_with_overlay<'a, I>(
        mut self,
        cancelled: &std::sync::atomic::AtomicBool,
        overlay: I,
    ) -> Result<CapturedCheckpoint, LsmError>
    where
        I: IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    {
        let (version, view) = match self.pending.take() {
            Some(Pending::Ready(v)) => v,
            Some(Pending::Waiting(id)) => {
                let r = self.wait_capture(id, cancelled);
                self.inner.state.lock().captures.retain(|c| c.id != id);
                r?
            }
            None => return Err(LsmError::Closed),
        };
        let overlay_seqno = self.seqno + 1;
        let written = OverlayFiles {
            inner: Arc::clone(&self.inner),
            files: write_overlay(&self.inner, overlay, overlay_seqno, cancelled)?,
            seqno: overlay_seqno,
            reserved: self.reserved,
            handed_to_tree: false,
        };
        let seqno = if written.files.is_empty() {
            self.seqno
        } else {
            overlay_seqno
        };
        let describe = |level: usize, f: &Arc<super::version::FileMeta>| CapturedFile {
            number: f.info.number,
            level,
            size: f.info.size,
            path: f.path.clone(),
            bounds: f.info.bounds.clone(),
        };
        let files = written
            .files
            .iter()
            .map(|f| describe(0, f))
            .chain(version.files().map(|(level, f)| describe(level, f)))
            .collect();
        Ok(CapturedCheckpoint {
            files,
            seqno,
            view,
            _version: version,
            overlay: written,
        })
    }

    fn wait_capture(
        &self,
        id: u64,
        cancelled: &std::sync::atomic::AtomicBool,
    ) -> Result<(Arc<super::version::Version>, CaptureView), LsmError> {
        let inner = &self.inner;
        let mut st = inner.state.lock();
        loop {
            let Some(c) = st.captures.iter().find(|c| c.id == id) else {
                return Err(LsmError::Closed);
            };
            if let Some((v, what)) = &c.version {
                return Ok((Arc::clone(v), *what));
            }
            if let Some(e) = &st.bg_error {
                return Err(LsmError::Background(Arc::clone(e)));
            }
            if cancelled.load(std::sync::atomic::Ordering::Acquire) {
                return Err(LsmError::Cancelled);
            }
            if st.shutting_down && !st.imm.iter().any(|m| Arc::ptr_eq(m, &c.mem)) {
                return Err(LsmError::Closed);
            }
            // Bounded waits: cancellation is a flag, not a notification.
            inner
                .cv
                .wait_for(&mut st, std::time::Duration::from_millis(20));
        }
    }
}

/// Writes `overlay` (strictly ascending user keys; `None`: a delete) at `seqno` into new SST files that are
/// not part of the tree (the caller marks them obsolete or adopts them).
fn write_overlay<'a, I>(
    inner: &super::inner::DbInner,
    overlay: I,
    seqno: u64,
    cancelled: &std::sync::atomic::AtomicBool,
) -> Result<Vec<Arc<super::version::FileMeta>>, LsmError>
where
    I: IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
{
    use super::ikey::{self, ValueKind};
    // One file, as a flush writes one: adopted, it is one L0 file, not one per key prefix or size step.
    let mut out = super::flush::Outputs::new(inner, None, false);
    let mut last: Option<&[u8]> = None;
    let mut ikey_buf = Vec::new();
    for (n, (k, v)) in overlay.into_iter().enumerate() {
        if last.is_some_and(|l| l >= k) {
            // `out` is dropped unfinished and deletes what it wrote.
            return Err(LsmError::NotAscending { key: k.to_vec() });
        }
        if n % 4096 == 4095 && cancelled.load(std::sync::atomic::Ordering::Acquire) {
            return Err(LsmError::Cancelled);
        }
        last = Some(k);
        ikey_buf.clear();
        let kind = if v.is_some() {
            ValueKind::Put
        } else {
            ValueKind::Delete
        };
        ikey::encode(&mut ikey_buf, k, seqno, kind);
        out.add(&ikey_buf, v.unwrap_or_default())?;
    }
    out.finish()
}

impl CapturedCheckpoint {
    /// Whether the capture wrote overlay files that [`adopt_overlay`](Self::adopt_overlay) may make the
    /// engine's: some were written, their sequence number was reserved, and none was adopted yet.
    pub fn has_adoptable_overlay(&self) -> bool {
        let o = &self.overlay;
        !o.files.is_empty() && o.reserved && !o.handed_to_tree
    }

    /// Makes the overlay files the engine's own L0 files, so that the writes they hold are in the engine
    /// (at the checkpoint's `S + 1`) and the next checkpoint reuses them by number; they are then compacted
    /// and deleted as any engine file. `claim` is called at the moment of the adoption (the compaction lock
    /// held, so that no compaction runs until the files are in); `Some` from it goes ahead, and is returned
    /// once the files are in (a guard the caller holds across the adoption).
    ///
    /// The caller's contract, which `claim` stands for: **since the synchronous part, no write of a key the
    /// overlay holds has reached the engine**. The engine then holds nothing newer than `S + 1` for those
    /// keys, and an L0 file at `S + 1` is above every older version of them. The engine checks the one
    /// placement it can break itself: an L0 file whose sequence numbers span `S + 1` (a merge within L0 of
    /// runs older and newer than it, picked before the overlay was in) and whose keys overlap the overlay's
    /// sorts above it while holding older versions; then nothing is adopted.
    ///
    /// `Ok(None)`: nothing adopted (no adoptable overlay, see
    /// [`has_adoptable_overlay`](Self::has_adoptable_overlay); the engine closed or failed; a spanning L0 file; `claim` declined); the
    /// files stay the capture's. An error of installing the version ([`LsmError::Io`],
    /// [`LsmError::Background`]) leaves them the capture's to read too, and on disk until the next open
    /// unless the edit became durable.
    pub fn adopt_overlay<T>(
        &mut self,
        claim: impl FnOnce() -> Option<T>,
    ) -> Result<Option<T>, LsmError> {
        if !self.has_adoptable_overlay() {
            return Ok(None);
        }
        let o = &mut self.overlay;
        let inner = Arc::clone(&o.inner);
        let Some((lo, hi)) = super::compaction::key_range(&o.files) else {
            return Ok(None);
        };
        // No compaction runs (or is picked) until the files are in.
        let _c = inner.compaction_lock.lock();
        let join = {
            let mut st = inner.state.lock();
            if st.bg_error.is_some() || st.shutting_down {
                return Ok(None);
            }
            let spans = |v: &super::version::Version| {
                v.levels.first().is_some_and(|l0| {
                    l0.iter().any(|f| {
                        f.info.min_seqno < o.seqno
                            && f.info.max_seqno > o.seqno
                            && f.info.overlaps(&lo, &hi)
                    })
                })
            };
            if spans(&st.version) {
                return Ok(None);
            }
            // The checkpoint view may keep in L0 a file the version has moved down: one spanning `S + 1`
            // would sort above the files there and hide their newer values from a restore of the view.
            // The view is given up instead (the next capture takes the whole version).
            if st.view.as_deref().is_some_and(spans) {
                st.view_state().reset(None);
            }
            // Every write up to `S` is in L0 or below already (the checkpoint's flush came before the
            // overlay was written), and later flushes hold only writes above `S + 1`: the run below the
            // files now is the run below them for good.
            st.version
                .levels
                .first()
                .and_then(|l0| super::version::joined_run_start(l0, o.seqno))
        };
        let Some(claimed) = claim() else {
            return Ok(None);
        };
        o.handed_to_tree = true;
        if let Some(start) = join {
            // One sorted run with the run below (its range overlaps theirs): the checkpoint adds one run
            // to L0, not two. Only the recorded range changes (reads do not use it); the files are not
            // shared before they are in.
            for f in &mut o.files {
                if let Some(m) = Arc::get_mut(f) {
                    m.info.min_seqno = start;
                }
            }
        }
        let added: Vec<(usize, Arc<super::version::FileMeta>)> =
            o.files.iter().map(|f| (0, Arc::clone(f))).collect();
        // Writes newer than the view's files (at `S + 1`): the checkpoint view takes them as it takes a flush.
        inner.log_and_apply_as(
            super::version::VersionEdit::default(),
            &[],
            &added,
            false,
            super::checkpoint_view::ViewEdit::Append,
        )?;
        {
            // Every write up to `S` was flushed before the overlay was written; with it, up to `S + 1`.
            let mut st = inner.state.lock();
            if st.flushed_seqno + 1 >= o.seqno {
                st.flushed_seqno = st.flushed_seqno.max(o.seqno);
            }
        }
        drop(_c);
        // A compaction job that found the lock held meanwhile is asked for again.
        inner.request_jobs();
        Ok(Some(claimed))
    }
}

impl Drop for PendingCheckpoint {
    fn drop(&mut self) {
        if let Some(Pending::Waiting(id)) = self.pending.take() {
            self.inner.state.lock().captures.retain(|c| c.id != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::OsStorage;
    use crate::{adopt_sst_files, AdoptFile, Options};
    use std::sync::atomic::AtomicBool;

    #[test]
    fn an_overlay_is_written_above_the_captured_files_and_goes_with_the_capture() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("db"), Options::default()).unwrap();
        for k in [&b"a"[..], b"b", b"c"] {
            db.put(k, b"engine").unwrap();
        }
        db.flush().unwrap();
        db.put(b"d", b"memtable").unwrap();
        let pending = db.begin_checkpoint().unwrap();
        let s = pending.seqno();
        // Written after the synchronous part: not captured.
        db.put(b"e", b"after").unwrap();
        let no = AtomicBool::new(false);
        let overlay: Vec<(&[u8], Option<&[u8]>)> =
            vec![(b"a", Some(b"overlay")), (b"c", None), (b"z", Some(b"new"))];
        let cap = pending.wait_with_overlay(&no, overlay).unwrap();
        assert_eq!(cap.seqno, s + 1);
        assert_eq!(cap.files[0].level, 0);
        let overlay_path = cap.files[0].path.clone();
        assert!(overlay_path.exists());
        // The files adopted as a database read as the overlay on top of the state at `s`.
        let dst = dir.path().join("restored");
        std::fs::create_dir_all(&dst).unwrap();
        let adopt: Vec<AdoptFile> = cap
            .files
            .iter()
            .map(|f| {
                std::fs::copy(&f.path, super::sst_path(&dst, f.number)).unwrap();
                AdoptFile {
                    level: f.level,
                    number: f.number,
                    bounds: f.bounds.clone(),
                }
            })
            .collect();
        adopt_sst_files(&OsStorage, &dst, &adopt, cap.seqno, 7).unwrap();
        drop(cap);
        assert!(!overlay_path.exists(), "the capture's own files go with it");
        let r = Db::open(&dst, Options::default()).unwrap();
        assert_eq!(r.get(b"a").unwrap().as_deref(), Some(&b"overlay"[..]));
        assert_eq!(r.get(b"b").unwrap().as_deref(), Some(&b"engine"[..]));
        assert_eq!(r.get(b"c").unwrap(), None);
        assert_eq!(r.get(b"d").unwrap().as_deref(), Some(&b"memtable"[..]));
        assert_eq!(r.get(b"e").unwrap(), None);
        assert_eq!(r.get(b"z").unwrap().as_deref(), Some(&b"new"[..]));
        // Keys out of order are refused.
        let bad: Vec<(&[u8], Option<&[u8]>)> = vec![(b"b", None), (b"a", None)];
        let r = db.begin_checkpoint().unwrap().wait_with_overlay(&no, bad);
        assert!(matches!(r, Err(LsmError::NotAscending { .. })), "{r:?}");
    }

    fn live(db: &Db) -> Vec<u64> {
        let v = Arc::clone(&db.inner().state.lock().version);
        v.files().map(|(_, f)| f.info.number).collect()
    }

    fn overlay_of<'a>(
        pairs: &'a [(&'a [u8], Option<&'a [u8]>)],
    ) -> Vec<(&'a [u8], Option<&'a [u8]>)> {
        pairs.to_vec()
    }

    #[test]
    fn an_adopted_overlay_is_the_engines_own_and_the_next_checkpoint_reuses_it() {
        let dir = tempfile::tempdir().unwrap();
        // Without the checkpoint view, which would keep the compacted-away file for the next checkpoint.
        let opts = Options {
            checkpoint_view: false,
            ..Options::default()
        };
        let db = Db::open(dir.path().join("db"), opts.clone()).unwrap();
        for k in [&b"a"[..], b"b", b"c"] {
            db.put(k, b"engine").unwrap();
        }
        db.flush().unwrap();
        let pending = db.begin_checkpoint_for_overlay().unwrap();
        let s = pending.seqno();
        // Written after the synchronous part: not captured, and newer than the overlay's seqno.
        db.put(b"e", b"after").unwrap();
        assert_eq!(
            db.stats().last_seqno,
            s + 2,
            "the next write skips the reserved seqno"
        );
        let no = AtomicBool::new(false);
        let pairs: [(&[u8], Option<&[u8]>); 3] =
            [(b"a", Some(b"overlay")), (b"c", None), (b"z", Some(b"new"))];
        let mut cap = pending.wait_with_overlay(&no, overlay_of(&pairs)).unwrap();
        assert_eq!(cap.seqno, s + 1);
        assert!(cap.has_adoptable_overlay());
        let overlay_numbers: Vec<u64> = cap
            .files
            .iter()
            .filter(|f| f.level == 0 && !live(&db).contains(&f.number))
            .map(|f| f.number)
            .collect();
        assert_eq!(overlay_numbers.len(), 1);
        assert_eq!(cap.adopt_overlay(|| Some(7)).unwrap(), Some(7));
        assert!(!cap.has_adoptable_overlay(), "adopted once");
        let overlay_path = cap.files[0].path.clone();
        drop(cap);
        assert!(
            overlay_path.exists(),
            "an adopted file outlives the capture"
        );
        assert!(live(&db).contains(&overlay_numbers[0]));
        // Reads see the overlay under the newer write.
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"overlay"[..]));
        assert_eq!(db.get(b"c").unwrap(), None);
        assert_eq!(db.get(b"z").unwrap().as_deref(), Some(&b"new"[..]));
        assert_eq!(db.get(b"e").unwrap().as_deref(), Some(&b"after"[..]));
        db.put(b"a", b"later").unwrap();
        // The next checkpoint holds the adopted file by its number.
        let next = db.begin_checkpoint().unwrap().wait(&no).unwrap();
        assert!(next.files.iter().any(|f| f.number == overlay_numbers[0]));
        drop(next);
        // Compaction merges it like any engine file; newer writes stay on top.
        db.compact_all().unwrap();
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"later"[..]));
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"engine"[..]));
        assert_eq!(db.get(b"c").unwrap(), None);
        assert_eq!(db.get(b"z").unwrap().as_deref(), Some(&b"new"[..]));
        assert!(!live(&db).contains(&overlay_numbers[0]));
        assert!(
            !overlay_path.exists(),
            "compacted away and unreferenced: deleted"
        );
        // Reopened, the engine reads the same.
        drop(db);
        let db = Db::open(dir.path().join("db"), Options::default()).unwrap();
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"later"[..]));
        assert_eq!(db.get(b"z").unwrap().as_deref(), Some(&b"new"[..]));
        assert_eq!(db.get(b"c").unwrap(), None);
    }

    #[test]
    fn an_overlay_adopted_before_a_crash_is_read_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let opts = || Options {
            wal: true,
            ..Options::default()
        };
        let db = Db::open(&path, opts()).unwrap();
        db.put(b"a", b"engine").unwrap();
        let pending = db.begin_checkpoint_for_overlay().unwrap();
        db.put(b"b", b"after").unwrap();
        let no = AtomicBool::new(false);
        let pairs: [(&[u8], Option<&[u8]>); 1] = [(b"a", Some(b"overlay"))];
        let mut cap = pending.wait_with_overlay(&no, overlay_of(&pairs)).unwrap();
        assert!(cap.adopt_overlay(|| Some(())).unwrap().is_some());
        drop(cap);
        // No flush, no close: the WAL holds "b", the manifest the adopted file.
        db.abandon();
        let db = Db::open(&path, opts()).unwrap();
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"overlay"[..]));
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"after"[..]));
        db.put(b"a", b"later").unwrap();
        db.flush().unwrap();
        db.compact_all().unwrap();
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"later"[..]));
    }

    #[test]
    fn a_checkpoint_with_an_adopted_overlay_adds_one_l0_run_as_its_flush_alone_would() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let opts = || Options {
            auto_compaction: false,
            ..Options::default()
        };
        let db = Db::open(&path, opts()).unwrap();
        let no = AtomicBool::new(false);
        let runs = |db: &Db| db.stats().l0_sorted_runs;
        for round in 0..4u8 {
            // The engine's writes (flushed by the checkpoint) and the overlay share key "k": the overlay's
            // value, at the reserved seqno, is the newer one.
            db.put(b"k", &[b'e', round]).unwrap();
            db.put(&[b'e', round], b"engine").unwrap();
            let pending = db.begin_checkpoint_for_overlay().unwrap();
            db.put(&[b'x', round], b"after").unwrap();
            let (k, v) = (&b"k"[..], [b'o', round]);
            let pairs: [(&[u8], Option<&[u8]>); 1] = [(k, Some(&v[..]))];
            let mut cap = pending.wait_with_overlay(&no, overlay_of(&pairs)).unwrap();
            assert!(cap.adopt_overlay(|| Some(())).unwrap().is_some());
            // The flush and the adopted file: one run, as the flush alone.
            assert_eq!(runs(&db), usize::from(round) + 1, "round {round}");
            assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&v[..]));
        }
        // The writes after the last checkpoint's synchronous part, flushed before the next checkpoint: their
        // own run, which that checkpoint's file (nothing left to flush) joins; the file of one more
        // checkpoint is a run of its own, never a second file joined to that run.
        db.flush().unwrap();
        assert_eq!(runs(&db), 5);
        for round in 0..2u8 {
            let pending = db.begin_checkpoint_for_overlay().unwrap();
            let v = [b'n', round];
            let pairs: [(&[u8], Option<&[u8]>); 1] = [(b"k", Some(&v[..]))];
            let mut cap = pending.wait_with_overlay(&no, overlay_of(&pairs)).unwrap();
            assert!(cap.adopt_overlay(|| Some(())).unwrap().is_some());
            assert_eq!(runs(&db), 5 + usize::from(round), "round {round}");
        }
        drop(db);
        // The recorded ranges are the manifest's: reopened, the same runs, and the newest value.
        let db = Db::open(&path, opts()).unwrap();
        assert_eq!(runs(&db), 6);
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"n\x01"[..]));
        assert_eq!(db.get(b"e\x03").unwrap().as_deref(), Some(&b"engine"[..]));
        // A merge of all L0 reads the same.
        db.compact_all().unwrap();
        assert_eq!(runs(&db), 0);
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"n\x01"[..]));
        assert_eq!(db.get(b"x\x03").unwrap().as_deref(), Some(&b"after"[..]));
    }

    #[test]
    fn a_declined_claim_or_an_unreserved_seqno_leaves_the_overlay_to_the_capture() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("db"), Options::default()).unwrap();
        db.put(b"a", b"engine").unwrap();
        let no = AtomicBool::new(false);
        let pairs: [(&[u8], Option<&[u8]>); 1] = [(b"a", Some(b"overlay"))];
        for reserve in [true, false] {
            let pending = if reserve {
                db.begin_checkpoint_for_overlay().unwrap()
            } else {
                db.begin_checkpoint().unwrap()
            };
            let mut cap = pending.wait_with_overlay(&no, overlay_of(&pairs)).unwrap();
            assert_eq!(cap.has_adoptable_overlay(), reserve);
            let mut asked = false;
            let got = cap
                .adopt_overlay(|| {
                    asked = true;
                    None::<()>
                })
                .unwrap();
            assert!(got.is_none());
            assert_eq!(
                asked, reserve,
                "the claim is asked only of an adoptable overlay"
            );
            let path = cap.files[0].path.clone();
            drop(cap);
            assert!(!path.exists(), "not adopted: deleted with the capture");
            assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"engine"[..]));
        }
    }
}

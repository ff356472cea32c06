//! [`FaultFs`]: an in-memory [`Storage`] for tests that loses what a crash loses and fails where it is told.
//!
//! It keeps two images, as redb's crash tests do: the *live* one (what reads see now) and the *durable* one
//! (what survives a crash). Bytes appended to a file become durable at the file's sync; a created, renamed,
//! linked or removed directory entry becomes durable at the sync of its directory. [`FaultFs::crash`] stops
//! every further operation (they fail with an error reading "storage crashed", as if the machine were
//! gone); [`FaultFs::reboot`] then replaces the live image with the durable one and invalidates every handle
//! opened before.
//!
//! Every call is one numbered *operation* ([`FaultFs::ops`]): a create, a write, a sync, a rename, a read,
//! and so on. [`FaultFs::crash_at`] crashes at the N-th one (it does not happen), which is how a test
//! enumerates crash points; [`FaultFs::inject`] makes matching operations fail with `EIO` or `ENOSPC`, write
//! only half of their bytes, and [`FaultFs::set_capacity`] models a full disk.
//!
//! Simplifications, all on the side of keeping data: directories are durable once created, and a file's
//! size and bytes become durable together at its sync.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{parent_dir, DirLock, FileBytes, NewFile, Storage, WritableFile};

/// The kinds of operation a [`Fault`] can match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Any operation.
    Any,
    /// Creating a file.
    Create,
    /// Appending to a file.
    Write,
    /// Syncing a file.
    Sync,
    /// Renaming.
    Rename,
    /// Removing a file.
    Remove,
    /// Syncing a directory.
    SyncDir,
    /// Reading, mapping or sizing a file.
    Read,
    /// Listing a directory, creating one, linking, locking.
    Meta,
}

/// What an injected fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Fails with `EIO`, changing nothing.
    Eio,
    /// Fails with `ENOSPC`, changing nothing.
    NoSpace,
    /// A write that appends the first half of its bytes, then fails with `EIO`; other operations fail
    /// with `EIO`.
    ShortWrite,
}

/// A fault: operations of kind `op` on paths containing `path_contains` fail with `effect`, after `skip`
/// matching ones went through, `times` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The kind of operation.
    pub op: Op,
    /// A substring of the path (empty: any path).
    pub path_contains: String,
    /// Matching operations that succeed before the fault strikes.
    pub skip: u64,
    /// How many matching operations fail (`u64::MAX`: all of them, until [`FaultFs::clear_faults`]).
    pub times: u64,
    /// What happens.
    pub effect: Effect,
}

impl Fault {
    /// Every operation of kind `op` on a path containing `path_contains` fails with `effect`.
    pub fn always(op: Op, path_contains: &str, effect: Effect) -> Self {
        Fault {
            op,
            path_contains: path_contains.to_string(),
            skip: 0,
            times: u64::MAX,
            effect,
        }
    }

    /// The next operation of kind `op` on a path containing `path_contains` fails with `effect`, once.
    pub fn once(op: Op, path_contains: &str, effect: Effect) -> Self {
        Fault {
            times: 1,
            ..Self::always(op, path_contains, effect)
        }
    }
}

struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Default)]
struct FsState {
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    live: BTreeMap<PathBuf, u64>,
    durable: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
    epoch: u64,
    ops: u64,
    crash_at: Option<u64>,
    crashed: bool,
    faults: Vec<Fault>,
    capacity: Option<u64>,
    trace: Option<Vec<String>>,
}

fn os_err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

/// What an operation may do, after faults were checked.
enum Go {
    Proceed,
    Fail(io::Error),
    Short,
}

impl FsState {
    /// Counts one operation and decides its fate.
    fn op(&mut self, op: Op, path: &Path) -> Go {
        self.ops += 1;
        if let Some(t) = &mut self.trace {
            t.push(format!("{} {op:?} {}", self.ops, path.display()));
        }
        if self.crashed {
            return Go::Fail(io::Error::other("storage crashed"));
        }
        if self.crash_at == Some(self.ops) {
            self.crashed = true;
            return Go::Fail(io::Error::other("storage crashed"));
        }
        let shown = path.to_string_lossy();
        for f in &mut self.faults {
            if (f.op == Op::Any || f.op == op)
                && f.times > 0
                && shown.contains(f.path_contains.as_str())
            {
                if f.skip > 0 {
                    f.skip -= 1;
                    continue;
                }
                if f.times != u64::MAX {
                    f.times -= 1;
                }
                return match f.effect {
                    Effect::Eio => Go::Fail(os_err(libc::EIO)),
                    Effect::NoSpace => Go::Fail(os_err(libc::ENOSPC)),
                    Effect::ShortWrite if op == Op::Write => Go::Short,
                    Effect::ShortWrite => Go::Fail(os_err(libc::EIO)),
                };
            }
        }
        Go::Proceed
    }

    fn check(&mut self, op: Op, path: &Path) -> io::Result<()> {
        match self.op(op, path) {
            Go::Proceed | Go::Short => Ok(()),
            Go::Fail(e) => Err(e),
        }
    }

    fn used(&self) -> u64 {
        let mut seen = BTreeSet::new();
        self.live
            .values()
            .filter(|i| seen.insert(**i))
            .filter_map(|i| self.inodes.get(i))
            .map(|n| n.live.len() as u64)
            .sum()
    }

    fn new_file(&mut self, path: &Path, truncate: bool) -> io::Result<u64> {
        if !self.dirs.contains(&parent_dir(path)) {
            return Err(not_found(&parent_dir(path)));
        }
        if let Some(&ino) = self.live.get(path) {
            if !truncate {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            // Truncating a file: its durable size shrinks only at its next sync.
            if let Some(n) = self.inodes.get_mut(&ino) {
                n.live.clear();
            }
            return Ok(ino);
        }
        self.next_inode += 1;
        let ino = self.next_inode;
        self.inodes.insert(
            ino,
            Inode {
                live: Vec::new(),
                durable: Vec::new(),
            },
        );
        self.live.insert(path.to_path_buf(), ino);
        Ok(ino)
    }

    fn live_bytes(&self, path: &Path) -> io::Result<&Vec<u8>> {
        self.live
            .get(path)
            .and_then(|i| self.inodes.get(i))
            .map(|n| &n.live)
            .ok_or_else(|| not_found(path))
    }
}

/// An in-memory file system with a live and a durable image and fault injection (see the module docs).
/// Cloning shares the file system.
#[derive(Clone, Default)]
pub struct FaultFs {
    state: Arc<Mutex<FsState>>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("FaultFs")
            .field("files", &st.live.len())
            .field("ops", &st.ops)
            .field("crashed", &st.crashed)
            .finish_non_exhaustive()
    }
}

impl FaultFs {
    /// An empty file system holding only the root directory `/`.
    pub fn new() -> Self {
        let fs = FaultFs::default();
        fs.state.lock().dirs.insert(PathBuf::from("/"));
        fs
    }

    /// Operations performed so far (every call counts, failed or not).
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Crashes at operation number `n` (counted from 1 over the file system's life): that operation and all
    /// later ones fail until [`FaultFs::reboot`].
    pub fn crash_at(&self, n: u64) {
        self.state.lock().crash_at = Some(n);
    }

    /// Crashes now.
    pub fn crash(&self) {
        self.state.lock().crashed = true;
    }

    /// Whether the file system crashed (and was not rebooted since).
    pub fn crashed(&self) -> bool {
        self.state.lock().crashed
    }

    /// Keeps a line per operation from now on, for [`FaultFs::trace`].
    pub fn enable_trace(&self) {
        self.state.lock().trace = Some(Vec::new());
    }

    /// The operations recorded since [`FaultFs::enable_trace`]: number, kind, path.
    pub fn trace(&self) -> Vec<String> {
        self.state.lock().trace.clone().unwrap_or_default()
    }

    /// Brings the file system back after a crash (or simulates one now): the live image becomes the
    /// durable one (unsynced bytes and directory entries are lost), locks are released, faults and the
    /// crash point are cleared, and handles opened before fail from now on.
    pub fn reboot(&self) {
        let mut st = self.state.lock();
        st.live = st.durable.clone();
        let keep: BTreeSet<u64> = st.durable.values().copied().collect();
        st.inodes.retain(|i, _| keep.contains(i));
        for n in st.inodes.values_mut() {
            n.live = n.durable.clone();
        }
        st.locks.clear();
        st.epoch += 1;
        st.crashed = false;
        st.crash_at = None;
        st.faults.clear();
        st.capacity = None;
    }

    /// Adds a fault.
    pub fn inject(&self, fault: Fault) {
        self.state.lock().faults.push(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// Caps the bytes all live files may hold (`None`: unlimited); a write past it appends what fits and
    /// fails with `ENOSPC`.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.lock().capacity = bytes;
    }

    /// Bytes held by live files.
    pub fn used_bytes(&self) -> u64 {
        self.state.lock().used()
    }

    /// The names of the live files, sorted, with their sizes (for test diagnostics).
    pub fn listing(&self) -> Vec<(PathBuf, usize)> {
        let st = self.state.lock();
        st.live
            .iter()
            .map(|(p, i)| (p.clone(), st.inodes.get(i).map_or(0, |n| n.live.len())))
            .collect()
    }

    /// The live bytes of a file, without counting an operation (for tests that damage or inspect files).
    pub fn peek(&self, path: &Path) -> Option<Vec<u8>> {
        self.state.lock().live_bytes(path).ok().cloned()
    }

    fn file(&self, st: &FsState, ino: u64, path: &Path) -> NewFile {
        NewFile::Other(Box::new(FaultFile {
            state: Arc::clone(&self.state),
            ino,
            path: path.to_path_buf(),
            epoch: st.epoch,
        }))
    }
}

struct FaultFile {
    state: Arc<Mutex<FsState>>,
    ino: u64,
    path: PathBuf,
    epoch: u64,
}

impl FaultFile {
    fn stale(&self, st: &FsState) -> io::Result<()> {
        if st.epoch != self.epoch {
            return Err(io::Error::other("file handle from before a crash"));
        }
        Ok(())
    }
}

impl WritableFile for FaultFile {
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        let go = st.op(Op::Write, &self.path);
        self.stale(&st)?;
        let (take, err) = match go {
            Go::Fail(e) => return Err(e),
            Go::Short => (data.len() / 2, Some(os_err(libc::EIO))),
            Go::Proceed => (data.len(), None),
        };
        let (take, err) = match st.capacity {
            Some(cap) => {
                let room = cap.saturating_sub(st.used()) as usize;
                if room < take {
                    (room, Some(os_err(libc::ENOSPC)))
                } else {
                    (take, err)
                }
            }
            None => (take, err),
        };
        let n = st
            .inodes
            .get_mut(&self.ino)
            .ok_or_else(|| not_found(&self.path))?;
        n.live.extend_from_slice(data.get(..take).unwrap_or(data));
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(Op::Sync, &self.path)?;
        self.stale(&st)?;
        let n = st
            .inodes
            .get_mut(&self.ino)
            .ok_or_else(|| not_found(&self.path))?;
        n.durable = n.live.clone();
        Ok(())
    }
}

struct FaultLock {
    state: Arc<Mutex<FsState>>,
    path: PathBuf,
    epoch: u64,
}

impl DirLock for FaultLock {}

impl Drop for FaultLock {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        if st.epoch == self.epoch {
            st.locks.remove(&self.path);
        }
    }
}

/// A file of a [`FaultFs`] read front to back ([`Storage::open_read`]): every `read` call is an
/// operation ([`Op::Read`]), so a fault or a crash can strike in the middle of the file.
struct FaultReader<'a> {
    fs: &'a FaultFs,
    path: PathBuf,
    bytes: Vec<u8>,
    at: usize,
}

impl io::Read for FaultReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.fs.state.lock().check(Op::Read, &self.path)?;
        let rest = self.bytes.get(self.at..).unwrap_or_default();
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.at += n;
        Ok(n)
    }
}

impl Storage for FaultFs {
    fn create(&self, path: &Path) -> io::Result<NewFile> {
        let mut st = self.state.lock();
        st.check(Op::Create, path)?;
        let ino = st.new_file(path, false)?;
        Ok(self.file(&st, ino, path))
    }

    fn create_or_truncate(&self, path: &Path) -> io::Result<NewFile> {
        let mut st = self.state.lock();
        st.check(Op::Create, path)?;
        let ino = st.new_file(path, true)?;
        Ok(self.file(&st, ino, path))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut st = self.state.lock();
        st.check(Op::Read, path)?;
        st.live_bytes(path).cloned()
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn io::Read + '_>> {
        let mut st = self.state.lock();
        st.check(Op::Read, path)?;
        let bytes = st.live_bytes(path)?.clone();
        Ok(Box::new(FaultReader {
            fs: self,
            path: path.to_path_buf(),
            bytes,
            at: 0,
        }))
    }

    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        let mut st = self.state.lock();
        st.check(Op::Read, path)?;
        let bytes = st.live_bytes(path)?;
        Ok(FileBytes::Mem(Arc::from(bytes.as_slice())))
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        let mut st = self.state.lock();
        st.check(Op::Read, path)?;
        st.live_bytes(path).map(|b| b.len() as u64)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(Op::Rename, to)?;
        if !st.dirs.contains(&parent_dir(to)) {
            return Err(not_found(&parent_dir(to)));
        }
        let ino = st.live.remove(from).ok_or_else(|| not_found(from))?;
        st.live.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(Op::Remove, path)?;
        st.live
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(Op::SyncDir, dir)?;
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let in_dir = |p: &Path| p.parent() == Some(dir);
        st.durable.retain(|p, _| !in_dir(p));
        let entries: Vec<(PathBuf, u64)> = st
            .live
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        st.durable.extend(entries);
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut st = self.state.lock();
        st.check(Op::Meta, dir)?;
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let mut names: Vec<String> = st
            .live
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        names.extend(
            st.dirs
                .iter()
                .filter(|p| p.parent() == Some(dir))
                .filter_map(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned()),
        );
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(Op::Meta, dir)?;
        for a in dir.ancestors() {
            if !a.as_os_str().is_empty() {
                st.dirs.insert(a.to_path_buf());
            }
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock();
        st.live.contains_key(path) || st.dirs.contains(path)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(Op::Meta, to)?;
        if st.live.contains_key(to) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        if !st.dirs.contains(&parent_dir(to)) {
            return Err(not_found(&parent_dir(to)));
        }
        let ino = *st.live.get(from).ok_or_else(|| not_found(from))?;
        st.live.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        let mut st = self.state.lock();
        st.check(Op::Meta, path)?;
        if !st.locks.insert(path.to_path_buf()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(Box::new(FaultLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
            epoch: st.epoch,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(fs: &FaultFs, p: &str, data: &[u8], sync: bool) {
        let mut f = fs.create(Path::new(p)).unwrap();
        f.write_all(data).unwrap();
        if sync {
            f.sync().unwrap();
        }
    }

    #[test]
    fn unsynced_bytes_and_unsynced_entries_are_lost_at_a_crash() {
        let fs = FaultFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        write(&fs, "/d/synced", b"abc", true);
        write(&fs, "/d/unsynced", b"xyz", false);
        fs.sync_dir(Path::new("/d")).unwrap();
        write(&fs, "/d/late", b"123", true);
        fs.rename(Path::new("/d/synced"), Path::new("/d/moved"))
            .unwrap();
        fs.reboot();
        let d = Path::new("/d");
        assert_eq!(fs.read(&d.join("synced")).unwrap(), b"abc");
        assert_eq!(fs.read(&d.join("unsynced")).unwrap(), b"");
        assert!(!fs.exists(&d.join("late")), "entry never synced");
        assert!(!fs.exists(&d.join("moved")), "rename never synced");
    }

    #[test]
    fn a_synced_rename_replaces_its_target_and_old_handles_fail_after_a_reboot() {
        let fs = FaultFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        write(&fs, "/d/a", b"old", true);
        write(&fs, "/d/a.tmp", b"new", true);
        let mut open = fs.create(Path::new("/d/b")).unwrap();
        fs.rename(Path::new("/d/a.tmp"), Path::new("/d/a")).unwrap();
        fs.sync_dir(Path::new("/d")).unwrap();
        fs.reboot();
        assert_eq!(fs.read(Path::new("/d/a")).unwrap(), b"new");
        assert!(open.write_all(b"x").is_err());
    }

    #[test]
    fn faults_strike_where_told_and_a_crash_stops_everything() {
        let fs = FaultFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        fs.inject(Fault::once(Op::Write, ".log", Effect::ShortWrite));
        let mut f = fs.create(Path::new("/d/1.log")).unwrap();
        assert!(f.write_all(b"abcd").is_err());
        assert_eq!(fs.peek(Path::new("/d/1.log")).unwrap(), b"ab");
        f.write_all(b"ef").unwrap();
        fs.set_capacity(Some(5));
        let e = f.write_all(b"gh").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(fs.peek(Path::new("/d/1.log")).unwrap(), b"abefg");
        fs.set_capacity(None);
        let at = fs.ops() + 2;
        fs.crash_at(at);
        f.write_all(b"1").unwrap();
        assert!(f.sync().is_err());
        assert!(fs.crashed());
        assert!(fs.read(Path::new("/d/1.log")).is_err());
    }
}

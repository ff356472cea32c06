//! The storage seam: every durable byte the engine writes or reads goes through a [`Storage`] — SST files
//! (written through [`Storage::create`], read through [`Storage::map`]), the WAL, the manifest
//! and `CURRENT`, directory syncs, renames, deletes, listings and the directory lock.
//!
//! [`OsStorage`] (the default) is the real file system. It hands out plain [`File`]s
//! ([`NewFile::Os`]), so the writers keep their `write(2)` paths and the SST reader keeps its
//! memory map: the hot paths (WAL append, SST block reads) branch on an enum once per call, as before, and
//! make no dynamic call. Any other implementation (`fault::FaultFs` (feature `test-util`), the fault-injecting one for tests)
//! hands out [`NewFile::Other`] boxes and in-memory images behind the same byte-slice interface.

#[cfg(any(test, feature = "test-util"))]
pub mod fault;

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
#[cfg(any(test, feature = "test-util"))]
use std::path::PathBuf;
use std::sync::Arc;

use memmap2::Mmap;

/// A file being written: appended to, then synced. Created by [`Storage::create`] when the storage is not
/// the real file system.
pub trait WritableFile: Send + Sync {
    /// Appends all of `data` (an error may leave a prefix of it written).
    fn write_all(&mut self, data: &[u8]) -> io::Result<()>;
    /// Makes every byte appended so far durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
}

/// A newly created file: a real one (written with the writers' own system calls) or a storage's own.
pub enum NewFile {
    /// A file of the real file system.
    Os(File),
    /// A file of another storage.
    Other(Box<dyn WritableFile>),
}

impl fmt::Debug for NewFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NewFile::Os(file) => f.debug_tuple("Os").field(file).finish(),
            NewFile::Other(_) => f.write_str("Other"),
        }
    }
}

impl NewFile {
    /// Appends all of `data`.
    pub fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            NewFile::Os(f) => io::Write::write_all(f, data),
            NewFile::Other(f) => f.write_all(data),
        }
    }

    /// Makes the data appended so far durable (`fdatasync` on a real file).
    pub fn sync(&mut self) -> io::Result<()> {
        match self {
            NewFile::Os(f) => f.sync_data(),
            NewFile::Other(f) => f.sync(),
        }
    }
}

/// The whole content of an immutable file, as one byte slice: a memory map of a real file, or an image in
/// memory.
#[derive(Clone)]
pub enum FileBytes {
    /// A read-only memory map.
    Map(Arc<Mmap>),
    /// Bytes in memory.
    Mem(Arc<[u8]>),
}

impl FileBytes {
    /// The bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match self {
            FileBytes::Map(m) => m,
            FileBytes::Mem(b) => b,
        }
    }
}

/// A held lock on a database directory, released when dropped.
pub trait DirLock: Send + Sync {}

impl DirLock for File {}

/// Where durable bytes live. Paths are the engine's own (a database directory joined with file names).
///
/// Semantics every implementation keeps (those of POSIX file systems, which `fault::FaultFs` (feature `test-util`) models): data
/// appended to a file is durable only after the file's [`WritableFile::sync`]; a created, renamed or removed
/// directory entry is durable only after [`Storage::sync_dir`] of its directory; a rename replaces its
/// target atomically.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates a new file for writing, failing if it exists (`O_CREAT | O_EXCL`).
    fn create(&self, path: &Path) -> io::Result<NewFile>;
    /// Creates or truncates a file for writing (used for `CURRENT.tmp`).
    fn create_or_truncate(&self, path: &Path) -> io::Result<NewFile>;
    /// Reads a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Appends the whole content of a file to `out`.
    fn read_append(&self, path: &Path, out: &mut Vec<u8>) -> io::Result<()> {
        out.extend_from_slice(&self.read(path)?);
        Ok(())
    }
    /// Maps a whole immutable file (never modified while mapped: SST files are written once).
    fn map(&self, path: &Path) -> io::Result<FileBytes>;
    /// Opens a file for reading from its start, front to back, so a large file can be streamed without a
    /// map (an I/O error is then an error, not a signal). The default reads the whole file with
    /// [`Storage::read`]; a storage of large real files overrides it.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn io::Read + '_>> {
        Ok(Box::new(io::Cursor::new(self.read(path)?)))
    }
    /// The size of a file in bytes.
    fn file_size(&self, path: &Path) -> io::Result<u64>;
    /// Renames `from` to `to`, replacing `to` atomically.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of directory `dir` durable (files created, renamed or removed in it).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// The names of the entries of directory `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates a directory and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Links `to` to the file at `from` (a second name for the same bytes).
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes `to`, a new file of this storage, hold the bytes of `from`, a file of the real file system
    /// (a checkpoint object on a local root); not synced.
    fn import(&self, from: &Path, to: &Path) -> io::Result<()> {
        let bytes = std::fs::read(from)?;
        self.create(to)?.write_all(&bytes)
    }
    /// Takes the exclusive lock of a database directory (the file `path`), failing with
    /// [`io::ErrorKind::WouldBlock`] if another handle holds it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>>;
}

/// The real file system (the default storage).
#[derive(Debug, Clone, Copy, Default)]
pub struct OsStorage;

impl Storage for OsStorage {
    fn create(&self, path: &Path) -> io::Result<NewFile> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map(NewFile::Os)
    }

    fn create_or_truncate(&self, path: &Path) -> io::Result<NewFile> {
        File::create(path).map(NewFile::Os)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn read_append(&self, path: &Path, out: &mut Vec<u8>) -> io::Result<()> {
        io::Read::read_to_end(&mut File::open(path)?, out).map(|_| ())
    }

    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        let file = File::open(path)?;
        // SAFETY: the engine maps only immutable files (SST files are written once under a fresh name, never
        // truncated or rewritten, and deleted only by unlinking, which leaves a map valid); the map is
        // read-only.
        let map = unsafe { Mmap::map(&file) }?;
        Ok(FileBytes::Map(Arc::new(map)))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn io::Read + '_>> {
        Ok(Box::new(File::open(path)?))
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        std::fs::metadata(path).map(|m| m.len())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        crate::fsutil::sync_dir(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for ent in std::fs::read_dir(dir)? {
            out.push(ent?.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }

    fn import(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to).or_else(|_| std::fs::copy(from, to).map(|_| ()))
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        use std::os::fd::AsRawFd;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        // SAFETY: `flock` only reads the descriptor, which `file` owns and keeps open for the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(Box::new(file))
    }
}

/// The storage a database uses: shared, cheap to clone; the real file system by default.
#[derive(Clone)]
pub struct StorageHandle(Arc<dyn Storage>);

impl StorageHandle {
    /// Wraps a storage.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        StorageHandle(storage)
    }

    /// The real file system.
    pub fn os() -> Self {
        StorageHandle(Arc::new(OsStorage))
    }
}

impl Default for StorageHandle {
    fn default() -> Self {
        Self::os()
    }
}

impl std::ops::Deref for StorageHandle {
    type Target = dyn Storage;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for StorageHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<S: Storage + 'static> From<Arc<S>> for StorageHandle {
    fn from(s: Arc<S>) -> Self {
        StorageHandle(s)
    }
}

/// The parent directory of `path` (`.` for a bare name).
#[cfg(any(test, feature = "test-util"))]
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

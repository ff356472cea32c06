//! File-writing I/O: a buffered, append-only [`FileWriter`] and [`copy_file`], each running over io_uring when
//! the kernel allows it and plain `write(2)`/`copy_file_range(2)` otherwise, chosen at run time.
//!
//! `IoUring::new` fails with `ENOSYS` or `EPERM` on old kernels and in sandboxes (seccomp, gVisor,
//! `io_uring_disabled`); [`IoMode::Auto`] then falls back to plain I/O. Operations are submitted one at a time
//! and waited for before the buffer they borrow is touched again, so no buffer is ever shared with the kernel
//! past the call that submitted it.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use io_uring::{opcode, squeue, types, IoUring};

use super::storage::{NewFile, OsStorage, Storage, WritableFile};
use super::LsmError;

/// Default write buffer of a [`FileWriter`].
pub const DEFAULT_BUFFER: usize = 256 * 1024;
/// Chunk size of [`copy_file`].
const COPY_CHUNK: usize = 1024 * 1024;

/// How file I/O is performed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// io_uring when the kernel allows it, plain I/O otherwise.
    #[default]
    Auto,
    /// io_uring only; creating a writer fails if the kernel refuses io_uring.
    IoUring,
    /// Plain blocking system calls.
    Plain,
}

/// Whether this process may use io_uring (probed once by creating a small ring).
pub fn io_uring_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| IoUring::new(4).is_ok())
}

/// An [`LsmError::Io`] for `source` on `path`.
pub(crate) fn io_err(path: &Path, source: io::Error) -> LsmError {
    LsmError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Creates a ring for `mode`: `None` means plain I/O.
fn ring_for(mode: IoMode, path: &Path) -> Result<Option<IoUring>, LsmError> {
    match mode {
        IoMode::Plain => Ok(None),
        IoMode::Auto if !io_uring_available() => Ok(None),
        IoMode::Auto => Ok(IoUring::new(8).ok()),
        IoMode::IoUring => IoUring::new(8).map(Some).map_err(|e| io_err(path, e)),
    }
}

/// Submits one entry and waits for its completion; returns the (non-negative) result.
fn submit_one(ring: &mut IoUring, sqe: &squeue::Entry) -> io::Result<u32> {
    // SAFETY: every entry built in this module points at a buffer the caller keeps borrowed (alive and not
    // otherwise accessed) until this function returns, and we return only after reaping the completion or
    // after `io_uring_enter` failed without consuming the entry.
    unsafe { ring.submission().push(sqe) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if let Some(cqe) = ring.completion().next() {
            let res = cqe.result();
            return if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as u32)
            };
        }
    }
}

fn ring_write_all(
    ring: &mut IoUring,
    file: &File,
    mut data: &[u8],
    mut offset: u64,
) -> io::Result<()> {
    let fd = types::Fd(file.as_raw_fd());
    while !data.is_empty() {
        let len = data.len().min(1 << 30) as u32;
        let sqe = opcode::Write::new(fd, data.as_ptr(), len)
            .offset(offset)
            .build();
        match submit_one(ring, &sqe) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                data = data.get(n as usize..).unwrap_or(&[]);
                offset += u64::from(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn ring_fsync(ring: &mut IoUring, file: &File) -> io::Result<()> {
    let sqe = opcode::Fsync::new(types::Fd(file.as_raw_fd())).build();
    submit_one(ring, &sqe).map(|_| ())
}

fn ring_read(ring: &mut IoUring, file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let len = buf.len().min(1 << 30) as u32;
    let sqe = opcode::Read::new(types::Fd(file.as_raw_fd()), buf.as_mut_ptr(), len)
        .offset(offset)
        .build();
    loop {
        match submit_one(ring, &sqe) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map(|n| n as usize),
        }
    }
}

/// Where a [`FileWriter`]'s bytes go: a real file (over io_uring or plain writes), or a file of another
/// [`Storage`]. One per open file, so the size of the ring inline does not matter; boxing it would add an
/// indirection to every write.
#[allow(clippy::large_enum_variant)]
enum Sink {
    Os { file: File, ring: Option<IoUring> },
    Other(Box<dyn WritableFile>),
}

/// A buffered, append-only writer of a new file, over io_uring or plain I/O (or a storage's own file).
pub struct FileWriter {
    path: PathBuf,
    sink: Sink,
    buf: Vec<u8>,
    /// Bytes already handed to the kernel.
    flushed: u64,
}

impl FileWriter {
    /// Creates a new file (failing if it exists: file names are never reused) with the default buffer.
    pub fn create(path: &Path, mode: IoMode) -> Result<Self, LsmError> {
        Self::create_with_buffer(path, mode, DEFAULT_BUFFER)
    }

    /// Creates a new file with a write buffer of `buffer` bytes.
    pub fn create_with_buffer(path: &Path, mode: IoMode, buffer: usize) -> Result<Self, LsmError> {
        Self::create_on(&OsStorage, path, mode, buffer)
    }

    /// Creates a new file of `storage` with a write buffer of `buffer` bytes; `mode` applies to real files.
    pub fn create_on(
        storage: &dyn Storage,
        path: &Path,
        mode: IoMode,
        buffer: usize,
    ) -> Result<Self, LsmError> {
        let sink = match storage.create(path).map_err(|e| io_err(path, e))? {
            NewFile::Os(file) => Sink::Os {
                file,
                ring: ring_for(mode, path)?,
            },
            NewFile::Other(f) => Sink::Other(f),
        };
        Ok(FileWriter {
            path: path.to_path_buf(),
            sink,
            buf: Vec::with_capacity(buffer.max(4096)),
            flushed: 0,
        })
    }

    /// The mode actually in use: [`IoMode::IoUring`] or [`IoMode::Plain`] (also for a storage's own files).
    pub fn mode(&self) -> IoMode {
        match &self.sink {
            Sink::Os { ring: Some(_), .. } => IoMode::IoUring,
            _ => IoMode::Plain,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written so far (buffered or not): the offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.flushed + self.buf.len() as u64
    }

    /// Appends bytes.
    pub fn write_all(&mut self, data: &[u8]) -> Result<(), LsmError> {
        if self.buf.len() + data.len() > self.buf.capacity() {
            self.flush()?;
            if data.len() >= self.buf.capacity() {
                return self.write_through(data);
            }
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    fn write_through(&mut self, data: &[u8]) -> Result<(), LsmError> {
        let res = match &mut self.sink {
            Sink::Os {
                file,
                ring: Some(ring),
            } => ring_write_all(ring, file, data, self.flushed),
            Sink::Os { file, ring: None } => file.write_all(data),
            Sink::Other(f) => f.write_all(data),
        };
        res.map_err(|e| io_err(&self.path, e))?;
        self.flushed += data.len() as u64;
        Ok(())
    }

    /// Hands buffered bytes to the kernel (no fsync).
    pub fn flush(&mut self) -> Result<(), LsmError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.buf);
        let res = self.write_through(&buf);
        self.buf = buf;
        self.buf.clear();
        res
    }

    /// Flushes and fsyncs the file.
    pub fn sync(&mut self) -> Result<(), LsmError> {
        self.flush()?;
        let res = match &mut self.sink {
            Sink::Os {
                file,
                ring: Some(ring),
            } => ring_fsync(ring, file),
            Sink::Os { file, ring: None } => file.sync_all(),
            Sink::Other(f) => f.sync(),
        };
        res.map_err(|e| io_err(&self.path, e))
    }

    /// Flushes, fsyncs and closes the file; returns its size.
    pub fn finish(mut self) -> Result<u64, LsmError> {
        self.sync()?;
        Ok(self.flushed)
    }
}

impl std::fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriter")
            .field("path", &self.path)
            .field("mode", &self.mode())
            .field("offset", &self.offset())
            .finish()
    }
}

/// Copies `src` to a new file `dst` (which must not exist) and fsyncs it; returns the bytes copied.
pub fn copy_file(src: &Path, dst: &Path, mode: IoMode) -> Result<u64, LsmError> {
    copy_file_on(&OsStorage, src, dst, mode)
}

/// [`copy_file`] within `storage`: with the real file system as [`copy_file`] does; otherwise a read of
/// `src` and a write and sync of `dst`.
pub fn copy_file_on(
    storage: &dyn Storage,
    src: &Path,
    dst: &Path,
    mode: IoMode,
) -> Result<u64, LsmError> {
    let mut output = match storage.create(dst).map_err(|e| io_err(dst, e))? {
        NewFile::Os(file) => file,
        NewFile::Other(mut f) => {
            let bytes = storage.read(src).map_err(|e| io_err(src, e))?;
            f.write_all(&bytes).map_err(|e| io_err(dst, e))?;
            f.sync().map_err(|e| io_err(dst, e))?;
            return Ok(bytes.len() as u64);
        }
    };
    let mut ring = ring_for(mode, dst)?;
    let mut input = File::open(src).map_err(|e| io_err(src, e))?;
    let copied = match &mut ring {
        None => {
            let n = io::copy(&mut input, &mut output).map_err(|e| io_err(dst, e))?;
            output.flush().map_err(|e| io_err(dst, e))?;
            output.sync_all().map_err(|e| io_err(dst, e))?;
            n
        }
        Some(ring) => {
            let mut buf = vec![0u8; COPY_CHUNK];
            let mut offset = 0u64;
            loop {
                let n = ring_read(ring, &input, &mut buf, offset).map_err(|e| io_err(src, e))?;
                if n == 0 {
                    break;
                }
                let chunk = buf.get(..n).unwrap_or(&[]);
                ring_write_all(ring, &output, chunk, offset).map_err(|e| io_err(dst, e))?;
                offset += n as u64;
            }
            ring_fsync(ring, &output).map_err(|e| io_err(dst, e))?;
            offset
        }
    };
    Ok(copied)
}

/// Fsyncs a directory so that files created or renamed in it are durable ([`LsmError::Io`] naming it).
pub fn sync_dir(dir: &Path) -> Result<(), LsmError> {
    sync_dir_on(&OsStorage, dir)
}

/// [`sync_dir`] within `storage`.
pub fn sync_dir_on(storage: &dyn Storage, dir: &Path) -> Result<(), LsmError> {
    storage.sync_dir(dir).map_err(|e| io_err(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(mode: IoMode) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut w = FileWriter::create_with_buffer(&p, mode, 4096).unwrap();
        let mut expect = Vec::new();
        for i in 0..200u32 {
            let chunk = vec![i as u8; (i as usize * 37) % 9000];
            w.write_all(&chunk).unwrap();
            expect.extend_from_slice(&chunk);
        }
        assert_eq!(w.offset(), expect.len() as u64);
        assert_eq!(w.finish().unwrap(), expect.len() as u64);
        assert_eq!(std::fs::read(&p).unwrap(), expect);
        let q = dir.path().join("g");
        assert_eq!(copy_file(&p, &q, mode).unwrap(), expect.len() as u64);
        assert_eq!(std::fs::read(&q).unwrap(), expect);
        assert!(
            copy_file(&p, &q, mode).is_err(),
            "dst must not be overwritten"
        );
    }

    #[test]
    fn plain_io() {
        roundtrip(IoMode::Plain);
    }

    #[test]
    fn uring_io() {
        if !io_uring_available() {
            eprintln!("note: io_uring refused by this kernel; skipping the io_uring path");
            return;
        }
        roundtrip(IoMode::IoUring);
    }
}

//! File-writing I/O: a buffered, append-only [`FileWriter`] and [`copy_file`], over plain `write(2)`,
//! `fsync(2)` and `copy_file_range(2)` (through `std`), or a [`Storage`]'s own files.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::storage::{NewFile, Storage, WritableFile};
use super::LsmError;

/// Default write buffer of a [`FileWriter`].
pub const DEFAULT_BUFFER: usize = 256 * 1024;

/// An [`LsmError::Io`] for `source` on `path`.
pub(crate) fn io_err(path: &Path, source: io::Error) -> LsmError {
    LsmError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where a [`FileWriter`]'s bytes go: a real file, or a file of another [`Storage`].
enum Sink {
    Os(File),
    Other(Box<dyn WritableFile>),
}

/// A buffered, append-only writer of a new file (a real file or a storage's own file).
pub struct FileWriter {
    path: PathBuf,
    sink: Sink,
    buf: Vec<u8>,
    /// Bytes already handed to the kernel.
    flushed: u64,
}

impl FileWriter {
    /// Creates a new file (failing if it exists: file names are never reused) with the default buffer.
    #[cfg(feature = "test-util")]
    pub fn create(path: &Path) -> Result<Self, LsmError> {
        Self::create_with_buffer(path, DEFAULT_BUFFER)
    }

    /// Creates a new file with a write buffer of `buffer` bytes.
    #[cfg(any(test, feature = "test-util"))]
    pub fn create_with_buffer(path: &Path, buffer: usize) -> Result<Self, LsmError> {
        Self::create_on(&super::storage::OsStorage, path, buffer)
    }

    /// Creates a new file of `storage` with a write buffer of `buffer` bytes.
    pub fn create_on(storage: &dyn Storage, path: &Path, buffer: usize) -> Result<Self, LsmError> {
        let sink = match storage.create(path).map_err(|e| io_err(path, e))? {
            NewFile::Os(file) => Sink::Os(file),
            NewFile::Other(f) => Sink::Other(f),
        };
        Ok(FileWriter {
            path: path.to_path_buf(),
            sink,
            buf: Vec::with_capacity(buffer.max(4096)),
            flushed: 0,
        })
    }

    /// The file's path.
    #[cfg(feature = "test-util")]
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
            Sink::Os(file) => file.write_all(data),
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
            Sink::Os(file) => file.sync_all(),
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
            .field("offset", &self.offset())
            .finish()
    }
}

/// Copies `src` to a new file `dst` (which must not exist) and fsyncs it; returns the bytes copied.
#[cfg(any(test, feature = "test-util"))]
pub fn copy_file(src: &Path, dst: &Path) -> Result<u64, LsmError> {
    copy_file_on(&super::storage::OsStorage, src, dst)
}

/// Copies `src` to a new file `dst` (which must not exist) of `storage` and syncs it; returns the bytes copied.
/// On the real file system the copy streams between the files (`copy_file_range(2)` where the kernel has
/// it); on another storage it is a read of `src`, then a write and sync of `dst`.
pub fn copy_file_on(storage: &dyn Storage, src: &Path, dst: &Path) -> Result<u64, LsmError> {
    let mut output = match storage.create(dst).map_err(|e| io_err(dst, e))? {
        NewFile::Os(file) => file,
        NewFile::Other(mut f) => {
            let bytes = storage.read(src).map_err(|e| io_err(src, e))?;
            f.write_all(&bytes).map_err(|e| io_err(dst, e))?;
            f.sync().map_err(|e| io_err(dst, e))?;
            return Ok(bytes.len() as u64);
        }
    };
    let mut input = File::open(src).map_err(|e| io_err(src, e))?;
    let copied = io::copy(&mut input, &mut output).map_err(|e| io_err(dst, e))?;
    output.flush().map_err(|e| io_err(dst, e))?;
    output.sync_all().map_err(|e| io_err(dst, e))?;
    Ok(copied)
}

/// Fsyncs directory `dir` of `storage`, so that files created or renamed in it are durable ([`LsmError::Io`]
/// naming it).
pub fn sync_dir_on(storage: &dyn Storage, dir: &Path) -> Result<(), LsmError> {
    storage.sync_dir(dir).map_err(|e| io_err(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_and_copied_bytes_read_back_and_a_copy_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut w = FileWriter::create_with_buffer(&p, 4096).unwrap();
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
        assert_eq!(copy_file(&p, &q).unwrap(), expect.len() as u64);
        assert_eq!(std::fs::read(&q).unwrap(), expect);
        assert!(copy_file(&p, &q).is_err(), "dst must not be overwritten");
    }
}

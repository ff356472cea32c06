//! The upload path of [`CheckpointStorage::upload_all`](super::CheckpointStorage::upload_all): one object's
//! parts (files streamed by reader threads of their own, or bytes in memory) read in order into buffers
//! of the storage's pool, hashed on the way, and written as one put or as a multipart upload with a
//! bounded number of parts in flight (aborted after an error).

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::path::Path as ObjPath;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};

use super::buffers::{PooledBuffer, UploadBuffers, BUFFER_SIZE};
use crate::error::CheckpointError;
use crate::error::{Error, Result};
use keyed_state_lsm::storage::{Storage, StorageHandle};

/// Uploads and downloads running at once, and parts of one multipart upload in flight at most.
pub const PARALLELISM: usize = 4;

/// One part of an uploaded object.
#[derive(Debug, Clone)]
pub enum UploadPart {
    /// A whole file of the storage [`CheckpointStorage::upload_all`](super::CheckpointStorage::upload_all) is given.
    File(PathBuf),
    /// Bytes in memory (a serialized heap table).
    Bytes(Vec<u8>),
}

/// One object to upload: the concatenation of its parts.
#[derive(Debug, Clone)]
pub struct Upload {
    /// Path relative to the root.
    pub path: String,
    /// The parts (files), concatenated in this order.
    pub files: Vec<UploadPart>,
}

/// What an upload wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// Size of the object.
    pub size: u64,
    /// xxh3-64 of the object.
    pub checksum: u64,
    /// (length, xxh3-64) of each file, in order.
    pub files: Vec<(u64, u64)>,
}

/// [`CheckpointError::Store`] of `operation` on `object` of store `store`.
pub(super) fn store_err(
    store: &str,
    operation: &'static str,
    object: &str,
    e: object_store::Error,
) -> Error {
    CheckpointError::Store {
        store: store.to_string(),
        operation,
        object: (!object.is_empty()).then(|| object.to_string()),
        detail: error_chain(&e),
    }
    .into()
}

/// An error and its chain of sources, each once.
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        source = s.source();
    }
    out
}

fn read_err(f: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::io("reading", f, source)
}

/// Aborts multipart upload `w` after `err`, with its parts in flight (so its parts are not left on the
/// store; best effort: a failed abort is logged), and returns `err`.
async fn abort(
    mut w: Box<dyn MultipartUpload>,
    inflight: VecDeque<tokio::task::JoinHandle<object_store::Result<()>>>,
    err: Error,
) -> Error {
    for h in &inflight {
        h.abort();
    }
    for h in inflight {
        let _ = h.await;
    }
    if let Err(e) = w.abort().await {
        tracing::warn!("aborting a multipart upload after \"{err}\" failed: {e}");
    }
    err
}

/// The store an upload task writes to, and its name for errors.
pub(super) struct Target {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) name: String,
    /// The pool the upload's buffers come from.
    pub(super) buffers: Arc<UploadBuffers>,
    /// Bytes of one part of a multipart upload (a multiple of [`BUFFER_SIZE`]).
    pub(super) part_size: usize,
    /// The store may keep a payload's bytes after the request (memory, a store given to `from_store`): it
    /// gets a copy, and the buffer goes back to the pool at once.
    pub(super) copy_payload: bool,
}

impl Target {
    fn err(&self, operation: &'static str, object: &str, e: object_store::Error) -> Error {
        store_err(&self.name, operation, object, e)
    }
}

/// A request to a [`ChunkReader`]'s thread: append this many bytes of the file to the buffer, answer with
/// it (and an error if the file ended before).
type ChunkRequest = (
    PooledBuffer,
    usize,
    futures::channel::oneshot::Sender<(PooledBuffer, std::io::Result<()>)>,
);

/// A local file streamed by a thread of its own, one request at a time (the storage's reader is neither
/// `Send` nor `'static`, so it stays on that thread). The thread ends when the reader is dropped.
struct ChunkReader {
    requests: std::sync::mpsc::Sender<ChunkRequest>,
}

/// Appends exactly `want` bytes of `r` to `buf` (whose capacity has room for them).
fn read_into(r: &mut dyn Read, buf: &mut Vec<u8>, want: usize) -> std::io::Result<()> {
    let start = buf.len();
    buf.resize(start + want, 0);
    let got = r.read_exact(buf.get_mut(start..).unwrap_or_default());
    if got.is_err() {
        buf.truncate(start);
    }
    got.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            std::io::Error::new(
                e.kind(),
                "the file is shorter than its size when the upload began",
            )
        } else {
            e
        }
    })
}

impl ChunkReader {
    fn open(fs: StorageHandle, path: PathBuf) -> Result<ChunkReader> {
        let (tx, rx) = std::sync::mpsc::channel::<ChunkRequest>();
        std::thread::Builder::new()
            .name("ckpt-read".into())
            .spawn(move || {
                let mut r = match fs.open_read(&path) {
                    Ok(r) => r,
                    Err(e) => {
                        if let Ok((buf, _, reply)) = rx.recv() {
                            let _ = reply.send((buf, Err(e)));
                        }
                        return;
                    }
                };
                for (mut buf, want, reply) in rx {
                    let got = read_into(&mut r, buf.vec(), want);
                    if reply.send((buf, got)).is_err() {
                        return;
                    }
                }
            })
            .map_err(Error::io_at(
                "starting a checkpoint file reader thread",
                "ckpt-read",
            ))?;
        Ok(ChunkReader { requests: tx })
    }

    /// Appends the next `want` bytes of the file to `buf`.
    async fn read(
        &self,
        buf: PooledBuffer,
        want: usize,
    ) -> (Option<PooledBuffer>, std::io::Result<()>) {
        let ended = || std::io::Error::other("the file reader thread ended");
        let (reply, answer) = futures::channel::oneshot::channel();
        if let Err(std::sync::mpsc::SendError((buf, _, _))) = self.requests.send((buf, want, reply))
        {
            return (Some(buf), Err(ended()));
        }
        match answer.await {
            Ok((buf, r)) => (Some(buf), r),
            Err(_) => (None, Err(ended())),
        }
    }
}

/// The bytes of one object, the concatenation of its parts, read into upload buffers in order, with each
/// part's length and xxh3-64 and the whole object's xxh3-64.
struct Source {
    /// The parts and their lengths when the upload began.
    parts: Vec<(UploadPart, u64)>,
    /// The part being read and the bytes of it read so far.
    idx: usize,
    at: u64,
    reader: Option<ChunkReader>,
    fs: StorageHandle,
    part_hash: xxhash_rust::xxh3::Xxh3,
    whole: xxhash_rust::xxh3::Xxh3,
    files: Vec<(u64, u64)>,
}

impl Source {
    fn new(parts: Vec<(UploadPart, u64)>, fs: StorageHandle) -> Source {
        let n = parts.len();
        let mut s = Source {
            parts,
            idx: 0,
            at: 0,
            reader: None,
            fs,
            part_hash: xxhash_rust::xxh3::Xxh3::new(),
            whole: xxhash_rust::xxh3::Xxh3::new(),
            files: Vec::with_capacity(n),
        };
        s.close_finished();
        s
    }

    /// Records every part read to its end (empty ones included) and moves past it.
    fn close_finished(&mut self) {
        while let Some((_, len)) = self.parts.get(self.idx) {
            if self.at < *len {
                return;
            }
            self.files.push((*len, self.part_hash.digest()));
            self.part_hash.reset();
            self.reader = None;
            self.idx += 1;
            self.at = 0;
        }
    }

    /// Fills `buf` up to its capacity, or with what is left of the object.
    async fn fill(&mut self, mut buf: PooledBuffer) -> Result<PooledBuffer> {
        while buf.room() > 0 {
            let Some((part, len)) = self.parts.get(self.idx) else {
                break;
            };
            let want = (buf.room() as u64).min(len - self.at) as usize;
            let start = buf.len();
            match part {
                UploadPart::Bytes(b) => {
                    let from = self.at as usize;
                    buf.vec()
                        .extend_from_slice(b.get(from..from + want).unwrap_or_default());
                }
                UploadPart::File(f) => {
                    if self.reader.is_none() {
                        self.reader = Some(ChunkReader::open(self.fs.clone(), f.clone())?);
                    }
                    let Some(reader) = self.reader.as_ref() else {
                        break;
                    };
                    let (back, got) = reader.read(buf, want).await;
                    got.map_err(read_err(f))?;
                    buf = back.ok_or_else(|| {
                        read_err(f)(std::io::Error::other("the file reader thread ended"))
                    })?;
                }
            }
            let c = buf.as_ref().get(start..).unwrap_or_default();
            self.part_hash.update(c);
            self.whole.update(c);
            self.at += c.len() as u64;
            self.close_finished();
        }
        Ok(buf)
    }
}

/// Buffers for `bytes` bytes.
fn buffers_for(bytes: u64) -> usize {
    (bytes.div_ceil(BUFFER_SIZE as u64) as usize).max(1)
}

/// Fills the buffers of one lease from `src` and hands them out as one payload (each buffer goes back to
/// the pool when the store drops it).
async fn fill_payload(t: &Target, src: &mut Source, bytes: u64) -> Result<PutPayload> {
    let mut lease = t.buffers.acquire(buffers_for(bytes)).await;
    let mut out = Vec::with_capacity(lease.len());
    while let Some(buf) = lease.take() {
        let buf = src.fill(buf).await?;
        if buf.is_empty() {
            break;
        }
        out.push(if t.copy_payload {
            bytes::Bytes::copy_from_slice(buf.as_ref())
        } else {
            buf.into_bytes()
        });
    }
    Ok(out.into_iter().collect())
}

/// Uploads `u` as object `p` of `t`, reading its files from `fs` (a task of the I/O runtime). The object
/// is read into buffers of `t`'s pool, one part (or the whole object, if it is no larger than a part) at a
/// time, and at most [`PARALLELISM`] parts are in flight.
pub(super) async fn upload_one(
    t: Target,
    p: ObjPath,
    u: Upload,
    fs: StorageHandle,
) -> Result<Uploaded> {
    let Upload { path, files: parts } = u;
    let sized = {
        let fs = fs.clone();
        tokio::task::spawn_blocking(move || {
            parts
                .into_iter()
                .map(|f| f.len(&*fs).map(|n| (f, n)))
                .collect::<Result<Vec<_>>>()
        })
        .await
        .map_err(super::io::joined)??
    };
    let total: u64 = sized.iter().map(|(_, n)| n).sum();
    let mut src = Source::new(sized, fs);
    if total <= t.part_size as u64 {
        let payload = fill_payload(&t, &mut src, total).await?;
        t.store
            .put(&p, payload)
            .await
            .map_err(|e| t.err("put", &path, e))?;
        return Ok(Uploaded {
            size: total,
            checksum: src.whole.digest(),
            files: src.files,
        });
    }
    let w = t
        .store
        .put_multipart(&p)
        .await
        .map_err(|e| t.err("multipart put", &path, e))?;
    upload_parts(&t, &path, w, &mut src, total).await?;
    Ok(Uploaded {
        size: total,
        checksum: src.whole.digest(),
        files: src.files,
    })
}

/// Streams `src` (`total` bytes) to multipart upload `w` in parts of `t.part_size`, completing it, or
/// aborting it after an error.
async fn upload_parts(
    t: &Target,
    path: &str,
    mut w: Box<dyn MultipartUpload>,
    src: &mut Source,
    total: u64,
) -> Result<()> {
    let mut inflight = VecDeque::new();
    let mut sent = 0u64;
    while sent < total {
        let part = (t.part_size as u64).min(total - sent);
        let payload = match fill_payload(t, src, part).await {
            Ok(p) => p,
            Err(e) => return Err(abort(w, inflight, e).await),
        };
        sent += part;
        inflight.push_back(tokio::spawn(w.put_part(payload)));
        if inflight.len() >= PARALLELISM {
            if let Some(h) = inflight.pop_front() {
                if let Err(e) = part_result(t, path, h.await) {
                    return Err(abort(w, inflight, e).await);
                }
            }
        }
    }
    while let Some(h) = inflight.pop_front() {
        if let Err(e) = part_result(t, path, h.await) {
            return Err(abort(w, inflight, e).await);
        }
    }
    if let Err(e) = w.complete().await {
        let err = t.err("multipart put", path, e);
        return Err(abort(w, VecDeque::new(), err).await);
    }
    Ok(())
}

/// The outcome of one part's task.
fn part_result(
    t: &Target,
    path: &str,
    r: std::result::Result<object_store::Result<()>, tokio::task::JoinError>,
) -> Result<()> {
    r.map_err(super::io::joined)?
        .map_err(|e| t.err("multipart put", path, e))
}

impl UploadPart {
    fn len(&self, files: &dyn Storage) -> Result<u64> {
        match self {
            UploadPart::File(f) => files.file_size(f).map_err(read_err(f)),
            UploadPart::Bytes(b) => Ok(b.len() as u64),
        }
    }
}

//! Checkpoint storage: a facade over an [`object_store::ObjectStore`] whose requests are tasks of an I/O
//! runtime ([`IoRuntime`]: its own, or one shared by a [`StateEnv`](crate::env::StateEnv)'s storages).
//! Each call is async at its core (`put_async`, `upload_all_async`, `list_async`, ...), awaited from any
//! executor without parking a thread of it; its synchronous form waits for it and works from a plain
//! thread and from inside a tokio runtime. Only [`CheckpointStorage::open`] knows which store it is; every other call is the same for the
//! local file system, memory and S3 (and any S3-compatible server).
//!
//! Remote stores get bounded timeouts and retries ([`REMOTE_CONNECT_TIMEOUT`], [`REMOTE_REQUEST_TIMEOUT`],
//! [`REMOTE_MAX_RETRIES`], [`REMOTE_RETRY_TIMEOUT`]): an unreachable store fails with
//! [`CheckpointError::Store`], naming the store and the operation, and never hangs.
//!
//! The upload pipeline behind [`CheckpointStorage::upload_all`] (buffers, reader threads, multipart) is
//! module `upload`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::buffers::{UploadBuffers, BUFFER_SIZE, DEFAULT_UPLOAD_BUFFER_BYTES};
use super::io::{IoRuntime, DEFAULT_IO_THREADS};
use super::upload;
#[cfg(feature = "s3")]
use super::upload::error_chain;
use super::upload::store_err;
pub use super::upload::{Upload, UploadPart, Uploaded, PARALLELISM};
use crate::error::{CheckpointError, Error, Location, Result};
use keyed_state_lsm::storage::StorageHandle;
use keyed_state_lsm::MemoryBudget;

/// Size of one part of a multipart upload to a remote store (S3 takes no smaller part but the last), and
/// the largest part size: an object larger than its storage's part size
/// ([`CheckpointStorage::part_size`]) is uploaded in parts.
pub const PART_SIZE: usize = 5 << 20;
/// Size of one part of a multipart upload to a local directory or to memory.
pub const LOCAL_PART_SIZE: usize = BUFFER_SIZE;
/// Objects larger than this are uploaded in parts on every store (the largest part size, [`PART_SIZE`]).
pub const MULTIPART_THRESHOLD: u64 = PART_SIZE as u64;

/// Time to establish a connection to a remote store.
pub const REMOTE_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time one request to a remote store may take (a 5 MiB whole-object put or part included: at least
/// 0.17 MB/s). With [`REMOTE_RETRY_TIMEOUT`] it bounds a store that accepts and never answers to
/// about 30 s.
pub const REMOTE_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries of one failed request to a remote store.
pub const REMOTE_MAX_RETRIES: usize = 3;
/// Time after the first attempt of a request beyond which it is not retried.
pub const REMOTE_RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// Checkpoint storage rooted at a directory or URL.
pub struct CheckpointStorage {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    local_root: Option<PathBuf>,
    io: Arc<IoRuntime>,
    root_name: String,
    /// Test hook: puts left before every put fails (negative: never).
    fail_after: AtomicI64,
    /// The pool upload buffers come from ([`with_buffers`](Self::with_buffers)).
    buffers: Arc<UploadBuffers>,
    /// Bytes of one part of a multipart upload.
    part_size: usize,
    /// The store may keep a payload's bytes after its request: it gets a copy.
    copy_payload: bool,
}

impl std::fmt::Debug for CheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointStorage")
            .field("root", &self.root_name)
            .finish()
    }
}

/// An invalid root, object path or setting.
fn invalid(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("checkpoint storage: {what}: {e}"))
}

/// The retries of a remote store.
#[cfg(feature = "s3")]
fn remote_retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: REMOTE_MAX_RETRIES,
        retry_timeout: REMOTE_RETRY_TIMEOUT,
    }
}

impl CheckpointStorage {
    /// Opens `root`: a directory path (created if missing), `file:///dir`, `memory:///`, or any URL
    /// `object_store::parse_url` understands (`s3://bucket/prefix` needs object_store's `aws` feature).
    ///
    /// For `s3://bucket/prefix` the settings come from the environment as object_store reads them
    /// (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`,
    /// `AWS_ALLOW_HTTP`, ...), with bounded timeouts and retries.
    pub fn open(root: &str) -> Result<Self> {
        Self::open_with(root, &[])
    }

    /// [`open`](Self::open) of a root that must exist, for commands that only read (or only delete): a local
    /// root (a path or `file://`) that is not an existing directory is [`Error::Io`] naming it (kind
    /// `NotFound` when it does not exist), and nothing is created. Other stores are opened as by `open`.
    pub fn open_existing(root: &str) -> Result<Self> {
        let local = if root.contains("://") {
            url::Url::parse(root)
                .ok()
                .filter(|u| u.scheme() == "file")
                .and_then(|u| u.to_file_path().ok())
        } else {
            Some(PathBuf::from(root))
        };
        if let Some(p) = local {
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Error::io(
                        "opening the checkpoint root",
                        p,
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a directory"),
                    ))
                }
                Err(e) => return Err(Error::io("opening the checkpoint root", p, e)),
            }
        }
        Self::open(root)
    }

    /// [`open`](Self::open) with store settings that override the environment's: for S3 any key
    /// `AmazonS3ConfigKey` parses (`aws_endpoint`, `aws_allow_http`, `aws_access_key_id`, `timeout`, ...).
    pub fn open_with(root: &str, settings: &[(&str, &str)]) -> Result<Self> {
        if root.contains("://") {
            let url =
                url::Url::parse(root).map_err(|e| invalid(format_args!("root URL {root}"), e))?;
            match url.scheme() {
                "file" => {
                    let p = url.to_file_path().map_err(|_| {
                        Error::InvalidArgument(format!(
                            "checkpoint storage: {root} is no local path"
                        ))
                    })?;
                    Self::local(&p)
                }
                "memory" => Self::in_memory(),
                #[cfg(feature = "s3")]
                "s3" | "s3a" => Self::s3(root, &url, settings),
                #[cfg(not(feature = "s3"))]
                "s3" | "s3a" => {
                    let _ = settings;
                    Err(Error::Unsupported {
                        backend: "checkpoint storage",
                        what: "S3 roots in a build without keyed-state's `s3` feature",
                    })
                }
                _ => {
                    let (store, prefix) = object_store::parse_url(&url)
                        .map_err(|e| invalid(format_args!("root {root}"), e))?;
                    Self::from_store(Arc::from(store), prefix.as_ref(), root)
                }
            }
        } else {
            Self::local(Path::new(root))
        }
    }

    #[cfg(feature = "s3")]
    fn s3(root: &str, url: &url::Url, settings: &[(&str, &str)]) -> Result<Self> {
        use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
        let mut b = AmazonS3Builder::new()
            .with_client_options(
                object_store::ClientOptions::new()
                    .with_connect_timeout(REMOTE_CONNECT_TIMEOUT)
                    .with_timeout(REMOTE_REQUEST_TIMEOUT),
            )
            .with_retry(remote_retry());
        // As `AmazonS3Builder::from_env`, after the bounded defaults so that the environment may change them.
        for (k, v) in std::env::vars() {
            if k.starts_with("AWS_") {
                if let Ok(key) = k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                    b = b.with_config(key, v);
                }
            }
        }
        b = b.with_url(url.as_str());
        for (k, v) in settings {
            let key = k
                .to_ascii_lowercase()
                .parse::<AmazonS3ConfigKey>()
                .map_err(|e| invalid(format_args!("S3 setting {k} for {root}"), e))?;
            b = b.with_config(key, *v);
        }
        let store = b.build().map_err(|e| CheckpointError::Store {
            store: root.to_string(),
            operation: "configure",
            object: None,
            detail: error_chain(&e),
        })?;
        let prefix = url.path().trim_matches('/').to_string();
        let mut s = Self::from_store(Arc::new(store), &prefix, root)?;
        // S3 drops a payload once its request (and retries) ended.
        s.copy_payload = false;
        Ok(s)
    }

    fn remote_err(&self, operation: &'static str, object: &str, e: object_store::Error) -> Error {
        store_err(&self.root_name, operation, object, e)
    }

    /// Storage in the local directory `dir` (created if missing); objects that hold one whole file can be
    /// hard-linked on restore. Every write is fsynced, with its directory, before it returns.
    pub fn local(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(Error::io_at("creating the checkpoint root", dir))?;
        // Every put is fsynced with its directory before it returns, as a remote store's PUT is durable
        // when acknowledged: the metadata written last must not outlive the objects it names.
        let fs = LocalFileSystem::new_with_prefix(dir)
            .map_err(|e| invalid(format_args!("root {}", dir.display()), e))?
            .with_fsync(true);
        let mut s = Self::from_store(Arc::new(fs), "", &dir.display().to_string())?;
        s.local_root = Some(dir.to_path_buf());
        s.part_size = LOCAL_PART_SIZE;
        // The local file system writes a payload and drops it.
        s.copy_payload = false;
        Ok(s)
    }

    /// Storage in memory (for tests).
    pub fn in_memory() -> Result<Self> {
        let mut s = Self::from_store(Arc::new(InMemory::new()), "", "memory:///")?;
        s.part_size = LOCAL_PART_SIZE;
        Ok(s)
    }

    /// Storage on any object store, under `prefix`.
    pub fn from_store(store: Arc<dyn ObjectStore>, prefix: &str, name: &str) -> Result<Self> {
        Ok(CheckpointStorage {
            store,
            prefix: prefix.trim_matches('/').to_string(),
            local_root: None,
            io: Arc::new(IoRuntime::new(DEFAULT_IO_THREADS)),
            root_name: name.to_string(),
            fail_after: AtomicI64::new(-1),
            buffers: UploadBuffers::new(None, DEFAULT_UPLOAD_BUFFER_BYTES),
            part_size: PART_SIZE,
            copy_payload: true,
        })
    }

    /// The part of the root that job `job` owns, sharing this storage's store and runtime: the root itself
    /// for the default job ([`DEFAULT_JOB`](super::DEFAULT_JOB), the layout of roots written before jobs),
    /// `jobs/<job>/` for any other (`design/checkpoint-fencing.md`, "Jobs in the root"). Object paths
    /// in its metadata are relative to it.
    pub fn job(&self, job: &str) -> Result<Self> {
        super::job_name::check_job_name(job)?;
        let sub = super::job_name::job_prefix(job);
        let (prefix, local_root, root_name) = if sub.is_empty() {
            (
                self.prefix.clone(),
                self.local_root.clone(),
                self.root_name.clone(),
            )
        } else {
            let sub = sub.trim_end_matches('/');
            (
                if self.prefix.is_empty() {
                    sub.to_string()
                } else {
                    format!("{}/{sub}", self.prefix)
                },
                self.local_root.as_ref().map(|r| r.join(sub)),
                format!("{} (job {job})", self.root_name),
            )
        };
        Ok(CheckpointStorage {
            store: Arc::clone(&self.store),
            prefix,
            local_root,
            io: Arc::clone(&self.io),
            root_name,
            fail_after: AtomicI64::new(-1),
            buffers: Arc::clone(&self.buffers),
            part_size: self.part_size,
            copy_payload: self.copy_payload,
        })
    }

    /// Runs the storage's requests on `io` (shared with other storages) instead of its own runtime.
    pub fn with_io(mut self, io: Arc<IoRuntime>) -> Self {
        self.io = io;
        self
    }

    /// Takes this storage's upload buffers from a pool of its own charged to `memory`
    /// ([`UploadBuffers`]: bounded by the budget, with one part guaranteed), so that the shared block cache
    /// makes room for them and an upload waits when the budget is full. Storages opened with
    /// [`StateEnv::open_storage`] share the environment's pool instead ([`with_buffers`](Self::with_buffers)).
    ///
    /// [`StateEnv::open_storage`]: crate::env::StateEnv::open_storage
    pub fn with_memory(self, memory: Arc<MemoryBudget>) -> Self {
        self.with_buffers(UploadBuffers::new(
            Some(memory),
            DEFAULT_UPLOAD_BUFFER_BYTES,
        ))
    }

    /// Takes this storage's upload buffers from `buffers`, a pool other storages may share: their uploads
    /// then share its bound. A storage opened on its own has a pool of its own with no budget, bounded by
    /// [`DEFAULT_UPLOAD_BUFFER_BYTES`].
    pub fn with_buffers(mut self, buffers: Arc<UploadBuffers>) -> Self {
        self.buffers = buffers;
        self
    }

    /// The pool this storage's upload buffers come from.
    pub fn buffers(&self) -> &Arc<UploadBuffers> {
        &self.buffers
    }

    /// A charge of `bytes` to the budget of the storage's pool, if it has one (downloads a restore holds).
    pub(crate) fn charge(&self, bytes: usize) -> Option<keyed_state_lsm::MemoryReservation> {
        self.buffers.memory().map(|m| m.reserve(bytes))
    }

    /// Bytes of one part of this storage's multipart uploads: [`LOCAL_PART_SIZE`] for a local directory
    /// and memory, [`PART_SIZE`] (S3's smallest) for other stores. An object no larger is uploaded whole.
    pub fn part_size(&self) -> usize {
        self.part_size
    }

    /// The runtime the storage's requests run on.
    pub fn io(&self) -> &Arc<IoRuntime> {
        &self.io
    }

    /// The root as given.
    pub fn root_name(&self) -> &str {
        &self.root_name
    }

    /// Makes every put after the next `n` fail (test hook for failure cases; `None` turns it off).
    #[doc(hidden)]
    pub fn fail_puts_after(&self, n: Option<u64>) {
        let v = n.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        self.fail_after.store(v, Ordering::SeqCst);
    }

    fn check_fail(&self, rel: &str) -> Result<()> {
        let r = self
            .fail_after
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                (v > 0).then_some(v - 1)
            });
        match r {
            Err(0) => Err(CheckpointError::Store {
                store: self.root_name.clone(),
                operation: "put",
                object: Some(rel.to_string()),
                detail: "injected failure".into(),
            }
            .into()),
            _ => Ok(()),
        }
    }

    fn full(&self, rel: &str) -> Result<ObjPath> {
        let s = if self.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.prefix)
        };
        ObjPath::parse(&s).map_err(|e| invalid(format_args!("object path {s}"), e))
    }

    fn rel(&self, p: &ObjPath) -> String {
        let s = p.as_ref();
        if self.prefix.is_empty() {
            s.to_string()
        } else {
            s.strip_prefix(&self.prefix)
                .map(|r| r.trim_start_matches('/').to_string())
                .unwrap_or_else(|| s.to_string())
        }
    }

    /// Runs the request `f` makes of the store as a task of the I/O runtime and awaits its result (see
    /// the module documentation).
    async fn on_io<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Arc<dyn ObjectStore>) -> Fut,
        Fut: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.io.spawn(f(Arc::clone(&self.store)))?.await
    }

    /// Writes `bytes` as object `rel`, atomically (whole or nothing).
    pub fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        self.io.block_on(|| self.put_async(rel, bytes))?
    }

    /// [`put`](Self::put), awaited.
    pub async fn put_async(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        self.check_fail(rel)?;
        let p = self.full(rel)?;
        self.on_io(|store| async move { store.put(&p, PutPayload::from(bytes)).await })
            .await?
            .map_err(|e| self.remote_err("put", rel, e))?;
        Ok(())
    }

    /// Writes `bytes` as object `rel` only if no object `rel` exists (object_store's `PutMode::Create`: a
    /// hard link without replace on a local root, `If-None-Match: *` on S3, a check under the store's lock
    /// in memory), atomically. `Ok(false)`: the object existed and is unchanged.
    pub fn put_if_absent(&self, rel: &str, bytes: Vec<u8>) -> Result<bool> {
        self.io.block_on(|| self.put_if_absent_async(rel, bytes))?
    }

    /// [`put_if_absent`](Self::put_if_absent), awaited.
    pub async fn put_if_absent_async(&self, rel: &str, bytes: Vec<u8>) -> Result<bool> {
        self.check_fail(rel)?;
        let p = self.full(rel)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let r = self
            .on_io(|store| async move { store.put_opts(&p, PutPayload::from(bytes), opts).await })
            .await?;
        match r {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.remote_err("create-only put", rel, e)),
        }
    }

    /// Uploads every `Upload` (up to [`PARALLELISM`] at once), reading its [`UploadPart::File`]s from
    /// `files` into buffers of the storage's pool ([`buffers`](Self::buffers)); objects larger than
    /// [`part_size`](Self::part_size) in parts, streamed (at most [`PARALLELISM`] parts of one object in
    /// flight). An upload waits for its buffers when the pool's budget has no room. Returns the results in order. After an error no
    /// further upload starts, the ones already started are awaited (a failed multipart upload is aborted),
    /// and the first error is returned.
    pub fn upload_all(&self, uploads: Vec<Upload>, files: StorageHandle) -> Result<Vec<Uploaded>> {
        self.io.block_on(|| self.upload_all_async(uploads, files))?
    }

    /// [`upload_all`](Self::upload_all), awaited. Each upload is a task of the I/O runtime; each file is
    /// streamed by a reader thread of its own (it reads one buffer at a time, as the upload asks for it).
    /// At the end the pool frees its buffers if no other upload holds any ([`UploadBuffers::trim`]).
    pub async fn upload_all_async(
        &self,
        uploads: Vec<Upload>,
        files: StorageHandle,
    ) -> Result<Vec<Uploaded>> {
        let failed = AtomicBool::new(false);
        let results = futures::stream::iter(uploads)
            .take_while(|_| std::future::ready(!failed.load(Ordering::SeqCst)))
            .map(|u| {
                let files = files.clone();
                let failed = &failed;
                async move {
                    let r = self.spawn_upload(u, files).await;
                    if r.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    r
                }
            })
            .buffered(PARALLELISM)
            .collect::<Vec<_>>()
            .await;
        self.buffers.trim();
        // The stream stops early only after an error, which `collect` then returns.
        results.into_iter().collect()
    }

    async fn spawn_upload(&self, u: Upload, files: StorageHandle) -> Result<Uploaded> {
        self.check_fail(&u.path)?;
        let p = self.full(&u.path)?;
        let target = upload::Target {
            store: Arc::clone(&self.store),
            name: self.root_name.clone(),
            buffers: Arc::clone(&self.buffers),
            part_size: self.part_size,
            copy_payload: self.copy_payload,
        };
        self.io
            .spawn(upload::upload_one(target, p, u, files))?
            .await?
    }

    /// Reads object `rel` whole.
    pub fn get(&self, rel: &str) -> Result<Vec<u8>> {
        self.io.block_on(|| self.get_async(rel))?
    }

    /// [`get`](Self::get), awaited.
    pub async fn get_async(&self, rel: &str) -> Result<Vec<u8>> {
        let p = self.full(rel)?;
        let r = self
            .on_io(|store| async move {
                let r = store.get(&p).await?;
                r.bytes().await
            })
            .await?;
        Ok(r.map_err(|e| self.map_get(rel, e))?.to_vec())
    }

    /// Reads object `rel` whole if it holds at most `max` bytes; `Ok(Err(size))` (nothing read) if larger.
    pub fn get_bounded(&self, rel: &str, max: u64) -> Result<std::result::Result<Vec<u8>, u64>> {
        self.io.block_on(|| self.get_bounded_async(rel, max))?
    }

    /// [`get_bounded`](Self::get_bounded), awaited.
    pub async fn get_bounded_async(
        &self,
        rel: &str,
        max: u64,
    ) -> Result<std::result::Result<Vec<u8>, u64>> {
        let p = self.full(rel)?;
        let r = self
            .on_io(|store| async move {
                let r = store.get(&p).await?;
                if r.meta.size > max {
                    return Ok(Err(r.meta.size));
                }
                let b = r.bytes().await?;
                if b.len() as u64 > max {
                    return Ok(Err(b.len() as u64));
                }
                Ok(Ok(b.to_vec()))
            })
            .await?;
        r.map_err(|e| self.map_get(rel, e))
    }

    /// Reads `len` bytes at `offset` of each `(object, offset, len)`, up to [`PARALLELISM`] at once (an empty
    /// range reads nothing).
    pub fn get_ranges(&self, parts: &[(String, u64, u64)]) -> Result<Vec<Vec<u8>>> {
        self.io.block_on(|| self.get_ranges_async(parts))?
    }

    /// [`get_ranges`](Self::get_ranges), awaited.
    pub async fn get_ranges_async(&self, parts: &[(String, u64, u64)]) -> Result<Vec<Vec<u8>>> {
        futures::stream::iter(parts.iter().map(|(rel, off, len)| async move {
            if *len == 0 {
                // An empty file (RocksDB's empty WAL of a checkpoint): nothing to read.
                return Ok(Vec::new());
            }
            let p = self.full(rel)?;
            let range = *off..off + len;
            let b = self
                .on_io(|store| async move { store.get_range(&p, range).await })
                .await?
                .map_err(|e| self.map_get(rel, e))?;
            Ok::<_, Error>(b.to_vec())
        }))
        .buffered(PARALLELISM)
        .try_collect()
        .await
    }

    /// Size of object `rel`, or `None` if it does not exist.
    pub fn size(&self, rel: &str) -> Result<Option<u64>> {
        self.io.block_on(|| self.size_async(rel))?
    }

    /// [`size`](Self::size), awaited.
    pub async fn size_async(&self, rel: &str) -> Result<Option<u64>> {
        let p = self.full(rel)?;
        match self
            .on_io(|store| async move { store.head(&p).await })
            .await?
        {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.remote_err("head", rel, e)),
        }
    }

    /// Every object under `rel_prefix` (relative paths and sizes, sorted).
    pub fn list(&self, rel_prefix: &str) -> Result<Vec<(String, u64)>> {
        self.io.block_on(|| self.list_async(rel_prefix))?
    }

    /// [`list`](Self::list), awaited.
    pub async fn list_async(&self, rel_prefix: &str) -> Result<Vec<(String, u64)>> {
        let p = if rel_prefix.is_empty() && self.prefix.is_empty() {
            None
        } else if rel_prefix.is_empty() {
            Some(ObjPath::parse(&self.prefix).map_err(|e| invalid("prefix", e))?)
        } else {
            Some(self.full(rel_prefix)?)
        };
        let items = self
            .on_io(|store| async move {
                store
                    .list(p.as_ref())
                    .try_collect::<Vec<object_store::ObjectMeta>>()
                    .await
            })
            .await?;
        let items = match items {
            Ok(v) => v,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(self.remote_err("list", rel_prefix, e)),
        };
        let mut out: Vec<(String, u64)> = items
            .iter()
            .map(|m| (self.rel(&m.location), m.size))
            .collect();
        out.sort();
        Ok(out)
    }

    /// Deletes object `rel` (deleting a missing object is not an error).
    pub fn delete(&self, rel: &str) -> Result<()> {
        self.io.block_on(|| self.delete_async(rel))?
    }

    /// [`delete`](Self::delete), awaited.
    pub async fn delete_async(&self, rel: &str) -> Result<()> {
        let p = self.full(rel)?;
        match self
            .on_io(|store| async move { store.delete(&p).await })
            .await?
        {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.remote_err("delete", rel, e)),
        }
    }

    /// Where object `rel` is on the local file system, for a local root.
    pub fn local_path(&self, rel: &str) -> Option<PathBuf> {
        self.local_root.as_ref().map(|r| r.join(rel))
    }
}

impl CheckpointStorage {
    fn map_get(&self, rel: &str, e: object_store::Error) -> Error {
        match e {
            object_store::Error::NotFound { .. } => CheckpointError::MissingObject {
                at: Location::file(rel),
            }
            .into(),
            e => self.remote_err("get", rel, e),
        }
    }
}

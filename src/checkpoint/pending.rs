//! The asynchronous part of a checkpoint: [`PendingCheckpoint`] waits for the backend's files, uploads
//! those the incremental base lacks in batches, and writes the metadata last.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::format::{CheckpointMetadata, FileKind, FileRef, ObjectRef};
use super::metadata_path;
use super::registry::{CheckpointSummary, Inner};
use super::reuse::{file_kind, packed_file_refs, reuse_key};
use super::storage::{Upload, UploadPart};
use crate::backend::{BackendConfig, CapturedFile, CheckpointCapture, FileSource};
use crate::error::{CheckpointError, Error, Result};
use crate::meta::StateMetaInfo;
use keyed_state_lsm::storage::StorageHandle;

/// Bytes of new files read or serialized before they are uploaded (a batch of uploads at a time).
const BATCH_BYTES: u64 = 64 << 20;

/// Files going into one object.
#[derive(Default)]
struct Group<'a> {
    parts: Vec<UploadPart>,
    files: Vec<&'a CapturedFile>,
    bytes: u64,
}

/// Groups waiting for upload.
#[derive(Default)]
struct Batch<'a> {
    groups: Vec<Group<'a>>,
    bytes: u64,
}

/// One uploaded object: its path, its files in order, what the upload wrote.
type UploadResult<'a> = (String, Vec<&'a CapturedFile>, super::storage::Uploaded);

impl<'a> Batch<'a> {
    fn push(&mut self, g: Group<'a>) {
        self.bytes += g.bytes;
        self.groups.push(g);
    }
}

/// The asynchronous part of a checkpoint ([`Checkpointer::begin`](super::Checkpointer::begin)); run it on any thread.
pub struct PendingCheckpoint {
    pub(super) inner: Arc<Inner>,
    pub(super) id: u64,
    /// Taken by the run (in a lock only so that the checkpoint is `Sync`, and its run's future `Send`).
    pub(super) capture: parking_lot::Mutex<Option<Box<dyn CheckpointCapture>>>,
    pub(super) config: BackendConfig,
    pub(super) states: Vec<StateMetaInfo>,
    pub(super) created_millis: u64,
    pub(super) base: Option<CheckpointMetadata>,
    pub(super) cancel: Arc<AtomicBool>,
}

impl std::fmt::Debug for PendingCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCheckpoint")
            .field("id", &self.id)
            .finish()
    }
}

impl PendingCheckpoint {
    /// The checkpoint id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Waits for the backend's files, uploads those the incremental base lacks, and writes the metadata
    /// last. On any failure (cancellation included) the objects it uploaded are deleted and no metadata
    /// exists. [`run_async`](Self::run_async) on the storage's I/O runtime, waited for (from a plain thread
    /// or from inside a tokio runtime).
    pub fn run(self) -> Result<CheckpointSummary> {
        let io = Arc::clone(self.inner.storage.io());
        io.block_on(move || self.run_async())?
    }

    /// [`run`](Self::run), awaited. The object-store requests are tasks of the storage's I/O runtime; the
    /// wait for the backend's files, reads of small local files and the serialization of in-memory tables
    /// run on its blocking threads (on the calling thread in [`run`](Self::run)), and a large file is
    /// streamed by a reader thread of its own. The awaiting task blocks no thread of its executor and uses
    /// none of its blocking threads.
    pub async fn run_async(mut self) -> Result<CheckpointSummary> {
        let t = Instant::now();
        let mut uploaded: Vec<String> = Vec::new();
        let span = tracing::debug_span!(
            "checkpoint_upload",
            id = self.id,
            instance = %self.inner.instance
        );
        let r = tracing::Instrument::instrument(self.run_inner(&mut uploaded, t), span).await;
        if r.is_err() {
            for p in &uploaded {
                let _ = self.inner.storage.delete_async(p).await;
            }
            self.inner.reg.lock().in_flight.remove(&self.id);
        }
        r
    }

    /// Uploads the groups of `batch` (their files read from `files`), protected from the sweep first;
    /// appends what each wrote to `results`.
    async fn flush<'a>(
        &self,
        files_on: &StorageHandle,
        batch: &mut Batch<'a>,
        uploaded: &mut Vec<String>,
        results: &mut Vec<UploadResult<'a>>,
    ) -> Result<()> {
        let inner = &self.inner;
        let id = self.id;
        if batch.groups.is_empty() {
            return Ok(());
        }
        let groups = std::mem::take(&mut batch.groups);
        batch.bytes = 0;
        let mut files = Vec::with_capacity(groups.len());
        let ups: Vec<Upload> = {
            // Numbered and protected under one lock: a sweep's snapshot holds the object, or was taken
            // before its number (and keeps every object of this run numbered from there on).
            let mut reg = inner.reg.lock();
            let Some(f) = reg.in_flight.get_mut(&id) else {
                return Err(CheckpointError::Cancelled { id }.into());
            };
            let ups: Vec<Upload> = groups
                .into_iter()
                .map(|g| {
                    let n = inner.next_object.fetch_add(1, Ordering::AcqRel);
                    let ext = if g.files.len() == 1 { "sst" } else { "pack" };
                    files.push(g.files);
                    Upload {
                        path: format!(
                            "{}{id}-{n}.{ext}",
                            super::fence::run_dir(&inner.instance, inner.run, inner.attempt)
                        ),
                        files: g.parts,
                    }
                })
                .collect();
            f.protect.extend(ups.iter().map(|u| u.path.clone()));
            ups
        };
        self.check_cancel()?;
        let paths: Vec<String> = ups.iter().map(|u| u.path.clone()).collect();
        uploaded.extend(paths.iter().cloned());
        let rs = inner
            .storage
            .upload_all_async(ups, files_on.clone())
            .await?;
        for ((path, f), r) in paths.into_iter().zip(files).zip(rs) {
            results.push((path, f, r));
        }
        Ok(())
    }

    fn check_cancel(&self) -> Result<()> {
        if self.cancel.load(Ordering::Acquire) {
            Err(CheckpointError::Cancelled { id: self.id }.into())
        } else {
            Ok(())
        }
    }

    async fn run_inner(
        &mut self,
        uploaded: &mut Vec<String>,
        t: Instant,
    ) -> Result<CheckpointSummary> {
        let capture = self.capture.lock().take().ok_or_else(|| {
            Error::from(CheckpointError::Invalid("checkpoint already run".into()))
        })?;
        let io = Arc::clone(self.inner.storage.io());
        let cancel = Arc::clone(&self.cancel);
        let mut captured = match io.spawn_blocking(move || capture.wait(&cancel))?.await? {
            Ok(c) => c,
            Err(Error::Lsm(keyed_state_lsm::LsmError::Cancelled)) => {
                return Err(CheckpointError::Cancelled { id: self.id }.into())
            }
            Err(e) => return Err(e),
        };
        self.check_cancel()?;
        let inner = &self.inner;
        let id = self.id;
        let files_on = captured.storage.clone();
        let mut tables = captured.tables.take();

        let mut objects: Vec<ObjectRef> = Vec::new();
        let mut object_index: BTreeMap<String, u32> = BTreeMap::new();
        let mut files: Vec<FileRef> = Vec::new();
        let mut new_files: Vec<&CapturedFile> = Vec::new();
        // The files a background materialization uploaded are referenced as the base's are, protected as
        // this checkpoint's from here on; once its protection ended (a checkpoint begun after it was
        // confirmed), the confirmed checkpoint newer than this one's base references them.
        let (mat, newer_base) = {
            let mut reg = inner.reg.lock();
            let reg = &mut *reg;
            match reg.in_flight.get_mut(&id) {
                Some(f) => match super::reuse::refs_for(&reg.mat, &mut f.protect) {
                    Some(m) => (Some(m), None),
                    None => (
                        None,
                        super::reuse::newer_base_refs(
                            self.base.as_ref(),
                            reg.base.as_ref(),
                            &mut f.protect,
                        ),
                    ),
                },
                None => return Err(CheckpointError::Cancelled { id }.into()),
            }
        };
        let base_files = super::reuse::reuse_table(
            self.base.as_ref(),
            mat.as_deref()
                .map(|m| (m, true))
                .or(newer_base.as_ref().map(|m| (m, false))),
        );
        let mut files_from_materialization = 0usize;
        let mut bytes_from_materialization = 0u64;
        for f in &captured.files {
            let kind = file_kind(&f.source);
            let reused = reuse_key(f.number, &kind)
                .and_then(|key| base_files.get(&key))
                .filter(|(r, _, _)| matches!(kind, FileKind::Table { .. }) || r.length == f.size);
            match reused {
                Some(&(r, o, from_mat)) => {
                    if from_mat {
                        files_from_materialization += 1;
                        bytes_from_materialization += r.length;
                    }
                    let idx = match object_index.get(&o.path) {
                        Some(i) => *i,
                        None => {
                            let i = objects.len() as u32;
                            objects.push(o.clone());
                            object_index.insert(o.path.clone(), i);
                            i
                        }
                    };
                    files.push(FileRef {
                        number: f.number,
                        level: f.level as u8,
                        object: idx,
                        offset: r.offset,
                        length: r.length,
                        checksum: r.checksum,
                        kind,
                    });
                }
                None => new_files.push(f),
            }
        }
        let files_reused = files.len();

        // Large files one object each, small ones packed (design/checkpoints.md, "Small files"); uploaded in
        // batches, so serialized tables are in memory a batch at a time.
        let mut batch = Batch::default();
        let mut small = Group::default();
        let mut uploads = 0usize;
        let mut bytes_written = 0u64;
        let mut bytes_new_files = 0u64;
        let mut results: Vec<UploadResult<'_>> = Vec::new();
        for f in &new_files {
            let part = match &f.source {
                FileSource::Sst(p)
                | FileSource::BoundedSst { path: p, .. }
                | FileSource::Named { path: p, .. } => (UploadPart::File(p.clone()), f.size),
                FileSource::Table { state, key_group } => {
                    let t = tables.take().ok_or_else(|| {
                        Error::from(CheckpointError::Invalid(
                            "a table file without its tables".into(),
                        ))
                    })?;
                    let (state, key_group) = (*state, *key_group);
                    // Serialized off the executor; the tables come back for the next one.
                    let (t, b) = io
                        .spawn_blocking(move || {
                            let mut b = Vec::new();
                            let r = t.render(state, key_group, &mut b);
                            (t, r.map(|()| b))
                        })?
                        .await?;
                    tables = Some(t);
                    let b = b?;
                    let n = b.len() as u64;
                    (UploadPart::Bytes(b), n)
                }
            };
            let (part, size) = part;
            if size >= inner.opts.pack_threshold {
                batch.push(Group {
                    parts: vec![part],
                    files: vec![f],
                    bytes: size,
                });
            } else {
                if small.bytes + size > inner.opts.pack_max && !small.files.is_empty() {
                    batch.push(std::mem::take(&mut small));
                }
                small.bytes += size;
                small.parts.push(part);
                small.files.push(f);
            }
            if batch.bytes >= BATCH_BYTES {
                self.flush(&files_on, &mut batch, uploaded, &mut results)
                    .await?;
                self.check_cancel()?;
            }
        }
        if !small.files.is_empty() {
            batch.push(small);
        }
        self.flush(&files_on, &mut batch, uploaded, &mut results)
            .await?;
        self.check_cancel()?;
        for (path, g, r) in &results {
            let idx = objects.len() as u32;
            objects.push(ObjectRef {
                path: path.clone(),
                size: r.size,
                checksum: r.checksum,
                uploaded_by: id,
            });
            uploads += 1;
            bytes_written += r.size;
            let packed = packed_file_refs(g, &r.files, idx);
            bytes_new_files += packed.iter().map(|f| f.length).sum::<u64>();
            files.extend(packed);
        }
        files.sort_by_key(|f| (f.level, f.number));
        let (view_materialized, bytes_materialization) = match captured.view {
            keyed_state_lsm::CaptureView::Materialized { bytes } => {
                (true, bytes.min(bytes_new_files))
            }
            _ => (false, 0),
        };
        let meta = CheckpointMetadata {
            checkpoint_id: id,
            backend: captured.backend,
            instance: inner.instance.clone(),
            run: inner.run,
            max_parallelism: self.config.max_parallelism,
            key_group_range: self.config.key_group_range,
            seqno: captured.seqno,
            created_millis: self.created_millis,
            key_serializer: self.config.key_serializer.clone(),
            states: self.states.clone(),
            objects,
            files,
        };
        let bytes = meta.encode()?;
        let meta_len = bytes.len() as u64;
        // The metadata is written without holding the registry's lock (so `begin` never waits on it). A
        // sweep keeps the objects it names either way: its snapshot, taken under the lock before it scans
        // the root, holds them while the checkpoint is in flight, and its scan sees the metadata once written.
        if !inner.reg.lock().in_flight.contains_key(&id) {
            return Err(CheckpointError::Cancelled { id }.into());
        }
        self.check_cancel()?;
        // Fenced writers commit nothing; the put is create-only, so no metadata is ever overwritten.
        inner.check_fenced_async().await?;
        let path = metadata_path(id, &inner.instance);
        if !inner.storage.put_if_absent_async(&path, bytes).await? {
            inner.check_fenced_async().await?;
            return Err(CheckpointError::AlreadyExists {
                id,
                instance: inner.instance.clone(),
                path,
            }
            .into());
        }
        // A newer attempt that opened between the check and the put may have swept objects this metadata
        // names before it existed: the checkpoint is withdrawn, never reported complete. So is one the host
        // aborted or subsumed while the metadata was being written.
        let withdrawn = match inner.check_fenced_async().await {
            Err(e) => Some(e),
            Ok(()) => {
                let mut reg = inner.reg.lock();
                let cancelled = self.cancel.load(Ordering::Acquire);
                match reg.in_flight.get_mut(&id).filter(|_| !cancelled) {
                    Some(f) => {
                        f.written = Some(meta.clone());
                        f.materialized = view_materialized;
                        f.protect.clear();
                        None
                    }
                    None => Some(CheckpointError::Cancelled { id }.into()),
                }
            }
        };
        if let Some(e) = withdrawn {
            if inner.storage.delete_async(&path).await.is_err() {
                // The metadata stays: so do the objects it names (a leak for a later sweep, never a
                // checkpoint whose objects are gone).
                uploaded.clear();
            }
            return Err(e);
        }
        drop(captured);
        Ok(CheckpointSummary {
            id,
            files_new: meta.files.len() - files_reused,
            files_reused,
            objects_written: uploads + 1,
            bytes_written: bytes_written + meta_len,
            bytes_new_files,
            state_size: meta.state_size(),
            view_materialized,
            bytes_materialization,
            files_from_materialization,
            bytes_from_materialization,
            async_micros: u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
        })
    }
}

//! The background materialization of the LSM checkpoint view (`design/checkpoint-view.md`, "In the
//! background"): at a checkpoint's synchronous part, when the engine says its view is past a background
//! trigger, the checkpointer takes the engine's version `M` and uploads, as a task of the I/O runtime, the
//! files of `M` the last confirmed checkpoint lacks, writing no metadata; then the engine's view advances
//! to `M` and the checkpoints that follow reference the uploaded objects.
//!
//! The objects are protected as an in-flight checkpoint's are: numbered and added to the materialization's
//! protect set under the registry's lock before their upload, so a sweep's snapshot keeps them. The
//! protection ends when a checkpoint that began after the uploads ended is confirmed (its metadata holds
//! what it referenced), or when the materialization is abandoned (its uploads failed, the checkpointer
//! closed, a confirmed in-band materialization made it moot, or the engine's view was replaced): its
//! objects are deleted then, and whatever is left (a crash) is unreferenced, for the next sweep.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::format::ObjectRef;
use super::registry::{Inner, Materializing, Refs, Registry};
use super::reuse::{file_kind, packed_file_refs, reuse_key, ReuseKey};
use super::storage::{Upload, UploadPart};
use crate::backend::{CapturedFile, FileSource, MaterializationCapture};
use crate::error::{CheckpointError, Result};

/// Bytes of new files uploaded in one batch.
const BATCH_BYTES: u64 = 64 << 20;

/// At the synchronous part of checkpoint `id` (the registry locked): notes `id` as the first checkpoint after
/// an uploaded materialization, or starts one when none is in the registry and `backend` has one due.
pub(super) fn at_begin(
    inner: &Arc<Inner>,
    reg: &mut Registry,
    id: u64,
    backend: &mut dyn crate::backend::StateBackend,
) {
    if let Some(m) = reg.mat.as_mut() {
        if m.refs.is_some() && m.first_after.is_none() {
            m.first_after = Some(id);
        }
        return;
    }
    // One at a time: an abandoned one is in flight until its objects are deleted.
    if reg.mat_status.in_flight {
        return;
    }
    let (Some(confirmed), Some(base)) = (reg.last_confirmed, reg.base.as_ref()) else {
        return;
    };
    let Some(cap) = backend.view_materialization() else {
        return;
    };
    let in_base: std::collections::HashSet<ReuseKey> = base
        .files
        .iter()
        .filter_map(|r| reuse_key(r.number, &r.kind))
        .collect();
    let seq = reg.mat_status.started + 1;
    let cancel = Arc::new(AtomicBool::new(false));
    reg.mat = Some(Materializing {
        seq,
        cancel: Arc::clone(&cancel),
        protect: BTreeSet::new(),
        refs: None,
        first_after: None,
    });
    reg.mat_status.started += 1;
    reg.mat_status.in_flight = true;
    let task = run(Arc::clone(inner), seq, cap, in_base, confirmed, cancel);
    if let Err(e) = inner.storage.io().spawn_detached(task) {
        tracing::warn!(instance = %inner.instance, "background materialization not started: {e}");
        reg.mat = None;
        reg.mat_status.abandoned += 1;
        reg.mat_status.in_flight = false;
    }
}

/// At the confirmation of checkpoint `id` (the registry locked; `moot`: its capture was an in-band
/// materialization): ends the protection of an uploaded materialization once a checkpoint that began after
/// it is confirmed; cancels one still uploading that the confirmation made moot.
pub(super) fn at_confirm(reg: &mut Registry, id: u64, moot: bool) {
    let Some(m) = reg.mat.as_ref() else {
        return;
    };
    if m.first_after.is_some_and(|c| c <= id) {
        reg.mat = None;
    } else if moot && m.refs.is_none() {
        m.cancel.store(true, Ordering::Release);
    }
}

async fn run(
    inner: Arc<Inner>,
    seq: u64,
    cap: Box<dyn MaterializationCapture>,
    in_base: std::collections::HashSet<ReuseKey>,
    uploaded_by: u64,
    cancel: Arc<AtomicBool>,
) {
    let mut guard = InFlight {
        inner: Arc::clone(&inner),
        seq,
        ended: false,
    };
    let mut uploaded: Vec<String> = Vec::new();
    let r = upload(
        &inner,
        seq,
        &*cap,
        &in_base,
        uploaded_by,
        &cancel,
        &mut uploaded,
    )
    .await;
    let stopped = || cancel.load(Ordering::Acquire) || inner.closed.load(Ordering::Acquire);
    let mut cap = cap;
    let abandoned = {
        // The view advances and the references are published under the registry's lock (the engine's
        // state lock inside it, as at `begin`): a checkpoint whose capture took the advanced view finds the
        // references (it looks under this lock), and one that begins after them captures the advanced view.
        let mut reg = inner.reg.lock();
        let mine = reg.mat.as_ref().is_some_and(|m| m.seq == seq);
        let abandoned = match r {
            Ok(refs) if mine && !stopped() => {
                let advanced = cap.advance();
                if let Err(why) = &advanced {
                    tracing::debug!(instance = %inner.instance, "the checkpoint view did not advance: {why:?}");
                }
                let s = &mut reg.mat_status;
                if advanced.is_ok() {
                    s.advanced += 1;
                } else {
                    s.refused += 1;
                }
                s.objects_written += refs.objects.len() as u64;
                s.bytes_written += refs.objects.iter().map(|o| o.size).sum::<u64>();
                if let Some(m) = reg.mat.as_mut() {
                    m.refs = Some(Arc::new(refs));
                }
                false
            }
            _ => {
                if mine {
                    reg.mat = None;
                }
                reg.mat_status.abandoned += 1;
                true
            }
        };
        guard.ended = true;
        abandoned
    };
    // The engine's files are released outside the lock, on a blocking thread: file deletions, and the
    // engine's last parts when its backend was dropped meanwhile (its private pool's threads are joined).
    match inner.storage.io().spawn_blocking(move || drop(cap)) {
        Ok(released) => {
            let _ = released.await;
        }
        Err(e) => {
            tracing::warn!(instance = %inner.instance, "materialization released in place: {e}")
        }
    }
    if abandoned {
        for p in &uploaded {
            let _ = inner.storage.delete_async(p).await;
        }
        super::sweeper::request(&inner);
    }
    // Done once an abandoned one's objects are deleted (`wait_for_materialization` returns after that).
    drop(guard);
}

/// The materialization `seq` in flight: when dropped, it is no longer in flight (and, dropped before it
/// `ended` — a panic in the task, or the runtime dropping it — it is abandoned: its objects are left to the
/// next sweep, which it requests).
struct InFlight {
    inner: Arc<Inner>,
    seq: u64,
    ended: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut reg = self.inner.reg.lock();
        if !self.ended {
            if reg.mat.as_ref().is_some_and(|m| m.seq == self.seq) {
                reg.mat = None;
            }
            reg.mat_status.abandoned += 1;
        }
        reg.mat_status.in_flight = false;
        drop(reg);
        if !self.ended {
            super::sweeper::request(&self.inner);
        }
        self.inner.mat_idle.notify_all();
    }
}

/// Uploads `cap`'s files not in the base, packed as a checkpoint packs them; returns their references.
async fn upload(
    inner: &Inner,
    seq: u64,
    cap: &dyn MaterializationCapture,
    in_base: &std::collections::HashSet<ReuseKey>,
    uploaded_by: u64,
    cancel: &AtomicBool,
    uploaded: &mut Vec<String>,
) -> Result<Refs> {
    let new: Vec<&CapturedFile> = cap
        .files()
        .iter()
        .filter(|f| {
            reuse_key(f.number, &file_kind(&f.source)).is_none_or(|k| !in_base.contains(&k))
        })
        .collect();
    let mut groups: Vec<Vec<&CapturedFile>> = Vec::new();
    let mut small: Vec<&CapturedFile> = Vec::new();
    let mut small_bytes = 0u64;
    for f in new {
        if f.size >= inner.opts.pack_threshold {
            groups.push(vec![f]);
            continue;
        }
        if small_bytes + f.size > inner.opts.pack_max && !small.is_empty() {
            groups.push(std::mem::take(&mut small));
            small_bytes = 0;
        }
        small_bytes += f.size;
        small.push(f);
    }
    if !small.is_empty() {
        groups.push(small);
    }
    let files_on = cap.storage();
    let mut refs = Refs {
        objects: Vec::new(),
        files: Vec::new(),
    };
    let mut rest = groups.into_iter().peekable();
    while rest.peek().is_some() {
        if !cap.is_current() {
            // The view was replaced since `M`'s moment: the advance would be refused.
            return Err(CheckpointError::Cancelled { id: uploaded_by }.into());
        }
        let mut batch: Vec<Vec<&CapturedFile>> = Vec::new();
        let mut bytes = 0u64;
        while let Some(g) = rest.next_if(|_| bytes < BATCH_BYTES) {
            bytes += g.iter().map(|f| f.size).sum::<u64>();
            batch.push(g);
        }
        let ups: Vec<Upload> = {
            // Numbered and protected under one lock, as a checkpoint's objects are.
            let mut reg = inner.reg.lock();
            let Some(m) = reg.mat.as_mut().filter(|m| m.seq == seq) else {
                return Err(CheckpointError::Cancelled { id: uploaded_by }.into());
            };
            let mut ups = Vec::with_capacity(batch.len());
            for g in &batch {
                let n = inner.next_object.fetch_add(1, Ordering::AcqRel);
                let ext = if g.len() == 1 { "sst" } else { "pack" };
                let path = format!(
                    "{}m{seq}-{n}.{ext}",
                    super::fence::run_dir(&inner.instance, inner.run, inner.attempt)
                );
                m.protect.insert(path.clone());
                let parts = g.iter().map(|f| part(f)).collect::<Result<Vec<_>>>()?;
                ups.push(Upload { path, files: parts });
            }
            ups
        };
        if cancel.load(Ordering::Acquire) || inner.closed.load(Ordering::Acquire) {
            return Err(CheckpointError::Cancelled { id: uploaded_by }.into());
        }
        uploaded.extend(ups.iter().map(|u| u.path.clone()));
        let paths: Vec<String> = ups.iter().map(|u| u.path.clone()).collect();
        let rs = inner
            .storage
            .upload_all_async(ups, files_on.clone())
            .await?;
        for ((path, g), r) in paths.into_iter().zip(&batch).zip(rs) {
            let idx = refs.objects.len() as u32;
            refs.objects.push(ObjectRef {
                path,
                size: r.size,
                checksum: r.checksum,
                uploaded_by,
            });
            refs.files.extend(packed_file_refs(g, &r.files, idx));
        }
    }
    Ok(refs)
}

fn part(f: &CapturedFile) -> Result<UploadPart> {
    match &f.source {
        FileSource::Sst(p) | FileSource::BoundedSst { path: p, .. } => {
            Ok(UploadPart::File(p.clone()))
        }
        _ => Err(CheckpointError::Invalid(
            "a background materialization holds SST files only".into(),
        )
        .into()),
    }
}

#[cfg(test)]
#[path = "materialize_tests.rs"]
mod tests;

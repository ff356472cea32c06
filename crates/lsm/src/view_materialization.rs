//! A background materialization of the checkpoint view (`design/checkpoint-view.md`, "In the
//! background"): the engine's version `M` of one moment, pinned while a host uploads its files outside any
//! checkpoint's path; then [`ViewMaterialization::advance`] makes the view `M` plus the files flushed (and
//! capture files adopted) since that moment, so the next capture takes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::checkpoint::CapturedFile;
use super::checkpoint_view::{self, Tail};
use super::db::Db;
use super::version::{FileMeta, Version};

static IDS: AtomicU64 = AtomicU64::new(1);

/// The engine's version at one moment, pinned (its files stay on disk while this lives), for a host to
/// upload before the checkpoint view advances to it ([`Db::begin_view_materialization`]).
pub struct ViewMaterialization {
    inner: Arc<super::inner::DbInner>,
    id: u64,
    version: Arc<Version>,
    /// What the advance replaced (the old view, the tail): released with this, outside the engine's lock.
    replaced: Option<(Option<Arc<Version>>, Tail)>,
    /// The files of the version, in level order.
    pub files: Vec<CapturedFile>,
}

impl std::fmt::Debug for ViewMaterialization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewMaterialization")
            .field("id", &self.id)
            .field("files", &self.files.len())
            .finish()
    }
}

/// Why [`ViewMaterialization::advance`] left the view as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvanceRefused {
    /// The view was replaced since the moment (an in-band materialization, an ingestion, a give-up).
    ViewReplaced,
    /// The version keeps in L0 a file whose sequence numbers span an adopted capture file's since.
    SpanningL0File,
    /// The engine failed or is closing.
    Closed,
}

impl Db {
    /// Whether the checkpoint view is past a background trigger
    /// ([`Options::checkpoint_view_background_l0_runs`](crate::Options::checkpoint_view_background_l0_runs)
    /// or its pinned ratio) and stays within its in-band bounds once the memtables written are flushed (the
    /// next checkpoint would materialize in band otherwise); false without a view.
    pub fn checkpoint_view_due(&self) -> bool {
        let st = self.inner().state.lock();
        let pending = st.imm.len() + usize::from(!st.mem.is_empty());
        checkpoint_view::background_due(
            st.view.as_deref(),
            &st.version,
            pending,
            st.view_background,
            &self.inner().opts,
        )
    }

    /// Takes the engine's current version for a background materialization of the checkpoint view:
    /// `None` without a view (off, or none yet: the next capture materializes in band), or while another
    /// one is in flight. From now on the files appended to the view are recorded for the advance.
    pub fn begin_view_materialization(&self) -> Option<ViewMaterialization> {
        let inner = self.inner();
        let mut st = inner.state.lock();
        if !inner.opts.checkpoint_view || st.view.is_none() || st.view_tail.is_some() {
            return None;
        }
        if st.bg_error.is_some() || st.shutting_down {
            return None;
        }
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        st.view_background = true;
        st.view_tail = Some(Tail {
            id,
            files: Vec::new(),
            valid: true,
        });
        let version = Arc::clone(&st.version);
        drop(st);
        let files = version
            .files()
            .map(|(level, f)| CapturedFile {
                number: f.info.number,
                level,
                size: f.info.size,
                path: f.path.clone(),
                bounds: f.info.bounds.clone(),
            })
            .collect();
        Some(ViewMaterialization {
            inner: Arc::clone(inner),
            id,
            version,
            replaced: None,
            files,
        })
    }
}

impl ViewMaterialization {
    /// Makes the checkpoint view this version plus the files appended to the view since its moment, so
    /// the next capture takes them (call once the host holds every file of [`files`](Self::files)). Refused
    /// when the view was replaced since, or when the version keeps in L0 a file spanning the sequence
    /// number of a capture file adopted since (it would sort above that file and hide its newer values:
    /// the hazard of `adopt_overlay`); the view then stays as it is. Once called, the next calls are refused.
    /// What it replaces is released when this is dropped (files whose last reference goes are deleted
    /// then): drop it outside the caller's locks.
    pub fn advance(&mut self) -> Result<(), AdvanceRefused> {
        let mut st = self.inner.state.lock();
        if st.bg_error.is_some() || st.shutting_down {
            return Err(AdvanceRefused::Closed);
        }
        let tail = match st.view_tail.take() {
            Some(t) if t.id == self.id => t,
            other => {
                st.view_tail = other;
                return Err(AdvanceRefused::ViewReplaced);
            }
        };
        let r = if !tail.valid || st.view.is_none() {
            Err(AdvanceRefused::ViewReplaced)
        } else if tail.files.iter().any(|(_, f)| spanned(&self.version, f)) {
            Err(AdvanceRefused::SpanningL0File)
        } else {
            Ok(Arc::new(self.version.apply(&[], &tail.files)))
        };
        let old = match &r {
            Ok(v) => st.view.replace(Arc::clone(v)),
            Err(_) => None,
        };
        drop(st);
        self.replaced = Some((old, tail));
        r.map(|_| ())
    }

    /// Whether the advance can still be made: the view was not replaced since the moment (polled between
    /// uploads, to stop early).
    pub fn is_current(&self) -> bool {
        let st = self.inner.state.lock();
        st.view_tail
            .as_ref()
            .is_some_and(|t| t.id == self.id && t.valid)
            && st.view.is_some()
    }
}

/// Whether `v`'s L0 keeps a file whose sequence numbers span `f`'s newest and whose keys overlap `f`'s.
fn spanned(v: &Version, f: &Arc<FileMeta>) -> bool {
    let Some((lo, hi)) = super::compaction::key_range(std::slice::from_ref(f)) else {
        return false;
    };
    let s = f.info.max_seqno;
    v.levels.first().is_some_and(|l0| {
        l0.iter()
            .any(|m| m.info.min_seqno < s && m.info.max_seqno > s && m.info.overlaps(&lo, &hi))
    })
}

impl Drop for ViewMaterialization {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        let tail = if st.view_tail.as_ref().is_some_and(|t| t.id == self.id) {
            st.view_tail.take()
        } else {
            None
        };
        drop(st);
        // The tail's files (and the version, the replaced view, after this) are released outside the lock.
        drop(tail);
    }
}

#[cfg(test)]
#[path = "view_materialization_tests.rs"]
mod tests;

//! The checkpoint view (`design/checkpoint-view.md`): the files the last checkpoint captured, plus the
//! files flushed (and capture files adopted) since, kept as a version so that its files stay on disk after
//! compactions replace them. A capture takes the view instead of the engine's whole version while the view
//! is within its bounds, so a checkpoint's new files are its flushes.

use std::collections::HashSet;
use std::sync::Arc;

use super::options::Options;
use super::version::{FileMeta, Version};

/// What a checkpoint capture took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureView {
    /// The view is off ([`Options::checkpoint_view`]): the engine's whole version.
    Off,
    /// The view: the files the last capture took and the files installed by flushes (and adopted capture
    /// files) since.
    Changes,
    /// The engine's whole version, which became the view (the first capture after opening or an
    /// ingestion, or the view was past a bound).
    Materialized {
        /// Bytes of the files taken beyond the view (and the flushes it held): what the capture uploads
        /// beyond its changes when the last checkpoint was confirmed (all of it after opening).
        bytes: u64,
    },
}

/// How an installed edit changes the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ViewEdit {
    /// From what the edit does: a flush's files are added to the view; an edit that deletes files (a
    /// compaction, a drop of covered or expired files) leaves it; any other that adds files (an ingestion)
    /// discards it.
    Infer,
    /// The added files (L0 files holding writes newer than the view's) are added to the view.
    Append,
}

/// The files appended to the view since a background materialization took its version
/// ([`ViewMaterialization`](crate::ViewMaterialization)): what the view becomes on top of that version
/// when it advances. `valid` is false once the view was replaced or given up since (the advance is refused).
pub(crate) struct Tail {
    /// The materialization it belongs to.
    pub id: u64,
    /// The L0 files flushed (and capture files adopted) since its moment, in install order.
    pub files: Vec<(usize, Arc<FileMeta>)>,
    pub valid: bool,
}

/// The view and the tail of a background materialization in flight (the engine's, under the state lock).
pub(crate) struct ViewState<'a> {
    pub view: &'a mut Option<Arc<Version>>,
    pub tail: &'a mut Option<Tail>,
    /// Whether a host took a background materialization: the hard L0 bound applies ([`l0_bound`]).
    pub background: bool,
}

impl ViewState<'_> {
    /// The view is given up or replaced: a materialization in flight can no longer advance it.
    pub(crate) fn reset(&mut self, to: Option<Arc<Version>>) {
        *self.view = to;
        if let Some(t) = self.tail.as_mut() {
            t.valid = false;
            t.files.clear();
        }
    }
}

/// Updates the view (the engine's, `None`: none) for an installed edit (call with the state lock held, after
/// installing the version).
pub(crate) fn on_install(
    mut vs: ViewState<'_>,
    how: ViewEdit,
    pop_imm: bool,
    deleted: &[(usize, Arc<FileMeta>)],
    added: &[(usize, Arc<FileMeta>)],
) {
    let Some(v) = vs.view.as_ref() else {
        return;
    };
    let append = how == ViewEdit::Append || pop_imm;
    if append {
        if !added.is_empty() {
            *vs.view = Some(Arc::new(v.apply(&[], added)));
            // A tail no longer valid takes no more files (it would keep them on disk for nothing).
            if let Some(t) = vs.tail.as_mut().filter(|t| t.valid) {
                t.files.extend(added.iter().cloned());
            }
        }
    } else if deleted.is_empty() && !added.is_empty() {
        vs.reset(None);
    }
}

/// The files of a checkpoint capture taken now, when the engine's installed `version` holds the writes up to
/// the last flushed memtable, and what they are; `view` becomes them (call with the state lock held).
pub(crate) fn capture(
    mut vs: ViewState<'_>,
    version: &Arc<Version>,
    opts: &Options,
) -> (Arc<Version>, CaptureView) {
    if !opts.checkpoint_view {
        return (Arc::clone(version), CaptureView::Off);
    }
    if let Some(v) = vs.view.as_ref() {
        if within_bounds(v, version, 0, l0_bound(opts, vs.background), opts) {
            return (Arc::clone(v), CaptureView::Changes);
        }
    }
    let bytes = match vs.view.as_ref() {
        Some(v) => bytes_outside(version, v),
        None => total_bytes(version),
    };
    vs.reset(Some(Arc::clone(version)));
    (Arc::clone(version), CaptureView::Materialized { bytes })
}

/// Whether a background materialization is due: the view is past one of its background triggers
/// ([`Options::checkpoint_view_background_l0_runs`], [`Options::checkpoint_view_background_pinned_ratio`])
/// and stays within its bounds once the `pending` memtables (sealed, or written and to be sealed by the next
/// checkpoint) are flushed: past them, the next capture materializes in band anyway.
pub(crate) fn background_due(
    view: Option<&Version>,
    version: &Version,
    pending: usize,
    background: bool,
    opts: &Options,
) -> bool {
    let Some(v) = view.filter(|_| opts.checkpoint_view) else {
        return false;
    };
    if !within_bounds(v, version, pending, l0_bound(opts, background), opts) {
        return false;
    }
    v.l0_runs >= opts.checkpoint_view_background_l0_runs
        || bytes_outside(v, version) as f64
            > opts.checkpoint_view_background_pinned_ratio * total_bytes(version) as f64
}

/// The view's bound on L0 runs: [`Options::checkpoint_view_max_l0_runs`], or once a host takes background
/// materializations (`background`) [`Options::checkpoint_view_hard_l0_runs`] (at least the former): a view
/// past the first is taken forward in the background instead of in the checkpoint's path.
pub(crate) fn l0_bound(opts: &Options, background: bool) -> usize {
    if background {
        opts.checkpoint_view_hard_l0_runs
            .max(opts.checkpoint_view_max_l0_runs)
    } else {
        opts.checkpoint_view_max_l0_runs
    }
}

/// The L0 bound holds while the view has no more runs than `l0_bound` or than the version itself (when the
/// engine's own L0 is past the bound, taking the version would not give a restore fewer runs); `pending`:
/// runs flushes will add to both.
fn within_bounds(
    view: &Version,
    version: &Version,
    pending: usize,
    l0_bound: usize,
    opts: &Options,
) -> bool {
    view.l0_runs + pending <= l0_bound.max(version.l0_runs + pending)
        && bytes_outside(view, version) as f64
            <= opts.checkpoint_view_max_pinned_ratio * total_bytes(version) as f64
}

/// Bytes of `a`'s files that `b` does not hold.
pub(crate) fn bytes_outside(a: &Version, b: &Version) -> u64 {
    let in_b: HashSet<u64> = b.files().map(|(_, f)| f.info.number).collect();
    a.files()
        .filter(|(_, f)| !in_b.contains(&f.info.number))
        .map(|(_, f)| f.info.size)
        .sum()
}

fn total_bytes(v: &Version) -> u64 {
    v.files().map(|(_, f)| f.info.size).sum()
}

//! The background materialization of the checkpoint view: the advance, its refusals, and the restore of a
//! capture taken after it.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::{AdvanceRefused, ViewMaterialization};
use crate::version::Version;
use crate::{CaptureView, CapturedCheckpoint, Db, Options};

fn opts() -> Options {
    Options {
        auto_compaction: false,
        checkpoint_view: true,
        ..Options::default()
    }
}

fn restore(cap: &CapturedCheckpoint, dst: &Path) -> Db {
    crate::checkpoint_view_tests::restore_with(cap, dst, opts())
}

fn numbers(files: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut v: Vec<u64> = files.into_iter().collect();
    v.sort_unstable();
    v
}

#[test]
fn an_advance_makes_the_view_the_materialized_version_and_the_flushes_since() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), opts()).unwrap();
    let no = AtomicBool::new(false);
    assert!(
        db.begin_view_materialization().is_none(),
        "no view before the first capture"
    );
    db.put(b"a", b"1").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    db.put(b"b", b"2").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    assert!(db.stats().checkpoint_view_pinned_bytes > 0);
    let mut m = db.begin_view_materialization().unwrap();
    assert!(db.begin_view_materialization().is_none(), "one at a time");
    let m_files = numbers(m.files.iter().map(|f| f.number));
    db.put(b"c", b"3").unwrap();
    db.flush().unwrap();
    m.advance().unwrap();
    assert_eq!(db.stats().checkpoint_view_pinned_bytes, 0);
    db.put(b"d", b"4").unwrap();
    let cap = db.begin_checkpoint().unwrap().wait(&no).unwrap();
    assert_eq!(cap.view, CaptureView::Changes);
    // M's files, the flush after its moment and the checkpoint's own flush: not the replaced files.
    assert_eq!(cap.files.len(), m_files.len() + 2, "{cap:?}");
    assert!(m_files
        .iter()
        .all(|n| cap.files.iter().any(|f| f.number == *n)));
    let r = restore(&cap, &dir.path().join("r"));
    for (k, v) in [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")] {
        assert_eq!(r.get(k).unwrap().as_deref(), Some(&v[..]));
    }
}

#[test]
fn an_advance_is_refused_once_the_view_was_replaced_and_a_dropped_one_frees_the_slot() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), opts()).unwrap();
    let no = AtomicBool::new(false);
    db.put(b"a", b"1").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    let mut m = db.begin_view_materialization().unwrap();
    db.ingest_sorted([(b"f", b"6")]).unwrap();
    assert_eq!(m.advance(), Err(AdvanceRefused::ViewReplaced));
    db.put(b"g", b"7").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    let m = db.begin_view_materialization().unwrap();
    drop(m);
    let mut m = db.begin_view_materialization().unwrap();
    // An in-band materialization (the view past its bound: the hard one, materializations having been
    // taken in the background) replaces the view too.
    let db_opts_runs = Options::default().checkpoint_view_hard_l0_runs;
    for i in 0..=db_opts_runs {
        db.put(&[b'k', i as u8], b"v").unwrap();
        db.flush().unwrap();
    }
    db.compact_all().unwrap();
    let cap = db.begin_checkpoint().unwrap().wait(&no).unwrap();
    assert!(matches!(cap.view, CaptureView::Materialized { .. }));
    assert_eq!(m.advance(), Err(AdvanceRefused::ViewReplaced));
}

#[test]
fn an_advance_is_refused_when_the_version_keeps_a_file_spanning_an_adopted_capture_files_seqno() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), opts()).unwrap();
    let no = AtomicBool::new(false);
    db.put(b"x", b"old").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    let mut m: ViewMaterialization = db.begin_view_materialization().unwrap();
    // The cache's capture file holds x's newer value at its reserved seqno, written, not adopted yet.
    let pending = db.begin_checkpoint_for_overlay().unwrap();
    let overlay: Vec<(&[u8], Option<&[u8]>)> = vec![(b"x", Some(b"new"))];
    let mut cap = pending.wait_with_overlay(&no, overlay).unwrap();
    // A merge of the old run with a later flush: one file whose seqnos span the capture file's.
    let snap = db.snapshot();
    db.put(b"y", b"later").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    drop(snap);
    let spanning = {
        let st = db.inner().state.lock();
        let f = st
            .version
            .files()
            .map(|(_, f)| Arc::clone(f))
            .next()
            .unwrap();
        assert!(f.info.min_seqno < cap.seqno && f.info.max_seqno > cap.seqno);
        f
    };
    // M as a version taken before that compaction left L0: the merged file in its L0.
    let mut levels = vec![Vec::new(); m.version.levels.len()];
    levels[0].push(spanning);
    m.version = Arc::new(Version::from_levels(levels));
    assert!(cap.adopt_overlay(|| Some(())).unwrap().is_some());
    drop(cap);
    assert_eq!(m.advance(), Err(AdvanceRefused::SpanningL0File));
    let next = db.begin_checkpoint().unwrap().wait(&no).unwrap();
    let r = restore(&next, &dir.path().join("r"));
    assert_eq!(r.get(b"x").unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(r.get(b"y").unwrap().as_deref(), Some(&b"later"[..]));
}

#[test]
fn a_background_materialization_is_due_between_its_trigger_and_the_in_band_bound() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("db"),
        Options {
            checkpoint_view_background_l0_runs: 2,
            checkpoint_view_max_l0_runs: 4,
            ..opts()
        },
    )
    .unwrap();
    let no = AtomicBool::new(false);
    assert!(!db.checkpoint_view_due(), "no view yet");
    db.put(b"a", b"1").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    let mut due = Vec::new();
    for i in 0..5u8 {
        due.push((db.stats().checkpoint_view_l0_runs, db.checkpoint_view_due()));
        db.put(&[b'k', i], b"v").unwrap();
        db.flush().unwrap();
    }
    // The engine's L0 holds as many runs as the view (no compaction): the view is within its bound.
    assert_eq!(
        due,
        vec![(1, false), (2, true), (3, true), (4, true), (5, true)]
    );
    // Past the in-band bound (the version's L0 merged away) the next capture materializes anyway: not due
    // in the background.
    db.compact_all().unwrap();
    assert_eq!(db.stats().checkpoint_view_l0_runs, 6);
    assert!(!db.checkpoint_view_due());
}

#[test]
fn a_background_materialization_is_not_due_when_the_pending_flushes_take_the_view_past_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("db"),
        Options {
            checkpoint_view_background_l0_runs: 2,
            checkpoint_view_max_l0_runs: 4,
            // The L0 bound alone.
            checkpoint_view_max_pinned_ratio: 100.0,
            ..opts()
        },
    )
    .unwrap();
    let no = AtomicBool::new(false);
    db.put(b"a", b"1").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    for i in 0..3u8 {
        db.put(&[b'k', i], b"v").unwrap();
        db.flush().unwrap();
    }
    // The view at its bound of 4 runs, the version's L0 merged away: due while nothing is to be flushed.
    db.compact_all().unwrap();
    assert_eq!(db.stats().checkpoint_view_l0_runs, 4);
    assert!(db.checkpoint_view_due());
    // A write the next checkpoint flushes: that checkpoint takes the view past its bound, in band.
    db.put(b"z", b"1").unwrap();
    assert!(!db.checkpoint_view_due());
    let pending = db.begin_checkpoint().unwrap();
    assert!(!db.checkpoint_view_due(), "the sealed memtable counts");
    let cap = pending.wait(&no).unwrap();
    assert!(
        matches!(cap.view, CaptureView::Materialized { .. }),
        "{cap:?}"
    );
}

#[test]
fn a_replaced_view_stops_the_materializations_tail_and_it_is_no_longer_current() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("db"),
        Options {
            checkpoint_view_max_l0_runs: 1,
            checkpoint_view_hard_l0_runs: 1,
            checkpoint_view_max_pinned_ratio: 100.0,
            ..opts()
        },
    )
    .unwrap();
    let no = AtomicBool::new(false);
    db.put(b"a", b"1").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    let m = db.begin_view_materialization().unwrap();
    let tail_files = || {
        let st = db.inner().state.lock();
        st.view_tail.as_ref().map(|t| t.files.len())
    };
    db.put(b"b", b"2").unwrap();
    db.flush().unwrap();
    assert!(m.is_current());
    assert_eq!(tail_files(), Some(1));
    // An in-band materialization (the view past its L0 bound) replaces the view: the tail keeps no files,
    // and takes none of the flushes the new view takes.
    db.compact_all().unwrap();
    let cap = db.begin_checkpoint().unwrap().wait(&no).unwrap();
    assert!(
        matches!(cap.view, CaptureView::Materialized { .. }),
        "{cap:?}"
    );
    assert!(!m.is_current());
    assert_eq!(tail_files(), Some(0));
    db.put(b"c", b"3").unwrap();
    db.flush().unwrap();
    assert_eq!(
        db.stats().checkpoint_view_l0_runs,
        1,
        "the new view took the flush"
    );
    assert_eq!(tail_files(), Some(0));
}

#[test]
fn once_materializations_are_taken_in_the_background_the_view_keeps_past_its_in_band_bound_up_to_the_hard_one(
) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("db"),
        Options {
            checkpoint_view_background_l0_runs: 2,
            checkpoint_view_max_l0_runs: 2,
            checkpoint_view_hard_l0_runs: 4,
            // The L0 bound alone.
            checkpoint_view_max_pinned_ratio: 100.0,
            ..opts()
        },
    )
    .unwrap();
    let no = AtomicBool::new(false);
    db.put(b"a", b"1").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    // A host takes (and here drops) a background materialization: the hard bound applies from then on.
    drop(db.begin_view_materialization().unwrap());
    for i in 0..2u8 {
        db.put(&[b'k', i], b"v").unwrap();
        db.flush().unwrap();
    }
    // The view at 3 runs, past its in-band bound of 2, the version's L0 merged into the base level (the
    // engine's compactions caught up): due in the background, and the capture keeps the view.
    db.compact_all().unwrap();
    assert_eq!(db.stats().checkpoint_view_l0_runs, 3);
    assert!(db.checkpoint_view_due());
    db.put(b"z", b"1").unwrap();
    let cap = db.begin_checkpoint().unwrap().wait(&no).unwrap();
    assert_eq!(cap.view, CaptureView::Changes, "{cap:?}");
    assert_eq!(db.stats().checkpoint_view_l0_runs, 4);
    // Past the hard bound, in band.
    db.put(b"y", b"1").unwrap();
    assert!(
        !db.checkpoint_view_due(),
        "the next flush takes it past the hard bound"
    );
    let cap = db.begin_checkpoint().unwrap().wait(&no).unwrap();
    assert!(
        matches!(cap.view, CaptureView::Materialized { .. }),
        "{cap:?}"
    );
}

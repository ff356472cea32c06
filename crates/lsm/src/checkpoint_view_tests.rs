//! The checkpoint view against a model: random puts, deletes, merges and range deletes, flushes and
//! compactions in between, a checkpoint every few steps (some with an adopted capture file), each restored
//! by adopting its files in a new directory and compared with a `BTreeMap` of its moment.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::storage::OsStorage;
use crate::version::sst_path;
use crate::{adopt_sst_files, AdoptFile, CaptureView, CapturedCheckpoint, Db, ListAppendOperator};
use crate::{Options, ReadOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// splitmix64: a seeded sequence without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

fn opts(view: bool) -> Options {
    Options {
        memtable_size: 128 << 10,
        target_file_size: 16 << 10,
        level_base_size: 64 << 10,
        checkpoint_view: view,
        checkpoint_view_max_l0_runs: 8,
        // The view keeps many times the state's bytes here (whole-tree compactions of a small tree), so that
        // most checkpoints take it.
        checkpoint_view_max_pinned_ratio: 20.0,
        merge_operator: Some(Arc::new(ListAppendOperator)),
        ..Options::default()
    }
}

fn contents(db: &Db) -> Model {
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut out = Model::new();
    while it.valid() {
        out.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    out
}

/// Copies the capture's files into `dst` and opens them there as a database.
fn restore(cap: &CapturedCheckpoint, dst: &Path, view: bool) -> Db {
    restore_with(cap, dst, opts(view))
}

/// [`restore`] with the restored database's options.
pub(crate) fn restore_with(cap: &CapturedCheckpoint, dst: &Path, opts: Options) -> Db {
    std::fs::create_dir_all(dst).unwrap();
    let adopt: Vec<AdoptFile> = cap
        .files
        .iter()
        .map(|f| {
            std::fs::copy(&f.path, sst_path(dst, f.number)).unwrap();
            AdoptFile {
                level: f.level,
                number: f.number,
                bounds: f.bounds.clone(),
            }
        })
        .collect();
    adopt_sst_files(&OsStorage, dst, &adopt, cap.seqno, 7).unwrap();
    Db::open(dst, opts).unwrap()
}

/// What one run saw: checkpoints by kind, and view checkpoints holding files compacted away.
#[derive(Debug, Default)]
struct Seen {
    changes: usize,
    materialized: usize,
    changes_with_compacted_files: usize,
}

fn run(seed: u64, view: bool) -> Seen {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), opts(view)).unwrap();
    let mut rng = Rng(seed);
    let mut model = Model::new();
    let mut seen = Seen::default();
    let no = AtomicBool::new(false);
    let value = |rng: &mut Rng, n: usize| -> Vec<u8> {
        let len = 20 + rng.below(180) as usize;
        let mut v = format!("v{n}-").into_bytes();
        v.resize(len, b'a' + (n % 26) as u8);
        v
    };
    for ck in 0..40usize {
        for n in 0..400usize {
            let k = key(rng.below(600));
            match rng.below(100) {
                0..=59 => {
                    let v = value(&mut rng, n);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
                60..=74 => {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                }
                75..=96 => {
                    let op = format!("m{ck}.{n}").into_bytes();
                    db.merge(&k, &op).unwrap();
                    let v = match model.remove(&k) {
                        Some(mut e) => {
                            e.push(b',');
                            e.extend_from_slice(&op);
                            e
                        }
                        None => op,
                    };
                    model.insert(k, v);
                }
                97..=98 => {
                    let start = rng.below(600);
                    let (a, b) = (key(start), key(start + 1 + rng.below(20)));
                    db.delete_range(&a, &b).unwrap();
                    let doomed: Vec<Vec<u8>> = model
                        .range(a.clone()..b.clone())
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in doomed {
                        model.remove(&k);
                    }
                }
                _ => match rng.below(3) {
                    0 => db.flush().unwrap(),
                    1 => db.compact_all().unwrap(),
                    _ => {
                        let s = rng.below(600);
                        db.compact_range(&key(s), &key(s + 100)).unwrap();
                    }
                },
            }
        }
        // Some checkpoints carry a capture file (as the read-modify-write cache's) that the engine adopts.
        let with_overlay = ck % 3 == 2;
        let pending = if with_overlay {
            db.begin_checkpoint_for_overlay().unwrap()
        } else {
            db.begin_checkpoint().unwrap()
        };
        let mut expected = model.clone();
        let cap = if with_overlay {
            let mut pairs: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            let mut at = rng.below(50);
            while at < 600 {
                let k = key(at);
                let v = (rng.below(4) != 0).then(|| value(&mut rng, ck));
                match &v {
                    Some(v) => expected.insert(k.clone(), v.clone()),
                    None => expected.remove(&k),
                };
                pairs.push((k, v));
                at += 1 + rng.below(60);
            }
            let overlay: Vec<(&[u8], Option<&[u8]>)> = pairs
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref()))
                .collect();
            let mut cap = pending.wait_with_overlay(&no, overlay).unwrap();
            assert!(cap.adopt_overlay(|| Some(())).unwrap().is_some());
            model = expected.clone();
            cap
        } else {
            pending.wait(&no).unwrap()
        };
        let live: Vec<u64> = {
            let v = Arc::clone(&db.inner().state.lock().version);
            v.files().map(|(_, f)| f.info.number).collect()
        };
        match cap.view {
            CaptureView::Changes => {
                seen.changes += 1;
                if cap.files.iter().any(|f| !live.contains(&f.number)) {
                    seen.changes_with_compacted_files += 1;
                }
            }
            CaptureView::Materialized { .. } => seen.materialized += 1,
            CaptureView::Off => assert!(!view),
        }
        let restored = restore(&cap, &dir.path().join(format!("r{ck}")), view);
        drop(cap);
        let got = contents(&restored);
        assert_eq!(
            got.len(),
            expected.len(),
            "seed {seed} checkpoint {ck}: entry count"
        );
        for (k, v) in &expected {
            assert_eq!(
                got.get(k),
                Some(v),
                "seed {seed} checkpoint {ck} key {}",
                String::from_utf8_lossy(k)
            );
        }
        // The restored engine compacts what it adopted to the same state.
        restored.compact_all().unwrap();
        assert_eq!(
            contents(&restored),
            expected,
            "seed {seed} checkpoint {ck}: compacted"
        );
    }
    assert_eq!(contents(&db), model, "seed {seed}: the engine itself");
    seen
}

#[test]
fn checkpoints_of_the_view_restore_to_the_model_state_across_compactions() {
    for seed in 1..=4 {
        let seen = run(seed, true);
        eprintln!("seed {seed}: {seen:?}");
        assert!(seen.materialized >= 2, "seed {seed}: {seen:?}");
        assert!(seen.changes >= 10, "seed {seed}: {seen:?}");
        assert!(
            seen.changes_with_compacted_files >= 5,
            "the view held files the engine compacted away, seed {seed}: {seen:?}"
        );
    }
}

#[test]
fn without_the_view_every_checkpoint_is_the_whole_version() {
    let seen = run(9, false);
    assert_eq!((seen.changes, seen.materialized), (0, 0), "{seen:?}");
}

fn numbers(cap: &CapturedCheckpoint) -> Vec<u64> {
    cap.files.iter().map(|f| f.number).collect()
}

#[test]
fn the_view_keeps_compacted_files_until_a_bound_or_an_ingestion_makes_a_capture_take_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("db"),
        Options {
            auto_compaction: false,
            checkpoint_view: true,
            checkpoint_view_max_l0_runs: 3,
            ..Options::default()
        },
    )
    .unwrap();
    let no = AtomicBool::new(false);
    let ck = |db: &Db| db.begin_checkpoint().unwrap().wait(&no).unwrap();
    db.put(b"a", b"1").unwrap();
    let first = ck(&db);
    assert!(
        matches!(first.view, CaptureView::Materialized { .. }),
        "{first:?}"
    );
    let base = numbers(&first);
    drop(first);
    db.put(b"b", b"2").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    let stats = db.stats();
    assert!(stats.checkpoint_view_pinned_bytes > 0, "{stats:?}");
    let metric = |name: &str| stats.metrics().into_iter().find(|m| m.name == name);
    assert_eq!(
        metric("keyed-state.lsm.checkpoint-view-pinned-bytes").map(|m| m.value),
        Some(stats.checkpoint_view_pinned_bytes)
    );
    db.put(b"c", b"3").unwrap();
    let second = ck(&db);
    assert_eq!(second.view, CaptureView::Changes);
    // The first checkpoint's file and two flushes, not the compaction's output.
    assert_eq!(second.files.len(), 3, "{second:?}");
    assert!(base.iter().all(|n| numbers(&second).contains(n)));
    let kept = second
        .files
        .iter()
        .find(|f| base.contains(&f.number))
        .unwrap();
    assert!(kept.path.exists(), "the view keeps a file compacted away");
    drop(second);
    // A fourth L0 run is past the bound: the next capture takes the version.
    db.put(b"d", b"4").unwrap();
    let third = ck(&db);
    match third.view {
        CaptureView::Materialized { bytes } => assert!(bytes > 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(db.stats().checkpoint_view_pinned_bytes, 0);
    drop(third);
    db.put(b"e", b"5").unwrap();
    assert_eq!(ck(&db).view, CaptureView::Changes);
    // An ingestion adds files the view cannot take as a flush.
    db.ingest_sorted([(b"f", b"6")]).unwrap();
    db.put(b"g", b"7").unwrap();
    assert!(matches!(ck(&db).view, CaptureView::Materialized { .. }));
}

#[test]
fn an_adopted_capture_file_gives_up_a_view_whose_l0_keeps_a_file_spanning_its_seqno() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path().join("db"),
        Options {
            auto_compaction: false,
            checkpoint_view: true,
            ..Options::default()
        },
    )
    .unwrap();
    let no = AtomicBool::new(false);
    db.put(b"x", b"old").unwrap();
    drop(db.begin_checkpoint().unwrap().wait(&no).unwrap());
    // The cache's capture file holds x's newer value at its reserved seqno (`cap.seqno`), written, not adopted yet.
    let pending = db.begin_checkpoint_for_overlay().unwrap();
    let overlay: Vec<(&[u8], Option<&[u8]>)> = vec![(b"x", Some(b"new"))];
    let mut cap = pending.wait_with_overlay(&no, overlay).unwrap();
    // A merge of the old run with a later flush: one file whose seqnos span the capture file's (a snapshot older than
    // the later write keeps its seqno), which the version holds below L0.
    let snap = db.snapshot();
    db.put(b"y", b"later").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    drop(snap);
    let spanning = {
        let st = db.inner().state.lock();
        assert!(st.version.levels[0].is_empty());
        let f = st
            .version
            .files()
            .map(|(_, f)| Arc::clone(f))
            .next()
            .unwrap();
        assert!(
            f.info.min_seqno < cap.seqno && f.info.max_seqno > cap.seqno,
            "{:?}",
            (f.info.min_seqno, f.info.max_seqno, cap.seqno)
        );
        f
    };
    // The view as a materialization before that compaction leaves it: the merged file in its L0.
    {
        let mut st = db.inner().state.lock();
        let mut levels = vec![Vec::new(); st.version.levels.len()];
        levels[0].push(spanning);
        st.view = Some(Arc::new(crate::version::Version::from_levels(levels)));
    }
    assert!(cap.adopt_overlay(|| Some(())).unwrap().is_some());
    drop(cap);
    assert!(
        db.inner().state.lock().view.is_none(),
        "the view kept a spanning L0 file"
    );
    let next = db.begin_checkpoint().unwrap().wait(&no).unwrap();
    assert!(
        matches!(next.view, CaptureView::Materialized { .. }),
        "{next:?}"
    );
    let restored = restore(&next, &dir.path().join("r"), true);
    assert_eq!(restored.get(b"x").unwrap().as_deref(), Some(&b"new"[..]));
}

//! `Db::multi_get` returns what `Db::get` returns for every key: a model test against a `BTreeMap`, over
//! memtables, SST files on several levels, deletes, range deletes and merge operands, with the batch's
//! block pre-read forced on and off.

use std::collections::BTreeMap;
use std::sync::Arc;

use keyed_state_lsm::internals::sst::force_pre_read;
use keyed_state_lsm::{Compression, Db, ListAppendOperator, Options, SstOptions};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u8),
    Delete(u16),
    Merge(u16, u8),
    DeleteRange(u16, u16),
    Flush,
    CompactAll,
    /// A batch of keys (duplicates allowed) read with `multi_get` and checked against the model and `get`.
    MultiGet(Vec<u16>),
    Snapshot,
}

const KEYS: u16 = 300;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..KEYS, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => (0..KEYS).prop_map(Op::Delete),
        5 => (0..KEYS, any::<u8>()).prop_map(|(k, v)| Op::Merge(k, v)),
        1 => (0..KEYS, 0..KEYS).prop_map(|(a, b)| Op::DeleteRange(a, b)),
        2 => Just(Op::Flush),
        1 => Just(Op::CompactAll),
        4 => prop::collection::vec(0..KEYS + 20, 0..40).prop_map(Op::MultiGet),
        1 => Just(Op::Snapshot),
    ]
}

fn key(k: u16) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

fn value(k: u16, v: u8) -> Vec<u8> {
    // Long enough that tiny memtables flush and files span many 256-byte blocks.
    format!("{k}-{v:03}-{}", "y".repeat(60)).into_bytes()
}

fn options(compression: Compression, row_cache: usize) -> Options {
    Options {
        row_cache_size: Some(row_cache),
        memtable_size: 16 << 10,
        target_file_size: 8 << 10,
        level_base_size: 32 << 10,
        l0_compaction_trigger: 2,
        sst: SstOptions {
            block_size: 256,
            compression,
            ..SstOptions::default()
        },
        block_cache_size: 8 << 10,
        merge_operator: Some(Arc::new(ListAppendOperator)),
        ..Options::default()
    }
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, ks: &[u16]) {
    let keys: Vec<Vec<u8>> = ks.iter().map(|&k| key(k)).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    for forced in [Some(true), Some(false)] {
        force_pre_read(forced);
        let got = db.multi_get(&refs).unwrap();
        assert_eq!(got.len(), keys.len());
        for (k, v) in keys.iter().zip(&got) {
            let single = db.get(k).unwrap().map(|v| v.to_vec());
            let batched = v.as_ref().map(|v| v.to_vec());
            assert_eq!(
                batched,
                single,
                "key {:?} (pre-read {forced:?})",
                String::from_utf8_lossy(k)
            );
            assert_eq!(
                batched.as_ref(),
                model.get(k),
                "key {:?} against the model",
                String::from_utf8_lossy(k)
            );
        }
    }
    force_pre_read(None);
}

fn run(ops: Vec<Op>, compression: Compression, row_cache: usize) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(compression, row_cache)).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut snaps = Vec::new();
    for op in ops {
        match op {
            Op::Put(k, v) => {
                db.put(&key(k), &value(k, v)).unwrap();
                model.insert(key(k), value(k, v));
            }
            Op::Delete(k) => {
                db.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Merge(k, v) => {
                let e = value(k, v);
                db.merge(&key(k), &e).unwrap();
                model
                    .entry(key(k))
                    .and_modify(|old| {
                        old.push(b',');
                        old.extend_from_slice(&e);
                    })
                    .or_insert(e);
            }
            Op::DeleteRange(a, b) => {
                let (lo, hi) = (key(a.min(b)), key(a.max(b)));
                db.delete_range(&lo, &hi).unwrap();
                let doomed: Vec<Vec<u8>> = model.range(lo..hi).map(|(k, _)| k.clone()).collect();
                for k in doomed {
                    model.remove(&k);
                }
            }
            Op::Flush => db.flush().unwrap(),
            Op::CompactAll => db.compact_all().unwrap(),
            Op::MultiGet(ks) => check(&db, &model, &ks),
            Op::Snapshot => snaps.push((db.snapshot(), model.clone())),
        }
    }
    // Every key, then every snapshot through `multi_get_at`.
    let all: Vec<u16> = (0..KEYS).collect();
    check(&db, &model, &all);
    let keys: Vec<Vec<u8>> = all.iter().map(|&k| key(k)).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    for (snap, m) in &snaps {
        force_pre_read(Some(true));
        let got = db.multi_get_at(&refs, snap).unwrap();
        force_pre_read(None);
        for (k, v) in keys.iter().zip(got) {
            assert_eq!(
                v.map(|v| v.to_vec()).as_ref(),
                m.get(k),
                "snapshot read of {k:?}"
            );
            assert_eq!(
                db.get_at(k, snap).unwrap().map(|v| v.to_vec()).as_ref(),
                m.get(k)
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn multi_get_equals_get_and_the_model(ops in prop::collection::vec(op(), 1..400)) {
        run(ops, Compression::None, 0);
    }

    #[test]
    fn multi_get_equals_get_and_the_model_with_a_row_cache(ops in prop::collection::vec(op(), 1..400)) {
        run(ops, Compression::None, 256 << 10);
    }

    #[test]
    fn multi_get_equals_get_and_the_model_on_lz4_blocks(ops in prop::collection::vec(op(), 1..400)) {
        run(ops, Compression::Lz4, 0);
    }
}

#[test]
fn multi_get_of_an_empty_batch_and_of_a_database_without_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(Compression::None, 0)).unwrap();
    assert!(db.multi_get(&[]).unwrap().is_empty());
    db.put(b"a", b"1").unwrap();
    let got = db.multi_get(&[b"b", b"a", b"a"]).unwrap();
    let got: Vec<Option<Vec<u8>>> = got.into_iter().map(|v| v.map(|v| v.to_vec())).collect();
    assert_eq!(got, vec![None, Some(b"1".to_vec()), Some(b"1".to_vec())]);
}

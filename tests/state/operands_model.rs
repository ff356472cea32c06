//! Reducing and aggregating state whose adds are merge operands (`design/merge-operands.md`) against a
//! `BTreeMap` model: random adds, clears, reads, namespace merges, flushes, compactions, savepoint restores
//! and engine checkpoints reopened before the states are registered again, on the LSM backend with and
//! without its read-modify-write cache (down to one byte) and on the heap backend (which reads, folds and
//! writes). The reduce function is neither commutative nor associative (in-order folding); the aggregate
//! function sums (associative folding).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::conformance::{ordered, SumAgg};
use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::{LsmBackend, LsmEngine};
use keyed_state::backend::{BackendConfig, StateBackend};
use keyed_state::checkpoint::{
    restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer,
};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state::serializer::{IntSerializer, LongSerializer};
use keyed_state::state::*;
use proptest::prelude::*;

const MAX_P: u32 = 8;

#[derive(Debug, Clone)]
enum Op {
    Add(i64, i32, i64),
    Clear(i64, i32),
    Get(i64, i32),
    /// Merge namespaces 1 and 2 into 0 at a key.
    MergeNamespaces(i64),
    Flush,
    Compact,
    /// Savepoint and restore into a new backend.
    SavepointRestore,
    /// Engine checkpoint, reopened and compacted before the states are registered again (LSM only).
    ReopenCheckpoint,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0i64..12;
    prop_oneof![
        12 => (key.clone(), 0i32..3, -50i64..50).prop_map(|(k, n, v)| Op::Add(k, n, v)),
        1 => (key.clone(), 0i32..3).prop_map(|(k, n)| Op::Clear(k, n)),
        3 => (key.clone(), 0i32..3).prop_map(|(k, n)| Op::Get(k, n)),
        1 => key.prop_map(Op::MergeNamespaces),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::SavepointRestore),
        1 => Just(Op::ReopenCheckpoint),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Heap,
    /// LSM with a read-modify-write cache of this many bytes (0: none).
    Lsm(usize),
}

type Store = KeyedStateStore<LongSerializer>;

struct Inst {
    store: Store,
    r: ReducingState<LongSerializer, IntSerializer>,
    a: AggregatingState<SumAgg, LongSerializer, IntSerializer>,
    engine: Option<LsmEngine>,
}

fn config() -> BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, MAX_P, KeyGroupRange::all(MAX_P))
}

fn lsm(b: LsmBackend, cache: usize) -> LsmBackend {
    if cache == 0 {
        return b.with_rmw_cache(0).unwrap();
    }
    let mut b = b.with_rmw_cache(cache).unwrap();
    b.set_rmw_cache_admission(true).unwrap();
    b
}

fn backend(kind: Kind) -> (Box<dyn StateBackend>, Option<LsmEngine>) {
    match kind {
        Kind::Heap => (Box::new(HeapBackend::new(config()).unwrap()), None),
        Kind::Lsm(cache) => {
            let b = lsm(
                LsmBackend::temp_with(config(), LsmBackend::small_options()).unwrap(),
                cache,
            );
            let e = b.engine();
            (Box::new(b), Some(e))
        }
    }
}

fn wrap(
    backend: Box<dyn StateBackend>,
    engine: Option<LsmEngine>,
    restore: Option<SavepointReader>,
) -> Inst {
    let mut store = KeyedStateStore::new(backend, LongSerializer).unwrap();
    if let Some(sp) = restore {
        store.restore(std::slice::from_ref(&sp)).unwrap();
    }
    let r = store
        .register_reducing(
            ReducingStateDescriptor::new("r", LongSerializer, ordered)
                .with_namespace(IntSerializer)
                .with_merge_operands(OperandFolding::InOrder),
        )
        .unwrap();
    let a = store
        .register_aggregating(
            AggregatingStateDescriptor::new("a", SumAgg, LongSerializer)
                .with_namespace(IntSerializer)
                .with_merge_operands(OperandFolding::Associative),
        )
        .unwrap();
    Inst {
        store,
        r,
        a,
        engine,
    }
}

fn savepoint(s: &mut Store) -> SavepointReader {
    let snap = s.snapshot().unwrap();
    let mut bytes = Vec::new();
    encode(&*snap, &WriteOptions::default(), &mut bytes).unwrap();
    SavepointReader::from_bytes(bytes).unwrap()
}

/// (reduced, summed) per (key, namespace).
type Model = BTreeMap<(i64, i32), (i64, i64)>;

fn check(x: &mut Inst, model: &Model, k: i64, n: i32) {
    x.store.set_current_key(&k).unwrap();
    let want = model.get(&(k, n));
    assert_eq!(
        x.store.reducing_in(&x.r, &n).unwrap().get().unwrap(),
        want.map(|w| w.0),
        "reducing at ({k}, {n})"
    );
    assert_eq!(
        x.store.aggregating_in(&x.a, &n).unwrap().get().unwrap(),
        want.map(|w| format!("sum={}", w.1)),
        "aggregating at ({k}, {n})"
    );
}

fn run(ops: &[Op], kind: Kind) {
    let (b, e) = backend(kind);
    let mut x = wrap(b, e, None);
    let mut model = Model::new();
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut checkpoint_id = 0u64;
    for op in ops {
        match op {
            Op::Add(k, n, v) => {
                x.store.set_current_key(k).unwrap();
                x.store.reducing_in(&x.r, n).unwrap().add(v).unwrap();
                x.store.aggregating_in(&x.a, n).unwrap().add(v).unwrap();
                model
                    .entry((*k, *n))
                    .and_modify(|e| *e = (ordered(&e.0, v), e.1 + v))
                    .or_insert((*v, *v));
            }
            Op::Clear(k, n) => {
                x.store.set_current_key(k).unwrap();
                x.store.reducing_in(&x.r, n).unwrap().clear().unwrap();
                x.store.aggregating_in(&x.a, n).unwrap().clear().unwrap();
                model.remove(&(*k, *n));
            }
            Op::Get(k, n) => check(&mut x, &model, *k, *n),
            Op::MergeNamespaces(k) => {
                x.store.set_current_key(k).unwrap();
                x.store
                    .merge_reducing_namespaces(&x.r, &0, &[1, 2])
                    .unwrap();
                x.store
                    .merge_aggregating_namespaces(&x.a, &0, &[1, 2])
                    .unwrap();
                // Sources in order, then the target, folded with the function (as the store does).
                let mut acc: Option<(i64, i64)> = None;
                for n in [1, 2, 0] {
                    if let Some(v) = model.remove(&(*k, n)) {
                        acc = Some(match acc {
                            Some(a) => (ordered(&a.0, &v.0), a.1 + v.1),
                            None => v,
                        });
                    }
                }
                if let Some(a) = acc {
                    model.insert((*k, 0), a);
                }
            }
            Op::Flush => {
                if let Some(e) = &x.engine {
                    e.flush().unwrap();
                }
            }
            Op::Compact => {
                if let Some(e) = &x.engine {
                    e.compact_all().unwrap();
                }
            }
            Op::SavepointRestore => {
                let sp = savepoint(&mut x.store);
                let (b, e) = backend(kind);
                x = wrap(b, e, Some(sp));
            }
            Op::ReopenCheckpoint => {
                let Kind::Lsm(cache) = kind else { continue };
                checkpoint_id += 1;
                let ck = Checkpointer::open(
                    Arc::clone(&storage),
                    &config(),
                    CheckpointOptions::default(),
                )
                .unwrap();
                ck.begin(checkpoint_id, x.store.backend_mut())
                    .unwrap()
                    .run()
                    .unwrap();
                ck.notify_complete(checkpoint_id).unwrap();
                drop(ck);
                let (restored, _) = restore_lsm_temp(
                    &storage,
                    checkpoint_id,
                    config(),
                    LsmBackend::small_options(),
                )
                .unwrap();
                restored.db().compact_all().unwrap();
                let restored = lsm(restored, cache);
                let e = restored.engine();
                x = wrap(Box::new(restored), Some(e), None);
            }
        }
    }
    for k in 0..12 {
        for n in 0..3 {
            check(&mut x, &model, k, n);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    #[test]
    fn operands_match_the_model(
        ops in proptest::collection::vec(op(), 1..120),
        kind in proptest::sample::select(vec![Kind::Heap, Kind::Lsm(0), Kind::Lsm(1), Kind::Lsm(300), Kind::Lsm(64 << 20)]),
    ) {
        run(&ops, kind);
    }
}

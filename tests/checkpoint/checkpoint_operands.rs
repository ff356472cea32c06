//! Checkpoints whose files hold merge operands of a reducing state (`design/merge-operands.md`): restore
//! and rescale adopt them as they are, compactions before the state is registered again keep them, and the
//! values fold exactly once the descriptor is registered.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::{options, MAX_P};
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::checkpoint::{
    restore_lsm_temp, to_savepoint, CheckpointOptions, CheckpointStorage, Checkpointer,
};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, OperandFolding, ReducingState, ReducingStateDescriptor};

/// Neither commutative nor associative: a value shows the order its adds were folded in.
fn ordered(a: &i64, b: &i64) -> i64 {
    a.wrapping_mul(3).wrapping_add(*b)
}

struct Inst {
    store: KeyedStateStore<LongSerializer>,
    r: ReducingState<LongSerializer>,
    db: keyed_state::backend::lsm::LsmEngine,
    ck: Checkpointer,
}

fn register(store: &mut KeyedStateStore<LongSerializer>) -> ReducingState<LongSerializer> {
    store
        .register_reducing(
            ReducingStateDescriptor::new("r", LongSerializer, ordered)
                .with_merge_operands(OperandFolding::InOrder),
        )
        .unwrap()
}

fn inst(backend: LsmBackend, storage: &Arc<CheckpointStorage>) -> Inst {
    let cfg = backend.config().clone();
    let db = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let r = register(&mut store);
    let ck = Checkpointer::open(Arc::clone(storage), &cfg, CheckpointOptions::default()).unwrap();
    Inst { store, r, db, ck }
}

impl Inst {
    fn owns(&self, k: i64) -> bool {
        let kg = self.store.key_group_of(&k).unwrap();
        self.store.config().key_group_range.contains(kg)
    }
    fn add(&mut self, k: i64, v: i64) {
        self.store.set_current_key(&k).unwrap();
        self.store.reducing(&self.r).unwrap().add(&v).unwrap();
    }
    fn get(&mut self, k: i64) -> Option<i64> {
        self.store.set_current_key(&k).unwrap();
        self.store.reducing(&self.r).unwrap().get().unwrap()
    }
    fn checkpoint(&mut self, id: u64) {
        self.ck
            .begin(id, self.store.backend_mut())
            .unwrap()
            .run()
            .unwrap();
        self.ck.notify_complete(id).unwrap();
    }
}

fn fold(model: &mut BTreeMap<i64, i64>, k: i64, v: i64) {
    let next = model.get(&k).map_or(v, |a| ordered(a, &v));
    model.insert(k, next);
}

/// Adds to every key of `insts` in rounds, flushing between rounds so the files hold operands.
fn add_rounds(insts: &mut [Inst], model: &mut BTreeMap<i64, i64>, rounds: i64, seed: i64) {
    for round in 0..rounds {
        for k in 0..300i64 {
            let v = (k * 31 + round * 7 + seed) % 19 - 9;
            let i = insts.iter().position(|x| x.owns(k)).unwrap();
            insts[i].add(k, v);
            fold(model, k, v);
        }
        for x in insts.iter() {
            x.db.flush().unwrap();
        }
    }
}

fn check(insts: &mut [Inst], model: &BTreeMap<i64, i64>) {
    for (&k, &v) in model {
        let i = insts.iter().position(|x| x.owns(k)).unwrap();
        assert_eq!(insts[i].get(k), Some(v), "key {k}");
    }
}

/// A restored backend, compacted before its reducing state is registered again (so no fold is known).
fn restored(storage: &Arc<CheckpointStorage>, id: u64, range: KeyGroupRange) -> Inst {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let (backend, _) = restore_lsm_temp(storage, id, cfg, options()).unwrap();
    backend.db().compact_all().unwrap();
    inst(backend, storage)
}

#[test]
fn operands_in_checkpoint_files_restore_and_rescale_1_2_1_exactly() {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut model = BTreeMap::new();
    let all = KeyGroupRange::all(MAX_P);
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all);
    let mut one = vec![inst(
        LsmBackend::temp_with(cfg, options()).unwrap(),
        &storage,
    )];
    add_rounds(&mut one, &mut model, 6, 0);
    one[0].checkpoint(1);
    // The checkpoint cannot become a savepoint without the reduce function: a typed error, not a wrong
    // value.
    let out = tempfile::tempdir().unwrap();
    assert!(to_savepoint(&storage, 1, &out.path().join("sp")).is_err());
    drop(one);
    // 1 -> 2.
    let mut two: Vec<Inst> = (0..2)
        .map(|i| {
            restored(
                &storage,
                1,
                key_group_range_for_operator(MAX_P, 2, i).unwrap(),
            )
        })
        .collect();
    check(&mut two, &model);
    add_rounds(&mut two, &mut model, 4, 5);
    check(&mut two, &model);
    for x in two.iter_mut() {
        x.checkpoint(2);
    }
    drop(two);
    // 2 -> 1.
    let mut one = vec![restored(&storage, 2, all)];
    check(&mut one, &model);
    add_rounds(&mut one, &mut model, 2, 11);
    one[0].db.compact_all().unwrap();
    check(&mut one, &model);
}

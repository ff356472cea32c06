//! Proptest model of checkpoints against a `BTreeMap`: random writes, checkpoints (some aborted, some two
//! at once), confirmations, retention, and restores with rescales P -> P' over several steps, in no-claim
//! and in claim mode. After every step storage holds exactly the objects that the metadata in the root
//! references and those a background materialization of the checkpoint view keeps (none missing, none left
//! over), and every restore equals the model as of the restored checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::tools::{referenced_objects, verify};
use keyed_state::checkpoint::{
    restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer, RestoreMode,
};
use keyed_state::keygroup::key_group_range_for_operator;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use proptest::prelude::*;

const MAX_P: u32 = 12;

#[derive(Debug, Clone)]
enum Op {
    Put(i64, i64),
    Delete(i64),
    /// Checkpoint on every instance; `second` takes another one before the first runs; `abort` aborts the
    /// last one instead of confirming it.
    Checkpoint {
        second: bool,
        abort: bool,
    },
    /// Restore the last confirmed checkpoint at this parallelism; `true`: in claim mode.
    Rescale(u32, bool),
    /// Flush and compact every instance's engine (what a checkpoint view keeps the inputs of).
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0i64..400, any::<i64>()).prop_map(|(k, v)| Op::Put(k, v)),
        1 => (0i64..400).prop_map(Op::Delete),
        2 => (any::<bool>(), any::<bool>()).prop_map(|(second, abort)| Op::Checkpoint { second, abort }),
        1 => (1u32..=3, any::<bool>()).prop_map(|(p, claim)| Op::Rescale(p, claim)),
        1 => Just(Op::Compact),
    ]
}

struct Inst {
    engine: keyed_state::backend::lsm::LsmEngine,
    store: KeyedStateStore<LongSerializer>,
    counter: ValueState<LongSerializer>,
    ck: Checkpointer,
}

fn wrap(backend: LsmBackend, storage: &Arc<CheckpointStorage>, retain: usize) -> Inst {
    let cfg = backend_config(&backend);
    let engine = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let counter = store
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    let ck = Checkpointer::open(
        Arc::clone(storage),
        &cfg,
        CheckpointOptions {
            retain,
            ..CheckpointOptions::default()
        },
    )
    .unwrap();
    Inst {
        engine,
        store,
        counter,
        ck,
    }
}

fn backend_config(b: &LsmBackend) -> keyed_state::backend::BackendConfig {
    use keyed_state::backend::StateBackend;
    b.config().clone()
}

fn owner(insts: &mut [Inst], k: i64) -> &mut Inst {
    let i = insts
        .iter()
        .position(|x| {
            let kg = x.store.key_group_of(&k).unwrap();
            x.store.config().key_group_range.contains(kg)
        })
        .unwrap();
    &mut insts[i]
}

/// Storage holds exactly the objects some metadata references and those the instances' background
/// materializations keep (after their uploads ended).
fn check_storage(storage: &CheckpointStorage, insts: &[Inst]) -> Result<(), TestCaseError> {
    let mut kept = BTreeSet::new();
    for x in insts {
        x.ck.wait_for_materialization();
        kept.extend(x.ck.materialization_objects());
    }
    keyed_state::checkpoint::wait_for_sweeps(storage);
    let objects: BTreeSet<String> = storage
        .list("shared/")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let mut refs = referenced_objects(storage).unwrap().unwrap();
    refs.extend(kept);
    prop_assert_eq!(objects, refs);
    prop_assert!(verify(storage, None).unwrap().problems.is_empty());
    Ok(())
}

/// `b` with a read-modify-write cache of `cache` bytes: below 1 MiB taking every key in on its first miss,
/// above as configured by default (a doorkeeper).
fn cached(b: LsmBackend, cache: usize) -> keyed_state::Result<LsmBackend> {
    let mut b = b.with_rmw_cache(cache)?;
    b.set_rmw_cache_admission(cache < 1 << 20)?;
    Ok(b)
}

/// `cache`: the read-modify-write cache capacity of every instance in bytes (0: off); `view`: the engines'
/// checkpoint view (`design/checkpoint-view.md`).
fn run_ops(ops: Vec<Op>, retain: usize, cache: usize, view: bool) -> Result<(), TestCaseError> {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let opts = keyed_state_lsm::Options {
        checkpoint_view: view,
        // Background materializations at most checkpoints after a compaction, running beside the
        // checkpoint whose synchronous part started them.
        checkpoint_view_background_l0_runs: 2,
        checkpoint_view_background_pinned_ratio: 0.0,
        ..LsmBackend::small_options()
    };
    let cfg = KeyedStateStore::config_for(
        &LongSerializer,
        MAX_P,
        key_group_range_for_operator(MAX_P, 1, 0).unwrap(),
    );
    let mut insts = vec![wrap(
        LsmBackend::temp_with(cfg, opts.clone())
            .and_then(|b| cached(b, cache))
            .unwrap(),
        &storage,
        retain,
    )];
    let mut model: BTreeMap<i64, i64> = BTreeMap::new();
    let mut confirmed: BTreeMap<u64, BTreeMap<i64, i64>> = BTreeMap::new();
    let mut next_id = 1u64;
    for op in ops {
        match op {
            Op::Put(k, v) => {
                let x = owner(&mut insts, k);
                x.store.set_current_key(&k).unwrap();
                x.store.value(&x.counter).unwrap().update(&v).unwrap();
                model.insert(k, v);
            }
            Op::Delete(k) => {
                let x = owner(&mut insts, k);
                x.store.set_current_key(&k).unwrap();
                x.store.value(&x.counter).unwrap().clear().unwrap();
                model.remove(&k);
            }
            Op::Checkpoint { second, abort } => {
                let first = next_id;
                let last = if second { first + 1 } else { first };
                next_id = last + 1;
                let mut runs = Vec::new();
                for x in insts.iter_mut() {
                    for id in first..=last {
                        runs.push(x.ck.begin(id, x.store.backend_mut()).unwrap());
                    }
                }
                for p in runs {
                    p.run().unwrap();
                }
                for x in insts.iter() {
                    if abort {
                        x.ck.notify_aborted(last).unwrap();
                    } else {
                        x.ck.notify_complete(last).unwrap();
                    }
                }
                if !abort {
                    confirmed.insert(last, model.clone());
                }
            }
            Op::Compact => {
                for x in &insts {
                    x.engine.flush().unwrap();
                    x.engine.compact_all().unwrap();
                }
            }
            Op::Rescale(p, claim) => {
                let Some((&id, m)) = confirmed.iter().next_back() else {
                    continue;
                };
                // Retention may have dropped it: only checkpoints with metadata restore.
                if keyed_state::checkpoint::checkpoint_parts(&storage, id)
                    .unwrap()
                    .is_empty()
                {
                    continue;
                }
                model = m.clone();
                for x in &insts {
                    x.ck.close();
                }
                insts = (0..p)
                    .map(|i| {
                        let range = key_group_range_for_operator(MAX_P, p, i).unwrap();
                        let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
                        let (b, info) = restore_lsm_temp(&storage, id, cfg, opts.clone()).unwrap();
                        let x = wrap(cached(b, cache).unwrap(), &storage, retain);
                        let mode = if claim {
                            RestoreMode::Claim
                        } else {
                            RestoreMode::NoClaim
                        };
                        x.ck.restored_from(&info.parts, range, mode).unwrap();
                        x
                    })
                    .collect();
                for (k, v) in &model {
                    let x = owner(&mut insts, *k);
                    x.store.set_current_key(k).unwrap();
                    prop_assert_eq!(x.store.value(&x.counter).unwrap().get().unwrap(), Some(*v));
                }
                let n: u64 = insts
                    .iter_mut()
                    .map(|x| x.store.num_entries().unwrap())
                    .sum();
                prop_assert_eq!(n, model.len() as u64);
            }
        }
        check_storage(&storage, &insts)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn checkpoints_follow_the_model(ops in proptest::collection::vec(op(), 5..40), retain in 1usize..3) {
        run_ops(ops, retain, 0, false)?;
    }

    /// With the read-modify-write cache: one byte (every write evicted at once), a few entries, everything.
    #[test]
    fn checkpoints_with_a_cache_follow_the_model(
        ops in proptest::collection::vec(op(), 5..40),
        retain in 1usize..3,
        cache in proptest::sample::select(vec![1usize, 1 << 10, 64 << 20]),
    ) {
        run_ops(ops, retain, cache, false)?;
    }

    /// With the engines' checkpoint view, the cache on or off: checkpoints hold compacted-away files and the
    /// cache's adopted files, and restore (with rescales, bounded files) to the model.
    #[test]
    fn checkpoints_of_the_view_follow_the_model(
        ops in proptest::collection::vec(op(), 5..40),
        retain in 1usize..3,
        cache in proptest::sample::select(vec![0usize, 1, 1 << 10, 64 << 20]),
    ) {
        run_ops(ops, retain, cache, true)?;
    }

    /// The same, every call made from inside a current-thread tokio runtime (the background
    /// materializations run on the storage's I/O runtime).
    #[test]
    fn checkpoints_of_the_view_follow_the_model_inside_tokio(
        ops in proptest::collection::vec(op(), 5..40),
        retain in 1usize..3,
        cache in proptest::sample::select(vec![0usize, 1 << 10]),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async { run_ops(ops, retain, cache, true) })?;
    }
}

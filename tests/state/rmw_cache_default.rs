//! The LSM backend's read-modify-write cache by default: off, or, with `StateEnvOptions::rmw_cache_ratio`, a
//! share of the environment's memory budget divided among its backends; and engine-level views that never
//! miss a value the cache holds dirty.

use keyed_state::backend::lsm::{LsmBackend, SUGGESTED_RMW_CACHE_RATIO};
use keyed_state::backend::StateBackend;
use keyed_state::env::{StateEnv, StateEnvOptions};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use keyed_state::ErrorKind;

const MIB: usize = 1 << 20;

fn config() -> keyed_state::backend::BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128))
}

fn env(budget: usize, ratio: f64) -> StateEnv {
    StateEnv::new(StateEnvOptions {
        memory_budget: Some(budget),
        rmw_cache_ratio: ratio,
        background_threads: 2,
        ..StateEnvOptions::default()
    })
    .unwrap()
}

fn counter(store: &mut KeyedStateStore<LongSerializer>) -> ValueState<LongSerializer> {
    store
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap()
}

fn set(
    store: &mut KeyedStateStore<LongSerializer>,
    v: &ValueState<LongSerializer>,
    k: i64,
    x: i64,
) {
    store.set_current_key(&k).unwrap();
    store.value(v).unwrap().update(&x).unwrap();
}

#[test]
fn an_engine_checkpoint_never_misses_a_value_the_cache_holds_dirty() {
    let backend = LsmBackend::temp_with(config(), LsmBackend::small_options())
        .and_then(|b| b.with_rmw_cache(4 * MIB))
        .unwrap();
    let engine = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let v = counter(&mut store);
    let mut checkpoints = 0;
    for round in 0..4i64 {
        for k in 0..50 {
            set(&mut store, &v, k, k * 10 + round);
        }
        let dir = tempfile::tempdir().unwrap();
        // The cache holds every value of this round dirty: the engine alone would miss them, so the
        // checkpoint refuses until the backend has written them back.
        let refused = engine.checkpoint(dir.path().join("early")).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InvalidInput, "{refused}");
        assert!(refused.to_string().contains("write them back"), "{refused}");
        store.backend_mut().write_back().unwrap();
        let ck = dir.path().join("ck");
        engine.checkpoint(&ck).unwrap();
        checkpoints += 1;
        let states = store.states().to_vec();
        let opened =
            LsmBackend::open_checkpoint(&ck, config(), states, LsmBackend::small_options())
                .unwrap();
        let mut other = KeyedStateStore::new(Box::new(opened), LongSerializer).unwrap();
        let w = counter(&mut other);
        for k in 0..50 {
            other.set_current_key(&k).unwrap();
            assert_eq!(
                other.value(&w).unwrap().get().unwrap(),
                Some(k * 10 + round),
                "round {round}, key {k}"
            );
        }
    }
    assert_eq!(checkpoints, 4);
    // A later write is refused again.
    set(&mut store, &v, 7, -7);
    let dir = tempfile::tempdir().unwrap();
    assert!(engine.checkpoint(dir.path().join("a")).is_err());
}

#[test]
fn the_backends_own_checkpoint_writes_back_first() {
    let mut backend = LsmBackend::temp_with(config(), LsmBackend::small_options())
        .and_then(|b| b.with_rmw_cache(4 * MIB))
        .unwrap();
    let engine = backend.engine();
    let dir = tempfile::tempdir().unwrap();
    // Written through a store, then taken back out of it as a trait object is not possible: write straight
    // to the backend, through the same state the store would register.
    let mut store = KeyedStateStore::new(
        Box::new(LsmBackend::temp(config()).unwrap()),
        LongSerializer,
    )
    .unwrap();
    let _ = counter(&mut store);
    let meta = store.states()[0].clone();
    let s = backend.register_state(meta).unwrap();
    backend.put(s, 3, b"key", b"value").unwrap();
    assert!(engine.checkpoint(dir.path().join("refused")).is_err());
    let ck = dir.path().join("ck");
    backend.checkpoint(&ck).unwrap();
    let states = backend.states().to_vec();
    let mut opened =
        LsmBackend::open_checkpoint(&ck, config(), states, LsmBackend::small_options()).unwrap();
    assert_eq!(opened.get(s, 3, b"key").unwrap(), Some(&b"value"[..]));
    // Written back, the engine's own checkpoint is allowed again.
    engine.checkpoint(dir.path().join("now")).unwrap();
}

#[test]
fn without_a_budget_a_backend_has_no_cache_until_it_sets_a_capacity() {
    let mut b = LsmBackend::temp(config()).unwrap();
    assert_eq!(b.rmw_cache_capacity(), 0);
    assert_eq!(b.rmw_cache_share_members(), 0);
    b.use_default_cache().unwrap();
    assert_eq!(
        b.rmw_cache_capacity(),
        0,
        "no budget: no share to take a part of"
    );
    let b = b.with_rmw_cache(5 * MIB).unwrap();
    assert_eq!(b.rmw_cache_capacity(), 5 * MIB);
    let b = b.with_rmw_cache(0).unwrap();
    assert_eq!(b.rmw_cache_capacity(), 0);
    let b = b.with_rmw_cache(3 * MIB).unwrap();
    assert_eq!(b.rmw_cache_capacity(), 3 * MIB);
}

#[test]
fn many_backends_share_a_part_of_the_budget_rebalanced_as_they_open_and_close() {
    // 16 operators of 3 states each in 512 MiB, as `benches/many_operators.rs` runs them.
    let budget = 512 * MIB;
    let env = env(budget, SUGGESTED_RMW_CACHE_RATIO);
    let pool = (budget as f64 * SUGGESTED_RMW_CACHE_RATIO) as usize;
    let mut ops = Vec::new();
    for _ in 0..16 {
        let b = env.temp_lsm(config(), LsmBackend::small_options()).unwrap();
        let mut store = KeyedStateStore::new(Box::new(b), LongSerializer).unwrap();
        let vs: Vec<_> = (0..3)
            .map(|i| {
                store
                    .register_value(ValueStateDescriptor::new(format!("v{i}"), LongSerializer))
                    .unwrap()
            })
            .collect();
        ops.push((store, vs));
    }
    for (store, vs) in &mut ops {
        for (i, v) in vs.iter().enumerate() {
            set(store, v, i as i64, 1);
        }
    }
    let mem = env.memory_usage();
    // Every cache has its part: a sixteenth of the pool, within the pool together.
    assert!(mem.rmw_caches > pool / 2, "{mem:?}");
    assert!(mem.rmw_caches <= pool, "{mem:?}");
    assert!(mem.total() <= budget + 16 * MIB, "{mem:?}");
    assert!(mem.rmw_caches <= mem.engines.reserved);
    let metric = env
        .metrics()
        .into_iter()
        .find(|m| m.name == "keyed-state.env.rmw-caches")
        .map(|m| m.value);
    assert_eq!(metric, Some(mem.rmw_caches as u64));
    // Half of them close: the others grow into their parts at their next operation.
    let one = mem.rmw_caches / 16;
    ops.truncate(8);
    for (store, vs) in &mut ops {
        set(store, &vs[0], 0, 2);
    }
    let mem = env.memory_usage();
    assert!(mem.rmw_caches <= pool, "{mem:?}");
    assert!(
        mem.rmw_caches / 8 > one * 3 / 2,
        "{mem:?} (one of 16: {one})"
    );
    // The values are all there.
    for (store, vs) in &mut ops {
        store.set_current_key(&0).unwrap();
        assert_eq!(store.value(&vs[0]).unwrap().get().unwrap(), Some(2));
        store.set_current_key(&1).unwrap();
        assert_eq!(store.value(&vs[1]).unwrap().get().unwrap(), Some(1));
    }
    drop(ops);
    assert_eq!(env.memory_usage().rmw_caches, 0);
}

#[test]
fn a_ratio_of_zero_gives_no_default_cache_and_an_own_capacity_still_works() {
    let env = env(256 * MIB, 0.0);
    let b = env.temp_lsm(config(), LsmBackend::small_options()).unwrap();
    let mut store = KeyedStateStore::new(Box::new(b), LongSerializer).unwrap();
    let v = counter(&mut store);
    set(&mut store, &v, 1, 1);
    assert_eq!(env.memory_usage().rmw_caches, 0);
    let b = env
        .temp_lsm(config(), LsmBackend::small_options())
        .unwrap()
        .with_rmw_cache(4 * MIB)
        .unwrap();
    assert_eq!(b.rmw_cache_capacity(), 4 * MIB);
    assert!(env.memory_usage().rmw_caches >= 4 * MIB);
    assert_eq!(b.rmw_cache_share_members(), 0);
    assert!(StateEnv::new(StateEnvOptions {
        rmw_cache_ratio: 1.5,
        ..StateEnvOptions::default()
    })
    .is_err());
}

#[test]
fn an_environment_at_its_defaults_gives_backends_no_cache() {
    let env = StateEnv::new(StateEnvOptions {
        memory_budget: Some(64 * MIB),
        background_threads: 1,
        ..StateEnvOptions::default()
    })
    .unwrap();
    let b = env.temp_lsm(config(), LsmBackend::small_options()).unwrap();
    let mut store = KeyedStateStore::new(Box::new(b), LongSerializer).unwrap();
    let v = counter(&mut store);
    set(&mut store, &v, 1, 1);
    assert_eq!(env.memory_usage().rmw_caches, 0);
}

#[test]
fn a_cache_whose_part_shrinks_charges_its_new_part_not_its_first_table() {
    // The first backend opens alone and takes the whole pool; fifteen more join, and at its next operation
    // its cache must fit its sixteenth, hash table included.
    let budget = 512 * MIB;
    let env = env(budget, SUGGESTED_RMW_CACHE_RATIO);
    let part = (budget as f64 * SUGGESTED_RMW_CACHE_RATIO) as usize / 16;
    let first = env.temp_lsm(config(), LsmBackend::small_options()).unwrap();
    let mut store = KeyedStateStore::new(Box::new(first), LongSerializer).unwrap();
    let v = counter(&mut store);
    set(&mut store, &v, 1, 1);
    assert!(
        env.memory_usage().rmw_caches > 8 * part,
        "alone, it has the pool"
    );
    let others: Vec<_> = (0..15)
        .map(|_| env.temp_lsm(config(), LsmBackend::small_options()).unwrap())
        .collect();
    set(&mut store, &v, 2, 2);
    let mem = env.memory_usage();
    assert!(mem.rmw_caches <= part, "{mem:?} against a part of {part}");
    store.set_current_key(&1).unwrap();
    assert_eq!(store.value(&v).unwrap().get().unwrap(), Some(1));
    drop(others);
}

//! The LSM backend's read-modify-write cache steps aside when its estimated hit ratio says it does not pay
//! (a working set much larger than the cache), back in when it would (a hot working set), and every value
//! stays where it was across both: dirty entries, pending checkpoint layers, open snapshots.

use std::collections::BTreeMap;
use std::sync::Arc;

use keyed_state::backend::lsm::{LsmBackend, LsmEngine, RmwCacheStepping};
use keyed_state::backend::EngineHandle;
use keyed_state::checkpoint::{
    restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer,
};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::SavepointReader;
use keyed_state::serializer::{IntSerializer, LongSerializer, StringSerializer};
use keyed_state::state::{
    KeyedStateStore, ListState, ListStateDescriptor, MapState, MapStateDescriptor, ValueState,
    ValueStateDescriptor,
};

type Store = KeyedStateStore<LongSerializer>;

fn config() -> keyed_state::backend::BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128))
}

/// A store on an LSM backend with a cache of `capacity` bytes stepping by `policy`, and its engine handle.
fn store(capacity: usize, first_touch: bool, policy: RmwCacheStepping) -> (Store, LsmEngine) {
    let mut b = LsmBackend::temp_with(config(), LsmBackend::small_options())
        .and_then(|b| b.with_rmw_cache(capacity))
        .unwrap();
    b.set_rmw_cache_admission(first_touch).unwrap();
    b.set_rmw_cache_stepping(policy);
    let engine = b.engine();
    (Store::new(Box::new(b), LongSerializer).unwrap(), engine)
}

fn metric(engine: &LsmEngine, name: &str) -> Option<u64> {
    engine
        .metrics()
        .into_iter()
        .find(|m| m.name == name)
        .map(|m| m.value)
}

fn active(engine: &LsmEngine) -> Option<u64> {
    metric(engine, "keyed-state.rmw-cache.active")
}

fn step_asides(engine: &LsmEngine) -> u64 {
    metric(engine, "keyed-state.rmw-cache.step-asides").unwrap_or(0)
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `ops` reads and updates of keys from `key`, checked against `model`.
fn run(
    store: &mut Store,
    v: &ValueState<LongSerializer>,
    model: &mut BTreeMap<i64, i64>,
    ops: u64,
    mut key: impl FnMut() -> i64,
) {
    for i in 0..ops {
        let k = key();
        store.set_current_key(&k).unwrap();
        if i % 2 == 0 {
            let x = i as i64;
            store.value(v).unwrap().update(&x).unwrap();
            model.insert(k, x);
        } else {
            assert_eq!(
                store.value(v).unwrap().get().unwrap(),
                model.get(&k).copied()
            );
        }
    }
}

fn check_all(store: &mut Store, v: &ValueState<LongSerializer>, model: &BTreeMap<i64, i64>) {
    for (k, x) in model {
        store.set_current_key(k).unwrap();
        assert_eq!(store.value(v).unwrap().get().unwrap(), Some(*x), "key {k}");
    }
}

/// About 680 entries of a value state (96 bytes each).
const CAPACITY: usize = 64 << 10;
/// Thresholds as by default, decided every 4,096 operations.
const SMALL_WINDOW: RmwCacheStepping = RmwCacheStepping {
    window_ops: 4096,
    ..RmwCacheStepping::DEFAULT
};

#[test]
fn a_uniform_working_set_ten_times_the_cache_makes_it_step_aside_and_a_hot_one_brings_it_back() {
    let (mut store, engine) = store(CAPACITY, false, SMALL_WINDOW);
    let v = store
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    let mut model = BTreeMap::new();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    assert_eq!(active(&engine), Some(1));
    // 6,800 keys, uniform: about a tenth of them fit.
    run(&mut store, &v, &mut model, 30_000, || {
        rng.below(6_800) as i64
    });
    assert_eq!(active(&engine), Some(0), "{:?}", engine.metrics());
    assert!(step_asides(&engine) >= 1);
    let estimate = metric(
        &engine,
        "keyed-state.rmw-cache.estimated-hit-ratio-permille",
    );
    assert!(estimate.is_some_and(|e| e < 250), "{estimate:?}");
    check_all(&mut store, &v, &model);
    // 200 hot keys (a third of what fits).
    run(&mut store, &v, &mut model, 20_000, || rng.below(200) as i64);
    assert_eq!(active(&engine), Some(1), "{:?}", engine.metrics());
    let estimate = metric(
        &engine,
        "keyed-state.rmw-cache.estimated-hit-ratio-permille",
    );
    assert!(estimate.is_some_and(|e| e > 400), "{estimate:?}");
    check_all(&mut store, &v, &model);
    // It stays in use while the hot set stays hot.
    let before = step_asides(&engine);
    run(&mut store, &v, &mut model, 20_000, || rng.below(200) as i64);
    assert_eq!(step_asides(&engine), before);
}

#[test]
fn a_cache_that_never_steps_stays_in_use_under_a_working_set_ten_times_its_size() {
    let (mut store, engine) = store(
        CAPACITY,
        false,
        RmwCacheStepping {
            window_ops: 4096,
            ..RmwCacheStepping::NEVER
        },
    );
    let v = store
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    let mut model = BTreeMap::new();
    let mut rng = Rng(7);
    run(&mut store, &v, &mut model, 30_000, || {
        rng.below(6_800) as i64
    });
    assert_eq!(active(&engine), Some(1));
    assert_eq!(step_asides(&engine), 0);
}

struct States {
    value: ValueState<LongSerializer, IntSerializer>,
    list: ListState<StringSerializer>,
    map: MapState<IntSerializer, LongSerializer>,
}

fn register(store: &mut Store) -> States {
    States {
        value: store
            .register_value(
                ValueStateDescriptor::new("value", LongSerializer).with_namespace(IntSerializer),
            )
            .unwrap(),
        list: store
            .register_list(ListStateDescriptor::new("list", StringSerializer))
            .unwrap(),
        map: store
            .register_map(MapStateDescriptor::new(
                "map",
                IntSerializer,
                LongSerializer,
            ))
            .unwrap(),
    }
}

/// Round `r` of writes to keys `0..n`: a value in a namespace, a list element, a map entry.
fn write_round(store: &mut Store, s: &States, n: i64, r: i64) {
    for k in 0..n {
        store.set_current_key(&k).unwrap();
        let ns = k as i32 % 3;
        store
            .value_in(&s.value, &ns)
            .unwrap()
            .update(&(k * 100 + r))
            .unwrap();
        store
            .list(&s.list)
            .unwrap()
            .add(&format!("{k}.{r}"))
            .unwrap();
        store
            .map(&s.map)
            .unwrap()
            .put(&(r as i32), &(k + r))
            .unwrap();
    }
}

/// Checks that keys `0..n` hold exactly rounds `0..rounds`.
fn check_rounds(store: &mut Store, s: &States, n: i64, rounds: i64) {
    for k in 0..n {
        store.set_current_key(&k).unwrap();
        let ns = k as i32 % 3;
        let want = (rounds > 0).then(|| k * 100 + rounds - 1);
        assert_eq!(
            store.value_in(&s.value, &ns).unwrap().get().unwrap(),
            want,
            "key {k}"
        );
        let list = store
            .list(&s.list)
            .unwrap()
            .get()
            .unwrap()
            .unwrap_or_default();
        let want: Vec<String> = (0..rounds).map(|r| format!("{k}.{r}")).collect();
        assert_eq!(list, want, "key {k}");
        let mut entries = store
            .map(&s.map)
            .unwrap()
            .entries()
            .collect::<keyed_state::Result<Vec<(i32, i64)>>>()
            .unwrap();
        entries.sort();
        let want: Vec<(i32, i64)> = (0..rounds).map(|r| (r as i32, k + r)).collect();
        assert_eq!(entries, want, "key {k}");
    }
}

#[test]
fn stepping_aside_with_dirty_entries_a_pending_checkpoint_and_an_open_snapshot_loses_nothing() {
    const N: i64 = 300;
    // Every key taken in, dirty. Steps aside at the end of its second window of 1,900 operations (the first
    // decides nothing), whatever its estimate, and never back in: after the fourth round of writes below
    // (900 operations each), before the checkpoint's asynchronous part runs.
    let aside = RmwCacheStepping {
        window_ops: 1900,
        aside_below: 2.0,
        back_above: 2.0,
    };
    let (mut store, engine) = store(16 << 20, true, aside);
    let s = register(&mut store);
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let ck = Checkpointer::open(
        Arc::clone(&storage),
        store.backend_mut().config(),
        CheckpointOptions::default(),
    )
    .unwrap();
    write_round(&mut store, &s, N, 0);
    write_round(&mut store, &s, N, 1);
    // A checkpoint of two rounds, its asynchronous part not run yet: the cache's dirty log is a pending
    // layer.
    let pending = ck.begin(1, store.backend_mut()).unwrap();
    write_round(&mut store, &s, N, 2);
    // A snapshot of three rounds: another layer.
    let snap = store.snapshot().unwrap();
    write_round(&mut store, &s, N, 3);
    assert_eq!(step_asides(&engine), 0);
    assert_eq!(active(&engine), Some(1));
    // It steps aside while these reads run, with four rounds dirty in the cache and two layers pending.
    check_rounds(&mut store, &s, N, 4);
    assert_eq!(active(&engine), Some(0), "{:?}", engine.metrics());
    assert_eq!(step_asides(&engine), 1);
    write_round(&mut store, &s, N, 4);
    check_rounds(&mut store, &s, N, 5);
    pending.run().unwrap();
    ck.notify_complete(1).unwrap();
    // The live store still reads its last round: the capture whose layers were written back on stepping
    // aside was not adopted as well (its older values above the newer writes).
    check_rounds(&mut store, &s, N, 5);
    engine.flush().unwrap();
    check_rounds(&mut store, &s, N, 5);
    // The snapshot reads its moment.
    let mut bytes = Vec::new();
    keyed_state::savepoint::encode(&*snap, &Default::default(), &mut bytes).unwrap();
    drop(snap);
    let (mut from_snapshot, _) = store_plain();
    let s2 = register(&mut from_snapshot);
    from_snapshot
        .restore(&[SavepointReader::from_bytes(bytes).unwrap()])
        .unwrap();
    check_rounds(&mut from_snapshot, &s2, N, 3);
    // The checkpoint restores its moment.
    let (b, _) = restore_lsm_temp(&storage, 1, config(), LsmBackend::small_options()).unwrap();
    let mut restored = Store::new(Box::new(b), LongSerializer).unwrap();
    let s3 = register(&mut restored);
    check_rounds(&mut restored, &s3, N, 2);
}

/// A store on an LSM backend without a cache.
fn store_plain() -> (Store, LsmEngine) {
    store(0, false, RmwCacheStepping::NEVER)
}

#[test]
fn a_cache_aside_gives_its_budget_charge_back_and_takes_it_again_when_back_in() {
    let env = keyed_state::env::StateEnv::new(keyed_state::env::StateEnvOptions {
        memory_budget: Some(64 << 20),
        background_threads: 2,
        ..keyed_state::env::StateEnvOptions::default()
    })
    .unwrap();
    let mut b = env
        .temp_lsm(config(), LsmBackend::small_options())
        .and_then(|b| b.with_rmw_cache(1 << 20))
        .unwrap();
    b.set_rmw_cache_stepping(SMALL_WINDOW);
    let engine = b.engine();
    let mut store = Store::new(Box::new(b), LongSerializer).unwrap();
    let v = store
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    let charged = env.memory_usage().rmw_caches;
    assert!(charged >= 1 << 20, "{charged}");
    let (mut model, mut rng) = (BTreeMap::new(), Rng(3));
    // About 9,400 entries; 94,000 keys.
    run(&mut store, &v, &mut model, 60_000, || {
        rng.below(94_000) as i64
    });
    assert_eq!(active(&engine), Some(0));
    // Aside: only the estimate's shadow (a quarter of the cache's entries here) is charged.
    let aside = env.memory_usage().rmw_caches;
    assert!(
        aside < charged / 8,
        "{aside} charged aside, {charged} in use"
    );
    run(&mut store, &v, &mut model, 40_000, || {
        rng.below(2_000) as i64
    });
    assert_eq!(active(&engine), Some(1));
    assert_eq!(env.memory_usage().rmw_caches, charged);
    check_all(&mut store, &v, &model);
}

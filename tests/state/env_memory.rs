//! The environment's memory accounting seen from the state layer: heap backends charge their state to the
//! budget without a cap, and the breakdown adds up to what the budget charges.

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::EngineHandle;
use keyed_state::env::{StateEnv, StateEnvOptions};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};
use keyed_state_lsm::{Metric, Options};

const MIB: usize = 1 << 20;

fn metric(ms: &[Metric], name: &str) -> u64 {
    ms.iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no metric {name} in {ms:?}"))
        .value
}

fn env(budget: usize) -> StateEnv {
    StateEnv::new(StateEnvOptions {
        memory_budget: Some(budget),
        background_threads: 2,
        ..StateEnvOptions::default()
    })
    .unwrap()
}

fn config() -> keyed_state::backend::BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128))
}

#[test]
fn a_heap_backend_reports_estimated_keys_and_bytes_in_its_metrics() {
    let backend = HeapBackend::new(config()).unwrap();
    let engine = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let v = store
        .register_value(ValueStateDescriptor::new("v", BytesSerializer))
        .unwrap();
    for k in 0..10_000i64 {
        store.set_current_key(&k).unwrap();
        store.value(&v).unwrap().update(&vec![3u8; 100]).unwrap();
    }
    // Refreshed every REFRESH_WRITES writes: the last ones are not counted yet.
    let refreshed = 10_000 / keyed_state::backend::heap::REFRESH_WRITES as u64
        * keyed_state::backend::heap::REFRESH_WRITES as u64;
    assert_eq!(engine.estimated_entries(), refreshed);
    // A snapshot (or checkpoint) refreshes.
    store.backend_mut().snapshot().unwrap();
    let m = engine.metrics();
    assert_eq!(metric(&m, "rocksdb.estimate-num-keys"), 10_000);
    assert_eq!(metric(&m, "keyed-state.heap.states"), 1);
    // Key (8-byte long and its key-group byte, less the table's stripped prefix), 100-byte value
    // (+ its serializer's length prefix) and the slot overhead.
    let bytes = metric(&m, "keyed-state.heap.estimate-state-bytes");
    let per_entry = bytes as f64 / 10_000.0;
    assert!(
        (108.0..=160.0).contains(&per_entry),
        "{per_entry} bytes per entry"
    );
    assert!(
        engine.summary().contains("10000 entries"),
        "{}",
        engine.summary()
    );
    engine.wait_for_background_work().unwrap();
    // Removing every key brings the figures back to 0.
    for k in 0..10_000i64 {
        store.set_current_key(&k).unwrap();
        store.value(&v).unwrap().clear().unwrap();
    }
    store.backend_mut().snapshot().unwrap();
    assert_eq!(engine.estimated_entries(), 0);
    assert_eq!(engine.estimated_bytes(), 0);
}

#[test]
fn a_heap_backend_on_an_env_charges_its_state_to_the_budget_without_a_cap() {
    let budget = MIB;
    let env = env(budget);
    let backend = env.heap(config()).unwrap();
    let engine = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let v = store
        .register_value(ValueStateDescriptor::new("v", BytesSerializer))
        .unwrap();
    // About 7 MiB of state against a 1 MiB budget: never refused.
    for k in 0..50_000i64 {
        store.set_current_key(&k).unwrap();
        store.value(&v).unwrap().update(&vec![5u8; 100]).unwrap();
    }
    store.backend_mut().snapshot().unwrap();
    let mem = env.memory_usage();
    assert_eq!(mem.heap_state as u64, engine.estimated_bytes());
    assert!(mem.heap_state > 5 * budget, "{mem:?}");
    assert_eq!(mem.engines.reserved, mem.heap_state, "{mem:?}");
    assert_eq!(mem.other_reserved(), 0);
    assert_eq!(mem.total(), env.memory().usage(), "{mem:?}");
    assert_eq!(env.memory().available(), 0);
    assert_eq!(
        metric(&env.metrics(), "keyed-state.env.heap-state"),
        mem.heap_state as u64
    );
    // A reservation of another user shows apart from the heap state.
    let other = env.memory().reserve(1000);
    assert_eq!(env.memory_usage().other_reserved(), 1000);
    drop(other);
    // Dropping the backend gives its charge back.
    drop(store);
    let mem = env.memory_usage();
    assert_eq!((mem.heap_state, mem.engines.reserved), (0, 0), "{mem:?}");
}

#[test]
fn the_memory_breakdown_adds_up_to_what_the_budget_charges() {
    let budget = 16 * MIB;
    // The read-modify-write caches on, at the suggested share, so that the breakdown counts them too.
    let env = StateEnv::new(StateEnvOptions {
        memory_budget: Some(budget),
        rmw_cache_ratio: keyed_state::backend::lsm::SUGGESTED_RMW_CACHE_RATIO,
        background_threads: 2,
        ..StateEnvOptions::default()
    })
    .unwrap();
    let mut stores = Vec::new();
    let mut engines = Vec::new();
    for _ in 0..2 {
        let b = env.temp_lsm(config(), Options::default()).unwrap();
        engines.push(b.engine());
        stores.push(KeyedStateStore::new(Box::new(b), LongSerializer).unwrap());
    }
    let heap = env.heap(config()).unwrap();
    stores.push(KeyedStateStore::new(Box::new(heap), LongSerializer).unwrap());
    let reservation = env.memory().reserve(MIB / 2);
    let states: Vec<_> = stores
        .iter_mut()
        .map(|s| {
            s.register_value(ValueStateDescriptor::new("v", BytesSerializer))
                .unwrap()
        })
        .collect();
    let check = |when: &str| {
        // A background job (or a deferred free) may let go of a flushed memtable between two reads: take
        // the breakdown, the budget's count and what it has available between two equal counts, and compare
        // those figures, not a later read.
        let sample = || {
            let before = env.memory().usage();
            let mem = env.memory_usage();
            let available = env.memory().available();
            (before, mem, available, env.memory().usage())
        };
        let (mut usage, mut mem, mut available, mut after) = sample();
        for _ in 0..200 {
            if usage == after && mem.total() == usage {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            (usage, mem, available, after) = sample();
        }
        let e = &mem.engines;
        // Every part, and their sum against the budget's own count.
        assert_eq!(
            e.memtables_mutable
                + e.memtables_pending_flush
                + e.memtables_flushed_held
                + e.block_cache
                + e.sst_metadata
                + e.reserved
                + e.row_cache,
            mem.total(),
            "{when}: {mem:?}"
        );
        assert_eq!(mem.total(), usage, "{when}: {mem:?}");
        assert_eq!(
            available,
            budget.saturating_sub(mem.total()),
            "{when}: {mem:?}"
        );
        // Heap state, the read-modify-write caches of the two LSM backends, the reservation.
        assert_eq!(
            e.reserved,
            mem.heap_state + mem.rmw_caches + MIB / 2,
            "{when}: {mem:?}"
        );
        assert_eq!(mem.other_reserved(), MIB / 2, "{when}: {mem:?}");
        // The published figures say the same.
        let m = env.metrics();
        let parts: u64 = [
            "keyed-state.env.memtables-mutable",
            "keyed-state.env.memtables-pending-flush",
            "keyed-state.env.memtables-flushed-held",
            "rocksdb.block-cache-usage",
            "keyed-state.env.sst-metadata",
            "keyed-state.env.reserved",
            "keyed-state.env.row-cache",
        ]
        .iter()
        .map(|n| metric(&m, n))
        .sum();
        assert_eq!(
            parts,
            metric(&m, "keyed-state.env.memory-charged"),
            "{when}"
        );
        mem
    };
    for k in 0..40_000i64 {
        for (s, v) in stores.iter_mut().zip(&states) {
            s.set_current_key(&k).unwrap();
            s.value(v)
                .unwrap()
                .update(&vec![(k % 251) as u8; 120])
                .unwrap();
        }
    }
    for s in stores.iter_mut() {
        s.backend_mut().snapshot().unwrap();
    }
    for e in &engines {
        e.wait_for_background_work().unwrap();
    }
    let after_writes = check("after the writes");
    assert!(after_writes.engines.memtables() > 0 || after_writes.engines.sst_metadata > 0);
    assert!(after_writes.heap_state > 0);
    assert!(after_writes.rmw_caches > 0, "{after_writes:?}");
    // Reads load blocks into the shared cache.
    for k in (0..40_000i64).step_by(7) {
        for (s, v) in stores.iter_mut().zip(&states) {
            s.set_current_key(&k).unwrap();
            assert!(s.value(v).unwrap().get().unwrap().is_some());
        }
    }
    check("after the reads");
    drop(reservation);
    drop(stores);
    drop(engines);
    let mem = env.memory_usage();
    assert_eq!(mem.total(), env.memory().usage(), "{mem:?}");
    assert_eq!(mem.engines.reserved, 0, "{mem:?}");
}

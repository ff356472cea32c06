//! Backend swap: a savepoint written by any backend restores into any other, and backends holding the same
//! logical state write byte-identical savepoints.

use crate::conformance;

/// The CLI's demo workload (a module of the binary, not of the library).
#[allow(dead_code)]
#[path = "../../crates/cli/src/demo.rs"]
mod demo;

use conformance::SumAgg;
use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::{BackendConfig, StateBackend};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::{encode, Compression, SavepointReader, WriteOptions};
use keyed_state::serializer::{IntSerializer, LongSerializer, StringSerializer};
use keyed_state::state::*;
use proptest::prelude::*;

const MAX_P: u32 = 128;
const KEYS: i64 = 60;
const NAMESPACES: i32 = 3;

/// The backends under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Heap,
    Lsm,
    /// The RocksDB-backed variant (`--features rocksdb`).
    #[cfg(feature = "rocksdb")]
    RocksDb,
}

#[cfg(not(feature = "rocksdb"))]
const KINDS: &[Kind] = &[Kind::Heap, Kind::Lsm];
#[cfg(feature = "rocksdb")]
const KINDS: &[Kind] = &[Kind::Heap, Kind::Lsm, Kind::RocksDb];

fn backend(kind: Kind, cfg: BackendConfig) -> Box<dyn StateBackend> {
    match kind {
        Kind::Heap => Box::new(HeapBackend::new(cfg).unwrap()),
        Kind::Lsm => Box::new(LsmBackend::temp_with(cfg, LsmBackend::small_options()).unwrap()),
        #[cfg(feature = "rocksdb")]
        Kind::RocksDb => Box::new(
            keyed_state::backend::rocksdb::RocksDbBackend::temporary(cfg, Default::default())
                .unwrap(),
        ),
    }
}

struct States {
    value: ValueState<LongSerializer, IntSerializer>,
    list: ListState<StringSerializer, IntSerializer>,
    map: MapState<StringSerializer, LongSerializer, IntSerializer>,
    reducing: ReducingState<LongSerializer, IntSerializer>,
    aggregating: AggregatingState<SumAgg, LongSerializer, IntSerializer>,
}

struct Store {
    store: KeyedStateStore<LongSerializer>,
    s: States,
}

fn register(store: &mut KeyedStateStore<LongSerializer>) -> States {
    States {
        value: store
            .register_value(
                ValueStateDescriptor::new("value", LongSerializer).with_namespace(IntSerializer),
            )
            .unwrap(),
        list: store
            .register_list(
                ListStateDescriptor::new("list", StringSerializer).with_namespace(IntSerializer),
            )
            .unwrap(),
        map: store
            .register_map(
                MapStateDescriptor::new("map", StringSerializer, LongSerializer)
                    .with_namespace(IntSerializer),
            )
            .unwrap(),
        reducing: store
            .register_reducing(
                ReducingStateDescriptor::new("reducing", LongSerializer, |a, b| a + b)
                    .with_namespace(IntSerializer),
            )
            .unwrap(),
        aggregating: store
            .register_aggregating(
                AggregatingStateDescriptor::new("aggregating", SumAgg, LongSerializer)
                    .with_namespace(IntSerializer),
            )
            .unwrap(),
    }
}

/// A store on `kind`; with `restore_from`, restored from it (half the time before registering the states).
fn open(kind: Kind, restore_from: Option<&[u8]>, register_first: bool) -> Store {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, KeyGroupRange::all(MAX_P));
    let mut store = KeyedStateStore::new(backend(kind, cfg), LongSerializer).unwrap();
    let restore = |store: &mut KeyedStateStore<LongSerializer>| {
        if let Some(bytes) = restore_from {
            let sp = SavepointReader::from_bytes(bytes.to_vec()).unwrap();
            store.restore(&[sp]).unwrap();
        }
    };
    if !register_first {
        restore(&mut store);
    }
    let s = register(&mut store);
    if register_first {
        restore(&mut store);
    }
    Store { store, s }
}

fn savepoint(store: &mut KeyedStateStore<LongSerializer>, compression: Compression) -> Vec<u8> {
    let snap = store.snapshot().unwrap();
    let mut out = Vec::new();
    encode(&*snap, &WriteOptions { compression }, &mut out).unwrap();
    out
}

/// Fills every kind of state in several namespaces; namespace 2's maps are filled and then emptied.
fn fill(st: &mut Store) {
    let (store, s) = (&mut st.store, &st.s);
    for key in 0..KEYS {
        store.set_current_key(&key).unwrap();
        for ns in 0..NAMESPACES {
            let x = key * 10 + ns as i64;
            store.value_in(&s.value, &ns).unwrap().update(&x).unwrap();
            for e in 0..(key % 4) {
                store
                    .list_in(&s.list, &ns)
                    .unwrap()
                    .add(&format!("e{x}-{e}"))
                    .unwrap();
            }
            for u in 0..3 {
                store
                    .map_in(&s.map, &ns)
                    .unwrap()
                    .put(&format!("u{u}"), &(x + u))
                    .unwrap();
            }
            if ns == 2 {
                for u in 0..3 {
                    store
                        .map_in(&s.map, &ns)
                        .unwrap()
                        .remove(&format!("u{u}"))
                        .unwrap();
                }
            }
            store
                .reducing_in(&s.reducing, &ns)
                .unwrap()
                .add(&x)
                .unwrap();
            store
                .reducing_in(&s.reducing, &ns)
                .unwrap()
                .add(&1)
                .unwrap();
            store
                .aggregating_in(&s.aggregating, &ns)
                .unwrap()
                .add(&x)
                .unwrap();
        }
    }
}

fn check(st: &mut Store) {
    let (store, s) = (&mut st.store, &st.s);
    for key in 0..KEYS {
        store.set_current_key(&key).unwrap();
        for ns in 0..NAMESPACES {
            let x = key * 10 + ns as i64;
            assert_eq!(
                store.value_in(&s.value, &ns).unwrap().get().unwrap(),
                Some(x)
            );
            let want: Vec<String> = (0..(key % 4)).map(|e| format!("e{x}-{e}")).collect();
            assert_eq!(
                store.list_in(&s.list, &ns).unwrap().get().unwrap(),
                (!want.is_empty()).then_some(want),
                "list order for key {key} ns {ns}"
            );
            let map = store
                .map_in(&s.map, &ns)
                .unwrap()
                .entries()
                .collect::<keyed_state::Result<Vec<_>>>()
                .unwrap();
            if ns == 2 {
                assert!(map.is_empty(), "emptied map of key {key}");
            } else {
                let want: Vec<(String, i64)> = (0..3).map(|u| (format!("u{u}"), x + u)).collect();
                assert_eq!(map, want);
            }
            assert_eq!(
                store.reducing_in(&s.reducing, &ns).unwrap().get().unwrap(),
                Some(x + 1)
            );
            assert_eq!(
                store
                    .aggregating_in(&s.aggregating, &ns)
                    .unwrap()
                    .get()
                    .unwrap(),
                Some(format!("sum={x}"))
            );
        }
    }
}

fn swap(from: Kind, to: Kind) {
    for compression in [Compression::None, Compression::Lz4] {
        let mut src = open(from, None, true);
        fill(&mut src);
        let bytes = savepoint(&mut src.store, compression);
        for register_first in [true, false] {
            let mut dst = open(to, Some(&bytes), register_first);
            check(&mut dst);
            assert_eq!(
                dst.store.num_entries().unwrap(),
                src.store.num_entries().unwrap()
            );
            // The restored backend writes the very same savepoint.
            assert!(
                savepoint(&mut dst.store, compression) == bytes,
                "{from:?} -> {to:?}: savepoint bytes differ after restore"
            );
            // And it keeps working: one more update per key, visible after another swap back.
            dst.store.set_current_key(&1).unwrap();
            dst.store
                .list_in(&dst.s.list, &0)
                .unwrap()
                .add(&"more".to_string())
                .unwrap();
            let again = savepoint(&mut dst.store, compression);
            let mut back = open(from, Some(&again), true);
            back.store.set_current_key(&1).unwrap();
            assert_eq!(
                back.store.list_in(&back.s.list, &0).unwrap().get().unwrap(),
                Some(vec!["e10-0".to_string(), "more".to_string()])
            );
        }
    }
}

#[test]
fn heap_to_lsm() {
    swap(Kind::Heap, Kind::Lsm);
}

#[test]
fn lsm_to_heap() {
    swap(Kind::Lsm, Kind::Heap);
}

#[test]
fn lsm_to_lsm() {
    swap(Kind::Lsm, Kind::Lsm);
}

#[test]
fn heap_to_heap() {
    swap(Kind::Heap, Kind::Heap);
}

#[cfg(feature = "rocksdb")]
#[test]
fn swaps_with_rocksdb() {
    for (a, b) in [
        (Kind::RocksDb, Kind::Lsm),
        (Kind::Lsm, Kind::RocksDb),
        (Kind::RocksDb, Kind::Heap),
        (Kind::Heap, Kind::RocksDb),
    ] {
        swap(a, b);
    }
}

#[test]
fn every_backend_writes_the_same_bytes_for_the_same_state() {
    let bytes: Vec<Vec<u8>> = KINDS
        .iter()
        .map(|k| {
            let mut st = open(*k, None, true);
            fill(&mut st);
            savepoint(&mut st.store, Compression::Lz4)
        })
        .collect();
    for (k, b) in KINDS.iter().zip(&bytes) {
        assert!(b == &bytes[0], "{k:?} differs from {:?}", KINDS[0]);
    }
}

// ------------------------------------------------------------------ proptest over random state

#[derive(Debug, Clone)]
enum Op {
    SetValue(i64, i32, i64),
    ClearValue(i64, i32),
    AddList(i64, i32, String),
    UpdateList(i64, i32, Vec<String>),
    PutMap(i64, i32, String, i64),
    RemoveMap(i64, i32, String),
    ClearMap(i64, i32),
    Reduce(i64, i32, i64),
    ClearReducing(i64, i32),
    Aggregate(i64, i32, i64),
    MergeReducing(i64),
    /// Swap both stores through each other's savepoints (heap restores the LSM's and vice versa).
    Swap,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0i64..30;
    let ns = 0i32..3;
    prop_oneof![
        4 => (key.clone(), ns.clone(), any::<i64>()).prop_map(|(k, n, v)| Op::SetValue(k, n, v)),
        1 => (key.clone(), ns.clone()).prop_map(|(k, n)| Op::ClearValue(k, n)),
        3 => (key.clone(), ns.clone(), "[a-z,]{0,5}").prop_map(|(k, n, s)| Op::AddList(k, n, s)),
        1 => (key.clone(), ns.clone(), proptest::collection::vec("[a-z]{0,3}", 0..3))
            .prop_map(|(k, n, v)| Op::UpdateList(k, n, v)),
        3 => (key.clone(), ns.clone(), "[a-c]{0,2}", any::<i64>())
            .prop_map(|(k, n, u, v)| Op::PutMap(k, n, u, v)),
        1 => (key.clone(), ns.clone(), "[a-c]{0,2}").prop_map(|(k, n, u)| Op::RemoveMap(k, n, u)),
        1 => (key.clone(), ns.clone()).prop_map(|(k, n)| Op::ClearMap(k, n)),
        2 => (key.clone(), ns.clone(), -100i64..100).prop_map(|(k, n, v)| Op::Reduce(k, n, v)),
        1 => (key.clone(), ns.clone()).prop_map(|(k, n)| Op::ClearReducing(k, n)),
        2 => (key.clone(), ns.clone(), -100i64..100).prop_map(|(k, n, v)| Op::Aggregate(k, n, v)),
        1 => key.clone().prop_map(Op::MergeReducing),
        1 => Just(Op::Swap),
    ]
}

fn apply(st: &mut Store, op: &Op) {
    let (store, s) = (&mut st.store, &st.s);
    match op {
        Op::SetValue(k, n, v) => {
            store.set_current_key(k).unwrap();
            store.value_in(&s.value, n).unwrap().update(v).unwrap();
        }
        Op::ClearValue(k, n) => {
            store.set_current_key(k).unwrap();
            store.value_in(&s.value, n).unwrap().clear().unwrap();
        }
        Op::AddList(k, n, e) => {
            store.set_current_key(k).unwrap();
            store.list_in(&s.list, n).unwrap().add(e).unwrap();
        }
        Op::UpdateList(k, n, v) => {
            store.set_current_key(k).unwrap();
            store.list_in(&s.list, n).unwrap().update(v).unwrap();
        }
        Op::PutMap(k, n, u, v) => {
            store.set_current_key(k).unwrap();
            store.map_in(&s.map, n).unwrap().put(u, v).unwrap();
        }
        Op::RemoveMap(k, n, u) => {
            store.set_current_key(k).unwrap();
            store.map_in(&s.map, n).unwrap().remove(u).unwrap();
        }
        Op::ClearMap(k, n) => {
            store.set_current_key(k).unwrap();
            store.map_in(&s.map, n).unwrap().clear().unwrap();
        }
        Op::Reduce(k, n, v) => {
            store.set_current_key(k).unwrap();
            store.reducing_in(&s.reducing, n).unwrap().add(v).unwrap();
        }
        Op::ClearReducing(k, n) => {
            store.set_current_key(k).unwrap();
            store.reducing_in(&s.reducing, n).unwrap().clear().unwrap();
        }
        Op::Aggregate(k, n, v) => {
            store.set_current_key(k).unwrap();
            store
                .aggregating_in(&s.aggregating, n)
                .unwrap()
                .add(v)
                .unwrap();
        }
        Op::MergeReducing(k) => {
            store.set_current_key(k).unwrap();
            store
                .merge_reducing_namespaces(&s.reducing, &0, &[1, 2])
                .unwrap();
        }
        Op::Swap => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn heap_and_lsm_savepoints_are_byte_identical(ops in proptest::collection::vec(op(), 1..120)) {
        let mut heap = open(Kind::Heap, None, true);
        let mut lsm = open(Kind::Lsm, None, true);
        for op in &ops {
            if let Op::Swap = op {
                let hb = savepoint(&mut heap.store, Compression::None);
                let lb = savepoint(&mut lsm.store, Compression::None);
                prop_assert!(hb == lb, "savepoints differ before the swap");
                heap = open(Kind::Heap, Some(&lb), false);
                lsm = open(Kind::Lsm, Some(&hb), true);
                continue;
            }
            apply(&mut heap, op);
            apply(&mut lsm, op);
        }
        for compression in [Compression::None, Compression::Lz4] {
            let hb = savepoint(&mut heap.store, compression);
            let lb = savepoint(&mut lsm.store, compression);
            prop_assert!(hb == lb, "savepoints differ ({:?})", compression);
        }
        prop_assert_eq!(heap.store.num_entries().unwrap(), lsm.store.num_entries().unwrap());
    }
}

#[test]
fn demo_workload_savepoints_are_identical_on_heap_and_lsm() {
    let bytes: Vec<Vec<u8>> = KINDS
        .iter()
        .map(|k| {
            let mut store = demo::store(backend(*k, demo::config())).unwrap();
            let states = demo::register(&mut store).unwrap();
            for e in demo::events(7, 5000) {
                demo::process(&mut store, &states, &e).unwrap();
            }
            savepoint(&mut store, Compression::Lz4)
        })
        .collect();
    for b in &bytes[1..] {
        assert!(*b == bytes[0], "demo savepoints differ");
    }
}

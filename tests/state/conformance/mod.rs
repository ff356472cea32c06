//! The conformance suite: Flink's keyed-state behaviour (Flink's `StateBackendTestBase`), written once against
//! `StateBackend` and run against every backend by `conformance_suite!`.

#![allow(dead_code)]

use std::collections::BTreeMap;

use keyed_state::backend::{BackendConfig, StateBackend};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{IntSerializer, LongSerializer, StringSerializer};
use keyed_state::state::*;
use keyed_state::Error;

mod timers;
mod ttl;
#[allow(unused_imports)]
pub use timers::*;
#[allow(unused_imports)]
pub use ttl::*;

/// Creates a backend for a configuration.
pub type Factory = dyn Fn(BackendConfig) -> Box<dyn StateBackend>;

/// A read-modify-write cache that steps aside at the end of every window of three operations (whatever its
/// estimate: writing everything back, pending layers first) and back in at the next: consistency across
/// stepping, with entries dirty and layers pending.
pub const STEP_EVERY_FEW_OPS: keyed_state::backend::lsm::RmwCacheStepping =
    keyed_state::backend::lsm::RmwCacheStepping {
        window_ops: 3,
        aside_below: 2.0,
        back_above: -1.0,
    };

pub fn store_long(
    f: &Factory,
    max_p: u32,
    range: KeyGroupRange,
) -> KeyedStateStore<LongSerializer> {
    let cfg = KeyedStateStore::config_for(&LongSerializer, max_p, range);
    KeyedStateStore::new(f(cfg), LongSerializer).expect("store")
}

pub fn store_string(f: &Factory) -> KeyedStateStore<StringSerializer> {
    let cfg = KeyedStateStore::config_for(&StringSerializer, 128, KeyGroupRange::all(128));
    KeyedStateStore::new(f(cfg), StringSerializer).expect("store")
}

pub fn store_int(f: &Factory) -> KeyedStateStore<IntSerializer> {
    let cfg = KeyedStateStore::config_for(&IntSerializer, 10, KeyGroupRange::all(10));
    KeyedStateStore::new(f(cfg), IntSerializer).expect("store")
}

pub fn value_default_update_clear(f: &Factory) {
    // testValueStateNullUpdate / testValueStateDefaultValue
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer).with_default(42))
        .unwrap();
    s.set_current_key(&1).unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), Some(42));
    s.value(&v).unwrap().update(&1).unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), Some(1));
    s.set_current_key(&2).unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), Some(42));
    s.set_current_key(&1).unwrap();
    s.value(&v).unwrap().clear().unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), Some(42));
    s.value(&v).unwrap().update(&17).unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), Some(17));
    s.value(&v).unwrap().set(None).unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), Some(42));
    assert_eq!(s.num_entries().unwrap(), 0);
}

pub fn multiple_value_states_are_independent(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let a = s
        .register_value(ValueStateDescriptor::new("a", StringSerializer))
        .unwrap();
    let b = s
        .register_value(ValueStateDescriptor::new("b", IntSerializer))
        .unwrap();
    s.set_current_key(&7).unwrap();
    s.value(&a).unwrap().update(&"x".to_string()).unwrap();
    assert_eq!(s.value(&b).unwrap().get().unwrap(), None);
    s.value(&b).unwrap().update(&5).unwrap();
    assert_eq!(s.value(&a).unwrap().get().unwrap(), Some("x".to_string()));
    assert_eq!(s.value(&b).unwrap().get().unwrap(), Some(5));
}

pub fn num_entries_counts_and_clear_removes(f: &Factory) {
    // testNumStateEntries
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v = s
        .register_value(ValueStateDescriptor::new("v", StringSerializer))
        .unwrap();
    assert_eq!(s.num_entries().unwrap(), 0);
    s.set_current_key(&0).unwrap();
    s.value(&v).unwrap().update(&"a".into()).unwrap();
    s.value(&v).unwrap().update(&"b".into()).unwrap();
    assert_eq!(s.num_entries().unwrap(), 1);
    s.set_current_key(&42).unwrap();
    s.value(&v).unwrap().update(&"c".into()).unwrap();
    assert_eq!(s.num_entries().unwrap(), 2);
    s.value(&v).unwrap().clear().unwrap();
    assert_eq!(s.num_entries().unwrap(), 1);
    s.set_current_key(&0).unwrap();
    s.value(&v).unwrap().clear().unwrap();
    assert_eq!(s.num_entries().unwrap(), 0);
}

pub fn list_state_api_matrix(f: &Factory) {
    // testListStateAPIs
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let l = s
        .register_list(ListStateDescriptor::new("l", LongSerializer))
        .unwrap();
    s.set_current_key(&1).unwrap();
    assert_eq!(s.list(&l).unwrap().get().unwrap(), None);
    s.list(&l).unwrap().add(&17).unwrap();
    s.list(&l).unwrap().add(&11).unwrap();
    assert_eq!(s.list(&l).unwrap().get().unwrap(), Some(vec![17, 11]));
    s.list(&l).unwrap().update(&[]).unwrap();
    assert_eq!(s.list(&l).unwrap().get().unwrap(), None);
    s.list(&l).unwrap().update(&[10, 16]).unwrap();
    assert_eq!(s.list(&l).unwrap().get().unwrap(), Some(vec![10, 16]));
    s.set_current_key(&2).unwrap();
    s.list(&l).unwrap().add_all(&[]).unwrap();
    assert_eq!(s.list(&l).unwrap().get().unwrap(), None);
    s.list(&l).unwrap().add_all(&[3, 4]).unwrap();
    s.list(&l).unwrap().add_all(&[]).unwrap();
    s.list(&l).unwrap().add_all(&[5, 6]).unwrap();
    assert_eq!(s.list(&l).unwrap().get().unwrap(), Some(vec![3, 4, 5, 6]));
    s.list(&l).unwrap().update(&[1, 2]).unwrap();
    for x in [3, 2, 1] {
        s.list(&l).unwrap().add(&x).unwrap();
    }
    assert_eq!(
        s.list(&l).unwrap().get().unwrap(),
        Some(vec![1, 2, 3, 2, 1])
    );
    for k in [1, 2] {
        s.set_current_key(&k).unwrap();
        s.list(&l).unwrap().clear().unwrap();
    }
    assert_eq!(s.num_entries().unwrap(), 0);
}

pub fn list_keeps_insertion_order_of_strings(f: &Factory) {
    let mut s = store_string(f);
    let l = s
        .register_list(ListStateDescriptor::new("l", StringSerializer))
        .unwrap();
    s.set_current_key(&"k1".to_string()).unwrap();
    let items: Vec<String> = (0..50).map(|i| format!("item-{i},with,commas")).collect();
    for it in &items {
        s.list(&l).unwrap().add(it).unwrap();
    }
    assert_eq!(s.list(&l).unwrap().get().unwrap(), Some(items));
}

/// The five key patterns of `testListStateMerging` (values 11..55 spread over namespaces 1, 2, 3).
fn merge_patterns() -> Vec<Vec<(i32, i64)>> {
    vec![
        vec![(1, 11), (2, 22), (3, 33), (1, 44), (3, 55)],
        vec![(1, 11), (1, 22), (3, 33), (3, 44), (1, 55)],
        vec![],
        vec![(1, 11), (1, 22), (1, 33), (1, 44), (1, 55)],
        vec![(3, 11), (3, 22), (3, 33), (3, 44), (3, 55)],
    ]
}

pub fn list_namespace_merge_deletes_sources(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let l = s
        .register_list(ListStateDescriptor::new("l", LongSerializer).with_namespace(IntSerializer))
        .unwrap();
    for (key, pattern) in merge_patterns().into_iter().enumerate() {
        s.set_current_key(&(key as i64)).unwrap();
        for (ns, v) in &pattern {
            s.list_in(&l, ns).unwrap().add(v).unwrap();
        }
        s.merge_list_namespaces(&l, &1, &[2, 3]).unwrap();
        let got = s.list_in(&l, &1).unwrap().get().unwrap();
        if pattern.is_empty() {
            assert_eq!(got, None);
        } else {
            let mut got = got.unwrap();
            got.sort();
            assert_eq!(got, vec![11, 22, 33, 44, 55]);
        }
        assert_eq!(s.list_in(&l, &2).unwrap().get().unwrap(), None);
        assert_eq!(s.list_in(&l, &3).unwrap().get().unwrap(), None);
    }
    for key in 0..5i64 {
        s.set_current_key(&key).unwrap();
        s.list_in(&l, &1).unwrap().clear().unwrap();
    }
    assert_eq!(s.num_entries().unwrap(), 0);
}

pub fn reducing_and_aggregating_merge_to_165(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let r = s
        .register_reducing(
            ReducingStateDescriptor::new("r", LongSerializer, |a, b| a + b)
                .with_namespace(IntSerializer),
        )
        .unwrap();
    let a = s
        .register_aggregating(
            AggregatingStateDescriptor::new("a", SumAgg, LongSerializer)
                .with_namespace(IntSerializer),
        )
        .unwrap();
    for (key, pattern) in merge_patterns().into_iter().enumerate() {
        s.set_current_key(&(key as i64)).unwrap();
        for (ns, v) in &pattern {
            s.reducing_in(&r, ns).unwrap().add(v).unwrap();
            s.aggregating_in(&a, ns).unwrap().add(v).unwrap();
        }
        s.merge_reducing_namespaces(&r, &1, &[2, 3]).unwrap();
        s.merge_aggregating_namespaces(&a, &1, &[2, 3]).unwrap();
        let expect = if pattern.is_empty() { None } else { Some(165) };
        assert_eq!(s.reducing_in(&r, &1).unwrap().get().unwrap(), expect);
        assert_eq!(
            s.aggregating_in(&a, &1).unwrap().get().unwrap(),
            expect.map(|x| format!("sum={x}"))
        );
        s.reducing_in(&r, &1).unwrap().clear().unwrap();
        s.aggregating_in(&a, &1).unwrap().clear().unwrap();
    }
    assert_eq!(s.num_entries().unwrap(), 0);
}

/// Sums i64 inputs; the result is a string, to show IN, ACC and OUT may differ.
pub struct SumAgg;
impl AggregateFunction for SumAgg {
    type In = i64;
    type Acc = i64;
    type Out = String;
    fn create_accumulator(&self) -> i64 {
        0
    }
    fn add(&self, v: &i64, acc: i64) -> i64 {
        acc + v
    }
    fn get_result(&self, acc: &i64) -> String {
        format!("sum={acc}")
    }
    fn merge(&self, a: i64, b: i64) -> i64 {
        a + b
    }
}

pub fn reducing_add_get_clear(f: &Factory) {
    // testReducingStateAddAndGet
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let r = s
        .register_reducing(ReducingStateDescriptor::new("r", LongSerializer, |a, b| {
            a + b
        }))
        .unwrap();
    s.set_current_key(&1).unwrap();
    assert_eq!(s.reducing(&r).unwrap().get().unwrap(), None);
    s.reducing(&r).unwrap().add(&17).unwrap();
    s.reducing(&r).unwrap().add(&11).unwrap();
    assert_eq!(s.reducing(&r).unwrap().get().unwrap(), Some(28));
    s.set_current_key(&2).unwrap();
    assert_eq!(s.reducing(&r).unwrap().get().unwrap(), None);
    s.set_current_key(&1).unwrap();
    s.reducing(&r).unwrap().clear().unwrap();
    assert_eq!(s.reducing(&r).unwrap().get().unwrap(), None);
    s.reducing(&r).unwrap().add(&9).unwrap();
    assert_eq!(s.reducing(&r).unwrap().get().unwrap(), Some(9));
    s.reducing(&r).unwrap().clear().unwrap();
    assert_eq!(s.num_entries().unwrap(), 0);
}

/// A reduce function that is neither commutative nor associative: the result shows the order of the fold.
pub fn ordered(a: &i64, b: &i64) -> i64 {
    a.wrapping_mul(3).wrapping_add(*b)
}

/// Adds that are merge operands (where the backend has them) give what reading, folding and writing gives,
/// in add order, for any reduce function: interleaved with reads, clears, snapshots and savepoints, across
/// namespaces; and the savepoint is byte-identical to that of the same adds without operands.
pub fn reducing_operands_fold_in_add_order(f: &Factory) {
    let mut with = store_long(f, 128, KeyGroupRange::all(128));
    let mut without = store_long(f, 128, KeyGroupRange::all(128));
    let desc =
        || ReducingStateDescriptor::new("r", LongSerializer, ordered).with_namespace(IntSerializer);
    let agg = || {
        AggregatingStateDescriptor::new("a", SumAgg, LongSerializer).with_namespace(IntSerializer)
    };
    let (r1, a1) = (
        with.register_reducing(desc().with_merge_operands(OperandFolding::InOrder))
            .unwrap(),
        with.register_aggregating(agg().with_merge_operands(OperandFolding::Associative))
            .unwrap(),
    );
    let (r2, a2) = (
        without.register_reducing(desc()).unwrap(),
        without.register_aggregating(agg()).unwrap(),
    );
    let mut snapshots = Vec::new();
    for step in 0..600i64 {
        let key = step % 7;
        let ns = (step % 3) as i32;
        let v = step * 7 % 11 - 5;
        for (s, r, a) in [(&mut with, &r1, &a1), (&mut without, &r2, &a2)] {
            s.set_current_key(&key).unwrap();
            if step % 53 == 0 {
                s.reducing_in(r, &ns).unwrap().clear().unwrap();
                s.aggregating_in(a, &ns).unwrap().clear().unwrap();
            } else {
                s.reducing_in(r, &ns).unwrap().add(&v).unwrap();
                s.aggregating_in(a, &ns).unwrap().add(&v).unwrap();
            }
        }
        if step % 97 == 0 {
            snapshots.push(with.snapshot().unwrap());
        }
        if step % 41 == 0 {
            with.set_current_key(&key).unwrap();
            without.set_current_key(&key).unwrap();
            assert_eq!(
                with.reducing_in(&r1, &ns).unwrap().get().unwrap(),
                without.reducing_in(&r2, &ns).unwrap().get().unwrap(),
                "step {step}"
            );
        }
    }
    for key in 0..7i64 {
        with.set_current_key(&key).unwrap();
        without.set_current_key(&key).unwrap();
        for ns in 0..3i32 {
            assert_eq!(
                with.reducing_in(&r1, &ns).unwrap().get().unwrap(),
                without.reducing_in(&r2, &ns).unwrap().get().unwrap()
            );
            assert_eq!(
                with.aggregating_in(&a1, &ns).unwrap().get().unwrap(),
                without.aggregating_in(&a2, &ns).unwrap().get().unwrap()
            );
        }
    }
    assert_eq!(savepoint_bytes(&mut with), savepoint_bytes(&mut without));
    // Snapshots taken along the way still read their own point, folded.
    for snap in snapshots {
        savepoint_of_snapshot(&*snap);
    }
    // Namespace merging reads the folded values.
    for key in 0..7i64 {
        for (s, r, a) in [(&mut with, &r1, &a1), (&mut without, &r2, &a2)] {
            s.set_current_key(&key).unwrap();
            s.merge_reducing_namespaces(r, &0, &[1, 2]).unwrap();
            s.merge_aggregating_namespaces(a, &0, &[1, 2]).unwrap();
        }
    }
    assert_eq!(savepoint_bytes(&mut with), savepoint_bytes(&mut without));
    assert_eq!(with.num_entries().unwrap(), without.num_entries().unwrap());
}

/// A savepoint of state whose adds were operands restores into a store that adds with operands again (and
/// into one that does not): the values keep folding from where they were.
pub fn reducing_operands_survive_savepoint_and_restore(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let desc = || ReducingStateDescriptor::new("r", LongSerializer, ordered);
    let r = s
        .register_reducing(desc().with_merge_operands(OperandFolding::InOrder))
        .unwrap();
    for key in 0..20i64 {
        s.set_current_key(&key).unwrap();
        for v in 0..key {
            s.reducing(&r).unwrap().add(&v).unwrap();
        }
    }
    let sp = savepoint_of(&mut s);
    for operands in [true, false] {
        let mut t = store_long(f, 128, KeyGroupRange::all(128));
        t.restore(std::slice::from_ref(&sp)).unwrap();
        let d = match operands {
            true => desc().with_merge_operands(OperandFolding::Associative),
            false => desc(),
        };
        let r2 = t.register_reducing(d).unwrap();
        for key in 0..20i64 {
            t.set_current_key(&key).unwrap();
            t.reducing(&r2).unwrap().add(&100).unwrap();
            let expect = (0..key).fold(None, |acc: Option<i64>, v| {
                Some(acc.map_or(v, |a| ordered(&a, &v)))
            });
            let expect = Some(expect.map_or(100, |a| ordered(&a, &100)));
            assert_eq!(t.reducing(&r2).unwrap().get().unwrap(), expect, "key {key}");
        }
    }
}

pub fn map_state_crud_and_retain(f: &Factory) {
    // testMapState
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let m = s
        .register_map(MapStateDescriptor::new(
            "m",
            IntSerializer,
            StringSerializer,
        ))
        .unwrap();
    s.set_current_key(&1).unwrap();
    assert!(s.map(&m).unwrap().is_empty().unwrap());
    assert_eq!(
        s.map(&m)
            .unwrap()
            .entries()
            .collect::<keyed_state::Result<Vec<_>>>()
            .unwrap(),
        vec![]
    );
    s.map(&m).unwrap().put(&1, &"1".into()).unwrap();
    s.set_current_key(&2).unwrap();
    s.map(&m)
        .unwrap()
        .put_all(&[(2, "2".into()), (102, "102".into())])
        .unwrap();
    s.set_current_key(&3).unwrap();
    s.map(&m)
        .unwrap()
        .put_all(&[
            (103, "103".into()),
            (1031, "1031".into()),
            (1032, "1032".into()),
        ])
        .unwrap();
    assert_eq!(s.map(&m).unwrap().get(&1031).unwrap(), Some("1031".into()));
    assert!(s.map(&m).unwrap().contains(&103).unwrap());
    assert!(!s.map(&m).unwrap().contains(&104).unwrap());
    // Iterator remove of values whose length != 4, setValue on the rest.
    s.map(&m)
        .unwrap()
        .retain(|_, v| {
            if v.len() != 4 {
                return false;
            }
            v.push_str("_updated");
            true
        })
        .unwrap();
    assert_eq!(
        s.map(&m)
            .unwrap()
            .entries()
            .collect::<keyed_state::Result<Vec<_>>>()
            .unwrap(),
        vec![
            (1031, "1031_updated".to_string()),
            (1032, "1032_updated".to_string())
        ]
    );
    s.set_current_key(&1).unwrap();
    s.map(&m).unwrap().clear().unwrap();
    assert!(s.map(&m).unwrap().is_empty().unwrap());
    s.set_current_key(&2).unwrap();
    s.map(&m).unwrap().remove(&102).unwrap();
    assert_eq!(
        s.map(&m)
            .unwrap()
            .keys()
            .collect::<keyed_state::Result<Vec<_>>>()
            .unwrap(),
        vec![2]
    );
    assert_eq!(
        s.map(&m)
            .unwrap()
            .values()
            .collect::<keyed_state::Result<Vec<_>>>()
            .unwrap(),
        vec!["2".to_string()]
    );
    assert_eq!(s.num_entries().unwrap(), 3);
}

pub fn map_iterates_in_ascending_key_order(f: &Factory) {
    // testMapStateIteratorArbitraryAccess (non-negative Int keys: byte order = numeric order)
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let m = s
        .register_map(MapStateDescriptor::new("m", IntSerializer, LongSerializer))
        .unwrap();
    s.set_current_key(&9).unwrap();
    let mut keys: Vec<i32> = (0..4096).collect();
    keys.reverse();
    for k in &keys {
        s.map(&m).unwrap().put(k, &(*k as i64 * 2)).unwrap();
    }
    let got = s
        .map(&m)
        .unwrap()
        .keys()
        .collect::<keyed_state::Result<Vec<_>>>()
        .unwrap();
    assert_eq!(got, (0..4096).collect::<Vec<_>>());
    assert!(!s.map(&m).unwrap().is_empty().unwrap());
    for k in 0..4096 {
        s.map(&m).unwrap().remove(&k).unwrap();
    }
    assert!(s.map(&m).unwrap().is_empty().unwrap());
}

/// `StateBackend::map_scan_from` (the timer queues' seek) visits one map's entries from a user key on, in
/// ascending order, until told to stop; also for maps restored from a savepoint and not touched since.
pub fn map_scan_from_starts_at_the_bound(f: &Factory) {
    fn scan(b: &mut dyn StateBackend, key_ns: &[u8], from: &[u8], stop_after: usize) -> Vec<u8> {
        let mut got = Vec::new();
        b.map_scan_from(0, 0, key_ns, from, &mut |uk, v| {
            assert_eq!(v, &[uk[0], 7][..]);
            got.push(uk[0]);
            got.len() < stop_after
        })
        .unwrap();
        got
    }
    fn check(b: &mut dyn StateBackend) {
        let odd = |from: u8| (from..40).filter(|u| u % 2 == 1).collect::<Vec<u8>>();
        assert_eq!(scan(b, &[0, 2], &[3], 100), odd(3));
        assert_eq!(scan(b, &[0, 2], &[4], 100), odd(4));
        assert_eq!(scan(b, &[0, 1], &[], 100), odd(0));
        assert_eq!(scan(b, &[0, 3], &[39], 100), vec![39]);
        assert_eq!(scan(b, &[0, 3], &[40], 100), Vec::<u8>::new());
        assert_eq!(scan(b, &[0, 4], &[], 100), Vec::<u8>::new());
        assert_eq!(scan(b, &[0, 1], &[10], 2), vec![11, 13]);
    }
    let register = |s: &mut KeyedStateStore<LongSerializer>| {
        s.register_map(MapStateDescriptor::new("m", LongSerializer, LongSerializer))
            .unwrap();
    };
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    register(&mut s);
    // Key-group prefix 0 and one byte of key and namespace per map; user keys 1, 3, ..., 39.
    for key_ns in [&[0u8, 1][..], &[0, 2], &[0, 3]] {
        for uk in (1u8..40).step_by(2) {
            s.backend_mut()
                .map_put(0, 0, key_ns, &[uk], &[uk, 7])
                .unwrap();
        }
    }
    check(s.backend_mut());
    let sp = savepoint_of(&mut s);
    let mut t = store_long(f, 128, KeyGroupRange::all(128));
    register(&mut t);
    t.restore(&[sp]).unwrap();
    check(t.backend_mut());
}

pub fn maps_of_neighbouring_keys_do_not_mix(f: &Factory) {
    // String keys and String namespaces: ambiguous layout with length bytes; prefix scans must be exact.
    let mut s = store_string(f);
    let m = s
        .register_map(
            MapStateDescriptor::new("m", StringSerializer, LongSerializer)
                .with_namespace(StringSerializer),
        )
        .unwrap();
    let keys = ["a", "ab", "", "a\u{0}"];
    let nss = ["", "x", "xy"];
    for k in keys {
        s.set_current_key(&k.to_string()).unwrap();
        for (i, ns) in nss.iter().enumerate() {
            s.map_in(&m, &ns.to_string())
                .unwrap()
                .put(&format!("{k}/{ns}"), &(i as i64))
                .unwrap();
        }
    }
    for k in keys {
        s.set_current_key(&k.to_string()).unwrap();
        for (i, ns) in nss.iter().enumerate() {
            assert_eq!(
                s.map_in(&m, &ns.to_string())
                    .unwrap()
                    .entries()
                    .collect::<keyed_state::Result<Vec<_>>>()
                    .unwrap(),
                vec![(format!("{k}/{ns}"), i as i64)]
            );
        }
    }
}

/// A map of more entries than one batch of the map iterators (`MAP_BATCH`) streams in order, whole, through
/// `entries`, `keys` and `values`; an iterator dropped midway leaves the accessor usable; an error-free
/// stream after removals sees exactly what is left.
pub fn map_iterators_stream_past_a_batch(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let m = s
        .register_map(MapStateDescriptor::new(
            "m",
            LongSerializer,
            StringSerializer,
        ))
        .unwrap();
    let n = 3 * MAP_BATCH as i64 + 7;
    let mut model = BTreeMap::new();
    s.set_current_key(&5).unwrap();
    // Inserted in descending order: iteration order is the key order, not the insertion order.
    for k in (0..n).rev() {
        let v = format!("v{k}");
        s.map(&m).unwrap().put(&(k * 3), &v).unwrap();
        model.insert(k * 3, v);
    }
    // A neighbouring key's map is not part of the stream.
    s.set_current_key(&6).unwrap();
    s.map(&m).unwrap().put(&1, &"other".to_string()).unwrap();
    s.set_current_key(&5).unwrap();
    let want: Vec<(i64, String)> = model.clone().into_iter().collect();
    let got: Vec<(i64, String)> = s
        .map(&m)
        .unwrap()
        .entries()
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(got, want);
    let keys: Vec<i64> = s
        .map(&m)
        .unwrap()
        .keys()
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(keys, model.keys().copied().collect::<Vec<_>>());
    let values: Vec<String> = s
        .map(&m)
        .unwrap()
        .values()
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(values, model.values().cloned().collect::<Vec<_>>());
    // Partial iteration, then the same accessor writes and iterates again.
    let mut access = s.map(&m).unwrap();
    let first: Vec<(i64, String)> = access
        .entries()
        .take(MAP_BATCH + 1)
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(first, want[..MAP_BATCH + 1]);
    // The order is that of the serialized user keys: -1 (0xFF...) after every non-negative key.
    access.put(&-1, &"last".to_string()).unwrap();
    assert_eq!(
        access.entries().last().unwrap().unwrap(),
        (-1, "last".to_string())
    );
    access.remove(&-1).unwrap();
    // Every second entry removed: the stream resumes after the last key of each batch, whatever is gone.
    for k in model.keys().copied().step_by(2).collect::<Vec<_>>() {
        access.remove(&k).unwrap();
        model.remove(&k);
    }
    let got: Vec<(i64, String)> = access
        .entries()
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(got, model.into_iter().collect::<Vec<_>>());
    assert!(!access.is_empty().unwrap());
    access.clear().unwrap();
    assert!(access.is_empty().unwrap());
    assert_eq!(access.entries().count(), 0);
}

/// `keys` and `keys_and_namespaces` over keys of every key group: each key (pair) once, key group by key group
/// in the range's order, exactly the model's.
pub fn keys_stream_key_group_by_key_group(f: &Factory) {
    let mut s = store_long(f, 16, KeyGroupRange::new(2, 13));
    let v = s
        .register_value(
            ValueStateDescriptor::new("v", LongSerializer).with_namespace(StringSerializer),
        )
        .unwrap();
    let mut in_a = std::collections::BTreeSet::new();
    let mut pairs = std::collections::BTreeSet::new();
    for k in 0..3000i64 {
        if s.set_current_key(&k).is_err() {
            continue;
        }
        let ns = if k % 3 == 0 { "a" } else { "b" };
        s.value_in(&v, &ns.to_string()).unwrap().update(&k).unwrap();
        if ns == "a" {
            in_a.insert(k);
        }
        pairs.insert((k, ns.to_string()));
    }
    let got: Vec<i64> = s
        .keys(&v, &"a".to_string())
        .unwrap()
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(got.len(), in_a.len(), "each key once");
    assert_eq!(
        got.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        in_a
    );
    let groups: Vec<u16> = got.iter().map(|k| s.key_group_of(k).unwrap()).collect();
    assert!(
        groups.windows(2).all(|w| w[0] <= w[1]),
        "key group by key group"
    );
    let got: Vec<(i64, String)> = s
        .keys_and_namespaces(&v)
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(got.len(), pairs.len());
    assert_eq!(
        got.into_iter().collect::<std::collections::BTreeSet<_>>(),
        pairs
    );
    // Taking a few keys reads no further than it needs; the store is usable afterwards.
    let few: Vec<i64> = s
        .keys(&v, &"b".to_string())
        .unwrap()
        .take(3)
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(few.len(), 3);
    s.set_current_key(&few[0]).unwrap();
    assert_eq!(
        s.value_in(&v, &"b".to_string()).unwrap().get().unwrap(),
        Some(few[0])
    );
}

pub fn keys_per_namespace(f: &Factory) {
    // testGetKeys / testGetKeysAndNamespaces
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v = s
        .register_value(
            ValueStateDescriptor::new("v", LongSerializer).with_namespace(StringSerializer),
        )
        .unwrap();
    let m = s
        .register_map(
            MapStateDescriptor::new("m", IntSerializer, LongSerializer)
                .with_namespace(StringSerializer),
        )
        .unwrap();
    for k in 0..2000i64 {
        let ns = if k < 1000 { "ns1" } else { "ns2" }.to_string();
        s.set_current_key(&k).unwrap();
        s.value_in(&v, &ns).unwrap().update(&k).unwrap();
        for uk in 0..3 {
            s.map_in(&m, &ns).unwrap().put(&uk, &k).unwrap();
        }
    }
    let mut k1 = s
        .keys(&v, &"ns1".to_string())
        .unwrap()
        .collect::<keyed_state::Result<Vec<_>>>()
        .unwrap();
    k1.sort();
    assert_eq!(k1, (0..1000).collect::<Vec<_>>());
    let mut k2 = s
        .keys(&m, &"ns2".to_string())
        .unwrap()
        .collect::<keyed_state::Result<Vec<_>>>()
        .unwrap();
    k2.sort();
    assert_eq!(k2, (1000..2000).collect::<Vec<_>>());
    let pairs = s
        .keys_and_namespaces(&v)
        .collect::<keyed_state::Result<Vec<_>>>()
        .unwrap();
    assert_eq!(pairs.len(), 2000);
    let uniq: std::collections::BTreeSet<_> = pairs.into_iter().collect();
    assert_eq!(uniq.len(), 2000);
}

pub fn apply_to_all_keys_tolerates_changes(f: &Factory) {
    // testConcurrentModificationWithApplyToAllKeys
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let l = s
        .register_list(ListStateDescriptor::new("l", StringSerializer))
        .unwrap();
    for k in 0..100i64 {
        s.set_current_key(&k).unwrap();
        s.list(&l).unwrap().add(&format!("Hello{k}")).unwrap();
    }
    let l2 = l.clone();
    s.apply_to_all_keys(&l, &keyed_state::serializer::VoidNamespace, |st, k| {
        assert_eq!(st.list(&l2)?.get()?, Some(vec![format!("Hello{k}")]));
        st.list(&l2)?.clear()?;
        assert_eq!(st.list(&l2)?.get()?, None);
        st.list(&l2)?.add(&"x".to_string())?;
        st.list(&l2)?.clear()?;
        st.list(&l2)?.add(&format!("Hello_{k}"))?;
        Ok(())
    })
    .unwrap();
    for k in 0..100i64 {
        s.set_current_key(&k).unwrap();
        assert_eq!(
            s.list(&l).unwrap().get().unwrap(),
            Some(vec![format!("Hello_{k}")])
        );
    }
}

pub fn registering_a_name_twice_checks_kind_and_type(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    s.register_value(ValueStateDescriptor::new("x", LongSerializer))
        .unwrap();
    // Same kind and type: the same state.
    s.register_value(ValueStateDescriptor::new("x", LongSerializer))
        .unwrap();
    let e = s
        .register_list(ListStateDescriptor::new("x", LongSerializer))
        .err()
        .unwrap();
    assert!(matches!(e, Error::StateKindMismatch { .. }), "{e}");
    let e = s
        .register_value(ValueStateDescriptor::new("x", StringSerializer))
        .err()
        .unwrap();
    assert!(matches!(e, Error::StateTypeMismatch { .. }), "{e}");
    assert!(e.to_string().contains("'x'"));
}

pub fn key_outside_range_is_rejected(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::new(0, 63));
    // Key 0 is in key group 94 (Flink's vector).
    let e = s.set_current_key(&0).err().unwrap();
    assert!(
        matches!(e, Error::KeyGroupOutOfRange { key_group: 94, .. }),
        "{e}"
    );
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    assert!(matches!(s.value(&v).err().unwrap(), Error::NoCurrentKey));
}

/// Collects a snapshot's entries as (state name, key, value), key group by key group.
pub fn snapshot_entries(
    snap: &dyn keyed_state::backend::BackendSnapshot,
) -> BTreeMap<(String, Vec<u8>), Vec<u8>> {
    let mut out = BTreeMap::new();
    for (id, meta) in snap.states().iter().enumerate() {
        for kg in snap.config().key_group_range.iter() {
            let mut last: Option<Vec<u8>> = None;
            snap.visit(id, kg, &mut |k, v| {
                if let Some(prev) = &last {
                    assert!(prev.as_slice() < k, "entries must be sorted");
                }
                last = Some(k.to_vec());
                out.insert((meta.name.clone(), k.to_vec()), v.to_vec());
                Ok(())
            })
            .unwrap();
        }
    }
    out
}

pub fn snapshot_is_isolated_from_later_writes(f: &Factory) {
    // testAsyncSnapshot / testParallelAsyncSnapshots: snapshots see exactly the state at their point.
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    let l = s
        .register_list(ListStateDescriptor::new("l", LongSerializer))
        .unwrap();
    let m = s
        .register_map(MapStateDescriptor::new("m", IntSerializer, LongSerializer))
        .unwrap();
    for k in 0..10i64 {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&k).unwrap();
        s.list(&l).unwrap().add(&k).unwrap();
        s.map(&m).unwrap().put(&1, &k).unwrap();
    }
    let snap1 = s.snapshot().unwrap();
    let before = snapshot_entries(&*snap1);
    for k in 0..20i64 {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&(k + 1)).unwrap();
        s.list(&l).unwrap().add(&(k + 100)).unwrap();
        s.map(&m).unwrap().put(&2, &k).unwrap();
        s.map(&m).unwrap().remove(&1).unwrap();
    }
    let snap2 = s.snapshot().unwrap();
    // Encode snapshot 1 on another thread while the store keeps writing.
    let handle = std::thread::spawn(move || snapshot_entries(&*snap1));
    for k in 0..20i64 {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().clear().unwrap();
    }
    let after1 = handle.join().unwrap();
    assert_eq!(before, after1);
    assert_eq!(before.len(), 30);
    let e2 = snapshot_entries(&*snap2);
    assert_eq!(e2.len(), 60);
    s.set_current_key(&3).unwrap();
    assert_eq!(s.value(&v).unwrap().get().unwrap(), None);
    assert_eq!(s.list(&l).unwrap().get().unwrap(), Some(vec![3, 103]));
}

pub fn multi_get_equals_get(f: &Factory) {
    // A batch read returns, key by key and in order, what single reads return: values, lists (merged
    // appends on the LSM backend), cleared and absent entries, keys of several key groups, duplicates.
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    let l = s
        .register_list(ListStateDescriptor::new("l", LongSerializer))
        .unwrap();
    for k in 0..200i64 {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&(k * 7)).unwrap();
        s.list(&l).unwrap().add(&k).unwrap();
        if k % 3 == 0 {
            s.list(&l).unwrap().add(&(k + 1000)).unwrap();
        }
        if k % 5 == 0 {
            s.value(&v).unwrap().clear().unwrap();
        }
    }
    let ids: Vec<usize> = ["v", "l"]
        .iter()
        .map(|n| {
            s.backend_mut()
                .states()
                .iter()
                .position(|m| m.name == *n)
                .unwrap()
        })
        .collect();
    for id in ids {
        let b = s.backend_mut();
        let mut entries: Vec<(keyed_state::keygroup::KeyGroup, Vec<u8>)> = Vec::new();
        b.scan_state(id, &mut |kg, key, _| {
            entries.push((kg, key.to_vec()));
            true
        })
        .unwrap();
        assert!(entries.len() >= 150, "{} entries", entries.len());
        // Absent keys: every present key with a byte appended, in the same key group; and duplicates.
        let mut keys = entries.clone();
        keys.extend(entries.iter().take(50).map(|(kg, k)| {
            let mut k = k.clone();
            k.push(0xEE);
            (*kg, k)
        }));
        keys.extend(entries.iter().take(10).cloned());
        keys.reverse();
        let expected: Vec<Option<Vec<u8>>> = keys
            .iter()
            .map(|(kg, k)| b.get(id, *kg, k).unwrap().map(|v| v.to_vec()))
            .collect();
        assert!(expected.iter().filter(|v| v.is_none()).count() >= 50);
        let refs: Vec<(keyed_state::keygroup::KeyGroup, &[u8])> =
            keys.iter().map(|(kg, k)| (*kg, &k[..])).collect();
        let mut got: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        let mut seen = 0;
        b.multi_get(id, &refs, &mut |i, v| {
            got[i] = v.map(|v| v.to_vec());
            seen += 1;
        })
        .unwrap();
        assert_eq!(seen, keys.len());
        assert_eq!(got, expected);
    }
}

/// Instantiates every conformance test for one backend factory.
#[macro_export]
macro_rules! conformance_suite {
    ($modname:ident, $factory:expr) => {
        mod $modname {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;
            fn factory() -> Box<c::Factory> {
                Box::new($factory)
            }
            macro_rules! t {
                ($name:ident) => {
                    #[test]
                    fn $name() {
                        c::$name(&*factory());
                    }
                };
            }
            t!(value_default_update_clear);
            t!(multi_get_equals_get);
            t!(multiple_value_states_are_independent);
            t!(num_entries_counts_and_clear_removes);
            t!(list_state_api_matrix);
            t!(list_keeps_insertion_order_of_strings);
            t!(list_namespace_merge_deletes_sources);
            t!(reducing_and_aggregating_merge_to_165);
            t!(reducing_add_get_clear);
            t!(reducing_operands_fold_in_add_order);
            t!(reducing_operands_survive_savepoint_and_restore);
            t!(map_state_crud_and_retain);
            t!(map_iterates_in_ascending_key_order);
            t!(maps_of_neighbouring_keys_do_not_mix);
            t!(map_scan_from_starts_at_the_bound);
            t!(keys_per_namespace);
            t!(map_iterators_stream_past_a_batch);
            t!(keys_stream_key_group_by_key_group);
            t!(apply_to_all_keys_tolerates_changes);
            t!(registering_a_name_twice_checks_kind_and_type);
            t!(key_outside_range_is_rejected);
            t!(snapshot_is_isolated_from_later_writes);
            t!(two_snapshots_restore_their_own_point);
            t!(every_kind_survives_savepoint_and_restore);
            t!(restored_untouched_state_is_snapshotted_again);
            t!(empty_backend_savepoint_restores);
            t!(restore_rejects_wrong_key_serializer_and_max_parallelism);
            t!(restore_rejects_incompatible_value_serializer_before_loading);
            t!(value_serializer_migrates_on_restore);
            t!(ttl_exact_expiration_on_write);
            t!(ttl_relaxed_expiration_on_write);
            t!(ttl_exact_expiration_on_read);
            t!(ttl_relaxed_expiration_on_read);
            t!(ttl_expiration_timestamp_overflow);
            t!(ttl_snapshot_change_restore);
            t!(ttl_merge_namespaces);
            t!(ttl_snapshot_cleanup_drops_expired_state);
            t!(ttl_cannot_be_toggled_across_restore);
            t!(ttl_value_bytes_are_flinks_ttl_value);
            t!(ttl_map_iteration_removes_expired_entries_across_batches);
            t!(ttl_map_read_whole_twice_drops_entries_expiring_between);
            t!(timers_key_grouped_priority_queue_walkthrough);
            t!(timers_queue_peek_poll_order_and_set_semantics);
            t!(timers_fire_in_order_with_the_current_key_set);
            t!(timers_survive_savepoint_and_rescale);
        }
    };
}

// ------------------------------------------------------------------ savepoints and restore

use keyed_state::savepoint::{encode, Compression, SavepointReader, WriteOptions};

/// Encodes a store's snapshot into an in-memory savepoint.
pub fn savepoint_of<K: keyed_state::serializer::KeySerializer>(
    s: &mut KeyedStateStore<K>,
) -> SavepointReader {
    let snap = s.snapshot().unwrap();
    savepoint_of_snapshot(&*snap)
}

/// A store's savepoint bytes (uncompressed).
pub fn savepoint_bytes<K: keyed_state::serializer::KeySerializer>(
    s: &mut KeyedStateStore<K>,
) -> Vec<u8> {
    let snap = s.snapshot().unwrap();
    let mut bytes = Vec::new();
    encode(
        &*snap,
        &WriteOptions {
            compression: Compression::None,
        },
        &mut bytes,
    )
    .unwrap();
    bytes
}

pub fn savepoint_of_snapshot(snap: &dyn keyed_state::backend::BackendSnapshot) -> SavepointReader {
    let mut bytes = Vec::new();
    encode(
        snap,
        &WriteOptions {
            compression: Compression::None,
        },
        &mut bytes,
    )
    .unwrap();
    SavepointReader::from_bytes(bytes).unwrap()
}

pub fn two_snapshots_restore_their_own_point(f: &Factory) {
    // testValueState: snapshot 1, more writes, snapshot 2; each restores its own contents.
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v = s
        .register_value(ValueStateDescriptor::new("v", StringSerializer))
        .unwrap();
    for (k, x) in [(1, "1"), (2, "2")] {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&x.to_string()).unwrap();
    }
    let snap1 = s.snapshot().unwrap();
    for (k, x) in [(1, "u1"), (2, "u2"), (3, "u3")] {
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&x.to_string()).unwrap();
    }
    let snap2 = s.snapshot().unwrap();
    let (sp1, sp2) = (
        savepoint_of_snapshot(&*snap1),
        savepoint_of_snapshot(&*snap2),
    );
    for (sp, expect) in [
        (sp1, [Some("1"), Some("2"), None]),
        (sp2, [Some("u1"), Some("u2"), Some("u3")]),
    ] {
        let mut r = store_long(f, 128, KeyGroupRange::all(128));
        let v = r
            .register_value(ValueStateDescriptor::new("v", StringSerializer))
            .unwrap();
        r.restore(&[sp]).unwrap();
        for (k, e) in [1i64, 2, 3].iter().zip(expect) {
            r.set_current_key(k).unwrap();
            assert_eq!(r.value(&v).unwrap().get().unwrap(), e.map(String::from));
        }
    }
}

pub fn every_kind_survives_savepoint_and_restore(f: &Factory) {
    let mut s = store_string(f);
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    let l = s
        .register_list(
            ListStateDescriptor::new("l", StringSerializer).with_namespace(IntSerializer),
        )
        .unwrap();
    let m = s
        .register_map(
            MapStateDescriptor::new("m", StringSerializer, LongSerializer)
                .with_namespace(StringSerializer),
        )
        .unwrap();
    let r = s
        .register_reducing(ReducingStateDescriptor::new("r", LongSerializer, |a, b| {
            *a.max(b)
        }))
        .unwrap();
    let a = s
        .register_aggregating(AggregatingStateDescriptor::new("a", SumAgg, LongSerializer))
        .unwrap();
    for i in 0..200i64 {
        let key = format!("user-{i}");
        s.set_current_key(&key).unwrap();
        s.value(&v).unwrap().update(&i).unwrap();
        s.list_in(&l, &((i % 3) as i32))
            .unwrap()
            .add_all(&[format!("a{i}"), format!("b{i}")])
            .unwrap();
        s.map_in(&m, &"ns".to_string())
            .unwrap()
            .put(&format!("k{i}"), &i)
            .unwrap();
        s.map_in(&m, &"empty".to_string())
            .unwrap()
            .put(&"gone".into(), &1)
            .unwrap();
        s.map_in(&m, &"empty".to_string())
            .unwrap()
            .remove(&"gone".into())
            .unwrap();
        s.reducing(&r).unwrap().add(&i).unwrap();
        s.aggregating(&a).unwrap().add(&i).unwrap();
    }
    let sp = savepoint_of(&mut s);
    let mut t = store_string(f);
    t.restore(&[sp]).unwrap();
    let v = t
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    let l = t
        .register_list(
            ListStateDescriptor::new("l", StringSerializer).with_namespace(IntSerializer),
        )
        .unwrap();
    let m = t
        .register_map(
            MapStateDescriptor::new("m", StringSerializer, LongSerializer)
                .with_namespace(StringSerializer),
        )
        .unwrap();
    let r = t
        .register_reducing(ReducingStateDescriptor::new("r", LongSerializer, |a, b| {
            *a.max(b)
        }))
        .unwrap();
    let a = t
        .register_aggregating(AggregatingStateDescriptor::new("a", SumAgg, LongSerializer))
        .unwrap();
    for i in 0..200i64 {
        t.set_current_key(&format!("user-{i}")).unwrap();
        assert_eq!(t.value(&v).unwrap().get().unwrap(), Some(i));
        assert_eq!(
            t.list_in(&l, &((i % 3) as i32)).unwrap().get().unwrap(),
            Some(vec![format!("a{i}"), format!("b{i}")])
        );
        assert_eq!(
            t.list_in(&l, &(((i + 1) % 3) as i32))
                .unwrap()
                .get()
                .unwrap(),
            None
        );
        assert_eq!(
            t.map_in(&m, &"ns".to_string())
                .unwrap()
                .entries()
                .collect::<keyed_state::Result<Vec<_>>>()
                .unwrap(),
            vec![(format!("k{i}"), i)]
        );
        assert!(t
            .map_in(&m, &"empty".to_string())
            .unwrap()
            .is_empty()
            .unwrap());
        assert_eq!(t.reducing(&r).unwrap().get().unwrap(), Some(i));
        assert_eq!(
            t.aggregating(&a).unwrap().get().unwrap(),
            Some(format!("sum={i}"))
        );
    }
    assert_eq!(t.num_entries().unwrap(), s.num_entries().unwrap());
}

pub fn restored_untouched_state_is_snapshotted_again(f: &Factory) {
    // testSnapshotNonAccessedState
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let m = s
        .register_map(MapStateDescriptor::new(
            "m",
            IntSerializer,
            StringSerializer,
        ))
        .unwrap();
    s.set_current_key(&5).unwrap();
    for i in 0..3 {
        s.map(&m).unwrap().put(&i, &format!("v{i}")).unwrap();
    }
    let sp = savepoint_of(&mut s);
    let mut t = store_long(f, 128, KeyGroupRange::all(128));
    t.restore(&[sp]).unwrap();
    let sp2 = savepoint_of(&mut t); // never registered, never touched
    let mut u = store_long(f, 128, KeyGroupRange::all(128));
    u.restore(&[sp2]).unwrap();
    let m = u
        .register_map(MapStateDescriptor::new(
            "m",
            IntSerializer,
            StringSerializer,
        ))
        .unwrap();
    u.set_current_key(&5).unwrap();
    assert_eq!(
        u.map(&m)
            .unwrap()
            .entries()
            .collect::<keyed_state::Result<Vec<_>>>()
            .unwrap()
            .len(),
        3
    );
}

pub fn empty_backend_savepoint_restores(f: &Factory) {
    // testEmptyStateCheckpointing
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let sp = savepoint_of(&mut s);
    assert_eq!(sp.key_groups().len(), 0);
    let mut t = store_long(f, 128, KeyGroupRange::all(128));
    let summary = t.restore(&[sp]).unwrap();
    assert_eq!(summary.entries, 0);
    assert_eq!(t.num_entries().unwrap(), 0);
}

pub fn restore_rejects_wrong_key_serializer_and_max_parallelism(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .unwrap();
    s.set_current_key(&1).unwrap();
    s.value(&v).unwrap().update(&1).unwrap();
    let bytes = {
        let snap = s.snapshot().unwrap();
        let mut b = Vec::new();
        encode(&*snap, &WriteOptions::default(), &mut b).unwrap();
        b
    };
    let mut t = store_string(f);
    let e = t
        .restore(&[SavepointReader::from_bytes(bytes.clone()).unwrap()])
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::IncompatibleSerializer { role: "key", .. }),
        "{e}"
    );
    let mut u = store_long(f, 256, KeyGroupRange::all(256));
    let e = u
        .restore(&[SavepointReader::from_bytes(bytes).unwrap()])
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            Error::MaxParallelismMismatch {
                savepoint: 128,
                backend: 256
            }
        ),
        "{e}"
    );
    assert_eq!(u.num_entries().unwrap(), 0);
}

pub fn restore_rejects_incompatible_value_serializer_before_loading(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v = s
        .register_value(ValueStateDescriptor::new("name", StringSerializer))
        .unwrap();
    let c = s
        .register_value(ValueStateDescriptor::new("count", LongSerializer))
        .unwrap();
    s.set_current_key(&1).unwrap();
    s.value(&v).unwrap().update(&"x".into()).unwrap();
    s.value(&c).unwrap().update(&7).unwrap();
    let snap = s.snapshot().unwrap();
    // Registered before the restore: checked before anything loads.
    let mut t = store_long(f, 128, KeyGroupRange::all(128));
    t.register_value(ValueStateDescriptor::new("name", LongSerializer))
        .unwrap();
    let e = t.restore(&[savepoint_of_snapshot(&*snap)]).err().unwrap();
    let msg = e.to_string();
    assert!(
        matches!(e, Error::IncompatibleSerializer { role: "value", .. }),
        "{msg}"
    );
    assert!(
        msg.contains("'name'")
            && msg.contains("StringSerializer")
            && msg.contains("LongSerializer"),
        "{msg}"
    );
    assert_eq!(
        t.num_entries().unwrap(),
        0,
        "nothing may load when a check fails"
    );
    // Registered after the restore: checked at registration.
    let mut u = store_long(f, 128, KeyGroupRange::all(128));
    u.restore(&[savepoint_of_snapshot(&*snap)]).unwrap();
    let e = u
        .register_value(ValueStateDescriptor::new("name", IntSerializer))
        .err()
        .unwrap();
    assert!(matches!(e, Error::IncompatibleSerializer { .. }), "{e}");
    let e = u
        .register_list(ListStateDescriptor::new("count", LongSerializer))
        .err()
        .unwrap();
    assert!(matches!(e, Error::StateKindMismatch { .. }), "{e}");
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct ProfileV1 {
    pub name: String,
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct ProfileV2 {
    pub name: String,
    pub visits: u64,
}

pub fn value_serializer_migrates_on_restore(f: &Factory) {
    use keyed_state::serializer::SerdeSerializer;
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let v1 = SerdeSerializer::<ProfileV1>::new("Profile", 1);
    let p = s
        .register_value(ValueStateDescriptor::new("profile", v1.clone()))
        .unwrap();
    let l = s
        .register_list(ListStateDescriptor::new("history", v1.clone()))
        .unwrap();
    let m = s
        .register_map(MapStateDescriptor::new("by-page", IntSerializer, v1))
        .unwrap();
    for k in 0..50i64 {
        s.set_current_key(&k).unwrap();
        let prof = ProfileV1 {
            name: format!("u{k}"),
        };
        s.value(&p).unwrap().update(&prof).unwrap();
        s.list(&l)
            .unwrap()
            .add_all(&[prof.clone(), prof.clone()])
            .unwrap();
        s.map(&m).unwrap().put(&(k as i32), &prof).unwrap();
    }
    let snap = s.snapshot().unwrap();
    let v2 = || {
        SerdeSerializer::<ProfileV2>::new("Profile", 2).with_serde_migration::<ProfileV1>(
            1,
            |old| ProfileV2 {
                name: old.name,
                visits: 0,
            },
        )
    };
    for register_first in [true, false] {
        let mut t = store_long(f, 128, KeyGroupRange::all(128));
        let handles = |t: &mut KeyedStateStore<LongSerializer>| {
            (
                t.register_value(ValueStateDescriptor::new("profile", v2()))
                    .unwrap(),
                t.register_list(ListStateDescriptor::new("history", v2()))
                    .unwrap(),
                t.register_map(MapStateDescriptor::new("by-page", IntSerializer, v2()))
                    .unwrap(),
            )
        };
        let (p2, l2, m2) = if register_first {
            let h = handles(&mut t);
            let summary = t.restore(&[savepoint_of_snapshot(&*snap)]).unwrap();
            assert_eq!(summary.migrated_states.len(), 3);
            h
        } else {
            t.restore(&[savepoint_of_snapshot(&*snap)]).unwrap();
            handles(&mut t)
        };
        for k in 0..50i64 {
            t.set_current_key(&k).unwrap();
            let want = ProfileV2 {
                name: format!("u{k}"),
                visits: 0,
            };
            assert_eq!(t.value(&p2).unwrap().get().unwrap(), Some(want.clone()));
            assert_eq!(
                t.list(&l2).unwrap().get().unwrap(),
                Some(vec![want.clone(), want.clone()])
            );
            assert_eq!(t.map(&m2).unwrap().get(&(k as i32)).unwrap(), Some(want));
        }
        // The migrated state snapshots with the new serializer.
        let sp = savepoint_of(&mut t);
        assert_eq!(sp.header().states[0].value_serializer.version, 2);
    }
    // A serializer that cannot read version 1 is incompatible.
    let mut u = store_long(f, 128, KeyGroupRange::all(128));
    u.restore(&[savepoint_of_snapshot(&*snap)]).unwrap();
    let e = u
        .register_value(ValueStateDescriptor::new(
            "profile",
            SerdeSerializer::<ProfileV2>::new("Profile", 2),
        ))
        .err()
        .unwrap();
    assert!(matches!(e, Error::IncompatibleSerializer { .. }), "{e}");
}

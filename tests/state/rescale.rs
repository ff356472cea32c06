//! Rescaling by key-group ranges (Flink's `testKeyGroupSnapshotRestore*`): 4→2, 2→4, 2→2, 15→77, 77→15 at
//! max parallelism 128. Every key group gets its own state and one key; after restoring at the new
//! parallelism, every target instance finds exactly the key groups it owns.

use crate::conformance;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::keygroup::{
    java_long_hash, key_group_for_hash, key_group_range_for_operator, KeyGroupRange,
};
use keyed_state::savepoint::SavepointReader;
use keyed_state::serializer::{LongSerializer, StringSerializer};
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};

const MAX_P: u32 = 128;

fn store(range: KeyGroupRange) -> KeyedStateStore<LongSerializer> {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap()
}

/// A key whose key group is `kg` (searching from a per-kg start so keys differ between runs of the loop).
fn key_for(kg: u16) -> i64 {
    (0i64..)
        .map(|i| i * 7919 + kg as i64)
        .find(|k| key_group_for_hash(java_long_hash(*k), MAX_P) == kg)
        .unwrap()
}

fn rescale(from: u32, to: u32) {
    let mut savepoints: Vec<SavepointReader> = Vec::new();
    for i in 0..from {
        let range = key_group_range_for_operator(MAX_P, from, i).unwrap();
        let mut s = store(range);
        for kg in range.iter() {
            let st = s
                .register_value(ValueStateDescriptor::new(
                    format!("state-{kg}"),
                    StringSerializer,
                ))
                .unwrap();
            s.set_current_key(&key_for(kg)).unwrap();
            s.value(&st).unwrap().update(&format!("{i}:{kg}")).unwrap();
        }
        savepoints.push(conformance::savepoint_of(&mut s));
    }
    let mut seen = 0;
    for j in 0..to {
        let range = key_group_range_for_operator(MAX_P, to, j).unwrap();
        let mut t = store(range);
        let summary = t.restore(&savepoints).unwrap();
        assert_eq!(
            summary.entries as usize,
            range.len(),
            "instance {j} of {to}"
        );
        for kg in range.iter() {
            let owner = (0..from)
                .find(|i| {
                    key_group_range_for_operator(MAX_P, from, *i)
                        .unwrap()
                        .contains(kg)
                })
                .unwrap();
            let st = t
                .register_value(ValueStateDescriptor::new(
                    format!("state-{kg}"),
                    StringSerializer,
                ))
                .unwrap();
            t.set_current_key(&key_for(kg)).unwrap();
            assert_eq!(
                t.value(&st).unwrap().get().unwrap(),
                Some(format!("{owner}:{kg}"))
            );
            seen += 1;
        }
        assert_eq!(t.num_entries().unwrap() as usize, range.len());
    }
    assert_eq!(seen, MAX_P as usize);
}

#[test]
fn scale_down_4_to_2() {
    rescale(4, 2);
}

#[test]
fn scale_up_2_to_4() {
    rescale(2, 4);
}

#[test]
fn no_rescale_2_to_2() {
    rescale(2, 2);
}

#[test]
fn scale_up_uneven_15_to_77() {
    rescale(15, 77);
}

#[test]
fn scale_down_uneven_77_to_15() {
    rescale(77, 15);
}

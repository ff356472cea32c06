//! The timer service against a `BTreeSet` model, with savepoints, restores and rescales across the heap
//! and LSM backends; and savepoints with timers byte-identical across backends.

use std::collections::BTreeSet;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::savepoint::{encode, Compression, SavepointReader, WriteOptions};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::*;
use proptest::prelude::*;

const MAX_P: u32 = 32;

type Store = KeyedStateStore<LongSerializer>;

fn backend(lsm: bool, range: KeyGroupRange) -> Box<dyn StateBackend> {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    if lsm {
        Box::new(LsmBackend::temp_with(cfg, LsmBackend::small_options()).unwrap())
    } else {
        Box::new(HeapBackend::new(cfg).unwrap())
    }
}

struct Instance {
    s: Store,
    svc: TimerService<LongSerializer>,
    range: KeyGroupRange,
}

fn instance(lsm: bool, range: KeyGroupRange, from: &[SavepointReader]) -> Instance {
    let mut s = KeyedStateStore::new(backend(lsm, range), LongSerializer).unwrap();
    let svc = s
        .register_timer_service("user-timers", LongSerializer)
        .unwrap();
    if !from.is_empty() {
        s.restore(from).unwrap();
    }
    Instance { s, svc, range }
}

fn savepoint_bytes(s: &mut Store) -> Vec<u8> {
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

#[derive(Debug, Clone)]
enum Op {
    Register { key: i64, ns: i64, ts: i64 },
    Delete { key: i64, ns: i64, ts: i64 },
    Advance(i64),
    Rescale { parallelism: u32, lsm: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0i64..40, 0i64..3, -20i64..100).prop_map(|(key, ns, ts)| Op::Register { key, ns, ts }),
        2 => (0i64..40, 0i64..3, -20i64..100).prop_map(|(key, ns, ts)| Op::Delete { key, ns, ts }),
        2 => (-30i64..110).prop_map(Op::Advance),
        1 => (1u32..4, any::<bool>()).prop_map(|(parallelism, lsm)| Op::Rescale { parallelism, lsm }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn timer_service_matches_a_btreeset_model(ops in proptest::collection::vec(op(), 1..80)) {
        // Model: the queued (timestamp, key, namespace) timers and the watermark.
        let mut model: BTreeSet<(i64, i64, i64)> = BTreeSet::new();
        let mut watermark = i64::MIN;
        let mut cluster = vec![instance(false, KeyGroupRange::all(MAX_P), &[])];
        let owner = |cluster: &[Instance], key: i64| -> usize {
            let kg = cluster[0].s.key_group_of(&key).unwrap();
            cluster.iter().position(|i| i.range.contains(kg)).unwrap()
        };
        for op in ops {
            match op {
                Op::Register { key, ns, ts } => {
                    let i = owner(&cluster, key);
                    let inst = &mut cluster[i];
                    inst.s.set_current_key(&key).unwrap();
                    inst.s.register_event_time_timer(&inst.svc, &ns, ts).unwrap();
                    model.insert((ts, key, ns));
                }
                Op::Delete { key, ns, ts } => {
                    let i = owner(&cluster, key);
                    let inst = &mut cluster[i];
                    inst.s.set_current_key(&key).unwrap();
                    inst.s.delete_event_time_timer(&inst.svc, &ns, ts).unwrap();
                    model.remove(&(ts, key, ns));
                }
                Op::Advance(t) => {
                    watermark = watermark.max(t);
                    let due: Vec<(i64, i64, i64)> =
                        model.iter().copied().filter(|e| e.0 <= watermark).collect();
                    for e in &due {
                        model.remove(e);
                    }
                    let mut all = Vec::new();
                    for inst in cluster.iter_mut() {
                        let mut fired = Vec::new();
                        let range = inst.range;
                        inst.s.advance_watermark(&inst.svc, watermark, |s, t| {
                            assert!(range.contains(s.current_key_group().unwrap()));
                            assert_eq!(s.current_key().unwrap(), Some(t.key));
                            fired.push((t.timestamp, t.key, t.namespace));
                            Ok(())
                        }).unwrap();
                        // Each instance fires its own due timers in order.
                        let mut sorted = fired.clone();
                        sorted.sort();
                        prop_assert_eq!(&fired, &sorted);
                        all.extend(fired);
                    }
                    all.sort();
                    prop_assert_eq!(all, due);
                }
                Op::Rescale { parallelism, lsm } => {
                    let sps: Vec<SavepointReader> = cluster
                        .iter_mut()
                        .map(|i| SavepointReader::from_bytes(savepoint_bytes(&mut i.s)).unwrap())
                        .collect();
                    cluster = (0..parallelism)
                        .map(|i| {
                            let range = key_group_range_for_operator(MAX_P, parallelism, i).unwrap();
                            instance(lsm, range, &sps)
                        })
                        .collect();
                }
            }
            let count: u64 = cluster
                .iter_mut()
                .map(|i| i.s.timer_count(&i.svc.event).unwrap())
                .sum();
            prop_assert_eq!(count, model.len() as u64);
        }
    }
}

#[test]
fn savepoints_with_timers_are_byte_identical_across_backends() {
    let mut bytes = Vec::new();
    for lsm in [false, true] {
        let mut inst = instance(lsm, KeyGroupRange::all(MAX_P), &[]);
        let count = inst
            .s
            .register_value(ValueStateDescriptor::new("count", LongSerializer))
            .unwrap();
        for k in 0..500i64 {
            inst.s.set_current_key(&k).unwrap();
            inst.s.value(&count).unwrap().update(&k).unwrap();
            inst.s
                .register_event_time_timer(&inst.svc, &(k % 7), 10_000 - k)
                .unwrap();
            inst.s
                .register_processing_time_timer(&inst.svc, &0, k)
                .unwrap();
        }
        // Fire some so the queues are not as written.
        inst.s
            .advance_watermark(&inst.svc, 9_600, |_, _| Ok(()))
            .unwrap();
        bytes.push(savepoint_bytes(&mut inst.s));
    }
    assert_eq!(bytes[0], bytes[1], "heap and LSM savepoints differ");
}

#[test]
fn firing_through_long_key_groups_with_registrations_and_deletes_in_between_matches_a_model() {
    // Thousands of timers in few key groups (several cached batches per key group), while firing: new
    // timers inside and beyond each key group's cached range, and deletes of queued timers.
    for lsm in [false, true] {
        let mut inst = instance(lsm, KeyGroupRange::all(MAX_P), &[]);
        let (s, svc) = (&mut inst.s, &inst.svc);
        let mut model: BTreeSet<(i64, i64, i64)> = BTreeSet::new();
        let mut x = 7u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..5000 {
            let (key, ts) = ((next() % 40) as i64, (next() % 10_000) as i64);
            s.set_current_key(&key).unwrap();
            s.register_event_time_timer(svc, &0, ts).unwrap();
            model.insert((ts, key, 0));
        }
        for step in 1..=20i64 {
            let wm = step * 500;
            let mut fired = Vec::new();
            s.advance_watermark(svc, wm, |_, t| {
                fired.push((t.timestamp, t.key, t.namespace));
                Ok(())
            })
            .unwrap();
            let due: Vec<(i64, i64, i64)> = model.iter().copied().filter(|t| t.0 <= wm).collect();
            for t in &due {
                model.remove(t);
            }
            // Fired in timestamp order; the same set as the model's due timers.
            assert!(
                fired.windows(2).all(|w| w[0].0 <= w[1].0),
                "lsm={lsm} step {step}"
            );
            let mut sorted = fired.clone();
            sorted.sort();
            assert_eq!(sorted, due, "lsm={lsm} step {step}");
            for _ in 0..200 {
                let (key, ts) = ((next() % 40) as i64, wm + 1 + (next() % 4000) as i64);
                s.set_current_key(&key).unwrap();
                if next() % 3 == 0 {
                    if let Some(&(ts, key, ns)) = model.range((ts, key, 0)..).next() {
                        s.set_current_key(&key).unwrap();
                        s.delete_event_time_timer(svc, &ns, ts).unwrap();
                        model.remove(&(ts, key, ns));
                    }
                } else {
                    s.register_event_time_timer(svc, &0, ts).unwrap();
                    model.insert((ts, key, 0));
                }
            }
        }
        let mut rest = Vec::new();
        s.advance_watermark(svc, i64::MAX, |_, t| {
            rest.push((t.timestamp, t.key, t.namespace));
            Ok(())
        })
        .unwrap();
        rest.sort();
        assert_eq!(rest, model.into_iter().collect::<Vec<_>>(), "lsm={lsm}");
    }
}

//! Model test: random operation sequences against a `BTreeMap` model, including snapshots, restores and
//! rescaling. The job runs at a parallelism of 1 to 4 instances (each a store over its key-group range);
//! keys are routed to their owner as Flink routes them.

mod conformance;

use std::collections::BTreeMap;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::keygroup::{key_group_range_for_operator, operator_index_for_key_group};
use keyed_state::savepoint::SavepointReader;
use keyed_state::serializer::{IntSerializer, LongSerializer, StringSerializer};
use keyed_state::state::*;
use proptest::prelude::*;

const MAX_P: u32 = 16;

#[derive(Debug, Clone)]
enum Op {
    SetValue(i64, i32, i64),
    ClearValue(i64, i32),
    AddList(i64, String),
    UpdateList(i64, Vec<String>),
    PutMap(i64, i32, i64),
    RemoveMap(i64, i32),
    ClearMap(i64),
    /// Take a savepoint of every instance (kept as the latest).
    Snapshot,
    /// Restore the latest savepoint at a new parallelism (and the model as it was then).
    Restore(u32),
    /// Snapshot and restore at a new parallelism right away (rescale).
    Rescale(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0i64..40;
    prop_oneof![
        4 => (key.clone(), 0i32..3, any::<i64>()).prop_map(|(k, n, v)| Op::SetValue(k, n, v)),
        1 => (key.clone(), 0i32..3).prop_map(|(k, n)| Op::ClearValue(k, n)),
        3 => (key.clone(), "[a-z,]{0,6}").prop_map(|(k, s)| Op::AddList(k, s)),
        1 => (key.clone(), proptest::collection::vec("[a-z]{0,3}", 0..3)).prop_map(|(k, v)| Op::UpdateList(k, v)),
        3 => (key.clone(), -5i32..5, any::<i64>()).prop_map(|(k, u, v)| Op::PutMap(k, u, v)),
        1 => (key.clone(), -5i32..5).prop_map(|(k, u)| Op::RemoveMap(k, u)),
        1 => key.prop_map(Op::ClearMap),
        1 => Just(Op::Snapshot),
        1 => (1u32..5).prop_map(Op::Restore),
        1 => (1u32..5).prop_map(Op::Rescale),
    ]
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    values: BTreeMap<(i64, i32), i64>,
    lists: BTreeMap<i64, Vec<String>>,
    maps: BTreeMap<i64, BTreeMap<i32, i64>>,
}

struct Instance {
    store: KeyedStateStore<LongSerializer>,
    value: ValueState<LongSerializer, IntSerializer>,
    list: ListState<StringSerializer>,
    map: MapState<IntSerializer, LongSerializer>,
}

/// Which backend the instances run on.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Heap,
    Lsm,
}

struct Job {
    kind: Kind,
    instances: Vec<Instance>,
}

impl Job {
    fn new(parallelism: u32, kind: Kind, restore_from: &[SavepointReader]) -> Job {
        let instances = (0..parallelism)
            .map(|i| {
                let range = key_group_range_for_operator(MAX_P, parallelism, i).unwrap();
                let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
                let backend: Box<dyn StateBackend> = match kind {
                    Kind::Heap => Box::new(HeapBackend::new(cfg).unwrap()),
                    Kind::Lsm => {
                        Box::new(LsmBackend::temp_with(cfg, LsmBackend::small_options()).unwrap())
                    }
                };
                let mut store = KeyedStateStore::new(backend, LongSerializer).unwrap();
                // Alternate: register before or after the restore.
                let before = i % 2 == 0;
                if !before {
                    store.restore(restore_from).unwrap();
                }
                let value = store
                    .register_value(
                        ValueStateDescriptor::new("value", LongSerializer)
                            .with_namespace(IntSerializer),
                    )
                    .unwrap();
                let list = store
                    .register_list(ListStateDescriptor::new("list", StringSerializer))
                    .unwrap();
                let map = store
                    .register_map(MapStateDescriptor::new(
                        "map",
                        IntSerializer,
                        LongSerializer,
                    ))
                    .unwrap();
                if before {
                    store.restore(restore_from).unwrap();
                }
                Instance {
                    store,
                    value,
                    list,
                    map,
                }
            })
            .collect();
        Job { kind, instances }
    }

    fn route(&mut self, key: i64) -> &mut Instance {
        let p = self.instances.len() as u32;
        let kg = self.instances[0].store.key_group_of(&key).unwrap();
        let i = operator_index_for_key_group(MAX_P, p, kg) as usize;
        let inst = &mut self.instances[i];
        inst.store.set_current_key(&key).unwrap();
        inst
    }

    fn savepoints(&mut self) -> Vec<SavepointReader> {
        self.instances
            .iter_mut()
            .map(|i| conformance::savepoint_of(&mut i.store))
            .collect()
    }

    fn check(&mut self, model: &Model) {
        for key in 0..40i64 {
            let inst = self.route(key);
            for ns in 0..3 {
                let got = inst
                    .store
                    .value_in(&inst.value, &ns)
                    .unwrap()
                    .get()
                    .unwrap();
                assert_eq!(
                    got,
                    model.values.get(&(key, ns)).copied(),
                    "value {key}/{ns}"
                );
            }
            let got = inst.store.list(&inst.list).unwrap().get().unwrap();
            let want = model.lists.get(&key).filter(|l| !l.is_empty()).cloned();
            assert_eq!(got, want, "list {key}");
            let got = inst.store.map(&inst.map).unwrap().entries().unwrap();
            let want: Vec<(i32, i64)> = model
                .maps
                .get(&key)
                .map(|m| {
                    // Serialized-byte order of i32 keys: non-negative first, then negative.
                    let mut v: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
                    v.sort_by_key(|(k, _)| k.to_be_bytes());
                    v
                })
                .unwrap_or_default();
            assert_eq!(got, want, "map {key}");
        }
    }
}

fn run(ops: Vec<Op>, kind: Kind) {
    let mut job = Job::new(1, kind, &[]);
    let mut model = Model::default();
    let mut latest: Option<(Vec<Vec<u8>>, Model)> = None;
    for op in ops {
        match op {
            Op::SetValue(k, n, v) => {
                let i = job.route(k);
                i.store.value_in(&i.value, &n).unwrap().update(&v).unwrap();
                model.values.insert((k, n), v);
            }
            Op::ClearValue(k, n) => {
                let i = job.route(k);
                i.store.value_in(&i.value, &n).unwrap().clear().unwrap();
                model.values.remove(&(k, n));
            }
            Op::AddList(k, s) => {
                let i = job.route(k);
                i.store.list(&i.list).unwrap().add(&s).unwrap();
                model.lists.entry(k).or_default().push(s);
            }
            Op::UpdateList(k, v) => {
                let i = job.route(k);
                i.store.list(&i.list).unwrap().update(&v).unwrap();
                model.lists.insert(k, v);
            }
            Op::PutMap(k, u, v) => {
                let i = job.route(k);
                i.store.map(&i.map).unwrap().put(&u, &v).unwrap();
                model.maps.entry(k).or_default().insert(u, v);
            }
            Op::RemoveMap(k, u) => {
                let i = job.route(k);
                i.store.map(&i.map).unwrap().remove(&u).unwrap();
                if let Some(m) = model.maps.get_mut(&k) {
                    m.remove(&u);
                }
            }
            Op::ClearMap(k) => {
                let i = job.route(k);
                i.store.map(&i.map).unwrap().clear().unwrap();
                model.maps.remove(&k);
            }
            Op::Snapshot => {
                let bytes = job
                    .instances
                    .iter_mut()
                    .map(|i| {
                        let snap = i.store.snapshot().unwrap();
                        let mut b = Vec::new();
                        keyed_state::savepoint::encode(&*snap, &Default::default(), &mut b)
                            .unwrap();
                        b
                    })
                    .collect();
                latest = Some((bytes, model.clone()));
            }
            Op::Restore(p) => {
                if let Some((bytes, m)) = &latest {
                    let sps: Vec<_> = bytes
                        .iter()
                        .map(|b| SavepointReader::from_bytes(b.clone()).unwrap())
                        .collect();
                    job = Job::new(p, job.kind, &sps);
                    model = m.clone();
                }
            }
            Op::Rescale(p) => {
                let sps = job.savepoints();
                job = Job::new(p, job.kind, &sps);
            }
        }
    }
    job.check(&model);
}

proptest! {
    // 64 cases by default; PROPTEST_CASES overrides (scripts/long-checks.sh runs 5000).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn heap_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Kind::Heap);
    }
}

proptest! {
    // Fewer cases: every job opens up to four engines (fsynced manifests), so a case costs more wall time.
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn lsm_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Kind::Lsm);
    }
}

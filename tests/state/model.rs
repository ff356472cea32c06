//! One model, every backend: the same random operation sequences on the heap, the LSM and (with the
//! `rocksdb` feature) the RocksDB backend against one `BTreeMap` model, including savepoints, restores and
//! rescaling, and incremental checkpoints (into an in-memory checkpoint storage) with restores and rescales
//! from them: natively on LSM (`restore_lsm_temp`), through `checkpoint::to_savepoint` on every backend. A backend
//! without checkpoints answers `Unsupported` and the sequence goes on without that checkpoint. The job runs
//! at a parallelism of 1 to 4 instances (each a store over its key-group range); keys are routed to their
//! owner as Flink routes them. `PROPTEST_CASES` sets the number of sequences (scripts/long-checks.sh: 10,000).

use crate::conformance;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
#[cfg(feature = "rocksdb")]
use keyed_state::backend::rocksdb::{RocksDbBackend, RocksDbOptions};
use keyed_state::backend::StateBackend;
use keyed_state::checkpoint::{
    checkpoint_parts, restore_lsm_temp, to_savepoint, CheckpointOptions, CheckpointStorage,
    Checkpointer,
};
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
    /// `put_all` of the entries in order (a user key may come twice: the last value wins).
    PutAllMap(i64, Vec<(i32, i64)>),
    RemoveMap(i64, i32),
    ClearMap(i64),
    /// Take a savepoint of every instance (kept as the latest).
    Snapshot,
    /// Restore the latest savepoint at a new parallelism (and the model as it was then).
    Restore(u32),
    /// Snapshot and restore at a new parallelism right away (rescale).
    Rescale(u32),
    /// Take an incremental checkpoint of every instance and confirm it (kept as the latest).
    Checkpoint,
    /// Restore the latest checkpoint at a new parallelism (and the model as it was then): natively where the
    /// backend can (`native`, LSM), else through a savepoint written from the checkpoint.
    RestoreCheckpoint(u32, bool),
    /// Read one map in the middle of a run (whole, one user key, emptiness), so that a map the LSM cache
    /// takes in whole is read again by later operations.
    ReadMap(i64, i32),
    /// Write every instance's cache back (LSM: the engine holds everything, the cache keeps it clean).
    WriteBack,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0i64..40;
    prop_oneof![
        4 => (key.clone(), 0i32..3, any::<i64>()).prop_map(|(k, n, v)| Op::SetValue(k, n, v)),
        1 => (key.clone(), 0i32..3).prop_map(|(k, n)| Op::ClearValue(k, n)),
        3 => (key.clone(), "[a-z,]{0,6}").prop_map(|(k, s)| Op::AddList(k, s)),
        1 => (key.clone(), proptest::collection::vec("[a-z]{0,3}", 0..3)).prop_map(|(k, v)| Op::UpdateList(k, v)),
        3 => (key.clone(), -5i32..5, any::<i64>()).prop_map(|(k, u, v)| Op::PutMap(k, u, v)),
        1 => (key.clone(), proptest::collection::vec((-5i32..5, any::<i64>()), 0..20)).prop_map(|(k, e)| Op::PutAllMap(k, e)),
        1 => (key.clone(), -5i32..5).prop_map(|(k, u)| Op::RemoveMap(k, u)),
        1 => key.clone().prop_map(Op::ClearMap),
        1 => Just(Op::Snapshot),
        1 => (1u32..5).prop_map(Op::Restore),
        1 => (1u32..5).prop_map(Op::Rescale),
        1 => Just(Op::Checkpoint),
        1 => (1u32..5, any::<bool>()).prop_map(|(p, n)| Op::RestoreCheckpoint(p, n)),
        2 => (key, -5i32..5).prop_map(|(k, u)| Op::ReadMap(k, u)),
        1 => Just(Op::WriteBack),
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
    ck: Checkpointer,
}

/// `b` with a read-modify-write cache of `capacity` bytes (`first_touch`: no doorkeeper; `stepping`: it
/// steps aside and back in every few operations, entries dirty or not).
fn cached(b: LsmBackend, capacity: usize, first_touch: bool, stepping: bool) -> LsmBackend {
    let mut b = b.with_rmw_cache(capacity).unwrap();
    b.set_rmw_cache_admission(first_touch).unwrap();
    if stepping {
        b.set_rmw_cache_stepping(conformance::STEP_EVERY_FEW_OPS);
    }
    b
}

/// Which backend the instances run on.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Heap,
    Lsm,
    /// The LSM backend with a read-modify-write cache of this many bytes; `true`: every key taken in on its
    /// first miss (no doorkeeper); `true`: the cache steps aside and back in every few operations.
    LsmCached(usize, bool, bool),
    #[cfg(feature = "rocksdb")]
    RocksDb,
}

/// Every backend kind this build has.
const KINDS: &[Kind] = &[
    Kind::Heap,
    Kind::Lsm,
    Kind::LsmCached(1, true, false),
    Kind::LsmCached(2 << 10, false, false),
    Kind::LsmCached(2 << 10, true, true),
    #[cfg(feature = "rocksdb")]
    Kind::RocksDb,
];

struct Job {
    kind: Kind,
    instances: Vec<Instance>,
    /// Where the job's checkpoints go (shared by all its incarnations).
    storage: Arc<CheckpointStorage>,
}

/// Checkpoint ids: increasing across every job of the process (the storage of a sequence is its own, so
/// only the order matters).
static NEXT_CHECKPOINT: AtomicU64 = AtomicU64::new(1);
/// Checkpoints confirmed, and restores from them natively and through a savepoint (for the campaign line).
static CHECKPOINTS: AtomicU64 = AtomicU64::new(0);
static NATIVE_RESTORES: AtomicU64 = AtomicU64::new(0);
static SAVEPOINT_RESTORES: AtomicU64 = AtomicU64::new(0);

impl Job {
    fn new(
        parallelism: u32,
        kind: Kind,
        restore_from: &[SavepointReader],
        storage: Arc<CheckpointStorage>,
    ) -> Job {
        let backends = (0..parallelism)
            .map(|i| {
                let range = key_group_range_for_operator(MAX_P, parallelism, i).unwrap();
                let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
                let backend: Box<dyn StateBackend> = match kind {
                    Kind::Heap => Box::new(HeapBackend::new(cfg).unwrap()),
                    // The engine alone, without the read-modify-write cache.
                    Kind::Lsm => Box::new(
                        LsmBackend::temp_with(cfg, LsmBackend::small_options())
                            .and_then(|b| b.with_rmw_cache(0))
                            .unwrap(),
                    ),
                    Kind::LsmCached(cache, first_touch, stepping) => Box::new(cached(
                        LsmBackend::temp_with(cfg, LsmBackend::small_options()).unwrap(),
                        cache,
                        first_touch,
                        stepping,
                    )),
                    #[cfg(feature = "rocksdb")]
                    Kind::RocksDb => {
                        Box::new(RocksDbBackend::temporary(cfg, RocksDbOptions::default()).unwrap())
                    }
                };
                backend
            })
            .collect();
        Job::with_backends(kind, backends, restore_from, storage)
    }

    /// LSM instances restored natively from checkpoint `id` at `parallelism`.
    fn from_checkpoint(
        kind: Kind,
        parallelism: u32,
        id: u64,
        storage: Arc<CheckpointStorage>,
    ) -> Job {
        let (cache, first_touch, stepping) = match kind {
            Kind::LsmCached(c, f, s) => (c, f, s),
            _ => (0, false, false),
        };
        let backends = (0..parallelism)
            .map(|i| {
                let range = key_group_range_for_operator(MAX_P, parallelism, i).unwrap();
                let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
                let (b, _) =
                    restore_lsm_temp(&storage, id, cfg, LsmBackend::small_options()).unwrap();
                Box::new(cached(b, cache, first_touch, stepping)) as Box<dyn StateBackend>
            })
            .collect();
        Job::with_backends(kind, backends, &[], storage)
    }

    fn with_backends(
        kind: Kind,
        backends: Vec<Box<dyn StateBackend>>,
        restore_from: &[SavepointReader],
        storage: Arc<CheckpointStorage>,
    ) -> Job {
        let instances = backends
            .into_iter()
            .enumerate()
            .map(|(i, backend)| {
                let ck = Checkpointer::open(
                    Arc::clone(&storage),
                    backend.config(),
                    CheckpointOptions::default(),
                )
                .unwrap();
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
                    ck,
                }
            })
            .collect();
        Job {
            kind,
            instances,
            storage,
        }
    }

    /// Takes and confirms a checkpoint of every instance; its id, or None if the backend has no checkpoints.
    fn checkpoint(&mut self) -> Option<u64> {
        let id = NEXT_CHECKPOINT.fetch_add(1, Ordering::Relaxed);
        let mut pending = Vec::new();
        for inst in &mut self.instances {
            match inst.ck.begin(id, inst.store.backend_mut()) {
                Ok(p) => pending.push(p),
                Err(keyed_state::Error::Unsupported { .. }) => {
                    assert!(
                        pending.is_empty(),
                        "one instance of a job took a checkpoint"
                    );
                    return None;
                }
                Err(e) => panic!("checkpoint {id}: {e}"),
            }
        }
        for p in pending {
            p.run().unwrap();
        }
        for inst in &self.instances {
            inst.ck.notify_complete(id).unwrap();
        }
        CHECKPOINTS.fetch_add(1, Ordering::Relaxed);
        Some(id)
    }

    /// Restores checkpoint `id` at `parallelism` into a new job of the same kind.
    fn restore_checkpoint(&mut self, id: u64, parallelism: u32, native: bool) -> Job {
        for inst in &self.instances {
            inst.ck.close();
        }
        let storage = Arc::clone(&self.storage);
        if native && matches!(self.kind, Kind::Lsm | Kind::LsmCached(..)) {
            NATIVE_RESTORES.fetch_add(1, Ordering::Relaxed);
            return Job::from_checkpoint(self.kind, parallelism, id, storage);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("from-checkpoint.ksp");
        to_savepoint(&storage, id, &path).unwrap();
        SAVEPOINT_RESTORES.fetch_add(1, Ordering::Relaxed);
        let sp = SavepointReader::open(&path).unwrap();
        Job::new(parallelism, self.kind, &[sp], storage)
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
            let empty = inst.store.map(&inst.map).unwrap().is_empty().unwrap();
            let want_empty = model.maps.get(&key).is_none_or(|m| m.is_empty());
            assert_eq!(empty, want_empty, "map {key} is empty");
            let got = inst
                .store
                .map(&inst.map)
                .unwrap()
                .entries()
                .collect::<keyed_state::Result<Vec<_>>>()
                .unwrap();
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

fn run(ops: &[Op], kind: Kind) {
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut job = Job::new(1, kind, &[], storage);
    let mut model = Model::default();
    let mut latest: Option<(Vec<Vec<u8>>, Model)> = None;
    let mut latest_checkpoint: Option<(u64, Model)> = None;
    for op in ops.iter().cloned() {
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
            Op::PutAllMap(k, e) => {
                let i = job.route(k);
                i.store.map(&i.map).unwrap().put_all(&e).unwrap();
                let m = model.maps.entry(k).or_default();
                m.extend(e.iter().copied());
            }
            Op::RemoveMap(k, u) => {
                let i = job.route(k);
                i.store.map(&i.map).unwrap().remove(&u).unwrap();
                if let Some(m) = model.maps.get_mut(&k) {
                    m.remove(&u);
                }
            }
            Op::ReadMap(k, u) => {
                let i = job.route(k);
                let got = i
                    .store
                    .map(&i.map)
                    .unwrap()
                    .entries()
                    .collect::<keyed_state::Result<Vec<_>>>()
                    .unwrap();
                let mut want: Vec<(i32, i64)> = model
                    .maps
                    .get(&k)
                    .map(|m| m.iter().map(|(k, v)| (*k, *v)).collect())
                    .unwrap_or_default();
                want.sort_by_key(|(k, _)| k.to_be_bytes());
                assert_eq!(got, want, "map {k} read in the run");
                let one = i.store.map(&i.map).unwrap().get(&u).unwrap();
                let want_one = model.maps.get(&k).and_then(|m| m.get(&u).copied());
                assert_eq!(one, want_one, "map {k} get {u}");
                let empty = i.store.map(&i.map).unwrap().is_empty().unwrap();
                assert_eq!(empty, want.is_empty(), "map {k} is empty in the run");
            }
            Op::WriteBack => {
                for i in &mut job.instances {
                    i.store.backend_mut().write_back().unwrap();
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
                    job = Job::new(p, job.kind, &sps, Arc::clone(&job.storage));
                    model = m.clone();
                }
            }
            Op::Rescale(p) => {
                let sps = job.savepoints();
                job = Job::new(p, job.kind, &sps, Arc::clone(&job.storage));
            }
            Op::Checkpoint => {
                if let Some(id) = job.checkpoint() {
                    latest_checkpoint = Some((id, model.clone()));
                }
            }
            Op::RestoreCheckpoint(p, native) => {
                if let Some((id, m)) = &latest_checkpoint {
                    // Retention (the checkpointer's default) may have dropped it.
                    if !checkpoint_parts(&job.storage, *id).unwrap().is_empty() {
                        job = job.restore_checkpoint(*id, p, native);
                        model = m.clone();
                    }
                }
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
        run(&ops, Kind::Heap);
    }
}

proptest! {
    // Fewer cases: every job opens up to four engines (fsynced manifests), so a case costs more wall time.
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn lsm_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(&ops, Kind::Lsm);
    }

    /// With the read-modify-write cache, from one byte (every write evicted at once) to everything fitting;
    /// stepping aside and back in every few operations or not.
    #[test]
    fn lsm_with_a_cache_matches_model(
        ops in proptest::collection::vec(op(), 1..80),
        cache in proptest::sample::select(vec![1usize, 300, 2 << 10, 64 << 20]),
        first_touch in any::<bool>(),
        stepping in any::<bool>(),
    ) {
        run(&ops, Kind::LsmCached(cache, first_touch, stepping));
    }
}

/// Sequences run on every backend by `every_backend_matches_one_model`.
static SEQUENCES: AtomicU64 = AtomicU64::new(0);

proptest! {
    // 16 cases by default (each runs on every backend); PROPTEST_CASES overrides (long-checks: 10,000).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(16),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_backend_matches_one_model(ops in proptest::collection::vec(op(), 1..60)) {
        for kind in KINDS {
            run(&ops, *kind);
        }
        let n = SEQUENCES.fetch_add(1, Ordering::Relaxed) + 1;
        let cases: u64 = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
        if n == cases {
            // The last case of a passing run (a failing one panics first and shrinks).
            println!(
                "campaign model:every_backend sequences={n} backends={} checkpoints={} \
                 native_restores={} savepoint_restores={} differences=0",
                KINDS.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join("+"),
                CHECKPOINTS.load(Ordering::Relaxed),
                NATIVE_RESTORES.load(Ordering::Relaxed),
                SAVEPOINT_RESTORES.load(Ordering::Relaxed),
            );
        }
    }
}

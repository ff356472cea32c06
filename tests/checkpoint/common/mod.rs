//! Helpers of the checkpoint tests (`tests/checkpoints.rs`, `tests/checkpoint_claim.rs`): instances of one
//! job on one checkpoint root, restores, storage checks, and the macros that run a scenario on every store
//! and backend.
#![allow(dead_code, unused_macros)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::checkpoint::tools;
use keyed_state::checkpoint::{
    restore_heap, restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer, RestoreInfo,
};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use keyed_state_lsm::Options;

pub const MAX_P: u32 = 16;

/// One instance: a store with one value state `counter`, its checkpointer and (LSM) its engine.
pub struct Inst {
    pub store: KeyedStateStore<LongSerializer>,
    pub counter: ValueState<LongSerializer>,
    pub ck: Checkpointer,
    pub engine: Option<keyed_state::backend::lsm::LsmEngine>,
}

/// Small engines with the checkpoint view as by default, materialized in band only: the scenarios here check
/// that storage holds exactly what metadata references, and a background materialization's objects are held
/// beside them until a later checkpoint references them (its own tests: `checkpoint_view_background.rs`,
/// and the view's model test).
pub fn options() -> Options {
    Options {
        checkpoint_view_background_l0_runs: usize::MAX,
        checkpoint_view_background_pinned_ratio: f64::INFINITY,
        ..LsmBackend::small_options()
    }
}

pub fn store_on(
    backend: Box<dyn StateBackend>,
) -> (KeyedStateStore<LongSerializer>, ValueState<LongSerializer>) {
    let mut store = KeyedStateStore::new(backend, LongSerializer).unwrap();
    let counter = store
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    (store, counter)
}

/// The backends whose checkpoints the backend-independent scenarios run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Lsm,
    Heap,
    #[cfg(feature = "rocksdb")]
    RocksDb,
}

pub fn fresh(storage: &Arc<CheckpointStorage>, range: KeyGroupRange, retain: usize) -> Inst {
    fresh_on(Kind::Lsm, storage, range, retain)
}

pub fn fresh_on(
    kind: Kind,
    storage: &Arc<CheckpointStorage>,
    range: KeyGroupRange,
    retain: usize,
) -> Inst {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let (backend, engine): (Box<dyn StateBackend>, _) = match kind {
        Kind::Lsm => {
            let b = LsmBackend::temp_with(cfg.clone(), options()).unwrap();
            let e = Some(b.engine());
            (Box::new(b), e)
        }
        Kind::Heap => (Box::new(HeapBackend::new(cfg.clone()).unwrap()), None),
        #[cfg(feature = "rocksdb")]
        Kind::RocksDb => (
            Box::new(
                keyed_state::backend::rocksdb::RocksDbBackend::temporary(
                    cfg.clone(),
                    Default::default(),
                )
                .unwrap(),
            ),
            None,
        ),
    };
    inst_on(backend, engine, storage, &cfg, retain)
}

/// An instance over `backend` (with its LSM `engine`, if any) checkpointing into `storage`, retaining
/// `retain`.
pub fn inst_on(
    backend: Box<dyn StateBackend>,
    engine: Option<keyed_state::backend::lsm::LsmEngine>,
    storage: &Arc<CheckpointStorage>,
    cfg: &keyed_state::backend::BackendConfig,
    retain: usize,
) -> Inst {
    let (store, counter) = store_on(backend);
    let ck = Checkpointer::open(
        Arc::clone(storage),
        cfg,
        CheckpointOptions {
            retain,
            ..CheckpointOptions::default()
        },
    )
    .unwrap();
    Inst {
        store,
        counter,
        ck,
        engine,
    }
}

impl Inst {
    pub fn put(&mut self, k: i64, v: i64) -> bool {
        if self.store.set_current_key(&k).is_err() {
            return false;
        }
        match self.store.value(&self.counter) {
            Ok(mut s) => s.update(&v).is_ok(),
            Err(_) => false,
        }
    }
    pub fn get(&mut self, k: i64) -> Option<i64> {
        self.store.set_current_key(&k).unwrap();
        self.store.value(&self.counter).unwrap().get().unwrap()
    }
    pub fn owns(&self, k: i64) -> bool {
        let kg = self.store.key_group_of(&k).unwrap();
        self.store.config().key_group_range.contains(kg)
    }
    pub fn checkpoint(&mut self, id: u64) -> keyed_state::checkpoint::CheckpointSummary {
        let p = self.ck.begin(id, self.store.backend_mut()).unwrap();
        p.run().unwrap()
    }
}

pub fn restore(storage: &CheckpointStorage, id: u64, range: KeyGroupRange) -> Inst {
    restore_on(Kind::Lsm, storage, id, range)
}

/// A backend of `kind` restored from checkpoint `id` for `cfg`'s key groups.
pub fn restored(
    kind: Kind,
    storage: &CheckpointStorage,
    id: u64,
    cfg: keyed_state::backend::BackendConfig,
) -> (Box<dyn StateBackend>, RestoreInfo) {
    match kind {
        Kind::Lsm => {
            let (b, i) = restore_lsm_temp(storage, id, cfg, options()).unwrap();
            (Box::new(b), i)
        }
        Kind::Heap => {
            let (b, i) = restore_heap(storage, id, cfg).unwrap();
            (Box::new(b), i)
        }
        #[cfg(feature = "rocksdb")]
        Kind::RocksDb => {
            let (b, i) =
                keyed_state::checkpoint::restore_rocksdb(storage, id, cfg, Default::default())
                    .unwrap();
            (Box::new(b), i)
        }
    }
}

pub fn restore_on(kind: Kind, storage: &CheckpointStorage, id: u64, range: KeyGroupRange) -> Inst {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let (backend, _) = restored(kind, storage, id, cfg.clone());
    inst_on(
        backend,
        None,
        &Arc::new(CheckpointStorage::in_memory().unwrap()),
        &cfg,
        3,
    )
}

/// Objects under `shared/` and the set every metadata in the root references, once the sweeps queued for
/// checkpointers on `storage` have run.
pub fn objects_and_references(storage: &CheckpointStorage) -> (BTreeSet<String>, BTreeSet<String>) {
    keyed_state::checkpoint::wait_for_sweeps(storage);
    let objects = storage
        .list("shared/")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let refs = tools::referenced_objects(storage).unwrap().unwrap();
    (objects, refs)
}

/// Every object of the root but the attempt markers (`attempts/…`), which fence older writers and stay.
pub fn objects_but_attempt_markers(storage: &CheckpointStorage) -> Vec<String> {
    keyed_state::checkpoint::wait_for_sweeps(storage);
    storage
        .list("")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| !p.starts_with("attempts/"))
        .collect()
}

pub fn assert_storage_exact(storage: &CheckpointStorage) {
    let (objects, refs) = objects_and_references(storage);
    assert_eq!(
        objects, refs,
        "storage holds exactly what metadata references"
    );
}

pub fn all() -> KeyGroupRange {
    KeyGroupRange::new(0, MAX_P as u16 - 1)
}

/// Each scenario below runs against the in-memory store, a local directory, and S3 (the server `.ci/run`
/// starts; skipped with a printed line when `KEYED_STATE_S3_ENDPOINT` is not set).
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[test]
            fn $name() {
                super::$name(&std::sync::Arc::new(
                    keyed_state::checkpoint::CheckpointStorage::in_memory().unwrap(),
                ));
            })*
        }
        mod local_dir {
            $(#[test]
            fn $name() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&std::sync::Arc::new(
                    keyed_state::checkpoint::CheckpointStorage::local(dir.path()).unwrap(),
                ));
            })*
        }
        #[cfg(feature = "s3")]
        mod s3 {
            $(#[test]
            fn $name() {
                if let Some(storage) = super::common_s3::storage(stringify!($name)) {
                    super::$name(&storage);
                }
            })*
        }
    };
}

/// The backend-independent scenarios: every store above, on every backend (the RocksDB variant with the
/// `rocksdb` feature).
macro_rules! on_every_backend_and_store {
    ($($name:ident),* $(,)?) => {
        mod lsm {
            on_every_backend_and_store!(@stores Lsm, $($name),*);
        }
        mod heap {
            on_every_backend_and_store!(@stores Heap, $($name),*);
        }
        #[cfg(feature = "rocksdb")]
        mod rocksdb {
            on_every_backend_and_store!(@stores RocksDb, $($name),*);
        }
    };
    (@stores $kind:ident, $($name:ident),*) => {
        mod memory {
            $(#[test]
            fn $name() {
                super::super::$name(
                    &std::sync::Arc::new(
                        keyed_state::checkpoint::CheckpointStorage::in_memory().unwrap(),
                    ),
                    super::super::Kind::$kind,
                );
            })*
        }
        mod local_dir {
            $(#[test]
            fn $name() {
                let dir = tempfile::tempdir().unwrap();
                super::super::$name(
                    &std::sync::Arc::new(
                        keyed_state::checkpoint::CheckpointStorage::local(dir.path()).unwrap(),
                    ),
                    super::super::Kind::$kind,
                );
            })*
        }
        #[cfg(feature = "s3")]
        mod s3 {
            $(#[test]
            fn $name() {
                if let Some(storage) = super::super::common_s3::storage(concat!(
                    stringify!($kind),
                    "-",
                    stringify!($name)
                )) {
                    super::super::$name(&storage, super::super::Kind::$kind);
                }
            })*
        }
    };
}

/// An instance restored by `restore_lsm_temp` for `range` of checkpoint `id`, with its restore report.
pub fn restore_reported(
    storage: &Arc<CheckpointStorage>,
    id: u64,
    range: KeyGroupRange,
) -> (Inst, RestoreInfo) {
    restore_reported_with(storage, id, range, options())
}

pub fn restore_reported_with(
    storage: &Arc<CheckpointStorage>,
    id: u64,
    range: KeyGroupRange,
    opts: Options,
) -> (Inst, RestoreInfo) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let (backend, info) = restore_lsm_temp(storage, id, cfg.clone(), opts).unwrap();
    let engine = Some(backend.engine());
    (inst_on(Box::new(backend), engine, storage, &cfg, 3), info)
}

/// Checkpoints every instance as `id`, confirms it and waits for the sweeps the confirmations queued.
pub fn checkpoint_all(insts: &mut [Inst], id: u64) {
    for x in insts.iter_mut() {
        x.checkpoint(id);
    }
    for x in insts.iter_mut() {
        x.ck.notify_complete(id).unwrap();
    }
    for x in insts.iter() {
        x.ck.wait_for_sweeps();
    }
}

/// Every key of the model is where it belongs, with its value, and no instance holds more entries than
/// its own key groups' (no foreign data is visible anywhere).
pub fn check_instances(insts: &mut [Inst], model: &BTreeMap<i64, i64>) {
    let mut owned = vec![0u64; insts.len()];
    for (k, v) in model {
        let i = insts.iter().position(|x| x.owns(*k)).unwrap();
        owned[i] += 1;
        assert_eq!(insts[i].get(*k), Some(*v), "key {k}");
    }
    for (x, n) in insts.iter_mut().zip(owned) {
        assert_eq!(x.store.num_entries().unwrap(), n);
    }
}

/// A current-thread and a 2-worker multi-thread tokio runtime, named, for scenarios that must hold inside
/// either flavour.
pub fn runtimes() -> Vec<(&'static str, tokio::runtime::Runtime)> {
    vec![
        (
            "current-thread",
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        ),
        (
            "multi-thread",
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        ),
    ]
}

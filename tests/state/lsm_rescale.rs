//! Rescaling on the LSM backend, after Flink's `RocksIncrementalCheckpointRescalingTest`: a counter
//! `ValueState` per key, max parallelism 10, keys in every key group 0..9. After each rescale (1→2→3 and
//! 3→2→1) every key keeps counting from where it was.
//!
//! Two rescale paths: through savepoints (restore loads only the target's key groups, by ingestion), and
//! through engine checkpoints (open the checkpoint of an overlapping source instance, clip it to the target's
//! range with range deletes, restore the remaining key groups from the other sources' savepoints).

use std::collections::BTreeMap;

use keyed_state::backend::lsm::{LsmBackend, LsmEngine};
use keyed_state::keygroup::{
    java_long_hash, key_group_for_hash, key_group_range_for_operator, operator_index_for_key_group,
    KeyGroupRange,
};
use keyed_state::savepoint::{encode, SavepointReader};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};

const MAX_P: u32 = 10;
const KEYS_PER_GROUP: usize = 4;

struct Instance {
    store: KeyedStateStore<LongSerializer>,
    counter: ValueState<LongSerializer>,
    engine: LsmEngine,
    /// Keeps a checkpoint directory (the engine's working directory) alive; dropped after the store.
    _dir: Option<tempfile::TempDir>,
}

fn register(store: &mut KeyedStateStore<LongSerializer>) -> ValueState<LongSerializer> {
    store
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap()
}

fn range_of(parallelism: u32, i: u32) -> KeyGroupRange {
    key_group_range_for_operator(MAX_P, parallelism, i).unwrap()
}

fn fresh(range: KeyGroupRange) -> Instance {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let backend = LsmBackend::temp_with(cfg, LsmBackend::small_options()).unwrap();
    let engine = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let counter = register(&mut store);
    Instance {
        store,
        counter,
        engine,
        _dir: None,
    }
}

struct Job {
    instances: Vec<Instance>,
    keys: Vec<i64>,
    expected: BTreeMap<i64, i64>,
}

impl Job {
    fn new() -> Job {
        let mut keys = Vec::new();
        for kg in 0..MAX_P as u16 {
            keys.extend(
                (0i64..)
                    .filter(|k| key_group_for_hash(java_long_hash(*k), MAX_P) == kg)
                    .take(KEYS_PER_GROUP),
            );
        }
        Job {
            instances: vec![fresh(range_of(1, 0))],
            keys,
            expected: BTreeMap::new(),
        }
    }

    fn parallelism(&self) -> u32 {
        self.instances.len() as u32
    }

    fn owner(&self, key: i64) -> usize {
        let kg = key_group_for_hash(java_long_hash(key), MAX_P);
        operator_index_for_key_group(MAX_P, self.parallelism(), kg) as usize
    }

    /// One record per key (`times` rounds): counter += 1, checking the value read first.
    fn process(&mut self, times: usize) {
        for _ in 0..times {
            for &key in &self.keys {
                let i = self.owner(key);
                let inst = &mut self.instances[i];
                inst.store.set_current_key(&key).unwrap();
                let got = inst.store.value(&inst.counter).unwrap().get().unwrap();
                let want = self.expected.get(&key).copied();
                assert_eq!(got, want, "key {key} at parallelism {}", self.parallelism());
                let next = want.unwrap_or(0) + 1;
                inst.store
                    .value(&inst.counter)
                    .unwrap()
                    .update(&next)
                    .unwrap();
                self.expected.insert(key, next);
            }
        }
    }

    /// Every instance holds exactly its keys' counters (nothing outside its range survives).
    fn check(&mut self) {
        let p = self.parallelism();
        for (i, inst) in self.instances.iter_mut().enumerate() {
            let range = range_of(p, i as u32);
            let mine: Vec<i64> = self
                .keys
                .iter()
                .copied()
                .filter(|k| range.contains(key_group_for_hash(java_long_hash(*k), MAX_P)))
                .collect();
            assert_eq!(
                inst.store.num_entries().unwrap(),
                mine.len() as u64,
                "instance {i} of {p} holds only its key groups"
            );
            for k in mine {
                inst.store.set_current_key(&k).unwrap();
                assert_eq!(
                    inst.store.value(&inst.counter).unwrap().get().unwrap(),
                    self.expected.get(&k).copied()
                );
            }
        }
    }

    fn savepoints(&mut self) -> Vec<Vec<u8>> {
        self.instances
            .iter_mut()
            .map(|inst| {
                let snap = inst.store.snapshot().unwrap();
                let mut b = Vec::new();
                encode(&*snap, &Default::default(), &mut b).unwrap();
                b
            })
            .collect()
    }

    /// Rescale through savepoints: each target restores only its key groups.
    fn rescale_by_savepoint(&mut self, to: u32) {
        let sps: Vec<SavepointReader> = self
            .savepoints()
            .into_iter()
            .map(|b| SavepointReader::from_bytes(b).unwrap())
            .collect();
        self.instances = (0..to)
            .map(|j| {
                let mut inst = fresh(range_of(to, j));
                inst.store.restore(&sps).unwrap();
                inst
            })
            .collect();
    }

    /// Rescale through engine checkpoints: each target opens a checkpoint of the first source overlapping
    /// its range, clipped to that range, and restores the rest from the other overlapping sources.
    fn rescale_by_checkpoint(&mut self, to: u32) {
        let from = self.parallelism();
        let sps = self.savepoints();
        let mut targets = Vec::new();
        for j in 0..to {
            let range = range_of(to, j);
            let overlapping: Vec<usize> = (0..from)
                .filter(|i| !range_of(from, *i).intersect(&range).is_empty())
                .map(|i| i as usize)
                .collect();
            let base = overlapping[0];
            let dir = tempfile::tempdir().unwrap();
            // The engine holds the whole state once the cache is written back.
            self.instances[base]
                .store
                .backend_mut()
                .write_back()
                .unwrap();
            self.instances[base].engine.checkpoint(dir.path()).unwrap();
            let states = self.instances[base].store.backend_mut().states().to_vec();
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
            let backend =
                LsmBackend::open_checkpoint(dir.path(), cfg, states, LsmBackend::small_options())
                    .unwrap();
            let engine = backend.engine();
            let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
            let counter = register(&mut store);
            let rest: Vec<SavepointReader> = overlapping[1..]
                .iter()
                .map(|i| SavepointReader::from_bytes(sps[*i].clone()).unwrap())
                .collect();
            if !rest.is_empty() {
                store.restore(&rest).unwrap();
            }
            targets.push(Instance {
                store,
                counter,
                engine,
                _dir: Some(dir),
            });
        }
        self.instances = targets;
    }
}

fn run(by_checkpoint: bool) {
    let mut job = Job::new();
    job.process(2);
    job.check();
    for p in [2, 3, 2, 1] {
        if by_checkpoint {
            job.rescale_by_checkpoint(p);
        } else {
            job.rescale_by_savepoint(p);
        }
        job.check();
        job.process(3);
        job.check();
    }
    assert_eq!(job.parallelism(), 1);
    assert!(job.expected.values().all(|c| *c == 2 + 4 * 3));
}

#[test]
fn rescale_1_2_3_2_1_by_savepoint() {
    run(false);
}

#[test]
fn rescale_1_2_3_2_1_by_checkpoint_and_clip() {
    run(true);
}

#[test]
fn clip_keeps_only_the_target_range() {
    let mut job = Job::new();
    // Enough records for several flushed files.
    job.process(50);
    let engine = job.instances[0].engine.clone();
    engine.flush().unwrap();
    let dir = tempfile::tempdir().unwrap();
    job.instances[0].store.backend_mut().write_back().unwrap();
    engine.checkpoint(dir.path()).unwrap();
    let states = job.instances[0].store.backend_mut().states().to_vec();
    let range = KeyGroupRange::new(3, 5);
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
    let backend =
        LsmBackend::open_checkpoint(dir.path(), cfg, states, LsmBackend::small_options()).unwrap();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let counter = register(&mut store);
    assert_eq!(
        store.num_entries().unwrap(),
        (3 * KEYS_PER_GROUP) as u64,
        "only key groups 3..=5 remain"
    );
    for &k in &job.keys {
        let kg = key_group_for_hash(java_long_hash(k), MAX_P);
        if range.contains(kg) {
            store.set_current_key(&k).unwrap();
            assert_eq!(store.value(&counter).unwrap().get().unwrap(), Some(50));
        } else {
            assert!(store.set_current_key(&k).is_err());
        }
    }
}

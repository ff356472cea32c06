//! Quick measurement behind `design/decisions/0003-one-engine-per-backend.md`: one engine for all states
//! (u16 state-id prefix, what `LsmBackend` does) versus one engine per state (like RocksDB column families,
//! each with its own memtable, files and background threads). 10 states, N keys spread over them: value put,
//! value get, list append, snapshot (sync part) and savepoint write (async part).
//!
//! `cargo bench --bench lsm_layout -- [keys]` (default 500000).

use std::time::Instant;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::{BackendConfig, BackendSnapshot, StateBackend, StateId};
use keyed_state::keygroup::{KeyGroup, KeyGroupRange};
use keyed_state::meta::{StateKind, StateMetaInfo};
use keyed_state::savepoint::{encode, WriteOptions};
use keyed_state::serializer::{LongSerializer, TypeSerializer, VoidNamespaceSerializer};
use keyed_state::state::KeyedStateStore;

const STATES: usize = 10;
const MAX_P: u32 = 128;

fn meta(i: usize) -> StateMetaInfo {
    let kind = if i % 2 == 0 {
        StateKind::Value
    } else {
        StateKind::List
    };
    StateMetaInfo {
        name: format!("s{i}"),
        kind,
        namespace_serializer: VoidNamespaceSerializer.snapshot(),
        value_serializer: LongSerializer.snapshot(),
        ttl: None,
    }
}

/// Entry key `KG | K (8 bytes) | NS (void, 1 byte)`.
fn key(k: u64) -> (KeyGroup, Vec<u8>) {
    let kg = (k % MAX_P as u64) as KeyGroup;
    let mut v = vec![kg as u8];
    v.extend_from_slice(&k.to_be_bytes());
    v.push(0);
    (kg, v)
}

struct Layout {
    /// (backend, state id in it) per logical state.
    backends: Vec<LsmBackend>,
    per_state: bool,
}

impl Layout {
    fn new(per_state: bool, cfg: &BackendConfig) -> Layout {
        let n = if per_state { STATES } else { 1 };
        let mut backends: Vec<LsmBackend> = (0..n)
            .map(|_| LsmBackend::temp(cfg.clone()).expect("backend"))
            .collect();
        for i in 0..STATES {
            let b = if per_state {
                &mut backends[i]
            } else {
                &mut backends[0]
            };
            b.register_state(meta(i)).expect("register");
        }
        Layout {
            backends,
            per_state,
        }
    }
    fn at(&mut self, state: usize) -> (&mut LsmBackend, StateId) {
        if self.per_state {
            (&mut self.backends[state], 0)
        } else {
            (&mut self.backends[0], state)
        }
    }
}

/// A snapshot over per-state backends, dispatching `visit(state)` to the state's own engine.
struct MultiSnapshot {
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    parts: Vec<Box<dyn BackendSnapshot>>,
}

impl BackendSnapshot for MultiSnapshot {
    fn config(&self) -> &BackendConfig {
        &self.config
    }
    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }
    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> keyed_state::Result<()>,
    ) -> keyed_state::Result<()> {
        self.parts[state].visit(0, kg, f)
    }
}

fn run(per_state: bool, keys: u64) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, KeyGroupRange::all(MAX_P));
    let mut l = Layout::new(per_state, &cfg);
    let value = 7u64.to_be_bytes();
    let t = Instant::now();
    for k in 0..keys {
        let s = (k as usize % STATES) & !1; // value states
        let (kg, key) = key(k);
        let (b, id) = l.at(s);
        b.put(id, kg, &key, &value).expect("put");
    }
    let put = t.elapsed();
    let t = Instant::now();
    let mut found = 0u64;
    for k in 0..keys {
        let s = (k as usize % STATES) & !1;
        let (kg, key) = key(k);
        let (b, id) = l.at(s);
        found += b.get(id, kg, &key).expect("get").is_some() as u64;
    }
    assert_eq!(found, keys);
    let get = t.elapsed();
    let t = Instant::now();
    for k in 0..keys {
        let s = (k as usize % STATES) | 1; // list states
        let (kg, key) = key(k);
        let (b, id) = l.at(s);
        b.append(id, kg, &key, &value).expect("append");
    }
    let append = t.elapsed();
    let t = Instant::now();
    let snap: Box<dyn BackendSnapshot> = if per_state {
        let parts = l
            .backends
            .iter_mut()
            .map(|b| b.snapshot().expect("snapshot"))
            .collect();
        Box::new(MultiSnapshot {
            config: cfg.clone(),
            states: (0..STATES).map(meta).collect(),
            parts,
        })
    } else {
        l.backends[0].snapshot().expect("snapshot")
    };
    let sync = t.elapsed();
    let t = Instant::now();
    let mut out = Vec::new();
    let summary = encode(&*snap, &WriteOptions::default(), &mut out).expect("encode");
    let write = t.elapsed();
    let threads = if per_state { 2 * STATES } else { 2 };
    println!(
        "{:<16} put {:>7.0} k/s  get {:>7.0} k/s  append {:>7.0} k/s  snapshot sync {:>8.3} ms  savepoint {:>7.1} ms ({} entries, {} bytes)  engine threads {}",
        if per_state { "engine per state" } else { "one engine" },
        keys as f64 / put.as_secs_f64() / 1e3,
        keys as f64 / get.as_secs_f64() / 1e3,
        keys as f64 / append.as_secs_f64() / 1e3,
        sync.as_secs_f64() * 1e3,
        write.as_secs_f64() * 1e3,
        summary.total_entries(),
        summary.bytes_written,
        threads,
    );
}

fn main() {
    // `cargo bench` passes `--bench` first; the key count is the first number among the arguments.
    let keys = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(500_000u64);
    for round in 0..2 {
        println!("round {round}, {keys} keys, {STATES} states");
        run(false, keys);
        run(true, keys);
    }
}

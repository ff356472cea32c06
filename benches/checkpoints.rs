//! Incremental checkpoints of the LSM backend (`design/checkpoints.md`), printed as tables.
//!
//! Setup: `KS_CKPT_BENCH_KEYS` keys (default 1,000,000; `KS_CKPT_BENCH_KEYS=10000000` for the 10M run,
//! about 1.1 GB of entries) of `i64` (`LongSerializer`) with one 100-byte value each (`BytesSerializer`,
//! random bytes of a 16-symbol alphabet), max parallelism 128, default engine options, written through
//! `KeyedStateStore` puts. Checkpoint root: a local directory (objects holding one file are hard-linked
//! on restore; packs are read by range).
//!
//! 1. Checkpoints: the first (full), then after 1 % and after 10 % of the keys changed since the last
//!    confirmed one: bytes written (data objects and metadata), as a ratio to the bytes of the SST files that
//!    are new since the last checkpoint and to the raw bytes of the changed entries; the synchronous part
//!    (`KeyedStateStore::checkpoint`); the asynchronous part (`PendingCheckpoint::run`: waits for the
//!    engine's flush of the switched memtable, uploads).
//! 2. 50 checkpoints, each after 1 % of the keys changed, retain 3: objects and bytes in storage after them,
//!    median and largest synchronous part, median asynchronous part.
//! 3. Restore at the same parallelism; rescale 1 -> 2 and 2 -> 1 by adopting files (`restore_lsm`), and
//!    the same rescale done Flink's way: open each old instance (restored at its own range) and copy the
//!    new range's entries into a fresh store (`load_entry`, the bulk-load path), with the ratio.
//!
//! Times are wall-clock (`Instant`), one run each: the machine is shared, note its load beside the numbers.
//!
//! Run: `cargo bench --bench checkpoints` (and `KS_CKPT_BENCH_KEYS=10000000 cargo bench --bench checkpoints`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::backend::lsm::{LsmBackend, LsmEngine};
use keyed_state::backend::{BackendConfig, EngineHandle, StateBackend};
use keyed_state::checkpoint::{
    restore_lsm, CheckpointOptions, CheckpointStorage, CheckpointSummary, Checkpointer,
};
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::lsm::Options;
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_P: u32 = 128;
const VALUE_LEN: usize = 100;
/// Raw bytes of one entry: 8-byte key, 100-byte value.
const ENTRY_BYTES: u64 = 8 + VALUE_LEN as u64;

struct Instance {
    store: KeyedStateStore<LongSerializer>,
    state: ValueState<BytesSerializer>,
    engine: LsmEngine,
    ck: Checkpointer,
    range: KeyGroupRange,
}

fn config(range: KeyGroupRange) -> BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, MAX_P, range)
}

fn instance(storage: &Arc<CheckpointStorage>, range: KeyGroupRange, retain: usize) -> Instance {
    let cfg = config(range);
    let backend = LsmBackend::temp_with(cfg.clone(), Options::default()).expect("backend");
    let engine = backend.engine();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).expect("store");
    let state = store
        .register_value(ValueStateDescriptor::new("payload", BytesSerializer))
        .expect("state");
    let ck = Checkpointer::open(
        Arc::clone(storage),
        &cfg,
        CheckpointOptions {
            retain,
            ..CheckpointOptions::default()
        },
    )
    .expect("checkpointer");
    Instance {
        store,
        state,
        engine,
        ck,
        range,
    }
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    (0..VALUE_LEN)
        .map(|_| b"abcdefghijklmnop"[rng.random_range(0..16)])
        .collect()
}

impl Instance {
    fn owns(&self, k: i64) -> bool {
        self.range
            .contains(self.store.key_group_of(&k).expect("key group"))
    }
    fn put(&mut self, k: i64, v: &[u8]) {
        self.store.set_current_key(&k).expect("key");
        self.store
            .value(&self.state)
            .expect("state")
            .update(&v.to_vec())
            .expect("put");
    }
    /// Checkpoint `id`: (summary, synchronous part). Confirmed.
    fn checkpoint(&mut self, id: u64) -> (CheckpointSummary, Duration) {
        let t = Instant::now();
        let p = self.store.checkpoint(&self.ck, id).expect("sync part");
        let sync = t.elapsed();
        let s = p.run().expect("async part");
        self.ck.notify_complete(id).expect("confirm");
        (s, sync)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn row(label: &str, changed: u64, s: &CheckpointSummary, sync: Duration) {
    let changed_bytes = changed * ENTRY_BYTES;
    println!(
        "| {label} | {} | {} | {} | {:.3} | {} | {} | {:.3} | {:.1} |",
        s.files_new,
        s.files_reused,
        s.bytes_written,
        s.bytes_written as f64 / s.bytes_new_files.max(1) as f64,
        if changed == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", s.bytes_written as f64 / changed_bytes as f64)
        },
        s.state_size,
        ms(sync),
        s.async_micros as f64 / 1e3,
    );
}

fn change(inst: &mut [&mut Instance], keys: i64, n: u64, rng: &mut StdRng) {
    for _ in 0..n {
        let k = rng.random_range(0..keys);
        let v = value(rng);
        if let Some(i) = inst.iter_mut().find(|i| i.owns(k)) {
            i.put(k, &v);
        }
    }
}

/// Flink's rescale: every old instance of checkpoint `id` whose range meets `target` is opened at its own
/// range, and its entries in `target` are copied into a fresh store.
fn copy_restore(
    storage: &CheckpointStorage,
    id: u64,
    old: &[KeyGroupRange],
    target: KeyGroupRange,
) -> LsmBackend {
    let mut dst = LsmBackend::temp_with(config(target), Options::default()).expect("backend");
    let mut registered = false;
    for r in old {
        let part = r.intersect(&target);
        if part.is_empty() {
            continue;
        }
        let (mut src, _) =
            restore_lsm(storage, id, config(*r), Options::default()).expect("open old instance");
        if !registered {
            for m in src.states().to_vec() {
                dst.register_state(m).expect("register");
            }
            registered = true;
        }
        let snap = src.snapshot().expect("snapshot");
        for kg in part.iter() {
            snap.visit(0, kg, &mut |k, v| dst.load_entry(0, kg, k, v))
                .expect("copy");
        }
    }
    dst.finish_load().expect("finish load");
    dst
}

fn main() {
    let keys: i64 = std::env::var("KS_CKPT_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let uptime = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "keys {keys} x {VALUE_LEN}-byte values, max parallelism {MAX_P}, load average {uptime}"
    );
    let mut rng = StdRng::seed_from_u64(11);
    let dir = tempfile::tempdir().expect("tmp");
    let storage = Arc::new(CheckpointStorage::local(&dir.path().join("root")).expect("root"));
    let all = KeyGroupRange::all(MAX_P);
    let mut one = instance(&storage, all, 3);
    let t = Instant::now();
    for k in 0..keys {
        let v = value(&mut rng);
        one.put(k, &v);
    }
    one.engine.wait_for_background_work().expect("settle");
    println!(
        "loaded in {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        one.engine.summary()
    );

    println!();
    println!("| checkpoint | files new | files reused | bytes written | / new SST bytes | / changed entry bytes | state size | sync ms | async ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let (s, sync) = one.checkpoint(1);
    row("first (full)", 0, &s, sync);
    let mut id = 1;
    for pct in [1u64, 10] {
        let n = keys as u64 * pct / 100;
        change(&mut [&mut one], keys, n, &mut rng);
        id += 1;
        let (s, sync) = one.checkpoint(id);
        row(&format!("{pct} % changed"), n, &s, sync);
    }

    println!();
    let (mut syncs, mut asyncs, mut written) = (Vec::new(), Vec::new(), Vec::new());
    let n = keys as u64 / 100;
    for _ in 0..50 {
        change(&mut [&mut one], keys, n, &mut rng);
        id += 1;
        let (s, sync) = one.checkpoint(id);
        syncs.push(ms(sync));
        asyncs.push(s.async_micros as f64 / 1e3);
        written.push(s.bytes_written as f64);
    }
    let objects = storage.list("").expect("list");
    let bytes: u64 = objects.iter().map(|(_, s)| s).sum();
    let largest_sync = syncs.iter().copied().fold(0.0, f64::max);
    println!("| 50 checkpoints, 1 % changed before each, retain 3 | value |");
    println!("|---|---|");
    println!(
        "| objects in storage after them (metadata included) | {} |",
        objects.len()
    );
    println!("| bytes in storage | {bytes} |");
    println!(
        "| bytes written per checkpoint, median | {:.0} |",
        median(&mut written)
    );
    println!(
        "| sync part, median / largest (ms) | {:.3} / {:.3} |",
        median(&mut syncs),
        largest_sync
    );
    println!("| async part, median (ms) | {:.1} |", median(&mut asyncs));
    println!("| engine | {} |", one.engine.summary());

    // Restores from the last checkpoint of the single instance.
    let last = id;
    println!();
    println!("| restore | adopt ms | files adopted | copy (Flink's way) ms | copy / adopt |");
    println!("|---|---|---|---|---|");
    let t = Instant::now();
    let (b, info) = restore_lsm(&storage, last, config(all), Options::default()).expect("restore");
    let same = t.elapsed();
    drop(b);
    println!(
        "| same parallelism (1 -> 1) | {:.1} | {} | - | - |",
        ms(same),
        info.files_adopted
    );

    let halves: Vec<KeyGroupRange> = (0..2)
        .map(|i| key_group_range_for_operator(MAX_P, 2, i).expect("range"))
        .collect();
    let (mut adopt, mut files, mut copy) = (Duration::ZERO, 0, Duration::ZERO);
    for h in &halves {
        let t = Instant::now();
        let (b, info) = restore_lsm(&storage, last, config(*h), Options::default()).expect("1->2");
        adopt += t.elapsed();
        files += info.files_adopted;
        drop(b);
        let t = Instant::now();
        let b = copy_restore(&storage, last, &[all], *h);
        copy += t.elapsed();
        drop(b);
    }
    println!(
        "| rescale 1 -> 2 (both new instances) | {:.1} | {files} | {:.1} | {:.1}x |",
        ms(adopt),
        ms(copy),
        copy.as_secs_f64() / adopt.as_secs_f64().max(1e-9)
    );
    drop(one);

    // Two instances of a job, each holding only its own key groups, checkpointed once.
    let root2 = Arc::new(CheckpointStorage::local(&dir.path().join("root2")).expect("root2"));
    let mut two: Vec<Instance> = halves.iter().map(|h| instance(&root2, *h, 3)).collect();
    for k in 0..keys {
        let v = value(&mut rng);
        if let Some(i) = two.iter_mut().find(|i| i.owns(k)) {
            i.put(k, &v);
        }
    }
    for i in two.iter_mut() {
        i.engine.wait_for_background_work().expect("settle");
        i.checkpoint(1);
    }
    drop(two);
    let t = Instant::now();
    let (b, info) = restore_lsm(&root2, 1, config(all), Options::default()).expect("2->1");
    let adopt = t.elapsed();
    drop(b);
    let t = Instant::now();
    let b = copy_restore(&root2, 1, &halves, all);
    let copy = t.elapsed();
    drop(b);
    println!(
        "| rescale 2 -> 1 | {:.1} | {} (adopted {}, copied {}) | {:.1} | {:.1}x |",
        ms(adopt),
        info.files_adopted,
        info.adopted.len(),
        info.copied.len(),
        ms(copy),
        copy.as_secs_f64() / adopt.as_secs_f64().max(1e-9)
    );
}

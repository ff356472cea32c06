//! The heap backend's copy-on-write tables: point operations, the cost of the first writes after a snapshot,
//! the synchronous snapshot part and memory.
//!
//! Setup: one `ValueState<i64>` over 500,000 `i64` keys (shuffled access order, random values), void
//! namespace, max parallelism 2 (key-group range 0..=1, Flink's benchmark setup) and 128 (all 128 key
//! groups, Flink's default max parallelism). Measured through the typed store API, per key-group count:
//!
//! * `get`, `update`: no snapshot open.
//! * `first-update-after-snapshot`: one update right after a snapshot was taken (the write that first touches
//!   a shared table: a COW table copies its whole key group here).
//! * `10k-updates-after-snapshot`: 10,000 updates of random keys right after a snapshot (the snapshot stays
//!   open while they run); throughput is per update.
//! * `snapshot-sync`: the synchronous part of a snapshot (`store.snapshot()`).
//!
//! Snapshots are taken and dropped outside the timed region. Live heap bytes (a counting global allocator)
//! are printed to stderr: after the load, and after a snapshot plus an update of
//! every key (both versions alive).
//!
//! Times are CPU time of the benchmark thread (`support/cpu_time.rs`): the machines are shared. Where single
//! operations are timed one by one, the cost of reading the clock is subtracted.
//!
//! Run: `cargo bench --bench heap_tables -- --warm-up-time 1 --measurement-time 3`.

#[allow(dead_code)]
#[path = "support/cpu_time.rs"]
mod cpu_time;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use cpu_time::CpuTime;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use keyed_state::backend::heap::HeapBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueState, ValueStateDescriptor};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Counts live heap bytes (relaxed atomics).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const KEYS: usize = 500_000;
const BURST: usize = 10_000;

type Store = KeyedStateStore<LongSerializer>;

struct Inputs {
    keys: Vec<i64>,
    values: Vec<i64>,
}

impl Inputs {
    fn new() -> Self {
        let mut rng = StdRng::seed_from_u64(11);
        let mut keys: Vec<i64> = (0..KEYS as i64).collect();
        keys.shuffle(&mut rng);
        let values = (0..KEYS).map(|_| rng.random()).collect();
        Inputs { keys, values }
    }
}

fn store(kgs: u32, inp: &Inputs) -> (Store, ValueState<LongSerializer>) {
    let range = KeyGroupRange::all(kgs);
    let config = KeyedStateStore::config_for(&LongSerializer, kgs, range);
    let backend = HeapBackend::new(config).unwrap();
    let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let h = store
        .register_value(ValueStateDescriptor::new("value", LongSerializer))
        .unwrap();
    for (k, v) in inp.keys.iter().zip(&inp.values) {
        store.set_current_key(k).unwrap();
        store.value(&h).unwrap().update(v).unwrap();
    }
    (store, h)
}

#[inline]
fn update(store: &mut Store, h: &ValueState<LongSerializer>, inp: &Inputs, i: usize) {
    store.set_current_key(&inp.keys[i % KEYS]).unwrap();
    store
        .value(h)
        .unwrap()
        .update(&inp.values[(i * 7) % KEYS])
        .unwrap();
}

fn mb(bytes: isize) -> f64 {
    bytes as f64 / 1e6
}

fn memory(kgs: u32, inp: &Inputs) {
    let base = LIVE.load(Ordering::Relaxed);
    let (mut s, h) = store(kgs, inp);
    let loaded = LIVE.load(Ordering::Relaxed) - base;
    let snap = s.snapshot().unwrap();
    for i in 0..KEYS {
        update(&mut s, &h, inp, i);
    }
    let both = LIVE.load(Ordering::Relaxed) - base;
    drop(snap);
    let after = LIVE.load(Ordering::Relaxed) - base;
    eprintln!(
        "memory kg={kgs}: {:.1} MB live after loading {KEYS} keys ({:.1} B/entry); {:.1} MB with a snapshot \
         open after updating every key; {:.1} MB after dropping the snapshot",
        mb(loaded),
        loaded as f64 / KEYS as f64,
        mb(both),
        mb(after)
    );
}

fn bench_key_groups(c: &mut Criterion<CpuTime>, inp: &Inputs, kgs: u32) {
    memory(kgs, inp);
    let (mut s, h) = store(kgs, inp);
    let label = format!("cow/kg{kgs}");
    let mut i = 0usize;
    let overhead = cpu_time::clock_overhead();

    let mut g = c.benchmark_group("tables");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("get", &label), |b| {
        b.iter(|| {
            s.set_current_key(&inp.keys[i % KEYS]).unwrap();
            let v = s.value(&h).unwrap().get().unwrap();
            i += 1;
            black_box(v)
        })
    });
    g.bench_function(BenchmarkId::new("update", &label), |b| {
        b.iter(|| {
            update(&mut s, &h, inp, i);
            i += 1;
        })
    });
    g.bench_function(BenchmarkId::new("snapshot-sync", &label), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = cpu_time::now();
                let snap = s.snapshot().unwrap();
                total += (cpu_time::now() - start).saturating_sub(overhead);
                drop(snap);
            }
            total
        })
    });
    g.sample_size(20);
    g.bench_function(
        BenchmarkId::new("first-update-after-snapshot", &label),
        |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let snap = s.snapshot().unwrap();
                    let start = cpu_time::now();
                    update(&mut s, &h, inp, i);
                    total += (cpu_time::now() - start).saturating_sub(overhead);
                    i += 1;
                    drop(snap);
                }
                total
            })
        },
    );
    g.throughput(Throughput::Elements(BURST as u64));
    g.bench_function(
        BenchmarkId::new("10k-updates-after-snapshot", &label),
        |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let snap = s.snapshot().unwrap();
                    let start = cpu_time::now();
                    for _ in 0..BURST {
                        update(&mut s, &h, inp, i);
                        i += 1;
                    }
                    total += (cpu_time::now() - start).saturating_sub(overhead);
                    drop(snap);
                }
                total
            })
        },
    );
    g.finish();
}

fn tables(c: &mut Criterion<CpuTime>) {
    let inp = Inputs::new();
    for kgs in [2, 128] {
        bench_key_groups(c, &inp, kgs);
    }
}

fn config() -> Criterion<CpuTime> {
    Criterion::default()
        .with_measurement(CpuTime)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = tables
}
criterion_main!(benches);

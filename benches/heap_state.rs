//! Flink's state micro-benchmarks (`org.apache.flink.state.benchmark`) on the heap backend, plus a plain
//! `std::collections::HashMap<i64, i64>` yardstick doing the same work in the same run.
//!
//! Setup as in Flink's `StateBenchmarkBase` / `StateBenchmarkConstants`: `i64` keys (`LongSerializer`), void
//! namespace, max parallelism 2 with key-group range `0..=1` (every key lands in it), 500,000 set-up keys
//! (0..499,999 shuffled) and 500,000 new keys (500,000..999,999 shuffled), 1,000,000 random `i64` values,
//! maps of 10 entries `i64 -> f64`, list add-all of 100 values. One global index `i` walks all input arrays
//! (`SETUP_KEYS[i % 500k]`, `NEW_KEYS[i % 500k]`, `MAP_KEYS[i % 10]`, ...). Each iteration sets the current
//! key, then does the operation. Throughput is reported per operation (per entry for map keys / values /
//! entries / iterator, Flink's `@OperationsPerInvocation(10)`). Flink sets up a fresh backend per benchmark;
//! here one store serves a whole group, so the benchmarks that add new keys run after the reads.
//!
//! Times are CPU time of the benchmark thread (`support/cpu_time.rs`): the machines are shared.
//!
//! Run: `cargo bench --bench heap_state -- --warm-up-time 1 --measurement-time 3`.

#[allow(dead_code)]
#[path = "support/cpu_time.rs"]
mod cpu_time;

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use cpu_time::CpuTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use keyed_state::backend::heap::HeapBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{DoubleSerializer, LongSerializer};
use keyed_state::state::{
    KeyedStateStore, ListState, ListStateDescriptor, MapState, MapStateDescriptor,
    ValueStateDescriptor,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SETUP_KEY_COUNT: usize = 500_000;
const NEW_KEY_COUNT: usize = 500_000;
const MAP_KEY_COUNT: usize = 10;
const LIST_VALUE_COUNT: usize = 100;
const RANDOM_VALUE_COUNT: usize = 1_000_000;
const MAX_PARALLELISM: u32 = 2;

type Store = KeyedStateStore<LongSerializer>;

/// Flink's `StateBenchmarkConstants` arrays.
struct Inputs {
    setup_keys: Vec<i64>,
    new_keys: Vec<i64>,
    map_keys: Vec<i64>,
    map_values: Vec<f64>,
    random_values: Vec<i64>,
    list_values: Vec<i64>,
}

impl Inputs {
    fn new() -> Self {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let mut setup_keys: Vec<i64> = (0..SETUP_KEY_COUNT as i64).collect();
        setup_keys.shuffle(&mut rng);
        let mut new_keys: Vec<i64> =
            (SETUP_KEY_COUNT as i64..(SETUP_KEY_COUNT + NEW_KEY_COUNT) as i64).collect();
        new_keys.shuffle(&mut rng);
        let mut map_keys: Vec<i64> = (0..MAP_KEY_COUNT as i64).collect();
        map_keys.shuffle(&mut rng);
        let map_values = (0..MAP_KEY_COUNT).map(|_| rng.random::<f64>()).collect();
        let random_values: Vec<i64> = (0..RANDOM_VALUE_COUNT).map(|_| rng.random()).collect();
        let list_values = random_values[..LIST_VALUE_COUNT].to_vec();
        Inputs {
            setup_keys,
            new_keys,
            map_keys,
            map_values,
            random_values,
            list_values,
        }
    }

    #[inline]
    fn setup_key(&self, i: usize) -> i64 {
        self.setup_keys[i % SETUP_KEY_COUNT]
    }
    #[inline]
    fn new_key(&self, i: usize) -> i64 {
        self.new_keys[i % NEW_KEY_COUNT]
    }
    #[inline]
    fn value(&self, i: usize) -> i64 {
        self.random_values[i % RANDOM_VALUE_COUNT]
    }
    #[inline]
    fn map_key(&self, i: usize) -> i64 {
        self.map_keys[i % MAP_KEY_COUNT]
    }
    #[inline]
    fn map_value(&self, i: usize) -> f64 {
        self.map_values[i % MAP_KEY_COUNT]
    }
}

fn new_store() -> Store {
    let config =
        KeyedStateStore::config_for(&LongSerializer, MAX_PARALLELISM, KeyGroupRange::new(0, 1));
    KeyedStateStore::new(Box::new(HeapBackend::new(config).unwrap()), LongSerializer).unwrap()
}

/// Runs `op(i)` for `iters` consecutive global indexes and times it.
fn timed(iters: u64, i: &mut usize, mut op: impl FnMut(usize)) -> Duration {
    let start = cpu_time::now();
    for _ in 0..iters {
        op(*i);
        *i += 1;
    }
    cpu_time::now() - start
}

// ---------------------------------------------------------------- value state + yardstick

fn value_state(c: &mut Criterion<CpuTime>) {
    let inp = Inputs::new();
    let mut store = new_store();
    let h = store
        .register_value(ValueStateDescriptor::new("value", LongSerializer))
        .unwrap();
    for (j, k) in inp.setup_keys.iter().enumerate() {
        store.set_current_key(k).unwrap();
        store.value(&h).unwrap().update(&inp.value(j)).unwrap();
    }
    let mut i = 0usize;
    let mut g = c.benchmark_group("value");
    g.throughput(Throughput::Elements(1));
    g.bench_function("valueUpdate", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            store.value(&h).unwrap().update(&inp.value(i)).unwrap();
            i += 1;
        })
    });
    g.bench_function("valueGet", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            let v = store.value(&h).unwrap().get().unwrap();
            i += 1;
            black_box(v)
        })
    });
    g.bench_function("valueAdd", |b| {
        b.iter(|| {
            store.set_current_key(&inp.new_key(i)).unwrap();
            store.value(&h).unwrap().update(&inp.value(i)).unwrap();
            i += 1;
        })
    });
    g.finish();
    drop(store);

    // The yardstick: a plain std HashMap with the same keys, values and access order.
    let mut map: HashMap<i64, i64> = HashMap::new();
    for (j, k) in inp.setup_keys.iter().enumerate() {
        map.insert(*k, inp.value(j));
    }
    let mut g = c.benchmark_group("yardstick");
    g.throughput(Throughput::Elements(1));
    g.bench_function("hashmapUpdate", |b| {
        b.iter(|| {
            map.insert(inp.setup_key(i), inp.value(i));
            i += 1;
        })
    });
    g.bench_function("hashmapGet", |b| {
        b.iter(|| {
            let v = map.get(&inp.setup_key(i)).copied();
            i += 1;
            black_box(v)
        })
    });
    drop(map);
    // The same map with 32-byte slots (`u128` keys and values): what the slot size alone costs once the
    // table outgrows the caches (`design/decisions/0002-heap-tables.md`, packed slots).
    let mut wide: HashMap<u128, u128> = HashMap::new();
    for (j, k) in inp.setup_keys.iter().enumerate() {
        wide.insert(*k as u128, inp.value(j) as u128);
    }
    g.bench_function("hashmap32ByteSlotsGet", |b| {
        b.iter(|| {
            let v = wide.get(&(inp.setup_key(i) as u128)).copied();
            i += 1;
            black_box(v)
        })
    });
    g.finish();
}

// ---------------------------------------------------------------- list state

/// Flink's per-iteration list setup: every set-up key holds one element.
fn reset_lists(store: &mut Store, h: &ListState<LongSerializer>, inp: &Inputs) {
    for (j, k) in inp.setup_keys.iter().enumerate() {
        store.set_current_key(k).unwrap();
        store.list(h).unwrap().update(&[inp.value(j)]).unwrap();
    }
}

/// A list benchmark: the lists are reset to one element each before the first sample and whenever
/// `reset_after` operations have run since the last reset (Flink resets them every 1 s iteration), so
/// appending benchmarks do not grow the lists without bound. Resets are not timed.
fn list_bench(
    g: &mut BenchmarkGroup<'_, CpuTime>,
    name: &str,
    store: &mut Store,
    h: &ListState<LongSerializer>,
    inp: &Inputs,
    reset_after: u64,
    mut op: impl FnMut(&mut Store, &ListState<LongSerializer>, usize),
) {
    let mut i = 0usize;
    let mut since_reset = u64::MAX;
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            if since_reset.saturating_add(iters) > reset_after {
                reset_lists(store, h, inp);
                since_reset = 0;
            }
            since_reset += iters;
            timed(iters, &mut i, |i| op(store, h, i))
        })
    });
}

fn list_state(c: &mut Criterion<CpuTime>) {
    let inp = Inputs::new();
    let mut store = new_store();
    let h = store
        .register_list(ListStateDescriptor::new("list", LongSerializer))
        .unwrap();
    let mut g = c.benchmark_group("list");
    g.throughput(Throughput::Elements(1));
    let never = u64::MAX - 1;
    list_bench(
        &mut g,
        "listUpdate",
        &mut store,
        &h,
        &inp,
        never,
        |s, h, i| {
            s.set_current_key(&inp.setup_key(i)).unwrap();
            s.list(h).unwrap().update(&[inp.value(i)]).unwrap();
        },
    );
    // Flink's listGet returns the heap list without iterating; here `get` always decodes the elements.
    list_bench(&mut g, "listGet", &mut store, &h, &inp, never, |s, h, i| {
        s.set_current_key(&inp.setup_key(i)).unwrap();
        black_box(s.list(h).unwrap().get().unwrap());
    });
    list_bench(
        &mut g,
        "listGetAndIterate",
        &mut store,
        &h,
        &inp,
        never,
        |s, h, i| {
            s.set_current_key(&inp.setup_key(i)).unwrap();
            let mut sum = 0i64;
            for v in s.list(h).unwrap().get().unwrap().into_iter().flatten() {
                sum = sum.wrapping_add(v);
            }
            black_box(sum);
        },
    );
    // Flink's listAdd calls `update([v])` on a new key.
    list_bench(&mut g, "listAdd", &mut store, &h, &inp, never, |s, h, i| {
        s.set_current_key(&inp.new_key(i)).unwrap();
        s.list(h).unwrap().update(&[inp.value(i)]).unwrap();
    });
    // Appends grow the lists: reset after 5 appends per key on average (Flink: ~6 per 1 s iteration).
    list_bench(
        &mut g,
        "listAppend",
        &mut store,
        &h,
        &inp,
        5 * SETUP_KEY_COUNT as u64,
        |s, h, i| {
            s.set_current_key(&inp.setup_key(i)).unwrap();
            s.list(h).unwrap().add(&inp.value(i)).unwrap();
        },
    );
    // 100 elements per call: reset after one add-all per key on average (Flink: ~1.25 per iteration).
    list_bench(
        &mut g,
        "listAddAll",
        &mut store,
        &h,
        &inp,
        SETUP_KEY_COUNT as u64,
        |s, h, i| {
            s.set_current_key(&inp.setup_key(i)).unwrap();
            s.list(h).unwrap().add_all(&inp.list_values).unwrap();
        },
    );
    g.finish();
}

// ---------------------------------------------------------------- map state

fn map_state(c: &mut Criterion<CpuTime>) {
    let inp = Inputs::new();
    let mut store = new_store();
    let h: MapState<LongSerializer, DoubleSerializer> = store
        .register_map(MapStateDescriptor::new(
            "map",
            LongSerializer,
            DoubleSerializer,
        ))
        .unwrap();
    for k in &inp.setup_keys {
        store.set_current_key(k).unwrap();
        let mut m = store.map(&h).unwrap();
        for j in 0..MAP_KEY_COUNT {
            m.put(&inp.map_key(j), &inp.map_value(j)).unwrap();
        }
    }
    let put_all: Vec<(i64, f64)> = (0..MAP_KEY_COUNT)
        .map(|j| (inp.map_key(j), inp.map_value(j)))
        .collect();
    let mut i = 0usize;
    let mut g = c.benchmark_group("map");
    g.throughput(Throughput::Elements(1));
    g.bench_function("mapUpdate", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            store
                .map(&h)
                .unwrap()
                .put(&inp.map_key(i), &inp.map_value(i))
                .unwrap();
            i += 1;
        })
    });
    g.bench_function("mapGet", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            let v = store.map(&h).unwrap().get(&inp.map_key(i)).unwrap();
            i += 1;
            black_box(v)
        })
    });
    g.bench_function("mapContains", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            let v = store
                .map(&h)
                .unwrap()
                .contains(&(inp.map_key(i) << 1))
                .unwrap();
            i += 1;
            black_box(v)
        })
    });
    g.bench_function("mapIsEmpty", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            let v = store.map(&h).unwrap().is_empty().unwrap();
            i += 1;
            black_box(v)
        })
    });
    // Per entry, as Flink's @OperationsPerInvocation(10).
    g.throughput(Throughput::Elements(MAP_KEY_COUNT as u64));
    g.bench_function("mapKeys", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            let mut sum = 0i64;
            for k in store.map(&h).unwrap().keys() {
                sum = sum.wrapping_add(k.unwrap());
            }
            i += 1;
            black_box(sum)
        })
    });
    g.bench_function("mapValues", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            let mut sum = 0f64;
            for v in store.map(&h).unwrap().values() {
                sum += v.unwrap();
            }
            i += 1;
            black_box(sum)
        })
    });
    g.bench_function("mapEntries", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            let mut sum = 0f64;
            for e in store.map(&h).unwrap().entries() {
                let (k, v) = e.unwrap();
                sum += k as f64 + v;
            }
            i += 1;
            black_box(sum)
        })
    });
    // Flink's `iterator()` supports `remove` and `setValue`; our equivalent is `retain`.
    g.bench_function("mapIterator", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            let mut sum = 0f64;
            store
                .map(&h)
                .unwrap()
                .retain(|k, v| {
                    sum += *k as f64 + *v;
                    true
                })
                .unwrap();
            i += 1;
            black_box(sum)
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("mapPutAll", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            store.map(&h).unwrap().put_all(&put_all).unwrap();
            i += 1;
        })
    });
    // Last: removes empty the maps (repeated removes then miss, as in Flink).
    g.bench_function("mapAdd", |b| {
        b.iter(|| {
            store.set_current_key(&inp.new_key(i)).unwrap();
            store
                .map(&h)
                .unwrap()
                .put(&inp.map_key(i), &inp.map_value(i))
                .unwrap();
            i += 1;
        })
    });
    g.bench_function("mapRemove", |b| {
        b.iter(|| {
            store.set_current_key(&inp.setup_key(i)).unwrap();
            store.map(&h).unwrap().remove(&inp.map_key(i)).unwrap();
            i += 1;
        })
    });
    g.finish();
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
    targets = value_state, list_state, map_state
}
criterion_main!(benches);

/// mimalloc as the global allocator (a dev-dependency): see design/architecture.md,
/// "Allocator".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

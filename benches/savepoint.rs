//! Savepoint encode and restore throughput (MB/s of savepoint bytes) of the heap backend.
//!
//! Setup: 1,000,000 `i64` keys (`LongSerializer`), max parallelism 128 (all 128 key groups), one
//! `ValueState<Vec<u8>>` (`BytesSerializer`) with a 100-byte payload per key (104 value bytes with the
//! length prefix), void namespace.
//!
//! * encode: `savepoint::encode` of a heap snapshot (sync part taken once, outside the timing) into
//!   `io::sink()` (`encode-sink`) and into a `Vec` pre-sized to the savepoint (`encode-vec`, includes the
//!   page faults of the fresh buffer).
//! * restore: `SavepointReader::from_bytes` + `KeyedStateStore::restore` into a fresh heap backend. The copy
//!   of the savepoint bytes handed to `from_bytes` and the drop of the restored store are not timed.
//! * restore-file: `SavepointReader::open` of the savepoint written to a file (in the page cache: written
//!   once before, read by every iteration) + `KeyedStateStore::restore`: what reading the file costs.
//!
//! Both uncompressed and LZ4. Throughput is `Throughput::Bytes(savepoint size)` of the variant measured.
//!
//! Times are CPU time of the benchmark thread (`support/cpu_time.rs`): the machines are shared.
//!
//! Run: `cargo bench --bench savepoint -- --warm-up-time 1 --measurement-time 3`.

#[allow(dead_code)]
#[path = "support/cpu_time.rs"]
mod cpu_time;

use std::time::Duration;

use cpu_time::CpuTime;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::BackendSnapshot;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::{encode, Compression, SavepointReader, WriteOptions};
use keyed_state::serializer::{BytesSerializer, LongSerializer};
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: i64 = 1_000_000;
const VALUE_LEN: usize = 100;
const MAX_PARALLELISM: u32 = 128;

type Store = KeyedStateStore<LongSerializer>;

fn new_store() -> Store {
    let config = KeyedStateStore::config_for(
        &LongSerializer,
        MAX_PARALLELISM,
        KeyGroupRange::all(MAX_PARALLELISM),
    );
    KeyedStateStore::new(Box::new(HeapBackend::new(config).unwrap()), LongSerializer).unwrap()
}

/// A heap store with `KEYS` keys of one 100-byte value each. The payload is random bytes from a small
/// alphabet (16 symbols), so LZ4 has something to do without the data being trivially compressible.
fn populated() -> Store {
    let mut rng = StdRng::seed_from_u64(7);
    let mut store = new_store();
    let h = store
        .register_value(ValueStateDescriptor::new("payload", BytesSerializer))
        .unwrap();
    let mut value = vec![0u8; VALUE_LEN];
    for k in 0..KEYS {
        for b in value.iter_mut() {
            *b = b'a' + rng.random_range(0..16u8);
        }
        store.set_current_key(&k).unwrap();
        store.value(&h).unwrap().update(&value).unwrap();
    }
    store
}

fn encode_to_vec(
    snapshot: &dyn BackendSnapshot,
    compression: Compression,
    capacity: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    encode(snapshot, &WriteOptions { compression }, &mut out).unwrap();
    out
}

fn savepoint(c: &mut Criterion<CpuTime>) {
    let mut store = populated();
    let snapshot = store.snapshot().unwrap();
    for (label, compression) in [("none", Compression::None), ("lz4", Compression::Lz4)] {
        let bytes = encode_to_vec(&*snapshot, compression, 0);
        let size = bytes.len();
        eprintln!(
            "savepoint ({label}): {KEYS} keys x {VALUE_LEN}-byte values, {size} bytes ({:.1} MB)",
            size as f64 / 1e6
        );
        let mut g = c.benchmark_group(format!("savepoint-{label}"));
        g.throughput(Throughput::BytesDecimal(size as u64));
        g.sample_size(10);
        g.bench_function("encode-sink", |b| {
            b.iter(|| encode(&*snapshot, &WriteOptions { compression }, std::io::sink()).unwrap())
        });
        g.bench_function("encode-vec", |b| {
            b.iter_batched(
                || (),
                |()| encode_to_vec(&*snapshot, compression, size),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("restore", |b| {
            b.iter_batched(
                || (bytes.clone(), new_store()),
                |(copy, mut fresh)| {
                    let reader = SavepointReader::from_bytes(copy).unwrap();
                    let summary = fresh.restore(std::slice::from_ref(&reader)).unwrap();
                    assert_eq!(summary.entries, KEYS as u64);
                    (fresh, reader)
                },
                BatchSize::PerIteration,
            )
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.savepoint");
        std::fs::write(&path, &bytes).unwrap();
        g.bench_function("restore-file", |b| {
            b.iter_batched(
                new_store,
                |mut fresh| {
                    let reader = SavepointReader::open(&path).unwrap();
                    let summary = fresh.restore(std::slice::from_ref(&reader)).unwrap();
                    assert_eq!(summary.entries, KEYS as u64);
                    (fresh, reader)
                },
                BatchSize::PerIteration,
            )
        });
        g.finish();
    }
}

fn config() -> Criterion<CpuTime> {
    Criterion::default()
        .with_measurement(CpuTime)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = savepoint
}
criterion_main!(benches);

/// mimalloc as the global allocator (a dev-dependency): see design/architecture.md,
/// "Allocator".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

//! Flink interop throughput: `export-flink` (our savepoint → Flink canonical savepoint directory) and
//! `import-flink` (Flink canonical savepoint → our savepoint), uncompressed and Snappy, in MB/s of the
//! canonical keyed-state stream (the bytes Flink's files hold uncompressed).
//!
//! Setup: one `ValueState<byte[]>` (`BytePrimitiveArraySerializer`, values of 4 + 100 bytes: 58 bytes of
//! fixed JSON-like text, then 42 pseudo-random bytes from a 16-symbol alphabet, so Snappy has something to
//! do) under `i64` keys 0..n (`LongSerializer`), void
//! namespace, max parallelism 128, exported at parallelism 4; n is chosen so the canonical stream is
//! `FLINK_BENCH_MB` MiB (default 1024). Our savepoint is written once (untimed) into `FLINK_BENCH_DIR`
//! (default `/dev/shm` if present, else the temp dir), then per round and compression: export (timed), import
//! of that export into a new savepoint file (timed), and a check that the re-imported savepoint is
//! byte-identical to the one exported. `FLINK_BENCH_ROUNDS` rounds (default 2); the table shows the round
//! with the least CPU time.
//!
//! Times: wall clock, and CPU time of the process (`CLOCK_PROCESS_CPUTIME_ID`; the work runs on one thread,
//! so this is one core's time). MB/s = stream MiB / CPU seconds.
//!
//! Run: `cargo bench --bench flink_interop` (`FLINK_BENCH_MB=64` for a quick run).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use keyed_state::backend::{BackendConfig, BackendSnapshot, StateId};
use keyed_state::keygroup::{java_long_hash, key_group_for_hash, KeyGroup, KeyGroupRange};
use keyed_state::meta::{StateKind, StateMetaInfo};
use keyed_state::savepoint::{write_savepoint, SavepointReader, WriteOptions};
use keyed_state::serializer::{
    SerializerSnapshot, BYTES_SNAPSHOT_ID, LONG_SNAPSHOT_ID, VOID_NAMESPACE_SNAPSHOT_ID,
};
use keyed_state_flink::{export_canonical, ExportOptions, FlinkSavepoint};

const MAX_PARALLELISM: u32 = 128;
const PAYLOAD: usize = 100;
/// Canonical stream bytes per entry: i32 len | key (1 + 8 + 1) | i32 len | value (4 + 100).
const ENTRY_STREAM_BYTES: u64 = 4 + 10 + 4 + 4 + PAYLOAD as u64;

fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Generated entries: per key group the keys that hash to it, ascending.
struct Generated {
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    keys: Vec<Vec<i64>>,
}

/// The fixed part of every payload (what a record's field names and common values look like).
const TEXT: &[u8] = b"\"status\":\"active\",\"region\":\"eu-west-1\",\"tier\":\"gold\",\"id\":";

fn payload(k: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(&(PAYLOAD as i32).to_be_bytes());
    out.extend_from_slice(TEXT);
    let mut x = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in TEXT.len()..PAYLOAD {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(b'a' + (x & 15) as u8);
    }
}

impl BackendSnapshot for Generated {
    fn config(&self) -> &BackendConfig {
        &self.config
    }
    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }
    fn visit(
        &self,
        _state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> keyed_state::Result<()>,
    ) -> keyed_state::Result<()> {
        let mut key = Vec::with_capacity(10);
        let mut value = Vec::with_capacity(4 + PAYLOAD);
        for &k in &self.keys[kg as usize] {
            key.clear();
            key.push(kg as u8);
            key.extend_from_slice(&k.to_be_bytes());
            key.push(0);
            value.clear();
            payload(k, &mut value);
            f(&key, &value)?;
        }
        Ok(())
    }
}

fn generated(n: u64) -> Generated {
    let mut keys = vec![Vec::new(); MAX_PARALLELISM as usize];
    for k in 0..n as i64 {
        keys[key_group_for_hash(java_long_hash(k), MAX_PARALLELISM) as usize].push(k);
    }
    Generated {
        config: BackendConfig {
            max_parallelism: MAX_PARALLELISM,
            key_group_range: KeyGroupRange::all(MAX_PARALLELISM),
            key_serializer: SerializerSnapshot::simple(LONG_SNAPSHOT_ID, 3),
        },
        states: vec![StateMetaInfo {
            name: "payload".into(),
            kind: StateKind::Value,
            namespace_serializer: SerializerSnapshot::simple(VOID_NAMESPACE_SNAPSHOT_ID, 3),
            value_serializer: SerializerSnapshot::simple(BYTES_SNAPSHOT_ID, 3),
            ttl: None,
        }],
        keys,
    }
}

fn dir_size(d: &Path) -> u64 {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

struct Row {
    op: &'static str,
    compression: &'static str,
    file_bytes: u64,
    wall: Duration,
    cpu: Duration,
}

fn main() {
    let mb: u64 = std::env::var("FLINK_BENCH_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let rounds: usize = std::env::var("FLINK_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let base: PathBuf = std::env::var_os("FLINK_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let shm = PathBuf::from("/dev/shm");
            if shm.is_dir() {
                shm
            } else {
                std::env::temp_dir()
            }
        });
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let n = mb * 1024 * 1024 / ENTRY_STREAM_BYTES;
    let stream = n * ENTRY_STREAM_BYTES;
    eprintln!(
        "generating {n} entries ({:.1} MiB canonical stream) in {}",
        stream as f64 / 1048576.0,
        tmp.path().display()
    );
    let ours = tmp.path().join("ours.sp");
    let summary = write_savepoint(&ours, &generated(n), &WriteOptions::default()).unwrap();
    let ours_bytes = std::fs::read(&ours).unwrap();
    eprintln!("our savepoint: {} bytes", summary.bytes_written);

    let mut best: Vec<Row> = Vec::new();
    for round in 0..rounds {
        for compress in [false, true] {
            let c = if compress { "snappy" } else { "none" };
            let out = tmp.path().join(format!("flink-{c}"));
            let reader = SavepointReader::open(&ours).unwrap();
            let opts = ExportOptions {
                compress,
                ..ExportOptions::new("bench-op", 4)
            };
            let (w, c0) = (Instant::now(), process_cpu());
            let s = export_canonical(&[("ours", &reader)], &opts, &out).unwrap();
            let export = Row {
                op: "export",
                compression: c,
                file_bytes: dir_size(&out),
                wall: w.elapsed(),
                cpu: process_cpu() - c0,
            };
            assert_eq!(s.entries(), n);
            drop(reader);

            let back = tmp.path().join("back.sp");
            let (w, c0) = (Instant::now(), process_cpu());
            let sp = FlinkSavepoint::open(&out).unwrap();
            let import = sp.import(sp.operator("bench-op").unwrap()).unwrap();
            write_savepoint(&back, &import, &WriteOptions::default()).unwrap();
            drop(import);
            let import = Row {
                op: "import",
                compression: c,
                file_bytes: export.file_bytes,
                wall: w.elapsed(),
                cpu: process_cpu() - c0,
            };
            assert!(
                std::fs::read(&back).unwrap() == ours_bytes,
                "import of the export differs from the savepoint exported"
            );
            std::fs::remove_file(&back).unwrap();
            std::fs::remove_dir_all(&out).unwrap();
            for r in [export, import] {
                eprintln!(
                    "round {round}: {} {}: wall {:?}, cpu {:?}",
                    r.op, r.compression, r.wall, r.cpu
                );
                match best
                    .iter_mut()
                    .find(|b| b.op == r.op && b.compression == r.compression)
                {
                    Some(b) if b.cpu <= r.cpu => {}
                    Some(b) => *b = r,
                    None => best.push(r),
                }
            }
        }
    }
    let mib = stream as f64 / 1048576.0;
    println!(
        "flink_interop: {n} entries, canonical stream {mib:.1} MiB, parallelism 4, best of {rounds} round(s); import of each export is byte-identical to the savepoint exported"
    );
    println!("| op | compression | stream MiB | files MiB | wall s | CPU s | MB/s (stream MiB / CPU s) |");
    println!("|---|---|---|---|---|---|---|");
    for r in &best {
        println!(
            "| {} | {} | {mib:.1} | {:.1} | {:.2} | {:.2} | {:.0} |",
            r.op,
            r.compression,
            r.file_bytes as f64 / 1048576.0,
            r.wall.as_secs_f64(),
            r.cpu.as_secs_f64(),
            mib / r.cpu.as_secs_f64()
        );
    }
}

//! Import throughput of Flink RocksDB **native** savepoints (`IncrementalRemoteKeyedStateHandle` with SST
//! files): the SST reader alone, and `import-flink` end to end (`_metadata`, SSTs read, folded, grouped by
//! key group, our savepoint written), in MB/s of SST file bytes.
//!
//! Flink is not available to write a big native savepoint, so the bench writes one itself, in the format of
//! the SST files FRocksDB wrote for the fixtures (tests/fixtures/flink/rocksdb-native-savepoint):
//! block-based tables, format_version 5, XXH3 block checksums, Snappy data blocks of ~4 KiB (restart
//! interval 16), a binary-search index of user keys with delta-encoded values, the properties Flink's files
//! carry (column family, `leveldb.BytewiseComparator`, `StringAppendTESTOperator`). When RocksDB's
//! `sst_dump` is on the PATH (Debian's `rocksdb-tools`), every generated file is first checked by it
//! (`--command=check --verify_checksum`, and its entry count), so the files are RocksDB's format by
//! RocksDB's reading, not only by ours.
//!
//! State: the fixture job's `sum` (`ValueState<Long>`) and `list` (`ListState<Long>`) for `i64` keys 0..n,
//! max parallelism 128, two subtasks (key groups 0..=63, 64..=127), each key written twice, as two flushes
//! would: per subtask and state one SST of the first writes and one of the second, so `sum` folds two puts
//! per key (newest wins) and `list` two merge operands (`e1,e2`). Values are pseudo-random. n is chosen so
//! the SST files total about `FLINK_NATIVE_BENCH_MB` MiB (default 256). The savepoint is written once
//! (untimed) into `FLINK_BENCH_DIR` (default `/dev/shm` if present, else the temp dir), with the fixture's
//! meta-data files, a `MANIFEST` listing the SSTs as RocksDB's flushes would and a `CURRENT` naming it, and a
//! `_metadata` derived from the fixture's. Then `FLINK_BENCH_ROUNDS` rounds (default
//! 3), each alternating: SST scan, full import, and the fixture native savepoint itself imported 200 times
//! (its 24 files of ~1.8 KiB: per-file overhead dominates). The table shows every round.
//!
//! Times: wall clock and process CPU time (`CLOCK_PROCESS_CPUTIME_ID`; one thread). MB/s = SST MiB / CPU s.
//!
//! Run: `cargo bench --bench flink_native_import` (`FLINK_NATIVE_BENCH_MB=32` for a quick run).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use keyed_state::keygroup::{java_long_hash, key_group_for_hash};
use keyed_state::savepoint::{write_savepoint, WriteOptions};
use keyed_state_flink::metadata::{KeyedHandle, StreamHandle};
use keyed_state_flink::metadata_writer::write_metadata;
use keyed_state_flink::sst::manifest::{EditSpec, LiveFile, ManifestWriter};
use keyed_state_flink::sst::table::block_checksum;
use keyed_state_flink::sst::SstFile;
use keyed_state_flink::FlinkSavepoint;

const MAX_PARALLELISM: u32 = 128;
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/flink/rocksdb-native-savepoint"
);
const BLOCK_SIZE: usize = 4096;
const RESTART_INTERVAL: usize = 16;

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

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// RocksDB's BlockBuilder: shared-prefix entries, restart points every `interval` entries. `with_value_len`
/// false writes delta-encoded index entries (no value length).
struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    last: Vec<u8>,
    count: usize,
    interval: usize,
    with_value_len: bool,
}

impl BlockBuilder {
    fn new(interval: usize, with_value_len: bool) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: Vec::new(),
            last: Vec::new(),
            count: 0,
            interval,
            with_value_len,
        }
    }

    fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.count % self.interval == 0 {
            self.restarts.push(self.buf.len() as u32);
            0
        } else {
            self.last
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        varint(shared as u64, &mut self.buf);
        varint((key.len() - shared) as u64, &mut self.buf);
        if self.with_value_len {
            varint(value.len() as u64, &mut self.buf);
        }
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last.clear();
        self.last.extend_from_slice(key);
        self.count += 1;
    }

    fn finish(&mut self) -> Vec<u8> {
        if self.restarts.is_empty() {
            self.restarts.push(0);
        }
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts.clear();
        self.last.clear();
        self.count = 0;
        out
    }
}

/// An SST file being written: blocks with trailers, then index, properties, metaindex and footer.
struct SstWriter {
    out: Vec<u8>,
    data: BlockBuilder,
    index: BlockBuilder,
    last_key: Vec<u8>,
    entries: u64,
    data_blocks: u64,
    raw_key: u64,
    raw_value: u64,
}

impl SstWriter {
    fn new() -> Self {
        SstWriter {
            out: Vec::new(),
            data: BlockBuilder::new(RESTART_INTERVAL, true),
            index: BlockBuilder::new(1, false),
            last_key: Vec::new(),
            entries: 0,
            data_blocks: 0,
            raw_key: 0,
            raw_value: 0,
        }
    }

    /// Writes `contents` with its trailer (Snappy when it saves at least 1/8, as RocksDB decides).
    fn write_block(&mut self, contents: &[u8], compress: bool) -> (u64, u64) {
        let offset = self.out.len() as u64;
        let compressed = compress
            .then(|| snap::raw::Encoder::new().compress_vec(contents).ok())
            .flatten()
            .filter(|c| c.len() < contents.len() - contents.len() / 8);
        let (body, ty) = match &compressed {
            Some(c) => (&c[..], 1u8),
            None => (contents, 0u8),
        };
        self.out.extend_from_slice(body);
        self.out.push(ty);
        let sum = block_checksum(4, body, ty);
        self.out.extend_from_slice(&sum.to_le_bytes());
        (offset, body.len() as u64)
    }

    fn flush_data(&mut self) {
        if self.data.count == 0 {
            return;
        }
        let block = self.data.finish();
        let (off, size) = self.write_block(&block, true);
        let mut handle = Vec::new();
        varint(off, &mut handle);
        varint(size, &mut handle);
        let sep = self.last_key[..self.last_key.len() - 8].to_vec();
        self.index.add(&sep, &handle);
        self.data_blocks += 1;
    }

    fn add(&mut self, user_key: &[u8], seqno: u64, ty: u8, value: &[u8]) {
        let mut ikey = user_key.to_vec();
        ikey.extend_from_slice(&((seqno << 8) | u64::from(ty)).to_le_bytes());
        self.data.add(&ikey, value);
        self.last_key = ikey;
        self.entries += 1;
        self.raw_key += self.last_key.len() as u64;
        self.raw_value += value.len() as u64;
        if self.data.buf.len() >= BLOCK_SIZE {
            self.flush_data();
        }
    }

    fn finish(mut self, column_family: &str, cf_id: u64) -> Vec<u8> {
        self.flush_data();
        let index = self.index.finish();
        let index_handle = self.write_block(&index, false);
        let num = |v: u64| {
            let mut b = Vec::new();
            varint(v, &mut b);
            b
        };
        let mut props: Vec<(&str, Vec<u8>)> = vec![
            (
                "rocksdb.block.based.table.index.type",
                0u32.to_le_bytes().to_vec(),
            ),
            ("rocksdb.column.family.id", num(cf_id)),
            (
                "rocksdb.column.family.name",
                column_family.as_bytes().to_vec(),
            ),
            ("rocksdb.comparator", b"leveldb.BytewiseComparator".to_vec()),
            ("rocksdb.compression", b"Snappy".to_vec()),
            ("rocksdb.data.size", num(index_handle.0)),
            ("rocksdb.index.key.is.user.key", num(1)),
            ("rocksdb.index.size", num(index_handle.1 + 5)),
            ("rocksdb.index.value.is.delta.encoded", num(1)),
            (
                "rocksdb.merge.operator",
                b"StringAppendTESTOperator".to_vec(),
            ),
            ("rocksdb.num.data.blocks", num(self.data_blocks)),
            ("rocksdb.num.entries", num(self.entries)),
            ("rocksdb.raw.key.size", num(self.raw_key)),
            ("rocksdb.raw.value.size", num(self.raw_value)),
        ];
        props.sort();
        let mut pb = BlockBuilder::new(1, true);
        for (k, v) in &props {
            pb.add(k.as_bytes(), v);
        }
        let props_block = pb.finish();
        let props_handle = self.write_block(&props_block, false);
        let mut mb = BlockBuilder::new(1, true);
        let mut h = Vec::new();
        varint(props_handle.0, &mut h);
        varint(props_handle.1, &mut h);
        mb.add(b"rocksdb.properties", &h);
        let meta_block = mb.finish();
        let meta_handle = self.write_block(&meta_block, false);
        let mut footer = vec![4u8];
        varint(meta_handle.0, &mut footer);
        varint(meta_handle.1, &mut footer);
        varint(index_handle.0, &mut footer);
        varint(index_handle.1, &mut footer);
        footer.resize(41, 0);
        footer.extend_from_slice(&5u32.to_le_bytes());
        footer.extend_from_slice(&0x88e2_41b7_85f4_cff7u64.to_le_bytes());
        self.out.extend_from_slice(&footer);
        self.out
    }
}

struct Generated {
    dir: PathBuf,
    sst_bytes: u64,
    records: u64,
    files: Vec<PathBuf>,
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Writes the native savepoint into `dir`: SSTs, the fixture's meta-data files, a `_metadata`.
fn generate(dir: &Path, target_bytes: u64) -> Generated {
    // About 2 × (sum + list) records of ~27 bytes each per key before Snappy.
    let n = (target_bytes / 75).max(1000) as i64;
    let mut by_kg: Vec<Vec<i64>> = vec![Vec::new(); MAX_PARALLELISM as usize];
    for k in 0..n {
        by_kg[key_group_for_hash(java_long_hash(k), MAX_PARALLELISM) as usize].push(k);
    }
    let sp = FlinkSavepoint::open(Path::new(FIXTURE)).expect("fixture _metadata");
    let mut meta = sp.metadata.clone();
    let mut files = Vec::new();
    let mut sst_bytes = 0;
    let mut records = 0;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let op = meta
        .operators
        .iter_mut()
        .find(|o| o.uid.as_deref() == Some("state-op"))
        .expect("state-op");
    for st in op.subtasks.iter_mut() {
        let Some(KeyedHandle::Incremental {
            range,
            meta: meta_handle,
            shared,
            private,
            ..
        }) = &mut st.managed_keyed
        else {
            panic!("fixture handle is not incremental");
        };
        // The fixture's meta-data file (the serialization proxy), copied.
        let StreamHandle::Relative { path, .. } = meta_handle.clone() else {
            panic!("fixture meta-data handle")
        };
        std::fs::copy(Path::new(FIXTURE).join(&path), dir.join(&path)).expect("copy meta-data");
        shared.clear();
        private.clear();
        // The MANIFEST: the two column families, then one flush (an L0 file) per SST written.
        let mut manifest = ManifestWriter::new();
        manifest.comparator("leveldb.BytewiseComparator");
        for (id, name) in [(1, "sum"), (2, "list")] {
            manifest.edit(&EditSpec {
                column_family: id,
                add_column_family: Some(name.into()),
                ..EditSpec::default()
            });
        }
        let mut file_no = 100;
        for layer in 0..2u64 {
            for (cf, cf_id, ty) in [("sum", 1u64, 1u8), ("list", 2, 2)] {
                let mut w = SstWriter::new();
                let first_seq = 1 + layer * 2 * n as u64;
                let mut seq = first_seq;
                let mut smallest = None;
                for kg in range.start()..=range.end() {
                    let mut keys: Vec<[u8; 10]> = by_kg[kg as usize]
                        .iter()
                        .map(|k| {
                            let mut b = [0u8; 10];
                            b[0] = kg as u8;
                            b[1..9].copy_from_slice(&k.to_be_bytes());
                            b
                        })
                        .collect();
                    keys.sort();
                    for key in &keys {
                        let v = (xorshift(&mut seed) % 1_000_000) as i64;
                        w.add(key, seq, ty, &v.to_be_bytes());
                        smallest.get_or_insert_with(|| w.last_key.clone());
                        seq += 1;
                    }
                }
                records += w.entries;
                let largest = w.last_key.clone();
                let bytes = w.finish(cf, cf_id);
                manifest.edit(&EditSpec {
                    column_family: cf_id as u32,
                    added: vec![LiveFile {
                        level: 0,
                        number: file_no,
                        size: bytes.len() as u64,
                        smallest: smallest.unwrap_or_else(|| largest.clone()),
                        largest,
                        smallest_seqno: first_seq,
                        largest_seqno: seq - 1,
                        epoch: file_no,
                    }],
                    next_file_and_last_sequence: Some((file_no + 1, seq - 1)),
                    ..EditSpec::default()
                });
                let name = format!("bench-{}-{file_no}.sst", st.index);
                std::fs::write(dir.join(&name), &bytes).expect("write sst");
                sst_bytes += bytes.len() as u64;
                shared.push((
                    format!("{file_no:06}.sst"),
                    StreamHandle::Relative {
                        path: name.clone(),
                        size: bytes.len() as i64,
                    },
                ));
                files.push(dir.join(&name));
                file_no += 1;
            }
        }
        for (local, bytes) in [
            ("MANIFEST-000005", manifest.finish()),
            ("CURRENT", b"MANIFEST-000005\n".to_vec()),
        ] {
            let name = format!("bench-{}-{local}", st.index);
            std::fs::write(dir.join(&name), &bytes).expect("write MANIFEST");
            private.push((
                local.to_string(),
                StreamHandle::Relative {
                    path: name,
                    size: bytes.len() as i64,
                },
            ));
        }
    }
    let bytes = write_metadata(&meta).expect("write _metadata");
    std::fs::write(dir.join("_metadata"), bytes).expect("write _metadata");
    Generated {
        dir: dir.to_path_buf(),
        sst_bytes,
        records,
        files,
    }
}

/// Has RocksDB's own `sst_dump` check every file: checksums verified, every entry read.
fn check_with_sst_dump(files: &[PathBuf]) -> Option<String> {
    Command::new("sst_dump").arg("--help").output().ok()?;
    let mut entries = 0u64;
    for f in files {
        let o = Command::new("sst_dump")
            .arg(format!("--file={}", f.display()))
            .args(["--command=check", "--verify_checksum", "--show_properties"])
            .output()
            .expect("run sst_dump");
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && !text.contains("Corruption") && !text.contains("rror"),
            "sst_dump rejects {}:\n{text}",
            f.display()
        );
        let n: u64 = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("# entries: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no entry count from sst_dump for {}:\n{text}", f.display()));
        entries += n;
    }
    Some(format!(
        "sst_dump checked {} files, {entries} entries",
        files.len()
    ))
}

fn timed(f: impl FnOnce() -> u64) -> (u64, Duration, Duration) {
    let (c0, w0) = (process_cpu(), Instant::now());
    let n = f();
    (n, process_cpu() - c0, w0.elapsed())
}

fn main() {
    let mb: u64 = std::env::var("FLINK_NATIVE_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let rounds: usize = std::env::var("FLINK_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let base = std::env::var_os("FLINK_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let shm = PathBuf::from("/dev/shm");
            if shm.is_dir() {
                shm
            } else {
                std::env::temp_dir()
            }
        });
    let tmp = tempfile::tempdir_in(&base).expect("bench dir");
    let sp_dir = tmp.path().join("native-savepoint");
    std::fs::create_dir(&sp_dir).expect("mkdir");
    let g = generate(&sp_dir, mb << 20);
    let mib = g.sst_bytes as f64 / (1 << 20) as f64;
    println!(
        "generated native savepoint: {} SST files, {:.1} MiB, {} records, in {}",
        g.files.len(),
        mib,
        g.records,
        base.display()
    );
    match check_with_sst_dump(&g.files) {
        Some(s) => println!("{s}"),
        None => println!("sst_dump not found: generated files checked by our reader only"),
    }
    let fixture_sst: u64 = std::fs::read_dir(FIXTURE)
        .expect("fixture dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            std::fs::read(p)
                .map(|b| b.len() > 60 && b.ends_with(&0x88e2_41b7_85f4_cff7u64.to_le_bytes()))
                .unwrap_or(false)
        })
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let out = tmp.path().join("import.sp");
    println!();
    println!("| round | variant | SST MiB | entries | CPU s | wall s | MB/s (CPU) |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for round in 1..=rounds {
        let (n, cpu, wall) = timed(|| {
            let mut n = 0;
            for f in &g.files {
                let data = std::fs::read(f).expect("read sst");
                let t = SstFile::open(&data, "bench").expect("open sst");
                n += t.for_each_record(&mut |_| Ok(())).expect("scan sst");
            }
            n
        });
        assert_eq!(n, g.records);
        println!(
            "| {round} | SST reader: open + every record | {mib:.1} | {n} | {:.3} | {:.3} | {:.0} |",
            cpu.as_secs_f64(),
            wall.as_secs_f64(),
            mib / cpu.as_secs_f64()
        );
        let (n, cpu, wall) = timed(|| {
            let sp = FlinkSavepoint::open(&g.dir).expect("open");
            let import = sp
                .import(sp.operator("state-op").expect("op"))
                .expect("import");
            let s = write_savepoint(&out, &import, &WriteOptions::default()).expect("write");
            s.total_entries()
        });
        println!(
            "| {round} | import-flink: read, fold, write our savepoint | {mib:.1} | {n} | {:.3} | {:.3} | {:.0} |",
            cpu.as_secs_f64(),
            wall.as_secs_f64(),
            mib / cpu.as_secs_f64()
        );
        let reps = 200u64;
        let fmib = (fixture_sst * reps) as f64 / (1 << 20) as f64;
        let (n, cpu, wall) = timed(|| {
            let mut n = 0;
            for _ in 0..reps {
                let sp = FlinkSavepoint::open(Path::new(FIXTURE)).expect("open");
                let import = sp
                    .import(sp.operator("state-op").expect("op"))
                    .expect("import");
                n += write_savepoint(&out, &import, &WriteOptions::default())
                    .expect("write")
                    .total_entries();
            }
            n
        });
        println!(
            "| {round} | import-flink of the fixture native savepoint ×{reps} | {fmib:.1} | {n} | {:.3} | {:.3} | {:.0} |",
            cpu.as_secs_f64(),
            wall.as_secs_f64(),
            fmib / cpu.as_secs_f64()
        );
    }
}

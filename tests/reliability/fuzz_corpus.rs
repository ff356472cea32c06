//! The fuzz targets' seed corpora (`fuzz/corpus/<target>/`): real files and real decoder inputs, written by
//! the engine itself or by Flink (tests/fixtures). `generate_fuzz_corpus` (ignored; run it to regenerate)
//! writes them; `every_fuzz_target_has_a_seed_corpus` checks that each bin of fuzz/Cargo.toml has one and that
//! its seeds still decode (a format change that makes the seeds stale fails here, not silently in the fuzzer).
//!
//! ```sh
//! cargo test --release --test fuzz_corpus -- --ignored generate_fuzz_corpus
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::checkpoint::{
    CheckpointMetadata, CheckpointOptions, CheckpointStorage, Checkpointer,
};
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::{self, SavepointReader, WriteOptions};
use keyed_state::serializer::{
    LongSerializer, StringSerializer, VoidNamespace, VoidNamespaceSerializer,
};
use keyed_state::state::*;
use keyed_state::ttl::ManualClock;
use keyed_state_lsm::internals::sst::block::BlockIter;
use keyed_state_lsm::internals::sst::format::{checked_block, BlockHandle, Footer, CODEC_NONE};
use keyed_state_lsm::internals::sst::SstReader;
use keyed_state_lsm::internals::{decode_write_batch, encode_write_batch, BlockCache};
use keyed_state_lsm::{Compression, Db, ListAppendOperator, Options, SstOptions, WriteBatch};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fuzz_targets() -> Vec<String> {
    let toml = fs::read_to_string(root().join("fuzz/Cargo.toml")).unwrap();
    toml.lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "keyed-state-fuzz")
        .map(str::to_string)
        .collect()
}

/// A seed corpus being written: one directory, files named by what they are.
struct Corpus(PathBuf);

impl Corpus {
    fn new(target: &str) -> Corpus {
        let dir = root().join("fuzz/corpus").join(target);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Corpus(dir)
    }
    fn add(&self, name: &str, bytes: &[u8]) {
        assert!(
            bytes.len() <= 64 << 10,
            "seed {name} is {} bytes",
            bytes.len()
        );
        fs::write(self.0.join(name), bytes).unwrap();
    }
}

fn small_lsm_options(compression: Compression) -> Options {
    Options {
        memtable_size: 8 << 10,
        target_file_size: 8 << 10,
        sst: SstOptions {
            block_size: 512,
            compression,
            ..SstOptions::default()
        },
        merge_operator: Some(Arc::new(ListAppendOperator)),
        auto_compaction: false,
        ..Options::default()
    }
}

/// A small database with puts, deletes, merges and range deletes in two flushed files and an unflushed WAL.
/// Returns its directory and the WAL batches it was given, encoded as the WAL holds them.
fn write_db(dir: &Path, compression: Compression) -> Vec<Vec<u8>> {
    let db = Db::open(dir, small_lsm_options(compression)).unwrap();
    let mut batches = Vec::new();
    let mut seqno = 1u64;
    for round in 0..3u32 {
        for i in 0..60u32 {
            let k = format!("k{:04}", i * 3 + round);
            db.put(k.as_bytes(), format!("value-{round}-{i}").as_bytes())
                .unwrap();
        }
        db.merge(b"k0007", format!("m{round}").as_bytes()).unwrap();
        db.delete(b"k0010").unwrap();
        db.delete_range(format!("k00{round}5").as_bytes(), b"k0099")
            .unwrap();
        let mut b = WriteBatch::new();
        b.put(b"batch-key", b"v")
            .delete(b"k0001")
            .merge(b"k0002", b"x")
            .delete_range(b"k0100", b"k0110");
        db.write(&b).unwrap();
        batches.push(encode_write_batch(&b, seqno));
        seqno += 4;
        if round < 2 {
            db.flush().unwrap();
        }
    }
    let mut single = WriteBatch::new();
    single.put(b"k", b"v");
    batches.push(encode_write_batch(&single, 7));
    batches.push(encode_write_batch(&WriteBatch::new(), 0));
    drop(db);
    batches
}

fn files_named(dir: &Path, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| pred(p.file_name().unwrap().to_str().unwrap()))
        .collect();
    v.sort();
    v
}

/// The raw (uncompressed) blocks of an SST image: its index block and its data blocks.
fn raw_blocks(file: &[u8]) -> Vec<Vec<u8>> {
    let footer = Footer::decode(file).unwrap();
    let (codec, index) = checked_block(file, footer.index).unwrap();
    let mut out = Vec::new();
    if codec != CODEC_NONE {
        return out;
    }
    out.push(index.to_vec());
    let mut it = BlockIter::new(index).unwrap();
    it.seek_to_first().unwrap();
    while it.valid() {
        let h = BlockHandle::decode_varint(it.value()).unwrap();
        let (codec, payload) = checked_block(file, h).unwrap();
        if codec == CODEC_NONE {
            out.push(payload.to_vec());
        }
        it.next().unwrap();
    }
    out
}

/// A heap store with a value, list, map (all with TTL) and a timer queue; returns it and its raw entries.
fn ttl_store() -> (KeyedStateStore<LongSerializer>, Vec<Vec<u8>>) {
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let mut s =
        KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
    s.set_ttl_time_provider(ManualClock::new(50_000));
    let ttl = StateTtlConfig::new(100_000);
    let v = s
        .register_value(ValueStateDescriptor::new("v", StringSerializer).with_ttl(ttl.clone()))
        .unwrap();
    let l = s
        .register_list(ListStateDescriptor::new("l", StringSerializer).with_ttl(ttl.clone()))
        .unwrap();
    let m = s
        .register_map(MapStateDescriptor::new("m", LongSerializer, StringSerializer).with_ttl(ttl))
        .unwrap();
    let q = s
        .register_timer_queue("t", VoidNamespaceSerializer)
        .unwrap();
    for key in 0..4i64 {
        s.set_current_key(&key).unwrap();
        s.value(&v)
            .unwrap()
            .update(&format!("value {key}"))
            .unwrap();
        let mut list = s.list(&l).unwrap();
        list.add(&"a".to_string()).unwrap();
        list.add(&format!("element {key}")).unwrap();
        s.map(&m).unwrap().put(&7, &format!("map {key}")).unwrap();
        s.add_timer(&q, 1_000_000 + key, &VoidNamespace).unwrap();
    }
    let mut raw = Vec::new();
    let ids: Vec<_> = s.backend_mut().states().iter().map(|_| ()).collect();
    for id in 0..ids.len() {
        let id = id as keyed_state::backend::StateId;
        s.backend_mut()
            .scan_state(id, &mut |_, key, value| {
                // Timer queues keep the element in the key (after the key-group byte); states their value.
                raw.push(if value.is_empty() {
                    key[1..].to_vec()
                } else {
                    value.to_vec()
                });
                true
            })
            .unwrap();
    }
    (s, raw)
}

fn flink_fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures/flink").join(rel)
}

/// The keyed-state files (named by UUID) of a Flink fixture directory.
fn flink_state_files(dir: &str) -> Vec<PathBuf> {
    files_named(&flink_fixture(dir), |n| {
        n.len() == 36 && n.matches('-').count() == 4
    })
}

#[test]
#[ignore = "writes fuzz/corpus/; run to regenerate the seed corpora"]
fn generate_fuzz_corpus() {
    let tmp = tempfile::tempdir().unwrap();

    // LSM: SSTs (raw and LZ4), their blocks and range-tombstone properties, MANIFESTs, WAL batches.
    let (sst, block, manifest, rangedel, wal) = (
        Corpus::new("sst_open_scan"),
        Corpus::new("sst_block"),
        Corpus::new("manifest_decode"),
        Corpus::new("range_tombstones_decode"),
        Corpus::new("wal_batch_decode"),
    );
    for fixture in files_named(&root().join("tests/fixtures"), |n| n.ends_with(".sst")) {
        let bytes = fs::read(&fixture).unwrap();
        let name = fixture.file_name().unwrap().to_str().unwrap();
        sst.add(&format!("fixture-{name}"), &bytes);
        for (i, b) in raw_blocks(&bytes).iter().enumerate().take(4) {
            block.add(&format!("fixture-{name}-block{i}"), b);
        }
    }
    for (tag, compression) in [("raw", Compression::None), ("lz4", Compression::Lz4)] {
        let dir = tmp.path().join(tag);
        let batches = write_db(&dir, compression);
        for (i, b) in batches.iter().enumerate() {
            wal.add(&format!("{tag}-batch{i}"), b);
        }
        for (i, path) in files_named(&dir, |n| n.ends_with(".sst"))
            .iter()
            .enumerate()
        {
            let bytes = fs::read(path).unwrap();
            sst.add(&format!("db-{tag}-{i}.sst"), &bytes);
            for (j, b) in raw_blocks(&bytes).iter().enumerate().take(3) {
                block.add(&format!("db-{tag}-{i}-block{j}"), b);
            }
            let reader = SstReader::open(path, 1, BlockCache::new(1 << 20)).unwrap();
            for (name, value) in &reader.properties().user {
                if name == "ks.range_dels" {
                    rangedel.add(&format!("db-{tag}-{i}"), value);
                }
            }
        }
        for path in files_named(&dir, |n| n.starts_with("MANIFEST-")) {
            manifest.add(&format!("db-{tag}-MANIFEST"), &fs::read(path).unwrap());
        }
    }

    // Savepoints of every state kind, raw and LZ4, from the heap backend.
    let (mut store, raw_entries) = ttl_store();
    let sp = Corpus::new("savepoint_decode");
    for (tag, compression) in [
        ("raw", savepoint::Compression::None),
        ("lz4", savepoint::Compression::Lz4),
    ] {
        let snap = store.snapshot().unwrap();
        let mut bytes = Vec::new();
        savepoint::encode(&*snap, &WriteOptions { compression }, &mut bytes).unwrap();
        sp.add(&format!("heap-{tag}.ksp"), &bytes);
    }

    // TTL values, list and map values and timer elements as the backends store them (first byte: clock).
    let ttl = Corpus::new("ttl_and_timer_values");
    for (i, raw) in raw_entries.iter().enumerate().take(16) {
        for clock in [0u8, 255] {
            let mut seed = vec![clock];
            seed.extend_from_slice(raw);
            ttl.add(&format!("entry{i}-clock{clock}"), &seed);
        }
    }

    // Checkpoint metadata of an LSM instance (one checkpoint with files, one incremental after it).
    let ck = Corpus::new("checkpoint_metadata_decode");
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let backend = LsmBackend::temp_with(
        KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::new(0, 63)),
        LsmBackend::small_options(),
    )
    .unwrap();
    let cfg = backend.config().clone();
    let mut lsm = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
    let counter = lsm
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    let checkpointer =
        Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default()).unwrap();
    for id in 1..=2u64 {
        for k in 0..200i64 {
            if lsm
                .config()
                .key_group_range
                .contains(lsm.key_group_of(&k).unwrap())
            {
                lsm.set_current_key(&k).unwrap();
                lsm.value(&counter)
                    .unwrap()
                    .update(&(k * id as i64))
                    .unwrap();
            }
        }
        checkpointer
            .begin(id, lsm.backend_mut())
            .unwrap()
            .run()
            .unwrap();
        checkpointer.notify_complete(id).unwrap();
        let parts = storage.list(&format!("chk-{id:020}/")).unwrap();
        for (rel, _) in parts.iter().filter(|(r, _)| r.ends_with("_metadata")) {
            let bytes = storage.get(rel).unwrap();
            CheckpointMetadata::decode(&bytes).unwrap();
            ck.add(&format!("lsm-chk{id}-metadata"), &bytes);
        }
    }
    // A rescale: half of the range restored from checkpoint 2 adopts the files with bounds; its checkpoint
    // is metadata version 3 (bounded SST files) and its manifest holds bounded file records.
    let half = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::new(0, 31));
    let quiet = Options {
        auto_compaction: false,
        ..LsmBackend::small_options()
    };
    let (restored, _) =
        keyed_state::checkpoint::restore_lsm_temp(&storage, 2, half.clone(), quiet).unwrap();
    let manifests: Vec<PathBuf> = fs::read_dir(restored.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("MANIFEST-")
        })
        .collect();
    for p in &manifests {
        let bytes = fs::read(p).unwrap();
        keyed_state_lsm::internals::validate_manifest(&bytes, std::path::Path::new("seed"))
            .unwrap();
        manifest.add("db-bounded-MANIFEST", &bytes);
    }
    let mut half_store = KeyedStateStore::new(Box::new(restored), LongSerializer).unwrap();
    half_store
        .register_value(ValueStateDescriptor::new("counter", LongSerializer))
        .unwrap();
    let half_ck =
        Checkpointer::open(Arc::clone(&storage), &half, CheckpointOptions::default()).unwrap();
    half_ck
        .begin(3, half_store.backend_mut())
        .unwrap()
        .run()
        .unwrap();
    let parts = storage.list(&format!("chk-{:020}/", 3)).unwrap();
    for (rel, _) in parts.iter().filter(|(r, _)| r.ends_with("_metadata")) {
        let bytes = storage.get(rel).unwrap();
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 3);
        CheckpointMetadata::decode(&bytes).unwrap();
        ck.add("lsm-rescaled-chk3-metadata-v3", &bytes);
    }

    // Flink's own files.
    let (fm, fks, fsn) = (
        Corpus::new("flink_metadata"),
        Corpus::new("flink_keyed_stream"),
        Corpus::new("flink_snappy"),
    );
    for dir in [
        "hashmap-canonical-savepoint",
        "hashmap-canonical-savepoint-inline",
        "hashmap-native-savepoint",
        "rocksdb-canonical-savepoint",
        "rocksdb-native-savepoint",
    ] {
        fm.add(
            dir,
            &fs::read(flink_fixture(&format!("{dir}/_metadata"))).unwrap(),
        );
        // The keyed-state streams (the RocksDB native savepoint's files are SSTs): two files of each.
        let streams = if dir.starts_with("rocksdb-native") {
            Vec::new()
        } else {
            flink_state_files(dir)
        };
        for (i, f) in streams.iter().enumerate().take(2) {
            let bytes = fs::read(f).unwrap();
            // Control byte: bit 0 = proxy without a header bound, high nibble = key groups to read.
            for ctl in [0xF1u8, 0x30] {
                let mut seed = vec![ctl];
                seed.extend_from_slice(&bytes);
                fks.add(&format!("{dir}-{i}-ctl{ctl:02x}"), &seed);
            }
            // Flink's keyed-state bytes framed the way Flink's Snappy stream frames them.
            let mut framed = Vec::new();
            let mut w = keyed_state_flink::snappy::FramedWriter::new();
            w.begin(&mut framed);
            w.write(&bytes[..bytes.len().min(8 << 10)], &mut framed);
            w.flush(&mut framed);
            fsn.add(&format!("{dir}-{i}-framed"), &framed);
        }
    }

    // Flink's RocksDB SST files (the native savepoint and the incremental checkpoint fixtures), found by
    // opening every file of those directories as an SST.
    let flink_sst = Corpus::new("flink_rocksdb_sst");
    for dir in [
        "rocksdb-native-savepoint",
        "rocksdb-incremental-checkpoint/chk-2",
        "rocksdb-incremental-checkpoint/chk-3",
        "rocksdb-incremental-checkpoint/shared",
    ] {
        let Ok(entries) = fs::read_dir(flink_fixture(dir)) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            let bytes = fs::read(&path).unwrap_or_default();
            if bytes.len() <= 64 << 10
                && keyed_state_flink::sst::SstFile::open(&bytes, "seed").is_ok()
            {
                let name = path.file_name().unwrap().to_str().unwrap();
                flink_sst.add(&format!("{}-{name}", dir.replace('/', "-")), &bytes);
            }
        }
    }

    // Flink's RocksDB MANIFEST files (every native savepoint and checkpoint fixture), found by replaying
    // every file named MANIFEST-* that a handle of those directories lists.
    let flink_manifest = Corpus::new("flink_rocksdb_manifest");
    for dir in [
        "rocksdb-native-savepoint",
        "rocksdb-native-savepoint-incremental-off",
        "rocksdb-full-checkpoint/chk-2",
        "rocksdb-incremental-checkpoint/chk-3",
    ] {
        let sp = keyed_state_flink::FlinkSavepoint::open(&flink_fixture(dir)).unwrap();
        for op in sp.keyed_operators() {
            for st in &op.subtasks {
                let Some(keyed_state_flink::KeyedHandle::Incremental {
                    shared, private, ..
                }) = &st.managed_keyed
                else {
                    continue;
                };
                for (local, h) in shared.iter().chain(private) {
                    if local.starts_with("MANIFEST-") {
                        let bytes = keyed_state_flink::location::open_stream(h, sp.dir()).unwrap();
                        keyed_state_flink::sst::read_manifest(&bytes, "seed").unwrap();
                        flink_manifest.add(
                            &format!(
                                "{}-{}-{}-{local}",
                                dir.replace('/', "-"),
                                op.label(),
                                st.index
                            ),
                            &bytes,
                        );
                    }
                }
            }
        }
    }

    // Heap checkpoint table files: an empty table, one entry, and a few hundred ascending entries.
    let heap = Corpus::new("heap_table_decode");
    for (i, n) in [0usize, 1, 300].into_iter().enumerate() {
        let mut t = Vec::new();
        keyed_state::internals::heap_table_file::begin(&mut t);
        for k in 0..n {
            let key = (k as u64).to_be_bytes();
            keyed_state::internals::heap_table_file::push_entry(
                &mut t,
                &key,
                format!("v{k}").as_bytes(),
            );
        }
        heap.add(&format!("table{i}-{n}-entries"), &t);
    }
}

#[test]
fn every_fuzz_target_has_a_seed_corpus() {
    let targets = fuzz_targets();
    assert!(targets.len() >= 11, "{targets:?}");
    for t in &targets {
        let dir = root().join("fuzz/corpus").join(t);
        let seeds: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{t}: no seed corpus at {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        assert!(!seeds.is_empty(), "{t}: empty seed corpus");
        for seed in &seeds {
            let bytes = fs::read(seed).unwrap();
            let ok = match t.as_str() {
                "sst_open_scan" => {
                    SstReader::open_bytes(Arc::from(&bytes[..]), seed, 1, BlockCache::new(1 << 20))
                        .is_ok()
                }
                "wal_batch_decode" => decode_write_batch(&bytes).is_ok(),
                "range_tombstones_decode" => {
                    keyed_state_lsm::internals::rangedel::decode(&bytes).is_ok()
                }
                "manifest_decode" => keyed_state_lsm::internals::validate_manifest(
                    &bytes,
                    std::path::Path::new("seed"),
                )
                .is_ok(),
                "savepoint_decode" => SavepointReader::from_bytes(bytes.clone())
                    .and_then(|r| r.verify().map(|_| ()))
                    .is_ok(),
                "checkpoint_metadata_decode" => CheckpointMetadata::decode(&bytes).is_ok(),
                "flink_metadata" => keyed_state_flink::parse_metadata(&bytes, "seed").is_ok(),
                "flink_snappy" => keyed_state_flink::snappy::decode_all(&bytes, "seed").is_ok(),
                "flink_rocksdb_sst" => {
                    keyed_state_flink::sst::SstFile::open(&bytes, "seed").is_ok()
                }
                "flink_rocksdb_manifest" => {
                    keyed_state_flink::sst::read_manifest(&bytes, "seed").is_ok()
                }
                "heap_table_decode" => keyed_state::internals::heap_table_file::decode(
                    std::path::Path::new("seed"),
                    &bytes,
                    &mut |_, _| Ok(()),
                )
                .is_ok(),
                _ => true,
            };
            assert!(ok, "{t}: seed {} no longer decodes", seed.display());
        }
    }
}

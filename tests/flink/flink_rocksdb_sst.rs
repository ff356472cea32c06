//! The pure-Rust RocksDB SST reader against the SST files Flink 2.3.0's RocksDB backend wrote
//! (tests/fixtures/flink/rocksdb-native-savepoint and rocksdb-incremental-checkpoint): every record as
//! RocksDB's own `sst_dump` printed it (each fixture's SST.txt), damaged files giving typed errors, and
//! the imports of the native savepoint and the incremental checkpoints: the canonical savepoint's entries,
//! restored on heap and LSM to the same savepoint bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::{BackendConfig, StateBackend};
use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state_flink::sst::{SstFile, ValueKind};
use keyed_state_flink::{FlinkError, FlinkSavepoint};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");

/// One SST as `sst_dump` described it: path, column family, entry count, merge operands, records.
struct Dumped {
    path: PathBuf,
    column_family: String,
    entries: u64,
    merge_operands: u64,
    records: Vec<String>,
}

fn sst_dump(fixture: &str) -> Vec<Dumped> {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{fixture}/SST.txt")).unwrap();
    let mut out: Vec<Dumped> = Vec::new();
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        if let Some(head) = line.strip_prefix("=== ") {
            let path = head.rsplit(" = ").next().unwrap();
            out.push(Dumped {
                path: PathBuf::from(format!("{FIXTURES}/{fixture}/{path}")),
                column_family: String::new(),
                entries: 0,
                merge_operands: 0,
                records: Vec::new(),
            });
            continue;
        }
        let d = out.last_mut().unwrap();
        let l = line.trim();
        if let Some(v) = l.strip_prefix("# entries: ") {
            d.entries = v.parse().unwrap();
        } else if let Some(v) = l.strip_prefix("# merge operands: ") {
            d.merge_operands = v.parse().unwrap();
        } else if let Some(v) = l.strip_prefix("column family name: ") {
            d.column_family = v.to_string();
        } else if l.starts_with('\'') {
            d.records.push(l.to_string());
        }
    }
    // A file that an incremental checkpoint reuses is dumped once.
    out.retain(|d| !d.column_family.is_empty() && seen.insert(d.path.clone()));
    out
}

fn all_dumped() -> Vec<Dumped> {
    let mut v = sst_dump("rocksdb-native-savepoint");
    v.extend(sst_dump("rocksdb-incremental-checkpoint"));
    v
}

/// Our reading of an SST in sst_dump's notation.
fn records(data: &[u8], name: &str) -> Result<(SstFile<'static>, Vec<String>), FlinkError> {
    let data: &'static [u8] = Box::leak(data.to_vec().into_boxed_slice());
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let t = SstFile::open(data, name)?;
    let mut out = Vec::new();
    t.for_each_record(&mut |r| {
        let ty = match r.kind {
            ValueKind::Put => 1,
            ValueKind::Delete => 0,
            ValueKind::SingleDelete => 7,
            ValueKind::Merge => 2,
        };
        let line = format!(
            "'{}' seq:{}, type:{ty} => {}",
            hex_upper(r.user_key),
            r.seqno,
            hex_upper(r.value)
        );
        out.push(line.trim_end().to_string());
        Ok(())
    })?;
    t.range_tombstones()?;
    Ok((t, out))
}

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

#[test]
fn every_fixture_sst_reads_as_sst_dump_reads_it() {
    let dumped = all_dumped();
    assert!(dumped.len() >= 40, "{}", dumped.len());
    for d in &dumped {
        let data = std::fs::read(&d.path).unwrap();
        let (t, got) = records(&data, &d.path.display().to_string()).unwrap();
        let p = &t.properties;
        assert_eq!(
            p.column_family_name.as_deref(),
            Some(d.column_family.as_str())
        );
        assert_eq!(p.num_entries, Some(d.entries));
        assert_eq!(p.comparator.as_deref(), Some("leveldb.BytewiseComparator"));
        assert_eq!(
            p.merge_operator.as_deref(),
            Some("StringAppendTESTOperator")
        );
        assert_eq!(p.compression.as_deref(), Some("Snappy"));
        assert_eq!(t.format_version, 5);
        assert_eq!(t.checksum_type, 4, "XXH3");
        assert_eq!(got, d.records, "{}", d.path.display());
        assert_eq!(
            got.iter().filter(|r| r.contains("type:2")).count() as u64,
            d.merge_operands
        );
    }
}

#[test]
fn truncated_fixture_ssts_are_errors() {
    for d in all_dumped() {
        let data = std::fs::read(&d.path).unwrap();
        for cut in 0..data.len() {
            let r = records(&data[..cut], "cut");
            assert!(r.is_err(), "{} cut at {cut} read", d.path.display());
        }
    }
}

#[test]
fn flipped_bytes_of_fixture_ssts_are_errors_or_change_nothing() {
    for d in all_dumped() {
        let data = std::fs::read(&d.path).unwrap();
        let mut copy = data.clone();
        for at in 0..data.len() {
            for mask in [0x01u8, 0x80] {
                copy[at] ^= mask;
                match records(&copy, "flip") {
                    Err(FlinkError::SstCorrupt { .. } | FlinkError::SstUnsupported { .. }) => {}
                    Err(e) => panic!("{} byte {at}: untyped error {e}", d.path.display()),
                    // Padding in the footer is not read, by RocksDB either.
                    Ok((_, got)) => assert_eq!(got, d.records, "{} byte {at}", d.path.display()),
                }
                copy[at] ^= mask;
            }
        }
    }
}

/// The entries of one import, by (state, key hex) → value hex.
fn import_entries(fixture: &str) -> (Vec<u8>, BTreeMap<(String, String), String>) {
    let sp = FlinkSavepoint::open(Path::new(&format!("{FIXTURES}/{fixture}"))).unwrap();
    let import = sp.import(sp.operator("state-op").unwrap()).unwrap();
    assert!(import.warnings().is_empty(), "{:?}", import.warnings());
    let mut bytes = Vec::new();
    encode(&import, &WriteOptions::default(), &mut bytes).unwrap();
    let reader = SavepointReader::from_bytes(bytes.clone()).unwrap();
    reader.verify().unwrap();
    let h = reader.header();
    let mut out = BTreeMap::new();
    for b in reader.key_groups() {
        reader
            .read_key_group(b.key_group, &mut |s, k, v| {
                assert!(out
                    .insert((h.states[s].name.clone(), hex(k)), hex(v))
                    .is_none());
                Ok(())
            })
            .unwrap();
    }
    (bytes, out)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn native_savepoint_and_final_checkpoint_import_to_the_canonical_savepoints_bytes() {
    // Flink wrote the canonical savepoint, the native savepoint and chk-3 of one run at the same state,
    // TTL timestamps included: the three imports are the same savepoint, byte for byte.
    let (canonical, want) = import_entries("rocksdb-canonical-savepoint");
    assert_eq!(want.len(), 752);
    for fixture in [
        "rocksdb-native-savepoint",
        "rocksdb-incremental-checkpoint/chk-3",
    ] {
        let (bytes, got) = import_entries(fixture);
        assert_eq!(got, want, "{fixture}");
        assert!(bytes == canonical, "{fixture}: savepoint bytes differ");
    }
}

#[test]
fn restoring_the_native_import_on_every_backend_gives_the_same_savepoint_bytes() {
    for fixture in [
        "rocksdb-native-savepoint",
        "rocksdb-incremental-checkpoint/chk-2",
        "rocksdb-incremental-checkpoint/chk-3",
    ] {
        let (bytes, _) = import_entries(fixture);
        let reader = SavepointReader::from_bytes(bytes.clone()).unwrap();
        let config = BackendConfig {
            max_parallelism: reader.header().max_parallelism,
            key_group_range: reader.header().key_group_range,
            key_serializer: reader.header().key_serializer.clone(),
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("import.sp");
        std::fs::write(&path, &bytes).unwrap();
        #[allow(unused_mut)]
        let mut backends: Vec<Box<dyn StateBackend>> = vec![
            Box::new(HeapBackend::new(config.clone()).unwrap()),
            Box::new(LsmBackend::temp(config.clone()).unwrap()),
        ];
        #[cfg(feature = "rocksdb")]
        backends.push(Box::new(
            keyed_state::backend::rocksdb::RocksDbBackend::temporary(
                config.clone(),
                Default::default(),
            )
            .unwrap(),
        ));
        for backend in backends {
            let name = backend.backend_name();
            let mut store = KeyedStateStore::new(backend, LongSerializer).unwrap();
            store
                .restore(&[SavepointReader::open(&path).unwrap()])
                .unwrap();
            let snap = store.snapshot().unwrap();
            let mut again = Vec::new();
            encode(&*snap, &WriteOptions::default(), &mut again).unwrap();
            assert!(again == bytes, "{fixture} restored on {name} differs");
        }
    }
}

#[test]
fn phase_1_checkpoint_holds_a_subset_of_the_files_and_older_values() {
    // chk-3 reuses chk-2's SST files and adds newer ones: the fold must take the newer versions. Every
    // key of chk-2 that chk-3 still has differs only where phase 2 wrote it.
    let (_, chk2) = import_entries("rocksdb-incremental-checkpoint/chk-2");
    let (_, chk3) = import_entries("rocksdb-incremental-checkpoint/chk-3");
    assert_eq!(chk2.len(), 625);
    assert_eq!(chk3.len(), 752);
    assert!(chk2.keys().all(|k| chk3.contains_key(k)));
    let changed = chk2.iter().filter(|(k, v)| chk3[*k] != **v).count();
    assert!(changed > 0);
    // A list of a key with several records is the merge of operands from both checkpoints' files.
    let list = |m: &BTreeMap<(String, String), String>, key: &str| {
        m[&("list".to_string(), key.to_string())].clone()
    };
    // Key 1 (key group 86): [1000] after phase 1, [1000, 1001] at the end.
    assert_eq!(list(&chk2, "56000000000000000100"), "00000000000003e8");
    assert_eq!(
        list(&chk3, "56000000000000000100"),
        "00000000000003e82c00000000000003e9"
    );
}

#[test]
fn a_damaged_sst_fails_the_import_naming_the_file() {
    let src = PathBuf::from(format!("{FIXTURES}/rocksdb-native-savepoint"));
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let sst = dir.path().join("0560438e-e824-4ae4-852b-68b61d32a3c2");
    let data = std::fs::read(&sst).unwrap();
    for cut in [0, 1, 100, data.len() / 2, data.len() - 1] {
        std::fs::write(&sst, &data[..cut]).unwrap();
        let sp = FlinkSavepoint::open(dir.path()).unwrap();
        let e = sp.import(sp.operator("state-op").unwrap()).unwrap_err();
        let FlinkError::InHandle {
            operator,
            subtask,
            handle,
            source,
        } = &e
        else {
            panic!("{e}")
        };
        assert_eq!(
            (operator.as_str(), *subtask, *handle),
            ("state-op", 0, "IncrementalRemoteKeyedStateHandle")
        );
        assert!(matches!(**source, FlinkError::SstCorrupt { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("000023.sst (0560438e-e824-4ae4-852b-68b61d32a3c2)"),
            "{e}"
        );
        assert_eq!(e.kind(), keyed_state::ErrorKind::Corruption);
    }
    // Files belong to the column family the MANIFEST lists them in: two files' contents swapped is
    // corruption naming the file (its size and its properties disagree with the MANIFEST).
    std::fs::write(&sst, &data).unwrap();
    let other = dir.path().join("a47a337d-3a5c-498e-85ee-2ed75f8e00cd");
    let other_data = std::fs::read(&other).unwrap();
    std::fs::write(&sst, &other_data).unwrap();
    std::fs::write(&other, &data).unwrap();
    let sp = FlinkSavepoint::open(dir.path()).unwrap();
    let e = sp.import(sp.operator("state-op").unwrap()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("corrupt RocksDB SST file") && msg.contains("MANIFEST-000005"),
        "{msg}"
    );
}

#[test]
fn keys_outside_a_handles_key_groups_are_skipped_with_a_warning() {
    // As after a rescale: subtask 0's handle claims key groups 0..=31 while its SSTs hold 0..=63.
    use keyed_state::keygroup::KeyGroupRange;
    use keyed_state_flink::metadata_writer::write_metadata;
    use keyed_state_flink::KeyedHandle;
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(format!("{FIXTURES}/rocksdb-native-savepoint")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let mut sp = FlinkSavepoint::open(dir.path()).unwrap();
    let op = sp
        .metadata
        .operators
        .iter_mut()
        .find(|o| o.uid.as_deref() == Some("state-op"))
        .unwrap();
    let Some(KeyedHandle::Incremental { range, .. }) = &mut op.subtasks[0].managed_keyed else {
        panic!("not incremental")
    };
    *range = KeyGroupRange::new(0, 31);
    std::fs::write(
        dir.path().join("_metadata"),
        write_metadata(&sp.metadata).unwrap(),
    )
    .unwrap();
    let sp = FlinkSavepoint::open(dir.path()).unwrap();
    let import = sp.import(sp.operator("state-op").unwrap()).unwrap();
    let w = import.warnings().join("\n");
    assert!(
        w.contains("subtask 0") && w.contains("outside its key groups"),
        "{w}"
    );
    let mut bytes = Vec::new();
    encode(&import, &WriteOptions::default(), &mut bytes).unwrap();
    let reader = SavepointReader::from_bytes(bytes).unwrap();
    let (_, all) = import_entries("rocksdb-native-savepoint");
    let mut got = BTreeMap::new();
    for b in reader.key_groups() {
        assert!(
            !(32..64).contains(&b.key_group),
            "key group {}",
            b.key_group
        );
        reader
            .read_key_group(b.key_group, &mut |s, k, v| {
                got.insert((reader.header().states[s].name.clone(), hex(k)), hex(v));
                Ok(())
            })
            .unwrap();
    }
    // Exactly the entries of the other key groups remain.
    let want: BTreeMap<_, _> = all
        .into_iter()
        .filter(|((_, k), _)| !(32..64).contains(&u8::from_str_radix(&k[..2], 16).unwrap()))
        .collect();
    assert_eq!(got, want);
    assert!(got.len() < 752 && !got.is_empty());
}

//! Imports read everything a handle references, or fail naming what they would leave behind: RocksDB
//! handles whose SST files are private (incremental checkpoints off, Flink's default) are read whole
//! through their MANIFEST; a live file missing from the handle, an SST file that is not live, a missing
//! file, a key group that no offset reaches and a key group never visited are errors naming the operator,
//! the handle and the file, never a success with fewer entries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state::ErrorKind;
use keyed_state_flink::metadata::StreamHandle;
use keyed_state_flink::metadata_writer::write_metadata;
use keyed_state_flink::{FlinkError, FlinkSavepoint, KeyedHandle};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// (state, key hex) → value hex of the import of `dir`, TTL timestamps (the first 8 value bytes of
/// `ttl-value`, wall clock at the time Flink wrote them) cut off.
fn entries(dir: &Path) -> BTreeMap<(String, String), String> {
    let sp = FlinkSavepoint::open(dir).unwrap();
    let import = sp.import(sp.operator("state-op").unwrap()).unwrap();
    assert!(import.warnings().is_empty(), "{:?}", import.warnings());
    let mut bytes = Vec::new();
    encode(&import, &WriteOptions::default(), &mut bytes).unwrap();
    let report = import.finish().unwrap();
    let reader = SavepointReader::from_bytes(bytes).unwrap();
    let h = reader.header();
    let mut out = BTreeMap::new();
    for b in reader.key_groups() {
        reader
            .read_key_group(b.key_group, &mut |s, k, v| {
                let name = h.states[s].name.clone();
                let v = if name == "ttl-value" { &v[8..] } else { v };
                assert!(out.insert((name, hex(k)), hex(v)).is_none());
                Ok(())
            })
            .unwrap();
    }
    assert_eq!(report.entries, out.len() as u64);
    out
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(format!("{FIXTURES}/{name}"))
}

/// A copy of a fixture directory (files only) in a temporary directory.
fn copy_of(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(fixture(name)).unwrap() {
        let f = f.unwrap().path();
        if f.is_file() {
            std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
        }
    }
    dir
}

/// Rewrites `_metadata` of `dir` after `edit` changed the state-op operator's subtask `i` handle.
fn edit_handle(dir: &Path, i: usize, edit: impl FnOnce(&mut KeyedHandle)) {
    let mut sp = FlinkSavepoint::open(dir).unwrap();
    let op = sp
        .metadata
        .operators
        .iter_mut()
        .find(|o| o.uid.as_deref() == Some("state-op"))
        .unwrap();
    edit(op.subtasks[i].managed_keyed.as_mut().unwrap());
    std::fs::write(dir.join("_metadata"), write_metadata(&sp.metadata).unwrap()).unwrap();
}

fn import_err(dir: &Path) -> FlinkError {
    let sp = FlinkSavepoint::open(dir).unwrap();
    let op = sp.operator("state-op").unwrap();
    match sp.import(op) {
        Err(e) => e,
        Ok(import) => {
            let mut sink = Vec::new();
            match encode(&import, &WriteOptions::default(), &mut sink) {
                Err(e) => e.into(),
                Ok(_) => import.finish().expect_err("the import must fail"),
            }
        }
    }
}

fn assert_names(e: &FlinkError, wants: &[&str]) {
    let msg = e.to_string();
    for w in wants {
        assert!(msg.contains(w), "missing {w:?} in: {msg}");
    }
}

#[test]
fn private_sst_files_of_native_savepoints_and_full_checkpoints_are_read() {
    // The same job and state as the canonical savepoint of another run (TTL timestamps aside).
    let want = entries(&fixture("rocksdb-canonical-savepoint"));
    assert_eq!(want.len(), 752);
    for name in [
        "rocksdb-native-savepoint-incremental-off",
        "rocksdb-full-checkpoint/chk-2",
    ] {
        let sp = FlinkSavepoint::open(&fixture(name)).unwrap();
        // Every SST file of these handles is private.
        for st in &sp.operator("state-op").unwrap().subtasks {
            let Some(KeyedHandle::Incremental {
                shared, private, ..
            }) = &st.managed_keyed
            else {
                panic!("{name}: not a RocksDB handle")
            };
            assert!(shared.is_empty(), "{name}");
            assert!(
                private.iter().filter(|(n, _)| n.ends_with(".sst")).count() >= 7,
                "{name}"
            );
        }
        assert_eq!(entries(&fixture(name)), want, "{name}");
    }
}

#[test]
fn a_live_sst_file_missing_from_the_handle_is_an_error_naming_it() {
    let dir = copy_of("rocksdb-native-savepoint-incremental-off");
    edit_handle(dir.path(), 1, |h| {
        let KeyedHandle::Incremental { private, .. } = h else {
            panic!()
        };
        let i = private.iter().position(|(n, _)| n == "000023.sst").unwrap();
        private.remove(i);
    });
    let e = import_err(dir.path());
    assert!(matches!(
        &e,
        FlinkError::InHandle { source, .. } if matches!(**source, FlinkError::MissingFile { .. })
    ));
    assert_names(
        &e,
        &[
            "operator 'state-op' subtask 1 (IncrementalRemoteKeyedStateHandle)",
            "000023.sst",
            "MANIFEST-000005",
            "column family 'list'",
        ],
    );
    assert_eq!(e.kind(), ErrorKind::NotFound);
}

#[test]
fn an_sst_file_that_is_not_live_is_an_error_never_skipped() {
    let dir = copy_of("rocksdb-native-savepoint");
    edit_handle(dir.path(), 0, |h| {
        let KeyedHandle::Incremental { shared, .. } = h else {
            panic!()
        };
        let (_, stored) = shared[0].clone();
        shared.push(("000099.sst".into(), stored));
    });
    let e = import_err(dir.path());
    assert_names(
        &e,
        &[
            "operator 'state-op' subtask 0",
            "000099.sst",
            "not among the live files of MANIFEST-000005",
        ],
    );
    assert_eq!(e.kind(), ErrorKind::Corruption);
}

#[test]
fn a_referenced_file_missing_on_disk_names_operator_handle_and_file() {
    let dir = copy_of("rocksdb-native-savepoint-incremental-off");
    let sp = FlinkSavepoint::open(dir.path()).unwrap();
    let Some(KeyedHandle::Incremental { private, .. }) =
        &sp.operator("state-op").unwrap().subtasks[0].managed_keyed
    else {
        panic!()
    };
    let (_, StreamHandle::Relative { path, .. }) =
        private.iter().find(|(n, _)| n == "000025.sst").unwrap()
    else {
        panic!()
    };
    std::fs::remove_file(dir.path().join(path)).unwrap();
    let e = import_err(dir.path());
    assert_names(&e, &["operator 'state-op' subtask 0", path.as_str()]);
    assert_eq!(e.kind(), ErrorKind::NotFound);
    // CURRENT naming a MANIFEST the handle does not hold.
    let dir = copy_of("rocksdb-native-savepoint-incremental-off");
    edit_handle(dir.path(), 0, |h| {
        let KeyedHandle::Incremental { private, .. } = h else {
            panic!()
        };
        private.retain(|(n, _)| !n.starts_with("MANIFEST-"));
    });
    assert_names(
        &import_err(dir.path()),
        &["MANIFEST-000005", "CURRENT names this MANIFEST"],
    );
}

#[test]
fn a_canonical_key_group_no_offset_reaches_is_an_error() {
    for name in ["rocksdb-canonical-savepoint", "hashmap-native-savepoint"] {
        let dir = copy_of(name);
        edit_handle(dir.path(), 0, |h| {
            let KeyedHandle::KeyGroups { offsets, .. } = h else {
                panic!()
            };
            // The second key group with data loses its offset: its bytes would be skipped.
            let j = offsets
                .iter()
                .enumerate()
                .filter(|(_, o)| **o != 0)
                .nth(1)
                .unwrap()
                .0;
            offsets[j] = 0;
        });
        let e = import_err(dir.path());
        assert_names(&e, &["operator 'state-op' subtask 0"]);
        assert!(matches!(&e, FlinkError::InHandle { .. }), "{name}: {e}");
        assert_eq!(e.kind(), ErrorKind::Corruption, "{name}: {e}");
        if name == "rocksdb-canonical-savepoint" {
            assert!(
                matches!(&e, FlinkError::InHandle { source, .. } if matches!(**source, FlinkError::UnreadData { .. })),
                "{e}"
            );
            assert_names(&e, &["bytes in no key group"]);
        }
    }
}

#[test]
fn bytes_after_the_header_that_no_offset_reaches_are_an_error() {
    let dir = copy_of("rocksdb-canonical-savepoint");
    edit_handle(dir.path(), 1, |h| {
        let KeyedHandle::KeyGroups { offsets, .. } = h else {
            panic!()
        };
        offsets.iter_mut().for_each(|o| *o = 0);
    });
    let e = import_err(dir.path());
    assert!(
        matches!(&e, FlinkError::InHandle { source, subtask: 1, .. }
            if matches!(**source, FlinkError::UnreadData { .. })),
        "{e}"
    );
    assert_names(&e, &["no key group offset points into them"]);
}

#[test]
fn finish_fails_while_a_key_group_with_data_was_not_read() {
    let sp = FlinkSavepoint::open(&fixture("rocksdb-native-savepoint-incremental-off")).unwrap();
    let import = sp.import(sp.operator("state-op").unwrap()).unwrap();
    let kgs: Vec<u16> = import.key_groups().collect();
    for kg in &kgs[..kgs.len() - 1] {
        import.decode_key_group(*kg).unwrap();
    }
    let e = import.finish().unwrap_err();
    assert_names(
        &e,
        &[
            "operator 'state-op' subtask 1",
            &format!(
                "key group {} holds data but was never read",
                kgs[kgs.len() - 1]
            ),
        ],
    );
    import.decode_key_group(kgs[kgs.len() - 1]).unwrap();
    let report = import.finish().unwrap();
    assert_eq!(report.entries, 752);
    assert_eq!(report.handles, 2);
    // `write_savepoint` reads everything and leaves no file behind on failure.
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("op.sp");
    let (summary, report) = import
        .write_savepoint(&path, &WriteOptions::default())
        .unwrap();
    assert_eq!(summary.total_entries(), 752);
    assert_eq!(report.key_groups, kgs.len());
}

#[test]
fn cut_and_flipped_manifests_are_errors_or_replay_never_panic() {
    let corpus = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/corpus/flink_rocksdb_manifest"
    );
    let mut seen = 0;
    for f in std::fs::read_dir(corpus).unwrap() {
        let bytes = std::fs::read(f.unwrap().path()).unwrap();
        let m = keyed_state_flink::sst::read_manifest(&bytes, "m").unwrap();
        assert!(m.live_files().count() >= 7);
        for cut in 0..bytes.len() {
            // Every record is checksummed and whole: any cut inside one is an error.
            let r = keyed_state_flink::sst::read_manifest(&bytes[..cut], "m");
            if let Ok(short) = r {
                assert!(short.edits < m.edits, "cut {cut}");
            }
        }
        let mut flipped = bytes.clone();
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                flipped[i] ^= bit;
                // The record checksums catch every flip of a record's header or payload.
                assert!(
                    keyed_state_flink::sst::read_manifest(&flipped, "m").is_err(),
                    "flip at {i}"
                );
                flipped[i] ^= bit;
            }
        }
        seen += 1;
    }
    assert_eq!(seen, 8);
}

//! Flink 1.x savepoints (tests/fixtures/flink/flink-1.20.3, written by Flink 1.20.3: `_metadata` version 4,
//! no operator uids or names in it): each fixture reads as Flink read it and imports the 752 entries of the
//! same job written by Flink 2.3.0 (TTL timestamps aside: another run); an export with a 1.20 template keeps
//! its `_metadata` version and properties; handle kinds and versions this reader does not know are refused
//! by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state_flink::{
    export_job, parse_metadata, FlinkError, FlinkSavepoint, JobExportOptions, KeyedHandle,
    OperatorSources,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");
const F120: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/flink/flink-1.20.3"
);

const FIXTURES_120: &[&str] = &[
    "hashmap-canonical-savepoint",
    "hashmap-canonical-savepoint-inline",
    "hashmap-native-savepoint",
    "rocksdb-canonical-savepoint",
    "rocksdb-native-savepoint",
    "rocksdb-native-savepoint-incremental-off",
    "rocksdb-full-checkpoint/chk-1",
    "rocksdb-incremental-checkpoint/chk-2",
];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// (state, key hex) → value hex of the import of state-op, TTL timestamps cut off.
fn entries(dir: &Path) -> BTreeMap<(String, String), String> {
    let sp = FlinkSavepoint::open(dir).unwrap();
    let import = sp.import(sp.operator("state-op").unwrap()).unwrap();
    assert!(import.warnings().is_empty(), "{:?}", import.warnings());
    let mut bytes = Vec::new();
    encode(&import, &WriteOptions::default(), &mut bytes).unwrap();
    import.finish().unwrap();
    let r = SavepointReader::from_bytes(bytes).unwrap();
    let h = r.header();
    let mut out = BTreeMap::new();
    for b in r.key_groups() {
        r.read_key_group(b.key_group, &mut |s, k, v| {
            let name = h.states[s].name.clone();
            let v = if name == "ttl-value" { &v[8..] } else { v };
            out.insert((name, hex(k)), hex(v));
            Ok(())
        })
        .unwrap();
    }
    out
}

#[test]
fn flink_1_20_metadata_reads_as_flink_read_it() {
    for f in FIXTURES_120 {
        let dir = PathBuf::from(format!("{F120}/{f}"));
        let sp = FlinkSavepoint::open(&dir).unwrap();
        assert_eq!(sp.metadata.version, 4, "{f}");
        let root = f.split('/').next().unwrap();
        let dump = std::fs::read_to_string(format!("{F120}/{root}/DUMP.txt")).unwrap();
        // Flink printed each operator as `operator <id> uid=- name=- parallelism=P maxParallelism=M`.
        for op in &sp.metadata.operators {
            assert_eq!((&op.uid, &op.name), (&None, &None), "{f}");
            let line = format!(
                "operator {} uid=- name=- parallelism={} maxParallelism={}",
                op.id, op.parallelism, op.max_parallelism
            );
            assert!(dump.contains(&line), "{f}: {line}");
        }
        // The uid finds its operator through the id Flink derives from it.
        let op = sp.operator("state-op").unwrap();
        assert_eq!(op.id.to_hex(), "14725b7741e1a536207c2c73a13e02c9");
        assert_eq!(op.label(), "14725b7741e1a536207c2c73a13e02c9");
    }
}

#[test]
fn flink_1_20_fixtures_import_the_state_flink_2_3_wrote() {
    let want = entries(Path::new(&format!(
        "{FIXTURES}/rocksdb-canonical-savepoint"
    )));
    assert_eq!(want.len(), 752);
    for f in FIXTURES_120 {
        assert_eq!(
            entries(Path::new(&format!("{F120}/{f}"))),
            want,
            "Flink 1.20.3 {f}"
        );
    }
}

#[test]
fn an_export_with_a_flink_1_20_template_keeps_its_metadata_version_and_properties() {
    let dir = PathBuf::from(format!("{F120}/rocksdb-canonical-savepoint"));
    let template = FlinkSavepoint::open(&dir).unwrap();
    let import = template
        .import(template.operator("state-op").unwrap())
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let ours = tmp.path().join("state-op.sp");
    import
        .write_savepoint(&ours, &WriteOptions::default())
        .unwrap();
    let r = SavepointReader::open(&ours).unwrap();
    let out = tmp.path().join("out");
    let ops = [OperatorSources {
        operator: "state-op".into(),
        savepoints: vec![("state-op.sp", &r)],
    }];
    let summary = export_job(&ops, Some(&template), &JobExportOptions::default(), &out).unwrap();
    assert_eq!(summary.metadata_version, 4);
    let result = FlinkSavepoint::open(&out).unwrap();
    assert_eq!(result.metadata.version, 4);
    assert_eq!(result.metadata.trailer, template.metadata.trailer);
    assert_eq!(entries(&out), entries(&dir));
    // The exported keyed-state files equal Flink 1.20's own (the RocksDB backend's order is ours).
    for (a, b) in template
        .operator("state-op")
        .unwrap()
        .subtasks
        .iter()
        .zip(&result.operator("state-op").unwrap().subtasks)
    {
        let (
            Some(KeyedHandle::KeyGroups { stream: sa, .. }),
            Some(KeyedHandle::KeyGroups { stream: sb, .. }),
        ) = (&a.managed_keyed, &b.managed_keyed)
        else {
            panic!()
        };
        let fa = keyed_state_flink::location::open_stream(sa, template.dir()).unwrap();
        let fb = keyed_state_flink::location::open_stream(sb, result.dir()).unwrap();
        assert!(fa == fb, "subtask {}", a.index);
    }
}

/// A `_metadata` of `version` with one operator (parallelism 1) whose subtask 0 holds `keyed` as managed
/// keyed state.
fn metadata_with_keyed(version: i32, keyed: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0x4960_672du32.to_be_bytes());
    b.extend_from_slice(&version.to_be_bytes());
    b.extend_from_slice(&7i64.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // master states
    b.extend_from_slice(&1i32.to_be_bytes()); // operators
    if version >= 5 {
        b.extend_from_slice(&[0, 0, 0, 0]); // name, uid
    }
    b.extend_from_slice(&[0x11; 16]);
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&128i32.to_be_bytes());
    b.push(0); // coordinator state
    b.extend_from_slice(&1i32.to_be_bytes()); // subtasks
    b.extend_from_slice(&0i32.to_be_bytes()); // index
    b.extend_from_slice(&0i32.to_be_bytes()); // managed operator state
    b.extend_from_slice(&0i32.to_be_bytes()); // raw operator state
    b.extend_from_slice(keyed);
    b.push(0); // raw keyed
    b.extend_from_slice(&0i32.to_be_bytes()); // input channels
    b.extend_from_slice(&0i32.to_be_bytes()); // result subpartitions
    b
}

#[test]
fn handle_kinds_and_versions_this_reader_cannot_import_are_refused_by_name() {
    // InMemoryChangelogStateHandle (tag 9): key groups 0..128, sequence numbers, no change, an id.
    let mut changelog = vec![9u8];
    changelog.extend_from_slice(&0i32.to_be_bytes());
    changelog.extend_from_slice(&128i32.to_be_bytes());
    changelog.extend_from_slice(&0i64.to_be_bytes());
    changelog.extend_from_slice(&1i64.to_be_bytes());
    changelog.extend_from_slice(&0i32.to_be_bytes());
    changelog.extend_from_slice(&[0, 2, b'i', b'd']);
    for version in [3, 4, 6] {
        let bytes = metadata_with_keyed(version, &changelog);
        let dir = tempfile::tempdir().unwrap();
        let sp = FlinkSavepoint::from_bytes(dir.path(), &bytes).unwrap();
        let op = &sp.metadata.operators[0];
        let e = sp.import(op).unwrap_err();
        assert!(
            matches!(&e, FlinkError::UnsupportedHandle { handle, .. } if *handle == "InMemoryChangelogStateHandle"),
            "v{version}: {e}"
        );
        assert_eq!(e.kind(), keyed_state::ErrorKind::Unsupported);
    }
    // A keyed handle tag no Flink version writes.
    let e = parse_metadata(&metadata_with_keyed(4, &[42]), "_metadata").unwrap_err();
    assert!(
        e.to_string()
            .contains("_metadata at byte 65: unknown keyed state handle type 42"),
        "{e}"
    );
    // Metadata versions 1 and 2 (Flink 1.14 and older).
    for v in [1, 2] {
        let e = parse_metadata(&metadata_with_keyed(v, &[0]), "_metadata").unwrap_err();
        assert!(
            matches!(e, FlinkError::UnsupportedMetadataVersion { version, .. } if version == v),
            "{e}"
        );
        assert!(e
            .to_string()
            .contains(&format!("version {v} is not supported")));
    }
    // A serialization proxy version other than 6 (Flink 1.16 and older could write 5).
    let e = keyed_state_flink::proxy::read_proxy(&[0, 0, 0, 5, 0], "f", None).unwrap_err();
    assert!(
        matches!(e, FlinkError::UnsupportedProxyVersion { version: 5, .. }),
        "{e}"
    );
}

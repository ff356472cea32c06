//! Flink 1.x savepoints, each set written by that Flink itself (tests/fixtures/flink/flink-<version>): Flink
//! 1.15.4 (`_metadata` version 3), 1.18.1 and 1.20.3 (version 4), none with operator uids or names in
//! `_metadata`. Each fixture reads as Flink read it and imports to exactly its `expected.json` (the entry
//! bytes our store writes for that logical state, TTL timestamps aside) and to the entries of the same job
//! written by Flink 2.3.0; an export with a 1.x template keeps its `_metadata` version and properties;
//! handle kinds and versions this reader does not know are refused by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state_flink::{
    export_job, parse_metadata, FlinkError, FlinkSavepoint, JobExportOptions, KeyedHandle,
    OperatorSources,
};
use serde_json::Value;

use crate::flink_fixtures::our_entries_for;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");

/// Each Flink 1.x fixture set: its folder under tests/fixtures/flink and the `_metadata` version that
/// Flink writes (1.15 `MetadataV3Serializer`; 1.16+ `MetadataV4Serializer`, which adds the checkpoint
/// properties).
const VERSIONS: &[(&str, i32)] = &[
    ("flink-1.15.4", 3),
    ("flink-1.18.1", 4),
    ("flink-1.20.3", 4),
];

/// The savepoints and final checkpoints of every set (all records processed): the incremental and full
/// checkpoints' ids come from their run-info.json.
const SAVEPOINTS: &[&str] = &[
    "hashmap-canonical-savepoint",
    "hashmap-canonical-savepoint-inline",
    "hashmap-native-savepoint",
    "rocksdb-canonical-savepoint",
    "rocksdb-native-savepoint",
    "rocksdb-native-savepoint-incremental-off",
];

fn checkpoint_ids(set: &str, run: &str) -> Vec<u64> {
    let info: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{FIXTURES}/{set}/{run}/run-info.json")).unwrap(),
    )
    .unwrap();
    info["checkpoint_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect()
}

/// The fixtures of `set` holding the state after all records: the savepoints, the full checkpoint and
/// the last incremental checkpoint.
fn final_fixtures(set: &str) -> Vec<String> {
    let mut out: Vec<String> = SAVEPOINTS.iter().map(|f| f.to_string()).collect();
    let full = checkpoint_ids(set, "rocksdb-full-checkpoint");
    out.push(format!("rocksdb-full-checkpoint/chk-{}", full[0]));
    let inc = checkpoint_ids(set, "rocksdb-incremental-checkpoint");
    out.push(format!("rocksdb-incremental-checkpoint/chk-{}", inc[1]));
    out
}

/// The incremental checkpoint of `set` taken after the first phase of records.
fn phase1_checkpoint(set: &str) -> String {
    let inc = checkpoint_ids(set, "rocksdb-incremental-checkpoint");
    format!("rocksdb-incremental-checkpoint/chk-{}", inc[0])
}

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

/// Our store's entries for a set's `expected.json` (after all records, or after phase 1), TTL timestamps
/// cut off as in [`entries`].
fn expected_entries(set: &str, phase1: bool) -> BTreeMap<(String, String), String> {
    our_entries_for(&format!("{FIXTURES}/{set}/expected.json"), phase1)
        .into_iter()
        .map(|((name, k), v)| {
            let v = if name == "ttl-value" {
                v[16..].to_string()
            } else {
                v
            };
            ((name, k), v)
        })
        .collect()
}

#[test]
fn flink_1x_metadata_reads_as_flink_read_it() {
    for &(set, version) in VERSIONS {
        let mut fixtures = final_fixtures(set);
        fixtures.push(phase1_checkpoint(set));
        for f in &fixtures {
            let dir = PathBuf::from(format!("{FIXTURES}/{set}/{f}"));
            let sp = FlinkSavepoint::open(&dir).unwrap();
            assert_eq!(sp.metadata.version, version, "{set}/{f}");
            // Version 3 ends after the operators; 4 appends the Java-serialized CheckpointProperties.
            assert_eq!(sp.metadata.trailer.is_empty(), version == 3, "{set}/{f}");
            if version == 4 {
                let props = b"org.apache.flink.runtime.checkpoint.CheckpointProperties";
                assert!(
                    sp.metadata.trailer.windows(props.len()).any(|w| w == props),
                    "{set}/{f}"
                );
            }
            let root = f.split('/').next().unwrap();
            let dump =
                std::fs::read_to_string(format!("{FIXTURES}/{set}/{root}/DUMP.txt")).unwrap();
            assert!(
                dump.contains(&format!("metadataVersion={version}")),
                "{set}/{f}"
            );
            // Flink printed each operator as `operator <id> uid=- name=- parallelism=P maxParallelism=M`.
            for op in &sp.metadata.operators {
                assert_eq!((&op.uid, &op.name), (&None, &None), "{set}/{f}");
                let line = format!(
                    "operator {} uid=- name=- parallelism={} maxParallelism={}",
                    op.id, op.parallelism, op.max_parallelism
                );
                assert!(dump.contains(&line), "{set}/{f}: {line}");
            }
            // The uid finds its operator through the id Flink derives from it.
            let op = sp.operator("state-op").unwrap();
            assert_eq!(op.id.to_hex(), "14725b7741e1a536207c2c73a13e02c9");
            assert_eq!(op.label(), "14725b7741e1a536207c2c73a13e02c9");
        }
    }
}

#[test]
fn flink_1x_fixtures_import_exactly_their_expected_json() {
    for &(set, _) in VERSIONS {
        let want = expected_entries(set, false);
        assert_eq!(want.len(), 752, "{set}");
        for f in final_fixtures(set) {
            assert_eq!(
                entries(Path::new(&format!("{FIXTURES}/{set}/{f}"))),
                want,
                "{set}/{f}"
            );
        }
        let f = phase1_checkpoint(set);
        let want = expected_entries(set, true);
        assert_eq!(want.len(), 625, "{set}/{f}");
        assert_eq!(
            entries(Path::new(&format!("{FIXTURES}/{set}/{f}"))),
            want,
            "{set}/{f}"
        );
    }
}

#[test]
fn flink_1x_fixtures_import_the_state_flink_2_3_wrote() {
    let want = entries(Path::new(&format!(
        "{FIXTURES}/rocksdb-canonical-savepoint"
    )));
    assert_eq!(want.len(), 752);
    for &(set, _) in VERSIONS {
        for f in final_fixtures(set) {
            assert_eq!(
                entries(Path::new(&format!("{FIXTURES}/{set}/{f}"))),
                want,
                "{set}/{f}"
            );
        }
    }
}

#[test]
fn an_export_with_a_flink_1x_template_keeps_its_metadata_version_and_properties() {
    for &(set, version) in VERSIONS {
        let dir = PathBuf::from(format!("{FIXTURES}/{set}/rocksdb-canonical-savepoint"));
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
        let summary =
            export_job(&ops, Some(&template), &JobExportOptions::default(), &out).unwrap();
        assert_eq!(summary.metadata_version, version, "{set}");
        let result = FlinkSavepoint::open(&out).unwrap();
        assert_eq!(result.metadata.version, version, "{set}");
        assert_eq!(result.metadata.trailer, template.metadata.trailer, "{set}");
        assert_eq!(entries(&out), entries(&dir), "{set}");
        // The exported keyed-state files equal Flink's own (the RocksDB backend's order is ours).
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
                panic!("{set}")
            };
            let fa = keyed_state_flink::location::open_stream(sa, template.dir()).unwrap();
            let fb = keyed_state_flink::location::open_stream(sb, result.dir()).unwrap();
            assert!(fa == fb, "{set}: subtask {}", a.index);
        }
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
    // The changelog handles' second versions (tags 13 and 14, Flink 1.16 and later) in a version 4
    // `_metadata` (what Flink 1.16 to 1.20 write): ChangelogStateHandleStreamImpl with no stream, and
    // ChangelogStateBackendHandle with no materialized or non-materialized handle.
    let mut stream_v2 = vec![13u8];
    stream_v2.extend_from_slice(&0i32.to_be_bytes());
    stream_v2.extend_from_slice(&128i32.to_be_bytes());
    stream_v2.extend_from_slice(&0i32.to_be_bytes()); // streams
    stream_v2.extend_from_slice(&0i64.to_be_bytes()); // state size
    stream_v2.extend_from_slice(&0i64.to_be_bytes()); // checkpointed size
    stream_v2.extend_from_slice(&[0, 2, b'i', b'd']);
    stream_v2.extend_from_slice(&[0, 3, b'd', b'f', b's']); // storage identifier
    let mut backend_v2 = vec![14u8];
    backend_v2.extend_from_slice(&0i32.to_be_bytes());
    backend_v2.extend_from_slice(&128i32.to_be_bytes());
    backend_v2.extend_from_slice(&0i64.to_be_bytes()); // checkpointed size
    backend_v2.extend_from_slice(&0i32.to_be_bytes()); // materialized handles
    backend_v2.extend_from_slice(&0i32.to_be_bytes()); // non-materialized handles
    backend_v2.extend_from_slice(&5i64.to_be_bytes()); // materialization id
    backend_v2.extend_from_slice(&7i64.to_be_bytes()); // checkpoint id
    backend_v2.extend_from_slice(&[0, 2, b'i', b'd']);
    for (keyed, name) in [
        (&stream_v2, "ChangelogStateHandleStreamImpl"),
        (&backend_v2, "ChangelogStateBackendHandle"),
    ] {
        let bytes = metadata_with_keyed(4, keyed);
        let dir = tempfile::tempdir().unwrap();
        let sp = FlinkSavepoint::from_bytes(dir.path(), &bytes).unwrap();
        let e = sp.import(&sp.metadata.operators[0]).unwrap_err();
        assert!(
            matches!(&e, FlinkError::UnsupportedHandle { handle, .. } if *handle == name),
            "{name}: {e}"
        );
        assert!(e.to_string().contains(name), "{e}");
        assert_eq!(e.kind(), keyed_state::ErrorKind::Unsupported);
    }
    // A keyed handle tag no Flink version writes.
    let e = parse_metadata(&metadata_with_keyed(4, &[42]), "_metadata").unwrap_err();
    assert!(
        e.to_string()
            .contains("_metadata at byte 65: unknown keyed state handle type 42"),
        "{e}"
    );
    // Metadata versions 1 and 2 (Flink releases before 1.14).
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
    // A serialization proxy version other than 6 (Flink 1.14 to 2.3 write 6; 5 and lower are older).
    let e = keyed_state_flink::proxy::read_proxy(&[0, 0, 0, 5, 0], "f", None).unwrap_err();
    assert!(
        matches!(e, FlinkError::UnsupportedProxyVersion { version: 5, .. }),
        "{e}"
    );
}

/// A copy of fixture `f` of `set` in which every `StringSerializerSnapshot` class name of the keyed-state
/// files is replaced by a class this reader does not know (same length: `…base.StringSerializer$Xtring…`).
fn with_unknown_string_snapshot(set: &str, f: &str, to: &Path) {
    let from = format!("{FIXTURES}/{set}/{f}");
    let known = b"StringSerializer$StringSerializerSnapshot";
    let unknown = b"StringSerializer$XtringSerializerSnapshot";
    let mut patched = 0;
    for e in std::fs::read_dir(&from).unwrap() {
        let e = e.unwrap();
        let mut bytes = std::fs::read(e.path()).unwrap();
        let name = e.file_name().into_string().unwrap();
        if name != "_metadata" && !name.ends_with(".txt") && !name.ends_with(".json") {
            let mut i = 0;
            while let Some(p) = bytes[i..].windows(known.len()).position(|w| w == known) {
                bytes[i + p..i + p + known.len()].copy_from_slice(unknown);
                i += p + known.len();
                patched += 1;
            }
        }
        std::fs::write(to.join(&name), bytes).unwrap();
    }
    assert!(patched > 0, "{set}/{f}");
}

#[test]
fn flink_1x_serializers_without_a_known_layout_are_named() {
    let class =
        "org.apache.flink.api.common.typeutils.base.StringSerializer$XtringSerializerSnapshot";
    for &(set, _) in VERSIONS {
        // The HashMap native format needs every value's length: refused, naming the subtask, handle, file,
        // state and class.
        let dir = tempfile::tempdir().unwrap();
        with_unknown_string_snapshot(set, "hashmap-native-savepoint", dir.path());
        let sp = FlinkSavepoint::open(dir.path()).unwrap();
        let err = match sp.import(sp.operator("state-op").unwrap()) {
            Err(e) => e.to_string(),
            Ok(import) => {
                let mut bytes = Vec::new();
                encode(&import, &WriteOptions::default(), &mut bytes)
                    .unwrap_err()
                    .to_string()
            }
        };
        // (`name` or `map`: the first state in the file's header whose serializer holds the class; the
        // HashMap backend's header order is its own.)
        assert!(
            err.contains(class)
                && (err.contains("state 'name'") || err.contains("state 'map'"))
                && err.contains("subtask 0 (KeyGroupsStateHandle)"),
            "{set}: {err}"
        );
        // The canonical format holds every value's length: imported, the values kept as raw bytes, with a
        // warning naming each state and the class.
        let dir = tempfile::tempdir().unwrap();
        with_unknown_string_snapshot(set, "hashmap-canonical-savepoint", dir.path());
        let sp = FlinkSavepoint::open(dir.path()).unwrap();
        let import = sp.import(sp.operator("state-op").unwrap()).unwrap();
        for state in ["map", "name"] {
            assert!(
                import
                    .warnings()
                    .iter()
                    .any(|w| w.contains(&format!("state '{state}'")) && w.contains(class)),
                "{set}: {:?}",
                import.warnings()
            );
        }
    }
}

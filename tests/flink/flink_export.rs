//! Exporting our savepoints as Flink canonical savepoints: `_metadata` written as Flink writes it (every
//! fixture's file reproduced byte for byte), the RocksDB fixture's keyed-state files reproduced byte for
//! byte from its import, import → export → import giving the same savepoint at any parallelism, plain and
//! Snappy, and null map values written as Flink's null flag.

use std::collections::BTreeMap;
use std::path::Path;

use keyed_state::backend::{BackendConfig, BackendSnapshot, StateId};
use keyed_state::keygroup::KeyGroup;
use keyed_state::meta::{StateKind, StateMetaInfo};
use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state_flink::keyed_stream::read_key_group;
use keyed_state_flink::metadata::{KeyedHandle, StreamHandle};
use keyed_state_flink::metadata_writer::{write_metadata, CANONICAL_SAVEPOINT_PROPERTIES};
use keyed_state_flink::proxy::read_proxy;
use keyed_state_flink::proxy_writer::{flink_state_meta, write_proxy};
use keyed_state_flink::{
    export_canonical, parse_metadata, ExportOptions, FlinkError, FlinkSavepoint,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");

const CANONICAL: &[&str] = &[
    "hashmap-canonical-savepoint",
    "hashmap-canonical-savepoint-inline",
    "rocksdb-canonical-savepoint",
];

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

/// Our savepoint (bytes) of the fixture's `state-op`.
fn import_dir(dir: &Path) -> Vec<u8> {
    let sp = FlinkSavepoint::open(dir).unwrap();
    let import = sp.import(sp.operator("state-op").unwrap()).unwrap();
    let mut out = Vec::new();
    encode(&import, &WriteOptions::default(), &mut out).unwrap();
    out
}

fn export(
    sp: &[u8],
    parallelism: u32,
    compress: bool,
    out: &Path,
) -> keyed_state_flink::ExportSummary {
    let reader = SavepointReader::from_bytes(sp.to_vec()).unwrap();
    let opts = ExportOptions {
        compress,
        ..ExportOptions::new("state-op", parallelism)
    };
    export_canonical(&[("ours", &reader)], &opts, out).unwrap()
}

#[test]
fn metadata_writer_reproduces_every_fixture_metadata_byte_for_byte() {
    let mut dirs: Vec<String> = [
        "hashmap-canonical-savepoint",
        "hashmap-canonical-savepoint-inline",
        "hashmap-native-savepoint",
        "rocksdb-canonical-savepoint",
        "rocksdb-native-savepoint",
    ]
    .iter()
    .map(|f| fixture(f))
    .collect();
    dirs.push(fixture("rocksdb-incremental-checkpoint/chk-2"));
    dirs.push(fixture("rocksdb-incremental-checkpoint/chk-3"));
    for d in dirs {
        let bytes = std::fs::read(format!("{d}/_metadata")).unwrap();
        let m = parse_metadata(&bytes, "_metadata").unwrap();
        assert!(write_metadata(&m).unwrap() == bytes, "{d}");
    }
}

#[test]
fn the_canonical_savepoint_properties_are_flinks() {
    for f in CANONICAL {
        let bytes = std::fs::read(format!("{}/_metadata", fixture(f))).unwrap();
        let m = parse_metadata(&bytes, "_metadata").unwrap();
        assert_eq!(m.trailer, CANONICAL_SAVEPOINT_PROPERTIES, "{f}");
    }
}

#[test]
fn proxy_writer_reproduces_flinks_header_from_our_meta() {
    for f in CANONICAL {
        let sp = FlinkSavepoint::open(Path::new(&fixture(f))).unwrap();
        let op = sp.operator("state-op").unwrap();
        let import = sp.import(op).unwrap();
        for file in import.files() {
            let header_end = file.offsets.iter().filter(|o| **o != 0).min().unwrap();
            let proxy = read_proxy(&file.data, &file.name, Some(*header_end as usize)).unwrap();
            let key = &proxy.key_serializer.snapshot;
            let states = file
                .metas
                .iter()
                .map(|m| flink_state_meta(m, key).unwrap())
                .collect::<Vec<_>>();
            let mut out = Vec::new();
            write_proxy(false, key, &states, &mut out).unwrap();
            assert!(
                out == file.data[..*header_end as usize],
                "{f} {}",
                file.name
            );
        }
    }
}

#[test]
fn export_of_the_rocksdb_fixture_is_byte_equal_to_flinks_own_files() {
    let dir = fixture("rocksdb-canonical-savepoint");
    let ours = import_dir(Path::new(&dir));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("export");
    let summary = export(&ours, 2, false, &out);
    let flink_bytes = std::fs::read(format!("{dir}/_metadata")).unwrap();
    let mut flink = parse_metadata(&flink_bytes, "_metadata").unwrap();
    let mut ours_meta =
        parse_metadata(&std::fs::read(out.join("_metadata")).unwrap(), "_metadata").unwrap();
    // Flink's operator with its file names replaced by ours is our operator, byte for byte (the operators'
    // places in the two files differ).
    flink
        .operators
        .retain(|o| o.uid.as_deref() == Some("state-op"));
    flink.operator_spans.clear();
    ours_meta.operator_spans.clear();
    flink.checkpoint_id = 0;
    for (st, f) in flink.operators[0].subtasks.iter_mut().zip(&summary.files) {
        let Some(KeyedHandle::KeyGroups { stream, .. }) = &mut st.managed_keyed else {
            panic!("not a key-groups handle")
        };
        let StreamHandle::Relative { path, size } = stream else {
            panic!("not a relative file")
        };
        let theirs = std::fs::read(format!("{dir}/{path}")).unwrap();
        let mine = std::fs::read(out.join(&f.name)).unwrap();
        assert!(
            theirs == mine,
            "subtask {} differs from Flink's {path}",
            f.subtask
        );
        assert_eq!(*size as u64, f.bytes);
        *path = f.name.clone();
    }
    assert_eq!(flink, ours_meta);
    assert!(write_metadata(&flink).unwrap() == std::fs::read(out.join("_metadata")).unwrap());
}

#[test]
fn import_export_import_gives_the_same_savepoint_at_any_parallelism() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for f in CANONICAL.iter().chain(&["hashmap-native-savepoint"]) {
        let ours = import_dir(Path::new(&fixture(f)));
        for p in [1, 2, 3, 5, 128] {
            for compress in [false, true] {
                n += 1;
                let out = tmp.path().join(format!("e{n}"));
                let s = export(&ours, p, compress, &out);
                assert_eq!(s.files.len(), p as usize);
                assert_eq!(s.entries(), 752);
                let again = import_dir(&out);
                assert!(again == ours, "{f} at parallelism {p}, compress {compress}");
            }
        }
    }
}

#[test]
fn every_exported_key_group_holds_only_its_own_keys() {
    let ours = import_dir(Path::new(&fixture("hashmap-canonical-savepoint")));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("e");
    export(&ours, 3, false, &out);
    let sp = FlinkSavepoint::open(&out).unwrap();
    let op = &sp.metadata.operators[0];
    assert_eq!(op.id.to_hex(), "14725b7741e1a536207c2c73a13e02c9");
    assert_eq!((op.parallelism, op.max_parallelism), (3, 128));
    let mut total = 0;
    for st in &op.subtasks {
        let Some(KeyedHandle::KeyGroups {
            range,
            offsets,
            stream,
            ..
        }) = &st.managed_keyed
        else {
            panic!()
        };
        let StreamHandle::Relative { path, .. } = stream else {
            panic!()
        };
        let data = std::fs::read(out.join(path)).unwrap();
        for (j, off) in offsets.iter().enumerate() {
            if *off == 0 {
                continue;
            }
            let kg = range.start() + j as u16;
            total += read_key_group(
                &data,
                *off as usize,
                kg,
                128,
                false,
                7,
                path,
                &mut |_, _, _| Ok(()),
            )
            .unwrap()
            .entries;
        }
    }
    assert_eq!(total, 752);
}

/// A snapshot held in memory: (state, key group) → sorted entries.
struct Memory {
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    entries: BTreeMap<(StateId, KeyGroup), Vec<(Vec<u8>, Vec<u8>)>>,
}

impl BackendSnapshot for Memory {
    fn config(&self) -> &BackendConfig {
        &self.config
    }
    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }
    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> keyed_state::Result<()>,
    ) -> keyed_state::Result<()> {
        for (k, v) in self.entries.get(&(state, kg)).into_iter().flatten() {
            f(k, v)?;
        }
        Ok(())
    }
}

fn memory_of(bytes: &[u8]) -> Memory {
    let r = SavepointReader::from_bytes(bytes.to_vec()).unwrap();
    let mut entries: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for b in r.key_groups() {
        r.read_key_group(b.key_group, &mut |s, k, v| {
            entries
                .entry((s, b.key_group))
                .or_default()
                .push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
    }
    Memory {
        config: r.header().backend_config(),
        states: r.header().states.clone(),
        entries,
    }
}

#[test]
fn null_map_values_are_written_as_flinks_null_flag() {
    let mut mem = memory_of(&import_dir(Path::new(&fixture(
        "rocksdb-canonical-savepoint",
    ))));
    let map = mem
        .states
        .iter()
        .position(|s| s.kind == StateKind::Map)
        .unwrap();
    let mut nulled = 0;
    for ((s, _), list) in mem.entries.iter_mut() {
        if *s == map {
            // Flink's MapSerializer: a `true` null flag and no value.
            list[0].1 = vec![1];
            nulled += 1;
        }
    }
    let mut bytes = Vec::new();
    encode(&mem, &WriteOptions::default(), &mut bytes).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for compress in [false, true] {
        let out = tmp.path().join(format!("e{compress}"));
        export(&bytes, 2, compress, &out);
        let again = import_dir(&out);
        assert!(again == bytes);
        let back = memory_of(&again);
        let nulls = back
            .entries
            .iter()
            .filter(|((s, _), _)| *s == map)
            .filter(|(_, l)| l[0].1 == [1])
            .count();
        assert_eq!(nulls, nulled);
    }
}

#[test]
fn bad_arguments_and_our_own_serializers_are_named_errors() {
    let ours = import_dir(Path::new(&fixture("rocksdb-canonical-savepoint")));
    let reader = SavepointReader::from_bytes(ours.clone()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let err = export_canonical(
        &[("a", &reader)],
        &ExportOptions::new("x", 129),
        &tmp.path().join("p"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("parallelism 129"), "{err}");
    // Non-empty output directory.
    std::fs::write(tmp.path().join("file"), b"x").unwrap();
    let err =
        export_canonical(&[("a", &reader)], &ExportOptions::new("x", 2), tmp.path()).unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
    // Two sources with the same (state, key group).
    let err = export_canonical(
        &[("a", &reader), ("b", &reader)],
        &ExportOptions::new("x", 2),
        &tmp.path().join("q"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("in both a and b"), "{err}");
    // A serializer of ours that Flink does not have.
    let mut mem = memory_of(&ours);
    mem.states[0].value_serializer = keyed_state::serializer::SerializerSnapshot::composite(
        "keyed-state/option",
        1,
        vec![mem.states[0].value_serializer.clone()],
    );
    let mut bytes = Vec::new();
    encode(&mem, &WriteOptions::default(), &mut bytes).unwrap();
    let r = SavepointReader::from_bytes(bytes).unwrap();
    let err = export_canonical(
        &[("a", &r)],
        &ExportOptions::new("x", 2),
        &tmp.path().join("r"),
    )
    .unwrap_err();
    assert!(
        matches!(&err, FlinkError::UnsupportedState { state, .. } if state == "sum"),
        "{err}"
    );
}

#[test]
fn two_savepoints_of_disjoint_key_groups_export_as_one() {
    let ours = import_dir(Path::new(&fixture("rocksdb-canonical-savepoint")));
    let mem = memory_of(&ours);
    let split = |lo: bool| {
        let m = Memory {
            config: mem.config.clone(),
            states: mem.states.clone(),
            entries: mem
                .entries
                .iter()
                .filter(|((_, kg), _)| (*kg < 64) == lo)
                .map(|(k, v)| (*k, v.clone()))
                .collect(),
        };
        let mut b = Vec::new();
        encode(&m, &WriteOptions::default(), &mut b).unwrap();
        SavepointReader::from_bytes(b).unwrap()
    };
    let (a, b) = (split(true), split(false));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("e");
    export_canonical(
        &[("a", &a), ("b", &b)],
        &ExportOptions::new("state-op", 3),
        &out,
    )
    .unwrap();
    assert!(import_dir(&out) == ours);
}

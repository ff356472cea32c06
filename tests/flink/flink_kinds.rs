//! The state Flink users keep (tests/fixtures/flink/kinds, written by Flink 2.3.0): TTL on list and map
//! state (a TtlValue per element and per entry), MapState with null values, String namespaces under String
//! keys (the ambiguous-key layout with length bytes), and three incremental RocksDB checkpoints between
//! which a compaction removed SST files. Each imports to its logical content (decoded here from our
//! savepoint and compared with `expected.json`, TTL timestamps inside their records' write times), and
//! each exports back to an import of the same bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state_flink::{export_canonical, ExportOptions, FlinkSavepoint, KeyedHandle};
use serde_json::{json, Value};

const KINDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink/kinds");

fn string_value(b: &[u8], mut i: usize) -> (String, usize) {
    let varint = |i: &mut usize| {
        let (mut v, mut shift) = (0u32, 0);
        loop {
            let c = b[*i];
            *i += 1;
            v |= u32::from(c & 0x7f) << shift;
            if c < 0x80 {
                return v;
            }
            shift += 7;
        }
    };
    let n = varint(&mut i);
    assert!(n > 0, "null string");
    let units: Vec<u16> = (0..n - 1).map(|_| varint(&mut i) as u16).collect();
    (String::from_utf16(&units).unwrap(), i)
}

/// Flink's variable-length int (little-endian bytes until the value is consumed).
fn var_len(n: usize) -> usize {
    let mut len = 1;
    let mut v = n >> 8;
    while v != 0 {
        len += 1;
        v >>= 8;
    }
    len
}

fn long(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// The logical content of the import (expected.json's shape), and every TTL timestamp with its record
/// `(key, j)`.
fn logical(r: &SavepointReader) -> (Value, Vec<(String, usize, i64)>) {
    let h = r.header();
    let mut out: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    let mut stamps = Vec::new();
    for b in r.key_groups() {
        r.read_key_group(b.key_group, &mut |s, k, v| {
            let (key, mut i) = string_value(k, 1);
            let e = out.entry(key.clone()).or_default();
            e.insert("key_group".into(), json!(k[0]));
            let state = h.states[s].name.as_str();
            let slot = |e: &mut serde_json::Map<String, Value>| {
                e.entry(state.to_string())
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .unwrap()
                    .clone()
            };
            match state {
                "ns-value" | "ns-list" => {
                    i += var_len(i - 1);
                    let (ns, end) = string_value(k, i);
                    assert_eq!(end + var_len(end - i), k.len(), "namespace length bytes");
                    let value = if state == "ns-value" {
                        json!(long(v, 0))
                    } else {
                        json!((0..v.len())
                            .step_by(9)
                            .map(|x| long(v, x))
                            .collect::<Vec<_>>())
                    };
                    let mut m = slot(e);
                    m.insert(ns, value);
                    e.insert(state.into(), Value::Object(m));
                }
                "ttl-list" => {
                    assert_eq!(k[i], 0, "void namespace");
                    let vals: Vec<i64> = (0..v.len()).step_by(17).map(|x| long(v, x + 8)).collect();
                    for (j, x) in (0..v.len()).step_by(17).enumerate() {
                        stamps.push((key.clone(), j, long(v, x)));
                    }
                    e.insert(state.into(), json!(vals));
                }
                "ttl-map" | "null-map" => {
                    assert_eq!(k[i], 0, "void namespace");
                    let (uk, end) = string_value(k, i + 1);
                    assert_eq!(end, k.len());
                    let value = match (v[0], state) {
                        (1, _) => {
                            assert_eq!(v.len(), 1);
                            Value::Null
                        }
                        (0, "ttl-map") => {
                            stamps.push((key.clone(), uk[1..].parse().unwrap(), long(v, 1)));
                            json!(long(v, 9))
                        }
                        (0, _) => json!(long(v, 1)),
                        (f, _) => panic!("null flag {f}"),
                    };
                    let mut m = slot(e);
                    m.insert(uk, value);
                    e.insert(state.into(), Value::Object(m));
                }
                other => panic!("unexpected state {other}"),
            }
            Ok(())
        })
        .unwrap();
    }
    let v = Value::Object(
        out.into_iter()
            .map(|(k, v)| (k, Value::Object(v)))
            .collect(),
    );
    (v, stamps)
}

fn expected(phase: u32) -> Value {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{KINDS}/expected.json")).unwrap())
            .unwrap();
    let mut e = v[format!("after_phase_{phase}")].clone();
    for (_, s) in e.as_object_mut().unwrap() {
        s.as_object_mut().unwrap().remove("subtask");
    }
    e
}

fn import(dir: &Path) -> (Vec<u8>, SavepointReader) {
    let sp = FlinkSavepoint::open(dir).unwrap();
    let import = sp.import(sp.operator("kinds").unwrap()).unwrap();
    assert!(import.warnings().is_empty(), "{:?}", import.warnings());
    let mut bytes = Vec::new();
    encode(&import, &WriteOptions::default(), &mut bytes).unwrap();
    import.finish().unwrap();
    (bytes.clone(), SavepointReader::from_bytes(bytes).unwrap())
}

/// Checks every TTL timestamp against the write time range run-info.json records for its record.
fn check_stamps(stamps: &[(String, usize, i64)], run_info: &Path) {
    let info: Value = serde_json::from_str(&std::fs::read_to_string(run_info).unwrap()).unwrap();
    let ranges = &info["ttl_write_millis_range_by_record"];
    assert!(!stamps.is_empty());
    for (key, j, ts) in stamps {
        let n: u32 = key
            .strip_prefix('k')
            .or_else(|| key.split('-').nth(1))
            .unwrap()
            .parse()
            .unwrap();
        let r = &ranges[format!("{n}/{j}")];
        assert!(
            r[0].as_i64().unwrap() <= *ts && *ts <= r[1].as_i64().unwrap(),
            "{key} j={j}: TTL timestamp {ts} outside {r}"
        );
    }
}

fn dir(rel: &str) -> PathBuf {
    PathBuf::from(format!("{KINDS}/{rel}"))
}

#[test]
fn ttl_lists_and_maps_null_map_values_and_string_namespaces_import_to_their_content() {
    let (canonical, _) = import(&dir("rocksdb-canonical-savepoint"));
    for (fixture, run) in [
        ("rocksdb-canonical-savepoint", "rocksdb-canonical-savepoint"),
        ("rocksdb-native-savepoint", "rocksdb-native-savepoint"),
        ("hashmap-native-savepoint", "hashmap-native-savepoint"),
        (
            "rocksdb-incremental-checkpoints/chk-4",
            "rocksdb-incremental-checkpoints",
        ),
    ] {
        let (bytes, r) = import(&dir(fixture));
        let (got, stamps) = logical(&r);
        assert_eq!(got, expected(3), "{fixture}");
        check_stamps(&stamps, &dir(run).join("run-info.json"));
        // 40 keys: 6-element TTL lists, and TTL map entries less the removed ones.
        assert_eq!(stamps.len(), 40 * 6 + 40 * 6 - 6, "{fixture}");
        if !fixture.starts_with("hashmap") {
            // One RocksDB run at one state: the same entries, TTL timestamps included.
            assert!(
                bytes == canonical,
                "{fixture}: savepoint bytes differ from the canonical import"
            );
        }
    }
}

#[test]
fn incremental_checkpoints_with_a_compaction_between_them_import_each_phase() {
    let mut previous: Option<BTreeMap<u32, BTreeSet<String>>> = None;
    let mut removed = 0;
    for (phase, chk) in [(1, "chk-2"), (2, "chk-3"), (3, "chk-4")] {
        let d = dir(&format!("rocksdb-incremental-checkpoints/{chk}"));
        let (_, r) = import(&d);
        let (got, stamps) = logical(&r);
        assert_eq!(got, expected(phase), "{chk}");
        check_stamps(
            &stamps,
            &dir("rocksdb-incremental-checkpoints").join("run-info.json"),
        );
        // The SST files each subtask's handle lists.
        let sp = FlinkSavepoint::open(&d).unwrap();
        let mut files = BTreeMap::new();
        for st in &sp.operator("kinds").unwrap().subtasks {
            let Some(KeyedHandle::Incremental { shared, .. }) = &st.managed_keyed else {
                panic!("{chk}: not incremental")
            };
            files.insert(
                st.index,
                shared
                    .iter()
                    .map(|(n, _)| n.clone())
                    .filter(|n| n.ends_with(".sst"))
                    .collect::<BTreeSet<_>>(),
            );
        }
        if let Some(prev) = &previous {
            for (i, before) in prev {
                removed += before.difference(&files[i]).count();
            }
        }
        previous = Some(files);
    }
    assert!(
        removed > 0,
        "a compaction removed SST files between two increments"
    );
}

#[test]
fn the_state_kinds_export_back_to_the_same_import() {
    for fixture in ["rocksdb-native-savepoint", "hashmap-native-savepoint"] {
        let (bytes, r) = import(&dir(fixture));
        let tmp = tempfile::tempdir().unwrap();
        for (p, compress) in [(1, false), (3, true)] {
            let out = tmp.path().join(format!("p{p}"));
            let opts = ExportOptions {
                compress,
                ..ExportOptions::new("kinds", p)
            };
            export_canonical(&[("ours", &r)], &opts, &out).unwrap();
            let (again, _) = import(&out);
            assert!(again == bytes, "{fixture} at parallelism {p}");
        }
    }
}

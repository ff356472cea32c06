//! `keyed-state import-flink`, `dump --json` of the import and `inspect` of Flink directories, run as a user
//! runs them, against the logical content Flink's job wrote (tests/fixtures/flink/expected.json).

use std::collections::BTreeMap;
use std::process::{Command, Output};

use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/flink");

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_keyed-state"))
        .args(args)
        .output()
        .expect("run keyed-state")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Per key: the fields of expected.json rebuilt from `dump --json` lines.
fn logical(lines: &str) -> BTreeMap<i64, serde_json::Map<String, Value>> {
    let mut out: BTreeMap<i64, serde_json::Map<String, Value>> = BTreeMap::new();
    for line in lines.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let o = v.as_object().unwrap();
        let state = o["state"].as_str().unwrap();
        let key = o["key"].as_i64().unwrap();
        assert_eq!(o["namespace"], Value::Null, "{line}");
        let e = out.entry(key).or_default();
        let prev = e.insert("key_group".into(), o["key_group"].clone());
        assert!(prev.is_none() || prev.as_ref() == Some(&o["key_group"]));
        let mut fields: Vec<&str> = o.keys().map(String::as_str).collect();
        fields.sort();
        match state {
            "sum" | "list" | "name" => {
                assert_eq!(
                    fields,
                    ["key", "key_group", "namespace", "state", "value"],
                    "{line}"
                );
                e.insert(state.into(), o["value"].clone());
            }
            "ttl-value" => {
                assert_eq!(
                    fields,
                    [
                        "key",
                        "key_group",
                        "namespace",
                        "state",
                        "ttl_timestamp",
                        "value"
                    ],
                    "{line}"
                );
                e.insert("ttl_value".into(), o["value"].clone());
                e.insert("ttl_timestamp".into(), o["ttl_timestamp"].clone());
            }
            "map" => {
                assert_eq!(
                    fields,
                    [
                        "key",
                        "key_group",
                        "namespace",
                        "state",
                        "user_key",
                        "value"
                    ],
                    "{line}"
                );
                let m = e.entry("map").or_insert_with(|| json!({}));
                let uk = o["user_key"].as_str().unwrap().to_string();
                assert!(m
                    .as_object_mut()
                    .unwrap()
                    .insert(uk, o["value"].clone())
                    .is_none());
            }
            "_timer_state/event_user-timers" | "_timer_state/processing_user-timers" => {
                assert_eq!(
                    fields,
                    ["key", "key_group", "namespace", "state", "timestamp"],
                    "{line}"
                );
                let name = if state.contains("event") {
                    "event_timer"
                } else {
                    "processing_timer"
                };
                assert!(e.insert(name.into(), o["timestamp"].clone()).is_none());
            }
            other => panic!("unexpected state {other}"),
        }
    }
    out
}

#[test]
fn import_then_dump_json_equals_expected_json() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{FIXTURES}/expected.json")).unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for fixture in [
        "hashmap-canonical-savepoint",
        "hashmap-canonical-savepoint-inline",
        "rocksdb-canonical-savepoint",
        "hashmap-native-savepoint",
        "rocksdb-native-savepoint",
        "rocksdb-incremental-checkpoint/chk-3",
        "rocksdb-native-savepoint-incremental-off",
        "rocksdb-full-checkpoint/chk-2",
        "flink-1.20.3/hashmap-canonical-savepoint",
        "flink-1.20.3/hashmap-canonical-savepoint-inline",
        "flink-1.20.3/hashmap-native-savepoint",
        "flink-1.20.3/rocksdb-canonical-savepoint",
        "flink-1.20.3/rocksdb-native-savepoint",
        "flink-1.20.3/rocksdb-native-savepoint-incremental-off",
        "flink-1.20.3/rocksdb-full-checkpoint/chk-1",
        "flink-1.20.3/rocksdb-incremental-checkpoint/chk-2",
        "flink-1.18.1/hashmap-canonical-savepoint",
        "flink-1.18.1/hashmap-canonical-savepoint-inline",
        "flink-1.18.1/hashmap-native-savepoint",
        "flink-1.18.1/rocksdb-canonical-savepoint",
        "flink-1.18.1/rocksdb-native-savepoint",
        "flink-1.18.1/rocksdb-native-savepoint-incremental-off",
        "flink-1.18.1/rocksdb-full-checkpoint/chk-1",
        "flink-1.18.1/rocksdb-incremental-checkpoint/chk-2",
        "flink-1.15.4/hashmap-canonical-savepoint",
        "flink-1.15.4/hashmap-canonical-savepoint-inline",
        "flink-1.15.4/hashmap-native-savepoint",
        "flink-1.15.4/rocksdb-canonical-savepoint",
        "flink-1.15.4/rocksdb-native-savepoint",
        "flink-1.15.4/rocksdb-native-savepoint-incremental-off",
        "flink-1.15.4/rocksdb-full-checkpoint/chk-1",
        "flink-1.15.4/rocksdb-incremental-checkpoint/chk-2",
    ] {
        // The directory holding run-info.json: the fixture, or the checkpoint's parent.
        let run_dir = match fixture.rsplit_once('/') {
            Some((parent, last)) if last.starts_with("chk-") => parent,
            _ => fixture,
        };
        let info: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{FIXTURES}/{run_dir}/run-info.json")).unwrap(),
        )
        .unwrap();
        let out = dir.path().join(format!("{}.sp", fixture.replace('/', "-")));
        let out_s = out.to_str().unwrap();
        for operator in ["state-op", "14725b7741e1a536207c2c73a13e02c9"] {
            let o = run(&[
                "import-flink",
                &format!("{FIXTURES}/{fixture}"),
                "--operator",
                operator,
                "--out",
                out_s,
            ]);
            assert!(o.status.success(), "{fixture}: {}", text(&o.stderr));
            assert!(
                text(&o.stdout).contains("752 entries"),
                "{}",
                text(&o.stdout)
            );
        }
        let o = run(&["dump", out_s, "--json"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let got = logical(&text(&o.stdout));
        let keys = expected["keys"].as_object().unwrap();
        assert_eq!(got.len(), keys.len(), "{fixture}");
        for (k, want) in keys {
            let g = &got[&k.parse::<i64>().unwrap()];
            let field = |name: &str| g.get(name).cloned().unwrap_or(Value::Null);
            assert_eq!(field("key_group"), want["key_group"], "{fixture} key {k}");
            for name in [
                "sum",
                "list",
                "name",
                "ttl_value",
                "event_timer",
                "processing_timer",
            ] {
                assert_eq!(field(name), want[name], "{fixture} key {k} {name}");
            }
            let map = field("map");
            let want_map = &want["map"];
            if want_map.as_object().unwrap().is_empty() {
                assert_eq!(map, Value::Null, "{fixture} key {k} map");
            } else {
                assert_eq!(&map, want_map, "{fixture} key {k} map");
            }
            let range = &info["ttl_last_write_millis_range_by_key"]
                [format!("{:03}", k.parse::<u32>().unwrap())];
            let ts = field("ttl_timestamp").as_i64().unwrap();
            assert!(
                range[0].as_i64().unwrap() <= ts && ts <= range[1].as_i64().unwrap(),
                "{fixture} key {k}: ttl timestamp {ts} outside {range}"
            );
        }
    }
}

#[test]
fn import_errors_name_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.sp");
    let out_s = out.to_str().unwrap();
    let o = run(&[
        "import-flink",
        &format!("{FIXTURES}/rocksdb-canonical-savepoint"),
        "--operator",
        "nope",
        "--out",
        out_s,
    ]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    for want in [
        "'nope'",
        "state-op / 14725b7741e1a536207c2c73a13e02c9",
        "sink",
        "source",
    ] {
        assert!(e.contains(want), "{e}");
    }
    assert!(!e.contains("panicked"), "{e}");
    // A native savepoint with one SST file damaged: the error names the RocksDB file and what is wrong.
    let copy = dir.path().join("native");
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(format!("{FIXTURES}/rocksdb-native-savepoint")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
    }
    // 000023.sst of subtask 0 (column family `list`), stored as 0560438e-….
    let sst = copy.join("0560438e-e824-4ae4-852b-68b61d32a3c2");
    let mut bytes = std::fs::read(&sst).unwrap();
    bytes[100] ^= 0x10;
    std::fs::write(&sst, &bytes).unwrap();
    let o = run(&[
        "import-flink",
        copy.to_str().unwrap(),
        "--operator",
        "state-op",
        "--out",
        out_s,
    ]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    for want in [
        "operator 'state-op' subtask 0 (IncrementalRemoteKeyedStateHandle)",
        "000023.sst (0560438e-e824-4ae4-852b-68b61d32a3c2)",
        "corrupt RocksDB SST file",
        "data block",
        "checksum mismatch",
    ] {
        assert!(e.contains(want), "missing {want:?} in {e}");
    }
    assert!(!e.contains("panicked"), "{e}");
    assert!(!out.exists());
    let o = run(&[
        "import-flink",
        dir.path().to_str().unwrap(),
        "--operator",
        "x",
        "--out",
        out_s,
    ]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("_metadata"), "{}", text(&o.stderr));
}

#[test]
fn inspect_shows_flink_operators_handles_states_and_counts() {
    let o = run(&[
        "inspect",
        &format!("{FIXTURES}/rocksdb-canonical-savepoint"),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    for want in [
        "Flink _metadata version 6",
        "operator 14725b7741e1a536207c2c73a13e02c9 uid=state-op name=state-op parallelism=2 max parallelism=128",
        "KeyGroupsSavepointStateHandle key groups [0..=63]",
        "RelativeFileStateHandle",
        "[0] sum (VALUE)",
        "[2] map (MAP)",
        "TtlSerializerSnapshot",
        "_timer_state/event_user-timers (PriorityQueue)",
        "total 376 entries",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
    for f in [
        "rocksdb-native-savepoint",
        "hashmap-native-savepoint",
        "rocksdb-incremental-checkpoint/chk-3",
    ] {
        let o = run(&["inspect", &format!("{FIXTURES}/{f}")]);
        assert!(o.status.success(), "{f}: {}", text(&o.stderr));
        assert!(text(&o.stdout).contains("states: 7"), "{f}");
    }
    // The SST files of a native savepoint, their column families, and the folded entries.
    let o = run(&["inspect", &format!("{FIXTURES}/rocksdb-native-savepoint")]);
    let s = text(&o.stdout);
    for want in [
        "sst 000023.sst (0560438e-e824-4ae4-852b-68b61d32a3c2): column family list, 50 records, 0 range tombstones, 1932 bytes",
        "[1] list (LIST)",
        "total 376 live entries",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
}

#[test]
fn incremental_checkpoint_chk2_imports_the_state_after_phase_1() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{FIXTURES}/expected.json")).unwrap(),
    )
    .unwrap();
    let info: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{FIXTURES}/rocksdb-incremental-checkpoint/run-info.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chk2.sp");
    let out_s = out.to_str().unwrap();
    let o = run(&[
        "import-flink",
        &format!("{FIXTURES}/rocksdb-incremental-checkpoint/chk-2"),
        "--operator",
        "state-op",
        "--out",
        out_s,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&["dump", out_s, "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let got = logical(&text(&o.stdout));
    let keys = expected["keys"].as_object().unwrap();
    assert_eq!(got.len(), keys.len());
    for (k, want) in keys {
        let g = &got[&k.parse::<i64>().unwrap()];
        let field = |name: &str| g.get(name).cloned().unwrap_or(Value::Null);
        let phase1 = &want["after_phase1"];
        assert_eq!(field("key_group"), want["key_group"], "key {k}");
        for name in ["sum", "list", "name", "ttl_value"] {
            assert_eq!(field(name), phase1[name], "key {k} {name}");
        }
        let want_map = &phase1["map"];
        if want_map.as_object().unwrap().is_empty() {
            assert_eq!(field("map"), Value::Null, "key {k} map");
        } else {
            assert_eq!(&field("map"), want_map, "key {k} map");
        }
        // Every key registers its timers with its first record, in phase 1.
        for name in ["event_timer", "processing_timer"] {
            assert_eq!(field(name), want[name], "key {k} {name}");
        }
        // run-info records the last write of each key; phase 1 wrote no later. For keys with one record
        // (k % 4 == 0) that write is phase 1's.
        let n: u32 = k.parse().unwrap();
        let range = &info["ttl_last_write_millis_range_by_key"][format!("{n:03}")];
        let ts = field("ttl_timestamp").as_i64().unwrap();
        assert!(
            ts <= range[1].as_i64().unwrap(),
            "key {k}: {ts} after {range}"
        );
        if n % 4 == 0 {
            assert!(
                ts >= range[0].as_i64().unwrap(),
                "key {k}: {ts} before {range}"
            );
        }
    }
}

fn run_ok(args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_keyed-state"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn cli_export_flink_then_import_flink_dumps_the_same_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).display().to_string();
    let fx = format!("{FIXTURES}/rocksdb-canonical-savepoint");
    run_ok(&[
        "import-flink",
        &fx,
        "--operator",
        "state-op",
        "--out",
        &p("a.sp"),
    ]);
    let out = run_ok(&[
        "export-flink",
        &p("a.sp"),
        "--operator-uid",
        "state-op",
        "--parallelism",
        "3",
        "--out",
        &p("flink"),
        "--compress",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("752 entries") && text.contains("14725b7741e1a536207c2c73a13e02c9"),
        "{text}"
    );
    run_ok(&[
        "import-flink",
        &p("flink"),
        "--operator",
        "state-op",
        "--out",
        &p("b.sp"),
    ]);
    let a = run_ok(&["dump", &p("a.sp"), "--json"]).stdout;
    let b = run_ok(&["dump", &p("b.sp"), "--json"]).stdout;
    assert_eq!(String::from_utf8_lossy(&a).lines().count(), 752);
    assert!(a == b);
    let inspect = run_ok(&["inspect", &p("flink")]).stdout;
    assert!(String::from_utf8_lossy(&inspect).contains("parallelism=3"));
    // An operator uid that is missing on import lists the one exported.
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_keyed-state"))
        .args([
            "import-flink",
            &p("flink"),
            "--operator",
            "nope",
            "--out",
            &p("c.sp"),
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("state-op"));
}

const JOB: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/flink/job"
);

/// Per key: the fields of the whole-job fixture's expected.json, rebuilt from `dump --json` lines.
fn job_logical(lines: &str) -> Value {
    let mut out = serde_json::Map::new();
    for line in lines.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let key = e["key"].as_i64().unwrap().to_string();
        let k = out
            .entry(key)
            .or_insert_with(|| json!({ "key_group": e["key_group"] }));
        let state = e["state"].as_str().unwrap();
        if state == "per-a" {
            let m = k
                .as_object_mut()
                .unwrap()
                .entry("per-a")
                .or_insert_with(|| json!({}));
            m.as_object_mut()
                .unwrap()
                .insert(e["user_key"].to_string(), e["value"].clone());
        } else {
            k.as_object_mut()
                .unwrap()
                .insert(state.to_string(), e["value"].clone());
        }
    }
    Value::Object(out)
}

fn job_expected(phase: &str) -> Value {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{JOB}/expected.json")).unwrap())
            .unwrap();
    v[phase].clone()
}

/// The `inspect` lines of the source operator (its coordinator and operator state, with checksums).
fn source_lines(dir: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(&run_ok(&["inspect", dir]).stdout).into_owned();
    let mut out = Vec::new();
    let mut in_source = false;
    for line in text.lines() {
        if line.starts_with("operator ") {
            in_source = line.contains(" uid=source ");
        }
        if in_source {
            // File names differ between savepoints; sizes and checksums do not.
            out.push(line.split(", via ").next().unwrap().to_string());
        }
    }
    out
}

#[test]
fn import_all_writes_one_savepoint_per_keyed_operator_named_by_uid() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ours");
    for sp in ["canonical-savepoint", "native-savepoint"] {
        let _ = std::fs::remove_dir_all(&out);
        let o = run_ok(&[
            "import-flink",
            &format!("{JOB}/{sp}"),
            "--all",
            "--out-dir",
            out.to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("imported 2 keyed operator(s) of 4"), "{text}");
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["keyed-a.sp", "keyed-b.sp"], "{sp}");
        for uid in ["keyed-a", "keyed-b"] {
            assert!(
                text.contains(&format!("imported operator {uid} (")),
                "{text}"
            );
            let path = out.join(format!("{uid}.sp"));
            let dump = run_ok(&["dump", path.to_str().unwrap(), "--json"]).stdout;
            assert_eq!(
                job_logical(&String::from_utf8_lossy(&dump)),
                job_expected("initial")[uid],
                "{sp} {uid}"
            );
        }
    }
    // Flink 1.x writes no uids into _metadata: operators are named by id.
    let _ = std::fs::remove_dir_all(&out);
    run_ok(&[
        "import-flink",
        &format!("{FIXTURES}/flink-1.20.3/rocksdb-native-savepoint"),
        "--all",
        "--out-dir",
        out.to_str().unwrap(),
    ]);
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["14725b7741e1a536207c2c73a13e02c9.sp"]);
    // --all and --operator exclude each other; --all needs --out-dir.
    for args in [
        vec!["--all", "--operator", "keyed-a", "--out-dir", "x"],
        vec!["--all"],
        vec!["--operator", "keyed-a"],
    ] {
        let mut full = vec!["import-flink", JOB];
        full.extend(args.iter().copied());
        let o = run(&full);
        assert!(!o.status.success(), "{args:?}");
    }
}

#[test]
fn export_flink_with_a_template_replaces_keyed_state_and_keeps_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).display().to_string();
    let template = format!("{JOB}/canonical-savepoint");
    run_ok(&["import-flink", &template, "--all", "--out-dir", &p("ours")]);
    let o = run_ok(&[
        "export-flink",
        "--template",
        &template,
        "--operator",
        &format!("keyed-a={}", p("ours/keyed-a.sp")),
        "--operator",
        &format!("keyed-b={}", p("ours/keyed-b.sp")),
        "--out",
        &p("job"),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    for want in [
        "exported 2 operator(s), 2 carried over from template",
        "operator keyed-a (9e32641d90691ee5ad28af9efd3c6b42) parallelism 2, max parallelism 128: replaced:",
        "operator keyed-b (624157fad7a80defebac3c24cbcf314f) parallelism 3, max parallelism 128: replaced:",
        "operator source (e5a72f353fc1e6bbf3bd96a41384998c) parallelism 1, max parallelism 128, coordinator state: carried over byte for byte",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    // The source's coordinator and operator state are the template's, byte for byte.
    let lines = source_lines(&p("job"));
    assert!(lines
        .iter()
        .any(|l| l.contains("coordinator state: 16 bytes")));
    assert!(lines.iter().any(|l| l.contains("SourceReaderState")));
    assert_eq!(lines, source_lines(&template));
    // Re-imported, every keyed operator holds its state.
    run_ok(&["import-flink", &p("job"), "--all", "--out-dir", &p("again")]);
    for uid in ["keyed-a", "keyed-b"] {
        let dump = run_ok(&["dump", &p(&format!("again/{uid}.sp")), "--json"]).stdout;
        assert_eq!(
            job_logical(&String::from_utf8_lossy(&dump)),
            job_expected("initial")[uid]
        );
    }
}

#[test]
fn export_flink_errors_name_the_operator() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).display().to_string();
    let template = format!("{JOB}/native-savepoint");
    run_ok(&["import-flink", &template, "--all", "--out-dir", &p("ours")]);
    let fails = |args: &[&str], wants: &[&str]| {
        let o = run(args);
        assert!(!o.status.success(), "{args:?}");
        let e = text(&o.stderr);
        for w in wants {
            assert!(e.contains(w), "missing {w:?} in {e}");
        }
        assert!(!e.contains("panicked"), "{e}");
    };
    let b = format!("keyed-b={}", p("ours/keyed-b.sp"));
    fails(
        &[
            "export-flink",
            "--template",
            &template,
            "--operator",
            &b,
            "--parallelism",
            "2",
            "--out",
            &p("x"),
        ],
        &[
            "operator 'keyed-b'",
            "parallelism 2",
            "parallelism 3 in the template",
        ],
    );
    fails(
        &[
            "export-flink",
            "--template",
            &template,
            "--operator",
            &format!("nope={}", p("ours/keyed-b.sp")),
            "--out",
            &p("x"),
        ],
        &["'nope'", "keyed-a", "keyed-b", "source"],
    );
    fails(
        &["export-flink", "--operator", &b, "--out", &p("x")],
        &["operator 'keyed-b': a parallelism is needed without a template"],
    );
    fails(
        &["export-flink", "--operator", "keyed-b", "--out", &p("x")],
        &["expected UID=SAVEPOINT[,SAVEPOINT...]"],
    );
    // The same state in the same key group from two savepoints.
    let a = p("ours/keyed-a.sp");
    fails(
        &[
            "export-flink",
            "--template",
            &template,
            "--operator",
            &format!("keyed-a={a},{a}"),
            "--out",
            &p("x"),
        ],
        &["in both"],
    );
    assert!(!tmp.path().join("x").join("_metadata").exists());
}

#[test]
fn help_shows_the_whole_job_contract() {
    let h = text(&run_ok(&["import-flink", "--help"]).stdout);
    for want in [
        "--all",
        "--out-dir <OUT_DIR>",
        "--operator <OPERATOR>",
        "--out <OUT>",
        "<uid>.sp",
    ] {
        assert!(h.contains(want), "import-flink --help lacks {want:?}:\n{h}");
    }
    let h = text(&run_ok(&["export-flink", "--help"]).stdout);
    for want in [
        "--operator <UID=SAVEPOINT[,SAVEPOINT...]>",
        "--template <FLINK_SAVEPOINT_DIR>",
        "--operator-uid <OPERATOR_UID>",
        "--parallelism <PARALLELISM>",
        "--out <OUT>",
        "--compress",
    ] {
        assert!(h.contains(want), "export-flink --help lacks {want:?}:\n{h}");
    }
}

const KINDS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/flink/kinds"
);

/// Per key: expected.json's fields of the state-kinds fixtures from `dump --json` lines, and the
/// `(key, j, ttl timestamp)` of every TTL'd list element and map entry.
fn kinds_logical(lines: &str) -> (Value, Vec<(String, usize, i64)>) {
    let mut out = serde_json::Map::new();
    let mut stamps = Vec::new();
    for line in lines.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let key = e["key"].as_str().unwrap().to_string();
        let k = out
            .entry(key.clone())
            .or_insert_with(|| json!({ "key_group": e["key_group"] }))
            .as_object_mut()
            .unwrap();
        let state = e["state"].as_str().unwrap();
        match state {
            "ns-value" | "ns-list" => {
                let m = k.entry(state).or_insert_with(|| json!({}));
                m.as_object_mut().unwrap().insert(
                    e["namespace"].as_str().unwrap().to_string(),
                    e["value"].clone(),
                );
            }
            "ttl-list" => {
                assert_eq!(e["namespace"], Value::Null);
                k.insert(state.into(), e["value"].clone());
                for (j, ts) in e["ttl_timestamp"].as_array().unwrap().iter().enumerate() {
                    stamps.push((key.clone(), j, ts.as_i64().unwrap()));
                }
            }
            "ttl-map" | "null-map" => {
                let uk = e["user_key"].as_str().unwrap().to_string();
                if state == "ttl-map" {
                    let j = uk[1..].parse().unwrap();
                    stamps.push((key.clone(), j, e["ttl_timestamp"].as_i64().unwrap()));
                }
                let m = k.entry(state).or_insert_with(|| json!({}));
                m.as_object_mut().unwrap().insert(uk, e["value"].clone());
            }
            other => panic!("unexpected state {other}"),
        }
    }
    (Value::Object(out), stamps)
}

#[test]
fn state_kind_fixtures_dump_json_equals_expected_json() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{KINDS}/expected.json")).unwrap())
            .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for (fixture, run_dir, phase) in [
        (
            "rocksdb-canonical-savepoint",
            "rocksdb-canonical-savepoint",
            3,
        ),
        ("rocksdb-native-savepoint", "rocksdb-native-savepoint", 3),
        ("hashmap-native-savepoint", "hashmap-native-savepoint", 3),
        (
            "rocksdb-incremental-checkpoints/chk-2",
            "rocksdb-incremental-checkpoints",
            1,
        ),
        (
            "rocksdb-incremental-checkpoints/chk-3",
            "rocksdb-incremental-checkpoints",
            2,
        ),
        (
            "rocksdb-incremental-checkpoints/chk-4",
            "rocksdb-incremental-checkpoints",
            3,
        ),
    ] {
        let out = tmp.path().join(format!("{}.sp", fixture.replace('/', "-")));
        let out_s = out.to_str().unwrap();
        run_ok(&[
            "import-flink",
            &format!("{KINDS}/{fixture}"),
            "--operator",
            "kinds",
            "--out",
            out_s,
        ]);
        let dump = text(&run_ok(&["dump", out_s, "--json"]).stdout);
        let (got, stamps) = kinds_logical(&dump);
        let mut want = expected[format!("after_phase_{phase}")].clone();
        for (_, s) in want.as_object_mut().unwrap() {
            s.as_object_mut().unwrap().remove("subtask");
        }
        assert_eq!(got, want, "{fixture}");
        let info: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{KINDS}/{run_dir}/run-info.json")).unwrap(),
        )
        .unwrap();
        let ranges = &info["ttl_write_millis_range_by_record"];
        for (key, j, ts) in &stamps {
            let n: u32 = key
                .strip_prefix('k')
                .or_else(|| key.split('-').nth(1))
                .unwrap()
                .parse()
                .unwrap();
            let r = &ranges[format!("{n}/{j}")];
            assert!(
                r[0].as_i64().unwrap() <= *ts && *ts <= r[1].as_i64().unwrap(),
                "{fixture} {key} j={j}: {ts} outside {r}"
            );
        }
    }
}

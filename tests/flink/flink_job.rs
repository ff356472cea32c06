//! Whole jobs (tests/fixtures/flink/job: a FLIP-27 source with operator and coordinator state, two keyed
//! operators at parallelism 2 and 3, written by Flink 2.3.0): every keyed operator imports to its
//! `expected.json`; an export with a template carries every other operator over byte for byte (its
//! `_metadata` bytes and its files) and replaces only the keyed state given; parallelism and max
//! parallelism are checked against the template naming the operator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keyed_state::backend::heap::HeapBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::savepoint::{encode, write_savepoint, SavepointReader, WriteOptions};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};
use keyed_state_flink::job::OperatorOutcome;
use keyed_state_flink::metadata::{OperatorState, StreamHandle};
use keyed_state_flink::{
    export_job, FlinkError, FlinkSavepoint, JobExportOptions, KeyedHandle, OperatorSources,
};
use serde_json::{json, Value};

const JOB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink/job");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");

fn long(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// The logical content (expected.json's shape) of one keyed operator of the job, from our savepoint.
fn logical(r: &SavepointReader) -> Value {
    let h = r.header();
    let mut out: BTreeMap<i64, serde_json::Map<String, Value>> = BTreeMap::new();
    for b in r.key_groups() {
        r.read_key_group(b.key_group, &mut |s, k, v| {
            let key = long(k, 1);
            let e = out.entry(key).or_default();
            e.insert("key_group".into(), json!(k[0]));
            match h.states[s].name.as_str() {
                "count" | "total" | "max" => {
                    e.insert(h.states[s].name.clone(), json!(long(v, 0)));
                }
                "values" => {
                    let vals: Vec<i64> = (0..v.len()).step_by(9).map(|i| long(v, i)).collect();
                    e.insert("values".into(), json!(vals));
                }
                "per-a" => {
                    assert_eq!(v[0], 0, "null map value");
                    let m = e.entry("per-a").or_insert_with(|| json!({}));
                    m.as_object_mut()
                        .unwrap()
                        .insert(long(k, 10).to_string(), json!(long(v, 1)));
                }
                other => panic!("unexpected state {other}"),
            }
            Ok(())
        })
        .unwrap();
    }
    Value::Object(
        out.into_iter()
            .map(|(k, v)| (k.to_string(), Value::Object(v)))
            .collect(),
    )
}

fn expected(phase: &str) -> Value {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{JOB}/expected.json")).unwrap())
            .unwrap();
    v[phase].clone()
}

/// Imports operator `uid` of the savepoint at `dir` into one of our savepoints in memory.
fn import(dir: &Path, uid: &str) -> SavepointReader {
    let sp = FlinkSavepoint::open(dir).unwrap();
    let import = sp.import(sp.operator(uid).unwrap()).unwrap();
    let mut bytes = Vec::new();
    encode(&import, &WriteOptions::default(), &mut bytes).unwrap();
    import.finish().unwrap();
    SavepointReader::from_bytes(bytes).unwrap()
}

/// Imports every keyed operator of `dir` into files in `out`: uid → path.
fn import_all(dir: &Path, out: &Path) -> BTreeMap<String, PathBuf> {
    let sp = FlinkSavepoint::open(dir).unwrap();
    let mut paths = BTreeMap::new();
    for op in sp.keyed_operators() {
        let path = out.join(format!("{}.sp", op.label()));
        sp.import(op)
            .unwrap()
            .write_savepoint(&path, &WriteOptions::default())
            .unwrap();
        paths.insert(op.label(), path);
    }
    paths
}

fn opened(paths: &BTreeMap<String, PathBuf>) -> BTreeMap<String, (String, SavepointReader)> {
    paths
        .iter()
        .map(|(uid, p)| {
            (
                uid.clone(),
                (p.display().to_string(), SavepointReader::open(p).unwrap()),
            )
        })
        .collect()
}

fn sources<'a>(
    readers: &'a BTreeMap<String, (String, SavepointReader)>,
    uids: &[&str],
) -> Vec<OperatorSources<'a>> {
    uids.iter()
        .map(|uid| {
            let (name, r) = &readers[*uid];
            OperatorSources {
                operator: uid.to_string(),
                savepoints: vec![(name.as_str(), r)],
            }
        })
        .collect()
}

/// Every file a stream handle names, relative to the savepoint directory.
fn relative_files(op: &OperatorState) -> Vec<String> {
    fn stream(h: &StreamHandle, out: &mut Vec<String>) {
        match h {
            StreamHandle::Relative { path, .. } => out.push(path.clone()),
            StreamHandle::KeyGroups { inner, .. } => stream(inner, out),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for st in &op.subtasks {
        for h in [&st.managed_operator, &st.raw_operator]
            .into_iter()
            .flatten()
        {
            stream(&h.stream, &mut out);
        }
        match &st.managed_keyed {
            Some(KeyedHandle::KeyGroups { stream: s, .. }) => stream(s, &mut out),
            Some(KeyedHandle::Incremental {
                meta,
                shared,
                private,
                ..
            }) => {
                stream(meta, &mut out);
                for (_, h) in shared.iter().chain(private) {
                    stream(h, &mut out);
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_keyed_operator_of_the_job_imports_to_its_expected_json() {
    let want = expected("initial");
    for sp in ["canonical-savepoint", "native-savepoint"] {
        let dir = PathBuf::from(format!("{JOB}/{sp}"));
        let f = FlinkSavepoint::open(&dir).unwrap();
        let keyed: Vec<String> = f.keyed_operators().map(|o| o.label()).collect();
        assert_eq!(keyed.len(), 2, "{sp}: {keyed:?}");
        for uid in ["keyed-a", "keyed-b"] {
            assert_eq!(logical(&import(&dir, uid)), want[uid], "{sp} {uid}");
        }
        // The source's reader state is operator state: a warning, never imported.
        let e = f.import(f.operator("source").unwrap()).unwrap_err();
        assert!(matches!(e, FlinkError::NoKeyedState { .. }), "{e}");
    }
}

#[test]
fn an_export_with_a_template_carries_the_other_operators_over_byte_for_byte() {
    for template_name in ["canonical-savepoint", "native-savepoint"] {
        let template_dir = PathBuf::from(format!("{JOB}/{template_name}"));
        let template = FlinkSavepoint::open(&template_dir).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let ours = import_all(&template_dir, tmp.path());
        let readers = opened(&ours);
        let out = tmp.path().join("out");
        // Only keyed-a replaced: keyed-b (keyed state), source (operator and coordinator state) and sink
        // come from the template.
        let summary = export_job(
            &sources(&readers, &["keyed-a"]),
            Some(&template),
            &JobExportOptions::default(),
            &out,
        )
        .unwrap();
        assert_eq!(summary.metadata_version, template.metadata.version);
        let result = FlinkSavepoint::open(&out).unwrap();
        assert_eq!(
            result.metadata.operators.len(),
            template.metadata.operators.len()
        );
        assert_eq!(result.metadata.trailer, template.metadata.trailer);
        assert_eq!(
            result.metadata.checkpoint_id,
            template.metadata.checkpoint_id
        );
        for (i, op) in template.metadata.operators.iter().enumerate() {
            let j = result
                .metadata
                .operators
                .iter()
                .position(|o| o.id == op.id)
                .unwrap();
            assert_eq!(j, i, "operators keep the template's order");
            let s = &summary.operators[i];
            if op.label() == "keyed-a" {
                assert!(matches!(s.outcome, OperatorOutcome::Replaced { .. }));
                assert_ne!(result.operator_bytes(j), template.operator_bytes(i));
                let r = &result.metadata.operators[j];
                assert_eq!(
                    (r.parallelism, r.max_parallelism, &r.uid, &r.name),
                    (op.parallelism, op.max_parallelism, &op.uid, &op.name)
                );
                continue;
            }
            assert!(
                matches!(s.outcome, OperatorOutcome::Carried { verbatim: true, .. }),
                "{template_name} {}: {:?}",
                op.label(),
                s.outcome
            );
            assert_eq!(
                result.operator_bytes(j),
                template.operator_bytes(i),
                "{template_name}: {} not carried byte for byte",
                op.label()
            );
            for f in relative_files(op) {
                assert!(
                    std::fs::read(out.join(&f)).unwrap()
                        == std::fs::read(template_dir.join(&f)).unwrap(),
                    "{template_name}: {f} of {} differs",
                    op.label()
                );
            }
        }
        let source = result.operator("source").unwrap();
        assert!(source.coordinator_state.is_some());
        assert!(source.subtasks[0].managed_operator.is_some());
        // Nothing else was written: the template's files of keyed-a are not copied.
        let copied: usize = std::fs::read_dir(&out).unwrap().count();
        let wanted: usize = result
            .metadata
            .operators
            .iter()
            .map(|o| relative_files(o).len())
            .sum::<usize>()
            + 1;
        assert_eq!(
            copied, wanted,
            "{template_name}: files in the new savepoint"
        );
        // Each keyed operator imports from the result as from the template.
        for uid in ["keyed-a", "keyed-b"] {
            assert_eq!(
                logical(&import(&out, uid)),
                expected("initial")[uid],
                "{template_name} {uid}"
            );
        }
    }
}

#[test]
fn a_template_checkpoint_with_absolute_paths_is_carried_over_with_relative_copies() {
    // chk-3's state-op handles name their shared files by absolute path on the machine that wrote them;
    // carried over, they become relative handles of copies, and the state is the same.
    let chk = PathBuf::from(format!("{FIXTURES}/rocksdb-incremental-checkpoint/chk-3"));
    let template = FlinkSavepoint::open(&chk).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let summary = export_job(&[], Some(&template), &JobExportOptions::default(), &out).unwrap();
    let state_op = summary
        .operators
        .iter()
        .find(|o| o.label == "state-op")
        .unwrap();
    assert!(
        matches!(state_op.outcome, OperatorOutcome::Carried { verbatim: false, files, .. } if files > 12),
        "{:?}",
        state_op.outcome
    );
    let result = FlinkSavepoint::open(&out).unwrap();
    for st in &result.operator("state-op").unwrap().subtasks {
        let Some(KeyedHandle::Incremental {
            shared, private, ..
        }) = &st.managed_keyed
        else {
            panic!()
        };
        assert!(shared
            .iter()
            .chain(private)
            .all(|(_, h)| matches!(h, StreamHandle::Relative { .. })));
    }
    let a = import(&chk, "state-op");
    let b = import(&out, "state-op");
    let dump = |r: &SavepointReader| {
        let mut v = Vec::new();
        for kg in r.key_groups() {
            r.read_key_group(kg.key_group, &mut |s, k, val| {
                v.push((s, k.to_vec(), val.to_vec()));
                Ok(())
            })
            .unwrap();
        }
        v
    };
    assert_eq!(dump(&a), dump(&b));
}

/// One of our savepoints with one value state at max parallelism `max_p`.
fn small_savepoint(path: &Path, max_p: u32) {
    let cfg = KeyedStateStore::config_for(
        &LongSerializer,
        max_p,
        KeyGroupRange::new(0, (max_p - 1) as u16),
    );
    let mut s =
        KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
    let count = s
        .register_value(ValueStateDescriptor::new("count", LongSerializer))
        .unwrap();
    for k in 0..10i64 {
        s.set_current_key(&k).unwrap();
        s.value(&count).unwrap().update(&k).unwrap();
    }
    write_savepoint(path, &*s.snapshot().unwrap(), &WriteOptions::default()).unwrap();
}

#[test]
fn parallelism_max_parallelism_and_unknown_operators_are_errors_naming_the_operator() {
    let template_dir = PathBuf::from(format!("{JOB}/canonical-savepoint"));
    let template = FlinkSavepoint::open(&template_dir).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let readers = opened(&import_all(&template_dir, tmp.path()));
    let out = tmp.path().join("out");
    let err = |e: FlinkError| e.to_string();
    // keyed-b has parallelism 3 in the template.
    let e = export_job(
        &sources(&readers, &["keyed-b"]),
        Some(&template),
        &JobExportOptions {
            parallelism: Some(2),
            compress: false,
        },
        &out,
    )
    .unwrap_err();
    assert!(err(e).contains(
        "operator 'keyed-b': parallelism 2 differs from its parallelism 3 in the template"
    ));
    assert!(!out.exists(), "nothing written on a refused export");
    // Max parallelism 256 against the template's 128.
    let p256 = tmp.path().join("p256.sp");
    small_savepoint(&p256, 256);
    let r = SavepointReader::open(&p256).unwrap();
    let name = p256.display().to_string();
    let ops = [OperatorSources {
        operator: "keyed-a".into(),
        savepoints: vec![(name.as_str(), &r)],
    }];
    let e = export_job(&ops, Some(&template), &JobExportOptions::default(), &out).unwrap_err();
    let msg = err(e);
    assert!(
        msg.contains("operator 'keyed-a'")
            && msg.contains("max parallelism 256")
            && msg.contains("128"),
        "{msg}"
    );
    // An operator the template does not have is named with those it has.
    let ops = [OperatorSources {
        operator: "keyed-c".into(),
        savepoints: vec![(name.as_str(), &r)],
    }];
    let e = export_job(&ops, Some(&template), &JobExportOptions::default(), &out).unwrap_err();
    assert!(matches!(e, FlinkError::OperatorNotFound { .. }));
    let msg = err(e);
    for want in ["keyed-c", "keyed-a", "keyed-b", "source"] {
        assert!(msg.contains(want), "{msg}");
    }
    // The same operator twice (by uid and by id).
    let (a_name, a) = &readers["keyed-a"];
    let id = template.operator("keyed-a").unwrap().id.to_hex();
    let ops = [
        OperatorSources {
            operator: "keyed-a".into(),
            savepoints: vec![(a_name.as_str(), a)],
        },
        OperatorSources {
            operator: id,
            savepoints: vec![(a_name.as_str(), a)],
        },
    ];
    let e = export_job(&ops, Some(&template), &JobExportOptions::default(), &out).unwrap_err();
    assert!(err(e).contains("given twice"));
    // Without a template, a parallelism is needed.
    let e = export_job(
        &sources(&readers, &["keyed-a"]),
        None,
        &JobExportOptions::default(),
        &out,
    )
    .unwrap_err();
    assert!(err(e).contains("operator 'keyed-a': a parallelism is needed"));
    assert!(!out.exists());
}

#[test]
fn several_operators_without_a_template_go_into_one_savepoint() {
    let template_dir = PathBuf::from(format!("{JOB}/native-savepoint"));
    let tmp = tempfile::tempdir().unwrap();
    let readers = opened(&import_all(&template_dir, tmp.path()));
    let out = tmp.path().join("out");
    let summary = export_job(
        &sources(&readers, &["keyed-a", "keyed-b"]),
        None,
        &JobExportOptions {
            parallelism: Some(4),
            compress: true,
        },
        &out,
    )
    .unwrap();
    assert_eq!(summary.operators.len(), 2);
    let result = FlinkSavepoint::open(&out).unwrap();
    let template = FlinkSavepoint::open(&template_dir).unwrap();
    for uid in ["keyed-a", "keyed-b"] {
        let op = result.operator(uid).unwrap();
        assert_eq!(op.parallelism, 4);
        assert_eq!(op.id, template.operator(uid).unwrap().id);
        assert_eq!(
            logical(&import(&out, uid)),
            expected("initial")[uid],
            "{uid}"
        );
    }
}

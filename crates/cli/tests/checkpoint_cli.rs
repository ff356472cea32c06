//! `keyed-state checkpoint list | verify | gc | to-savepoint`, run as a user runs them, on a root that the
//! library wrote (two instances, three checkpoints).

use std::process::{Command, Output};
use std::sync::Arc;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::{CheckpointOptions, CheckpointStorage, Checkpointer};
use keyed_state::keygroup::key_group_range_for_operator;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, ValueStateDescriptor};

use crate::s3 as common_s3;

thread_local! {
    /// Environment of the child processes (the S3 settings, as object_store reads them).
    static ENV: std::cell::RefCell<Vec<(String, String)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn run(args: &[&str]) -> Output {
    let env = ENV.with(|e| e.borrow().clone());
    Command::new(env!("CARGO_BIN_EXE_keyed-state"))
        .args(args)
        .envs(env)
        .output()
        .expect("run keyed-state")
}

/// The S3 settings as environment variables (`AWS_ENDPOINT`, ...).
fn s3_env(endpoint: &str) -> Vec<(String, String)> {
    common_s3::settings(endpoint)
        .into_iter()
        .map(|(k, v)| (k.to_ascii_uppercase(), v))
        .collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Two instances of a job at max parallelism 16 checkpoint ids 1..=3 into `storage` (retain 3).
fn write_root(storage: &Arc<CheckpointStorage>) {
    for i in 0..2 {
        let range = key_group_range_for_operator(16, 2, i).unwrap();
        let cfg = KeyedStateStore::config_for(&LongSerializer, 16, range);
        let backend = LsmBackend::temp_with(cfg.clone(), LsmBackend::small_options()).unwrap();
        let engine = backend.engine();
        let mut store = KeyedStateStore::new(Box::new(backend), LongSerializer).unwrap();
        let c = store
            .register_value(ValueStateDescriptor::new("counter", LongSerializer))
            .unwrap();
        let ck =
            Checkpointer::open(Arc::clone(storage), &cfg, CheckpointOptions::default()).unwrap();
        for id in 1..=3u64 {
            for k in 0..3000i64 {
                if range.contains(store.key_group_of(&k).unwrap()) {
                    store.set_current_key(&k).unwrap();
                    store.value(&c).unwrap().update(&(k + id as i64)).unwrap();
                }
            }
            if id == 3 {
                // Checkpoint 3 references none of the files of 1 and 2, whatever the background
                // compactions did: `gc --retain 1` then has unreferenced objects of the live attempt.
                engine.compact_all().unwrap();
            }
            ck.begin(id, store.backend_mut()).unwrap().run().unwrap();
            ck.notify_complete(id).unwrap();
        }
    }
}

#[test]
fn checkpoint_list_verify_gc_and_to_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let storage = Arc::new(CheckpointStorage::local(&root).unwrap());
    let nothing = dir.path().join("nothing");
    list_verify_gc_and_to_savepoint(root.to_str().unwrap(), &storage, nothing.to_str().unwrap());
}

#[cfg(feature = "s3")]
#[test]
fn checkpoint_commands_on_an_s3_root() {
    let Some(storage) = common_s3::storage("checkpoint_commands_on_an_s3_root") else {
        return;
    };
    let endpoint = common_s3::endpoint("").unwrap();
    ENV.with(|e| *e.borrow_mut() = s3_env(&endpoint));
    let r = storage.root_name().to_string();
    list_verify_gc_and_to_savepoint(&r, &storage, &format!("{r}-nothing"));
}

#[cfg(feature = "s3")]
#[test]
fn an_unreachable_s3_root_fails_naming_the_store_and_the_operation() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    ENV.with(|e| *e.borrow_mut() = s3_env(&format!("http://127.0.0.1:{port}")));
    let o = run(&["checkpoint", "list", "s3://nowhere/ckpt"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("checkpoint storage s3://nowhere/ckpt: list") && err.contains("failed"),
        "{err}"
    );
}

fn list_verify_gc_and_to_savepoint(r: &str, storage: &Arc<CheckpointStorage>, nothing: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_root(storage);

    let o = run(&["checkpoint", "list", r]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    for (line, (id, range)) in lines.iter().zip([
        (1, "0-7"),
        (1, "8-15"),
        (2, "0-7"),
        (2, "8-15"),
        (3, "0-7"),
        (3, "8-15"),
    ]) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f[0], id.to_string(), "{line}");
        assert_eq!(f[1], range, "{line}");
        let (new, referenced) = f[2].split_once('/').unwrap();
        let new: u64 = new.parse().unwrap();
        referenced.parse::<u64>().unwrap();
        assert!(id > 1 || new > 0, "{line}");
        let bytes: u64 = f[3].parse().unwrap();
        let state: u64 = f[4].parse().unwrap();
        assert!(state > 0 && (new == 0 || bytes > 0), "{line}");
    }

    let o = run(&["checkpoint", "verify", r]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("ok: 6 metadata files"),
        "{}",
        text(&o.stdout)
    );

    let sp = dir.path().join("sp");
    let o = run(&[
        "checkpoint",
        "to-savepoint",
        r,
        "--id",
        "3",
        "--out",
        sp.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&["verify", sp.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    let o = run(&["checkpoint", "gc", r, "--retain", "1", "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("would delete\tchk-00000000000000000001/"));
    assert_eq!(
        text(&run(&["checkpoint", "list", r]).stdout)
            .lines()
            .count(),
        6
    );
    let o = run(&["checkpoint", "gc", r, "--retain", "1"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The writers' newest attempts may still be running: their unreferenced uploads stay.
    assert!(
        text(&o.stdout).contains("a live writer may still use"),
        "{}",
        text(&o.stdout)
    );
    let listed = text(&run(&["checkpoint", "list", r]).stdout);
    assert!(listed.lines().all(|l| l.starts_with("3\t")), "{listed}");
    let o = run(&["checkpoint", "verify", r, "--id", "3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The job stopped: gc --fence fences its writers and leaves exactly what checkpoint 3 references.
    let o = run(&["checkpoint", "gc", r, "--retain", "1", "--fence"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        !text(&o.stdout).contains("live writer"),
        "{}",
        text(&o.stdout)
    );
    let referenced = keyed_state::checkpoint::tools::referenced_objects(storage)
        .unwrap()
        .unwrap();
    let shared: std::collections::BTreeSet<String> = storage
        .list("shared/")
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(shared, referenced);

    // Damage: a missing object is named, with a non-zero exit.
    let (victim, _) = storage.list("shared/").unwrap().into_iter().next().unwrap();
    storage.delete(&victim).unwrap();
    let o = run(&["checkpoint", "verify", r]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains(&victim) && err.contains("missing"), "{err}");

    let o = run(&["checkpoint", "verify", nothing]);
    assert!(!o.status.success());
    let o = run(&[
        "checkpoint",
        "to-savepoint",
        r,
        "--id",
        "99",
        "--out",
        sp.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("99"), "{}", text(&o.stderr));
}

/// The demo as a host: one line per checkpoint (id, bytes, files new and reused, sync and async times),
/// confirmed ones retained, and the last one (taken at the last event) holds exactly the final state.
fn demo_checkpoints_into(root: &str, dir: &std::path::Path) {
    demo_checkpoints_on("lsm", root, dir);
}

fn demo_checkpoints_on(backend: &str, root: &str, dir: &std::path::Path) {
    let sp = dir.join("demo.sp");
    let o = run(&[
        "demo",
        "--backend",
        backend,
        "--records",
        "60000",
        "--checkpoint-dir",
        root,
        "--checkpoint-every",
        "20000",
        "--retain",
        "2",
        "--savepoint",
        sp.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("checkpoint "))
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (i, line) in lines.iter().enumerate() {
        // checkpoint 1: 724862 bytes written, 5 files new, 0 reused, sync 0.045 ms, async 106.6 ms
        let (head, rest) = line.split_once(": ").unwrap();
        assert_eq!(head, format!("checkpoint {}", i + 1));
        let f: Vec<&str> = rest.split(", ").collect();
        assert_eq!(f.len(), 5, "{line}");
        let bytes: u64 = f[0]
            .strip_suffix(" bytes written")
            .unwrap()
            .parse()
            .unwrap();
        let new: u64 = f[1].strip_suffix(" files new").unwrap().parse().unwrap();
        f[2].strip_suffix(" reused")
            .unwrap()
            .parse::<u64>()
            .unwrap();
        let ms = |s: &str, p: &str| -> f64 {
            s.strip_prefix(p)
                .unwrap()
                .strip_suffix(" ms")
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!(
            ms(f[3], "sync ") >= 0.0 && ms(f[4], "async ") > 0.0,
            "{line}"
        );
        assert!(bytes > 0 && (i > 0 || new > 0), "{line}");
    }
    assert!(out.contains("checkpoints:    3 completed into"), "{out}");
    let listed = text(&run(&["checkpoint", "list", root]).stdout);
    let ids: Vec<&str> = listed
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(ids, ["2", "3"], "{listed}");
    let o = run(&["checkpoint", "verify", root]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let from_ckpt = dir.join("ckpt.sp");
    let o = run(&[
        "checkpoint",
        "to-savepoint",
        root,
        "--id",
        "3",
        "--out",
        from_ckpt.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let a = run(&["dump", "--json", sp.to_str().unwrap()]);
    let b = run(&["dump", "--json", from_ckpt.to_str().unwrap()]);
    assert!(a.status.success() && b.status.success());
    assert!(!a.stdout.is_empty());
    assert!(
        a.stdout == b.stdout,
        "the last checkpoint holds the final state"
    );
}

#[test]
fn demo_takes_confirms_and_retains_checkpoints_while_it_processes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    demo_checkpoints_into(root.to_str().unwrap(), dir.path());
}

#[cfg(feature = "s3")]
#[test]
fn demo_checkpoints_into_an_s3_root() {
    let Some(storage) = common_s3::storage("demo_checkpoints_into_an_s3_root") else {
        return;
    };
    let endpoint = common_s3::endpoint("").unwrap();
    ENV.with(|e| *e.borrow_mut() = s3_env(&endpoint));
    let dir = tempfile::tempdir().unwrap();
    demo_checkpoints_into(storage.root_name(), dir.path());
}

#[test]
fn demo_checkpoints_on_the_heap_backend() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    demo_checkpoints_on("heap", root.to_str().unwrap(), dir.path());
}

#[cfg(feature = "rocksdb")]
#[test]
fn demo_checkpoints_on_the_rocksdb_variant() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    demo_checkpoints_on("rocksdb", root.to_str().unwrap(), dir.path());
}

/// The arguments of a demo checkpointing into `root` every 20000 of 100000 events, retaining 2.
fn demo_into(root: &str, sp: &std::path::Path, seed: &str) -> Vec<String> {
    [
        "demo",
        "--records",
        "100000",
        "--seed",
        seed,
        "--checkpoint-dir",
        root,
        "--checkpoint-every",
        "20000",
        "--retain",
        "2",
        "--savepoint",
        sp.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Every checkpoint in `root` verifies.
fn assert_root_verifies(root: &str) {
    let o = run(&["checkpoint", "verify", root]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
}

#[test]
fn a_second_demo_into_a_used_root_fails_and_overwrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    let root = root.to_str().unwrap();
    let first = run(&demo_into(root, &dir.path().join("a.sp"), "1")
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    assert!(first.status.success(), "{}", text(&first.stderr));
    let listed = run(&["checkpoint", "list", root]);
    let second = run(&demo_into(root, &dir.path().join("b.sp"), "2")
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    assert!(!second.status.success(), "{}", text(&second.stdout));
    let err = text(&second.stderr);
    assert!(
        err.contains("already holds checkpoints of this instance up to id 5"),
        "{err}"
    );
    assert_root_verifies(root);
    // The first demo's checkpoints are those listed before, unchanged.
    let o = run(&["checkpoint", "list", root]);
    let ids = |o: &Output| -> Vec<String> {
        text(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|w| w.parse::<u64>().is_ok())
            .map(str::to_string)
            .collect()
    };
    let (before, after) = (ids(&listed), ids(&o));
    assert!(
        before.iter().all(|id| after.contains(id)),
        "{before:?} {after:?}"
    );
    let out = dir.path().join("4.sp");
    let o = run(&[
        "checkpoint",
        "to-savepoint",
        root,
        "--id",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn two_demos_into_one_root_at_once_never_both_succeed_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    let root = root.to_str().unwrap();
    let spawn = |sp: &str, seed: &str| {
        Command::new(env!("CARGO_BIN_EXE_keyed-state"))
            .args(demo_into(root, &dir.path().join(sp), seed))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a.sp", "1"), spawn("b.sp", "2"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(
        !(a.status.success() && b.status.success()),
        "both reported success:\n{}\n{}",
        text(&a.stdout),
        text(&b.stdout)
    );
    for o in [&a, &b] {
        if !o.status.success() {
            let err = text(&o.stderr);
            assert!(
                err.contains("fenced")
                    || err.contains("already exists")
                    || err.contains("already holds"),
                "{err}"
            );
        }
    }
    assert_root_verifies(root);
    // Whatever checkpoint the root lists restores.
    let listed = text(&run(&["checkpoint", "list", root]).stdout);
    let newest = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .max();
    if let Some(id) = newest {
        let out = dir.path().join("newest.sp");
        let o = run(&[
            "checkpoint",
            "to-savepoint",
            root,
            "--id",
            &id.to_string(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
}

#[test]
fn read_only_checkpoint_commands_on_a_mistyped_root_fail_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("ckpt-typo");
    let t = typo.to_str().unwrap();
    let out = dir.path().join("out.sp");
    let url = format!("file://{t}");
    for args in [
        vec!["checkpoint", "list", t],
        vec!["checkpoint", "verify", t],
        vec!["checkpoint", "gc", t, "--retain", "1", "--dry-run"],
        vec!["checkpoint", "gc", t, "--retain", "1"],
        vec![
            "checkpoint",
            "to-savepoint",
            t,
            "--id",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        vec!["checkpoint", "list", &url],
    ] {
        let o = run(&args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = text(&o.stderr);
        assert!(
            err.contains(t) && err.contains("No such file or directory"),
            "{args:?}: {err}"
        );
        assert!(!typo.exists(), "{args:?} created the root");
    }
    // A file given as the root names it as not a directory.
    std::fs::write(&typo, b"x").unwrap();
    let o = run(&["checkpoint", "verify", t]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("not a directory"),
        "{}",
        text(&o.stderr)
    );
}

/// `demo_into`, as job `job` of the root.
fn demo_as_job(root: &str, sp: &std::path::Path, seed: &str, job: &str) -> Output {
    let mut args = demo_into(root, sp, seed);
    args.extend(["--job".to_string(), job.to_string()]);
    run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn two_demo_jobs_in_one_root_are_listed_by_job_and_the_newest_is_never_taken_from_another() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    let root = root.to_str().unwrap();
    // Two jobs at the same parallelism, each numbering its checkpoints from 1: both succeed.
    let a = demo_as_job(root, &dir.path().join("a.sp"), "1", "nightly");
    assert!(a.status.success(), "{}", text(&a.stderr));
    let b = demo_as_job(root, &dir.path().join("b.sp"), "2", "backfill");
    assert!(b.status.success(), "{}", text(&b.stderr));
    assert!(
        text(&b.stdout).contains("(job backfill)"),
        "{}",
        text(&b.stdout)
    );
    // A third, plain demo: the default job (the root's top level), as before jobs.
    let c = run(&demo_into(root, &dir.path().join("c.sp"), "3")
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    assert!(c.status.success(), "{}", text(&c.stderr));

    let jobs = text(&run(&["checkpoint", "jobs", root]).stdout);
    assert_eq!(
        jobs.lines().collect::<Vec<_>>(),
        vec!["backfill\t2\t5", "default\t2\t5", "nightly\t2\t5"],
        "{jobs}"
    );
    // Without --job, each line names its job (a seventh column); with --job, the six columns as before.
    let all = text(&run(&["checkpoint", "list", root]).stdout);
    assert_eq!(all.lines().count(), 6, "{all}");
    for job in ["backfill", "default", "nightly"] {
        assert_eq!(
            all.lines()
                .filter(|l| l.ends_with(&format!("\t{job}")))
                .count(),
            2,
            "{all}"
        );
    }
    let one = text(&run(&["checkpoint", "list", root, "--job", "nightly"]).stdout);
    assert_eq!(one.lines().count(), 2, "{one}");
    assert!(one.lines().all(|l| l.split('\t').count() == 6), "{one}");
    assert_root_verifies(root);
    let o = run(&["checkpoint", "verify", root, "--job", "backfill"]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    // The newest checkpoint of which job? A typed error listing them; nothing written.
    let out = dir.path().join("newest.sp");
    let o = run(&[
        "checkpoint",
        "to-savepoint",
        root,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("holds several jobs (backfill, default, nightly)") && err.contains("--job"),
        "{err}"
    );
    assert!(!out.exists());
    for cmd in [
        vec!["checkpoint", "gc", root, "--retain", "1"],
        vec!["checkpoint", "verify", root, "--id", "5"],
    ] {
        let o = run(&cmd);
        assert!(!o.status.success(), "{cmd:?}");
        assert!(text(&o.stderr).contains("several jobs"), "{cmd:?}");
    }
    let o = run(&["checkpoint", "list", root, "--job", "nope"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("holds no job nope"),
        "{}",
        text(&o.stderr)
    );

    // Each job's newest restores to what that job's demo saved (its final savepoint holds the same
    // state as its last checkpoint, taken after the last event).
    for (job, sp) in [("nightly", "a.sp"), ("backfill", "b.sp")] {
        let out = dir.path().join(format!("{job}-newest.sp"));
        let o = run(&[
            "checkpoint",
            "to-savepoint",
            root,
            "--job",
            job,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(
            text(&o.stdout).contains("of checkpoint 5"),
            "{}",
            text(&o.stdout)
        );
        let dump = |p: &std::path::Path| {
            let o = run(&["dump", p.to_str().unwrap()]);
            assert!(o.status.success(), "{}", text(&o.stderr));
            text(&o.stdout)
                .lines()
                .filter(|l| l.contains("entries"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(dump(&out), dump(&dir.path().join(sp)), "{job}");
    }
    // gc of one job, named: the others stay whole.
    let o = run(&[
        "checkpoint",
        "gc",
        root,
        "--retain",
        "1",
        "--job",
        "nightly",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let jobs = text(&run(&["checkpoint", "jobs", root]).stdout);
    assert!(
        jobs.contains("nightly\t1\t5") && jobs.contains("backfill\t2\t5"),
        "{jobs}"
    );
    assert_root_verifies(root);
}

//! The `keyed-state` command line, run as a user runs it.

use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_keyed-state"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run keyed-state")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn key_group_prints_flink_key_groups_and_operator_indexes() {
    let o = run(&[
        "key-group",
        "--max-parallelism",
        "128",
        "--parallelism",
        "2",
        "--key-type",
        "long",
        "0",
        "1",
        "42",
        "-1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "0\t94\t1\n1\t86\t1\n42\t29\t0\n-1\t94\t1\n");
    let o = run(&[
        "key-group",
        "--max-parallelism",
        "32768",
        "--key-type",
        "string",
        "hello",
        "",
    ]);
    assert_eq!(stdout(&o), "hello\t31395\n\t31198\n");
    let o = run(&[
        "key-group",
        "--max-parallelism",
        "128",
        "--key-type",
        "int",
        "-1",
        "2147483647",
    ]);
    assert_eq!(stdout(&o), "-1\t80\n2147483647\t62\n");
}

#[test]
fn key_group_rejects_bad_arguments_without_panicking() {
    for args in [
        &[
            "key-group",
            "--max-parallelism",
            "0",
            "--key-type",
            "long",
            "1",
        ][..],
        &[
            "key-group",
            "--max-parallelism",
            "40000",
            "--key-type",
            "long",
            "1",
        ],
        &[
            "key-group",
            "--max-parallelism",
            "128",
            "--parallelism",
            "200",
            "--key-type",
            "long",
            "1",
        ],
        &[
            "key-group",
            "--max-parallelism",
            "128",
            "--key-type",
            "int",
            "99999999999",
        ],
        &[
            "key-group",
            "--max-parallelism",
            "128",
            "--key-type",
            "long",
            "abc",
        ],
    ] {
        let o = run(args);
        assert!(!o.status.success(), "{args:?}");
        let err = stderr(&o);
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn demo_inspect_dump_verify_round() {
    let dir = tempfile::tempdir().unwrap();
    let sp = dir.path().join("demo.sp");
    let sp = sp.to_str().unwrap();
    let o = run(&[
        "demo",
        "--records",
        "3000",
        "--seed",
        "7",
        "--savepoint",
        sp,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("events/s"));

    // The same seed and record count give the same savepoint bytes.
    let sp2 = dir.path().join("demo2.sp");
    let o = run(&[
        "demo",
        "--records",
        "3000",
        "--seed",
        "7",
        "--savepoint",
        sp2.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    assert_eq!(std::fs::read(sp).unwrap(), std::fs::read(&sp2).unwrap());

    let o = run(&["inspect", sp]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for s in [
        "clicks",
        "impressions",
        "recent-pages",
        "page-clicks",
        "clicks-per-hour",
        "max parallelism:  128",
    ] {
        assert!(text.contains(s), "inspect lacks {s}: {text}");
    }

    let o = run(&["dump", sp, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut kinds = std::collections::BTreeSet::new();
    for line in stdout(&o).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let state = v["state"].as_str().unwrap().to_string();
        assert!(v["key_group"].is_u64());
        assert!(v["key"].is_i64(), "{line}");
        match state.as_str() {
            "recent-pages" => assert!(v["value"].is_array()),
            "page-clicks" => {
                assert!(v["user_key"].as_str().unwrap().starts_with("/page/"));
                assert!(v["value"].is_i64());
            }
            "clicks-per-hour" => assert!(v["namespace"].is_i64()),
            _ => assert!(v["value"].is_i64()),
        }
        kinds.insert(state);
    }
    assert_eq!(kinds.len(), 5);

    let o = run(&["verify", sp]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("ok:"));

    // Damage one byte in the middle of the data: verify fails and names the block.
    let mut bytes = std::fs::read(sp).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    let bad = dir.path().join("bad.sp");
    std::fs::write(&bad, &bytes).unwrap();
    let o = run(&["verify", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.starts_with("error:") && err.contains("key group"),
        "{err}"
    );

    // A truncated file is an error, not a panic, for every command.
    std::fs::write(&bad, &bytes[..bytes.len() / 3]).unwrap();
    for cmd in ["inspect", "verify", "dump"] {
        let o = run(&[cmd, bad.to_str().unwrap()]);
        assert!(!o.status.success(), "{cmd}");
        assert!(!stderr(&o).contains("panicked"), "{cmd}: {}", stderr(&o));
    }
}

#[test]
fn missing_file_is_a_clear_error() {
    let o = run(&["inspect", "/nonexistent/savepoint"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("/nonexistent/savepoint"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn demo_with_instances_on_one_budget_holds_the_same_entries_as_one_instance() {
    let dir = tempfile::tempdir().unwrap();
    let sp = dir.path().join("one.sp");
    let entries = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("state entries:"))
            .unwrap_or_else(|| panic!("no entry count in {out}"))
            .split_whitespace()
            .nth(2)
            .unwrap()
            .to_string()
    };
    let one = run(&[
        "demo",
        "--records",
        "5000",
        "--seed",
        "3",
        "--savepoint",
        sp.to_str().unwrap(),
    ]);
    assert!(one.status.success(), "{}", stderr(&one));
    let many = run(&[
        "demo",
        "--records",
        "5000",
        "--seed",
        "3",
        "--instances",
        "4",
        "--memory-budget",
        "64MiB",
    ]);
    assert!(many.status.success(), "{}", stderr(&many));
    let out = stdout(&many);
    assert_eq!(entries(&out), entries(&stdout(&one)), "{out}");
    for line in [
        "peak memory:",
        "threads:",
        "write stalls:",
        "memory budget:  64 MiB",
    ] {
        assert!(out.contains(line), "{line} missing from {out}");
    }
    let bad = run(&["demo", "--instances", "2", "--memory-budget", "lots"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("not a size"), "{}", stderr(&bad));
}

/// Every file of `dir` with its bytes (the lock file aside).
fn files_of(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.ends_with("LOCK"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

#[test]
fn demo_dir_without_current_fails_naming_the_directory_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let sp = dir.path().join("a.sp");
    let args = |records: &str| {
        vec![
            "demo".to_string(),
            "--dir".into(),
            db.display().to_string(),
            "--records".into(),
            records.into(),
            "--savepoint".into(),
            sp.display().to_string(),
        ]
    };
    let o = bin().args(args("20000")).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_file(db.join("CURRENT")).unwrap();
    let before = files_of(&db);
    assert!(before.keys().any(|n| n.ends_with(".sst")), "{before:?}");
    let o = bin().args(args("100")).output().unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains(&db.display().to_string()) && err.contains("no CURRENT"),
        "{err}"
    );
    assert!(err.contains(".sst"), "names what it found: {err}");
    assert_eq!(files_of(&db), before, "the failed demo deleted files");
}

/// `dump` of a savepoint that is cut and rewritten (as `cp` over it does) again and again while it runs: every
/// run ends with an exit code, never a signal (a mapped file's read past the cut was SIGBUS, exit 135), and
/// a failed run names the file.
#[test]
fn dump_of_a_savepoint_replaced_while_it_runs_exits_with_an_error_never_a_signal() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let sp = dir.path().join("a.sp");
    let o = run(&[
        "demo",
        "--records",
        "200000",
        "--savepoint",
        sp.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let good = std::fs::read(&sp).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (sp, good, stop) = (sp.clone(), good.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // What `cp` does: truncate in place, then write.
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(&sp)
                    .unwrap();
                std::io::Write::write_all(&mut f, &good[..good.len() / 2]).unwrap();
                std::io::Write::write_all(&mut f, &good[good.len() / 2..]).unwrap();
            }
        })
    };
    for _ in 0..8 {
        let o = bin()
            .args(["dump", sp.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            o.status.signal(),
            None,
            "killed by a signal: {}",
            stderr(&o)
        );
        if !o.status.success() {
            assert!(
                stderr(&o).contains(&sp.display().to_string()),
                "{}",
                stderr(&o)
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
}

#[test]
fn verify_of_a_directory_names_it_and_says_it_is_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["verify", "dump"] {
        let o = run(&[cmd, dir.path().to_str().unwrap()]);
        assert!(!o.status.success());
        let err = stderr(&o);
        assert!(
            err.contains(&dir.path().display().to_string()) && err.contains("Is a directory"),
            "{cmd}: {err}"
        );
    }
}

/// The demo's temporary LSM directory (under `TMPDIR`) is removed when the demo is interrupted by SIGINT or
/// SIGTERM, and the demo exits with 130.
#[test]
fn an_interrupted_demo_removes_its_temporary_directory() {
    for signal in ["-INT", "-TERM"] {
        let tmp = tempfile::tempdir().unwrap();
        let sp = tmp.path().join("never.sp");
        let mut child = bin()
            .args([
                "demo",
                "--records",
                "100000000",
                "--savepoint",
                sp.to_str().unwrap(),
            ])
            .env("TMPDIR", tmp.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the engine's directory holds its CURRENT.
        let started = std::time::Instant::now();
        let engine_dir = loop {
            let found = std::fs::read_dir(tmp.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.join("CURRENT").exists());
            if let Some(d) = found {
                // The handler is installed right after the engine opens: give it that moment.
                std::thread::sleep(std::time::Duration::from_millis(300));
                break d;
            }
            assert!(
                started.elapsed().as_secs() < 60,
                "no engine directory appeared"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let kill = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(130), "{signal}: {status:?} {err}");
        assert!(
            !engine_dir.exists(),
            "{signal}: {} is left",
            engine_dir.display()
        );
        assert!(err.contains("removed the temporary directory"), "{err}");
    }
}

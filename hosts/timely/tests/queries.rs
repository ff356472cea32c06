//! Every query, run by the binary at 1 process × 1 worker (heap) and 2 processes × 2 workers (LSM), equals
//! its single-threaded reference.

use keyed_state_timely::queries::Query;

use crate::common::{assert_ok, assert_rows, committed_rows, Job};
use crate::reference;

fn check(query: Query, events: u64) {
    let want = {
        let d = tempfile::tempdir().unwrap();
        let job = Job::local(query, "heap", events, d.path());
        reference::rows(query, &job.spec())
    };
    assert!(!want.is_empty(), "{query:?}: the reference has rows");
    for (backend, p, w) in [("heap", 1, 1), ("lsm", 2, 2)] {
        let d = tempfile::tempdir().unwrap();
        let job = Job::local(query, backend, events, d.path());
        let o = job.launch(p, w, false);
        assert_ok(&o, &format!("{query:?} on {backend}, {p}x{w}"));
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            stdout.lines().filter(|l| l.contains("events/s")).count(),
            p,
            "one end-of-run line per process:\n{stdout}"
        );
        assert_rows(
            &committed_rows(&job.out),
            &want,
            &format!("{query:?} on {backend}, {p} processes x {w} workers"),
        );
    }
}

#[test]
fn q3_incremental_join_equals_reference() {
    check(Query::Q3, 40_000);
}

#[test]
fn q5_hot_items_equals_reference() {
    check(Query::Q5, 30_000);
}

#[test]
fn q7_highest_bid_equals_reference() {
    check(Query::Q7, 30_000);
}

#[test]
fn q8_new_users_equals_reference() {
    check(Query::Q8, 40_000);
}

#[test]
fn q11_user_sessions_equals_reference() {
    check(Query::Q11, 30_000);
}

#[test]
fn a_fresh_run_refuses_a_used_root_and_restore_of_a_finished_job_adds_nothing() {
    let d = tempfile::tempdir().unwrap();
    let job = Job::local(Query::Q7, "lsm", 10_000, d.path());
    assert_ok(&job.launch(1, 1, false), "first run");
    let first = committed_rows(&job.out);
    let o = job.launch(1, 1, false);
    assert!(
        !o.status.success(),
        "a second fresh run into the same root must fail"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--restore"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_ok(&job.launch(2, 1, true), "restore of a finished job");
    assert_eq!(committed_rows(&job.out), first);
}

#[test]
fn a_small_memory_budget_gives_the_same_result_and_a_too_small_one_is_refused() {
    let want = {
        let d = tempfile::tempdir().unwrap();
        let job = Job::local(Query::Q11, "lsm", 20_000, d.path());
        reference::rows(Query::Q11, &job.spec())
    };
    let d = tempfile::tempdir().unwrap();
    let job = Job::local(Query::Q11, "lsm", 20_000, d.path());
    let mut c = job.command();
    c.arg("launch").args(job.args(false)).args([
        "--processes",
        "2",
        "--workers",
        "2",
        "--memory-budget",
        "16MiB",
    ]);
    let o = c.output().unwrap();
    assert_ok(&o, "q11 on LSM, 2x2, 16 MiB per process");
    assert_rows(&committed_rows(&job.out), &want, "q11 with a 16 MiB budget");

    for (bad, says) in [("1KiB", "at least 8 MiB"), ("lots", "not a size")] {
        let d = tempfile::tempdir().unwrap();
        let job = Job::local(Query::Q11, "lsm", 20_000, d.path());
        let mut c = job.command();
        c.arg("run")
            .args(job.args(false))
            .args(["--memory-budget", bad]);
        let o = c.output().unwrap();
        assert!(!o.status.success(), "--memory-budget {bad} must be refused");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "--memory-budget {bad}: {err}");
    }
}

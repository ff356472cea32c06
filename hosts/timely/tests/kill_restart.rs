//! Kill -9 one process at a random moment, restart at another parallelism, again and again: the committed
//! output equals the failure-free result, with no duplicate and no missing row.

use std::process::Child;
use std::time::{Duration, Instant};

use keyed_state_timely::queries::Query;
use rand::{Rng, SeedableRng};

use crate::common::{assert_ok, assert_rows, committed_rows, s3_root, Job};
use crate::reference;

/// Waits for `c` up to `limit`; kills it and fails if it does not end.
fn wait(c: &mut Child, limit: Duration, what: &str) -> (std::process::ExitStatus, String) {
    let t = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = c.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return (s, err);
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            panic!("{what} did not stop within {limit:?} after a peer was killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `processes` processes and kills one of them after a random delay; the others must stop by
/// themselves, with an error, unless the job ended first.
fn run_and_kill(
    job: &Job,
    processes: usize,
    restore: bool,
    rng: &mut rand::rngs::StdRng,
    dir: &std::path::Path,
) {
    let mut children = job.spawn(processes, 1, restore, dir);
    let delay = Duration::from_millis(rng.random_range(200..2_500));
    let victim = rng.random_range(0..processes);
    std::thread::sleep(delay);
    let finished_before = children[victim].try_wait().unwrap().is_some();
    let _ = children[victim].kill();
    let _ = children[victim].wait();
    for (i, c) in children.iter_mut().enumerate() {
        if i == victim {
            continue;
        }
        let (status, err) = wait(c, Duration::from_secs(60), &format!("process {i}"));
        if !finished_before && !status.success() {
            assert!(
                err.contains("lost the connection") || err.contains("did not all connect"),
                "process {i} stopped without saying why: {err}"
            );
        }
    }
    println!(
        "{} processes, killed process {victim} after {delay:?}{}; {} rows committed so far",
        processes,
        if finished_before {
            " (it had finished)"
        } else {
            ""
        },
        committed_rows(&job.out).len()
    );
}

fn kill_and_restart(
    query: Query,
    backend: &'static str,
    s3: Option<(String, Vec<(String, String)>)>,
    seed: u64,
) {
    let d = tempfile::tempdir().unwrap();
    let mut job = Job::local(query, backend, 60_000, d.path());
    job.per_epoch = 1_000;
    job.every = 2;
    if let Some((root, env)) = s3 {
        job.root = root;
        job.env = env;
    }
    let want = reference::rows(job.query, &job.spec());
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    println!(
        "kill-and-restart of {query:?} on {backend}, root {}, seed {seed} (KEYED_STATE_KILL_SEED)",
        job.root
    );
    run_and_kill(&job, 3, false, &mut rng, d.path());
    run_and_kill(&job, 2, true, &mut rng, d.path());
    run_and_kill(&job, 1, true, &mut rng, d.path());
    assert_ok(&job.launch(3, 1, true), "the final restart at 3 processes");
    assert_rows(
        &committed_rows(&job.out),
        &want,
        &format!("after kills on {backend}"),
    );
}

fn seed() -> u64 {
    std::env::var("KEYED_STATE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

#[test]
fn kill_restart_rescale_3_2_1_3_on_lsm_loses_and_duplicates_nothing() {
    kill_and_restart(Query::Q11, "lsm", None, seed());
}

#[test]
fn kill_restart_rescale_3_2_1_3_on_heap_loses_and_duplicates_nothing() {
    kill_and_restart(Query::Q3, "heap", None, seed());
}

#[test]
fn kill_restart_rescale_on_s3_lsm_loses_and_duplicates_nothing() {
    if let Some(s3) = s3_root("kill-lsm") {
        kill_and_restart(Query::Q11, "lsm", Some(s3), seed());
    }
}

#[test]
fn kill_restart_rescale_on_s3_heap_loses_and_duplicates_nothing() {
    if let Some(s3) = s3_root("kill-heap") {
        kill_and_restart(Query::Q3, "heap", Some(s3), seed());
    }
}

//! Kill -9 one process at a random moment, restart at another parallelism, again and again: the committed
//! output equals the failure-free result, with no duplicate and no missing row.

use std::process::{Child, Command};
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
    let delay = Duration::from_millis(rng.random_range(300..5_000));
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

/// The children of process `pid` (Linux: /proc/PID/task/PID/children).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// `launch` as a supervisor sees it: a SIGKILL of one of its processes makes it stop the others and exit
/// non-zero, and a later `launch --restore` at another number of processes completes the job.
#[test]
fn launch_stops_the_others_and_fails_when_one_of_its_processes_is_killed() {
    let d = tempfile::tempdir().unwrap();
    let job = Job::local(Query::Q7, "lsm", 200_000, d.path());
    let want = reference::rows(job.query, &job.spec());
    let mut launch = job.launch_child(3, 1, false);
    let t = Instant::now();
    let children = loop {
        let c = children_of(launch.id());
        if c.len() == 3 {
            break c;
        }
        assert!(
            launch.try_wait().unwrap().is_none(),
            "launch ended before starting its 3 processes"
        );
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "launch started {c:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    std::thread::sleep(Duration::from_millis(500));
    let killed = Command::new("kill")
        .args(["-9", &children[1].to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -9 {}", children[1]);
    let (status, err) = wait(&mut launch, Duration::from_secs(60), "launch");
    assert!(
        !status.success(),
        "launch must fail when one of its processes was killed: {err}"
    );
    for pid in [children[0], children[2]] {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} is still running after launch ended"
        );
    }
    assert_ok(&job.launch(2, 1, true), "launch --restore at 2 processes");
    assert_rows(
        &committed_rows(&job.out),
        &want,
        "after the killed launch and a restore at 2 processes",
    );
}

/// `scripts/long-checks.sh`: KEYED_STATE_TIMELY_KILLS kills (10 per job) with random rescales (1–4
/// processes × 1–2 workers) over every query on LSM and heap; each job's committed output must equal its
/// reference. Without the variable it prints that it is skipped.
#[test]
fn kill_campaign_with_random_rescales() {
    let Some(kills) = std::env::var("KEYED_STATE_TIMELY_KILLS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
    else {
        println!("skipped kill_campaign_with_random_rescales: KEYED_STATE_TIMELY_KILLS is not set (scripts/long-checks.sh sets it)");
        return;
    };
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    println!("kill campaign: {kills} kills, seed {seed} (KEYED_STATE_KILL_SEED)");
    let mut done = 0;
    let mut jobs = 0;
    let mut failures = 0;
    while done < kills {
        let query = Query::ALL[rng.random_range(0..Query::ALL.len())];
        let backend = if rng.random_bool(0.5) { "lsm" } else { "heap" };
        let d = tempfile::tempdir().unwrap();
        let mut job = Job::local(query, backend, 80_000, d.path());
        job.every = rng.random_range(1..4);
        let want = reference::rows(query, &job.spec());
        for k in 0..10.min(kills - done) {
            let p = rng.random_range(1..5);
            let w = rng.random_range(1..3);
            let mut children = job.spawn(p, w, k > 0, d.path());
            std::thread::sleep(Duration::from_millis(rng.random_range(300..6_000)));
            let victim = rng.random_range(0..p);
            let _ = children[victim].kill();
            for c in children.iter_mut() {
                wait(c, Duration::from_secs(60), "a process");
            }
            done += 1;
        }
        let p = rng.random_range(1..5);
        let o = job.launch(p, rng.random_range(1..3), true);
        assert_ok(&o, "the final restart");
        let got = committed_rows(&job.out);
        jobs += 1;
        if got != want {
            failures += 1;
            println!(
                "{query:?} on {backend}: {} rows, {} expected",
                got.len(),
                want.len()
            );
        }
    }
    println!("campaign timely_kills kills={done} jobs={jobs} failures={failures}");
    assert_eq!(failures, 0);
}

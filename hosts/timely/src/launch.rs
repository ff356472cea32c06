//! `launch`: a job's processes on loopback, as this process's children (`-n P -p i -w W`, ports chosen
//! free). If one of them dies the others are stopped and the launch fails, as a supervisor would.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use crate::error::{Error, Result};

/// `n` free loopback ports (bound, read and released: another program could take one in between, and the
/// process that should bind it then fails with a clear error).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()
        .map_err(Error::io("binding a loopback port", "127.0.0.1:0"))?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(Error::io("reading a bound port", "127.0.0.1:0"))
        })
        .collect()
}

/// How a launch ended.
#[derive(Debug)]
pub enum LaunchOutcome {
    /// Every process exited successfully.
    Done,
    /// Process `process` failed with `status`; the others were stopped.
    Failed {
        /// The process that failed first.
        process: usize,
        /// Its exit status.
        status: ExitStatus,
    },
}

/// Starts `processes` children running `exe run ARGS -n P -p i -w W --hostfile F` and waits for them.
pub fn launch(
    exe: &PathBuf,
    run_args: &[String],
    processes: usize,
    workers: usize,
) -> Result<LaunchOutcome> {
    let ports = free_ports(processes)?;
    let dir = tempfile::Builder::new()
        .prefix("keyed-state-timely-launch-")
        .tempdir()
        .map_err(Error::io(
            "creating a temporary directory",
            std::env::temp_dir(),
        ))?;
    let hostfile = dir.path().join("hosts");
    let hosts: String = ports.iter().map(|p| format!("127.0.0.1:{p}\n")).collect();
    std::fs::write(&hostfile, hosts).map_err(Error::io("writing", &hostfile))?;
    let mut children: Vec<Child> = Vec::new();
    for i in 0..processes {
        let child = Command::new(exe)
            .arg("run")
            .args(run_args)
            .args(["-n", &processes.to_string(), "-p", &i.to_string()])
            .args(["-w", &workers.to_string()])
            .arg("--hostfile")
            .arg(&hostfile)
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                stop(&mut children);
                return Err(Error::io("starting", exe)(e));
            }
        }
    }
    let mut done = vec![false; processes];
    loop {
        for (i, c) in children.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            match c.try_wait() {
                Ok(Some(status)) if status.success() => done[i] = true,
                Ok(Some(status)) => {
                    stop(&mut children);
                    return Ok(LaunchOutcome::Failed { process: i, status });
                }
                Ok(None) => {}
                Err(e) => {
                    stop(&mut children);
                    return Err(Error::io("waiting for", exe)(e));
                }
            }
        }
        if done.iter().all(|d| *d) {
            return Ok(LaunchOutcome::Done);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills and reaps every child still running.
fn stop(children: &mut [Child]) {
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
    }
    for c in children.iter_mut() {
        let _ = c.wait();
    }
}

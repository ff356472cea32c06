//! Jobs in a checkpoint root (`design/checkpoint-fencing.md`, "Jobs in the root"): each job owns a part of
//! the root — the root itself for the default job (the layout of roots written before jobs), `jobs/<job>/`
//! for any other — and reads, writes, restores and collects only there. [`CheckpointStorage::job`] opens a
//! job's part; [`list_jobs`] says which jobs a root holds; [`resolve_job`] picks the job a command means,
//! and never guesses between several.

use super::job_name::{check_job_name, DEFAULT_JOB, JOBS_DIR};
use super::scan::checkpoint_id_of;
use super::storage::CheckpointStorage;
use crate::error::{CheckpointError, Result};

/// The prefixes of the objects a job owns, relative to its part of the root.
const JOB_OBJECTS: [&str; 4] = ["chk-", "shared/", "attempts/", "claimed/"];

/// A new job name, unique among the jobs of any root with overwhelming probability: `job-` and 16 hex
/// digits of the time, the process id and a counter.
pub fn generate_job_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut b = Vec::with_capacity(32);
    b.extend_from_slice(&nanos.to_le_bytes());
    b.extend_from_slice(&std::process::id().to_le_bytes());
    b.extend_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    format!("job-{:016x}", xxhash_rust::xxh3::xxh3_64(&b))
}

/// The jobs `storage` (a whole root) holds, sorted: [`DEFAULT_JOB`] if its top level holds checkpoint
/// objects, and every `jobs/<job>/` holding any object. One listing of the root.
pub fn list_jobs(storage: &CheckpointStorage) -> Result<Vec<String>> {
    let mut jobs = std::collections::BTreeSet::new();
    for (path, _) in storage.list("")? {
        if let Some(rest) = path.strip_prefix(JOBS_DIR) {
            if let Some((job, _)) = rest.split_once('/') {
                if check_job_name(job).is_ok() && job != DEFAULT_JOB {
                    jobs.insert(job.to_string());
                }
            }
        } else if JOB_OBJECTS.iter().any(|p| path.starts_with(p)) {
            jobs.insert(DEFAULT_JOB.to_string());
        }
    }
    Ok(jobs.into_iter().collect())
}

/// The job a command on `storage` (a whole root) means: `job` if given (it must be in the root: else
/// [`CheckpointError::NoSuchJob`] listing those it holds); else the root's only job ([`DEFAULT_JOB`] for a
/// root holding none). Several jobs and none named is [`CheckpointError::AmbiguousJob`] listing them:
/// "the newest checkpoint" or "what to collect" is never taken from another job.
pub fn resolve_job(storage: &CheckpointStorage, job: Option<&str>) -> Result<String> {
    let jobs = list_jobs(storage)?;
    match job {
        Some(j) => {
            check_job_name(j)?;
            if jobs.iter().any(|x| x == j) {
                Ok(j.to_string())
            } else {
                Err(CheckpointError::NoSuchJob {
                    root: storage.root_name().to_string(),
                    job: j.to_string(),
                    jobs,
                }
                .into())
            }
        }
        None => match jobs.len() {
            0 => Ok(DEFAULT_JOB.to_string()),
            1 => Ok(jobs[0].clone()),
            _ => Err(CheckpointError::AmbiguousJob {
                root: storage.root_name().to_string(),
                jobs,
            }
            .into()),
        },
    }
}

/// The newest checkpoint id with metadata in `job_storage` (a job's part of a root, as
/// [`CheckpointStorage::job`] gives it; one listing, nothing read), or `None`.
pub fn newest_checkpoint(job_storage: &CheckpointStorage) -> Result<Option<u64>> {
    Ok(job_storage
        .list("")?
        .iter()
        .filter(|(p, _)| p.starts_with("chk-") && p.ends_with("/_metadata"))
        .filter_map(|(p, _)| checkpoint_id_of(p))
        .max())
}

#[cfg(test)]
mod tests {
    use super::super::job_name::job_prefix;
    use super::*;

    #[test]
    fn job_names_are_checked_and_the_default_job_is_the_top_level() {
        for bad in ["", ".x", "a/b", "a b", &"x".repeat(201)] {
            assert!(check_job_name(bad).is_err(), "{bad:?}");
        }
        check_job_name("nightly-2.run_1").unwrap();
        assert_eq!(job_prefix(DEFAULT_JOB), "");
        assert_eq!(job_prefix("a"), "jobs/a/");
        let g = generate_job_name();
        check_job_name(&g).unwrap();
        assert_ne!(g, generate_job_name());
    }
}

//! Job names in a checkpoint root: what a valid name is, the default job (the layout of roots written
//! before jobs) and the part of the root a job owns. A leaf module, so that storage and the job listing
//! (`jobs`) both depend on it.

use crate::error::{Error, Result};

/// The job of a root's top level: every root written before jobs is this one job.
pub const DEFAULT_JOB: &str = "default";

/// Where the jobs other than [`DEFAULT_JOB`] live in a root.
pub(crate) const JOBS_DIR: &str = "jobs/";

/// A job name is 1..=200 bytes of ASCII letters, digits, `-`, `_` and `.`, not starting with `.`.
pub(crate) fn check_job_name(job: &str) -> Result<()> {
    let ok = !job.is_empty()
        && job.len() <= 200
        && !job.starts_with('.')
        && job
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "checkpoint job name {job:?} must be 1..200 ASCII letters, digits, '-', '_' or '.', not \
             starting with '.'"
        )))
    }
}

/// The part of the root job `job` owns, relative to the root: empty for the default job.
pub(crate) fn job_prefix(job: &str) -> String {
    if job == DEFAULT_JOB {
        String::new()
    } else {
        format!("{JOBS_DIR}{job}/")
    }
}

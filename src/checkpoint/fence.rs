//! Who owns what in a checkpoint root: attempt markers (`attempts/<instance>/<attempt>`, written
//! create-only, the newest fences every older writer of the instance name), claim markers
//! (`claimed/<instance>/…`) and the run an object path belongs to. The protocol is in
//! `design/checkpoint-fencing.md`.

use super::storage::CheckpointStorage;
use crate::error::{CheckpointError, Error, Result};

/// The prefix of the attempt markers of `instance`: `attempts/<instance>/`.
pub(crate) fn attempts_prefix(instance: &str) -> String {
    format!("attempts/{instance}/")
}

/// The marker of attempt `attempt` of `instance`.
pub(crate) fn attempt_marker(instance: &str, attempt: u64) -> String {
    format!("{}{attempt:020}", attempts_prefix(instance))
}

/// The newest attempt of `instance` in the root (0: none). One listing; names that are not attempt
/// markers are ignored.
pub(crate) fn newest_attempt(storage: &CheckpointStorage, instance: &str) -> Result<u64> {
    let prefix = attempts_prefix(instance);
    Ok(storage
        .list(&prefix)?
        .iter()
        .filter_map(|(p, _)| p.strip_prefix(&prefix)?.parse::<u64>().ok())
        .max()
        .unwrap_or(0))
}

/// Writes the marker of a new attempt of `instance`: `attempt`, or the next one after the newest. The
/// marker is written create-only, so two writers never hold one attempt; an attempt at or below the
/// newest is [`CheckpointError::Fenced`].
pub(crate) fn take_attempt(
    storage: &CheckpointStorage,
    instance: &str,
    attempt: Option<u64>,
) -> Result<u64> {
    for _ in 0..16 {
        let newest = newest_attempt(storage, instance)?;
        let want = match attempt {
            Some(a) if a <= newest => {
                return Err(CheckpointError::Fenced {
                    instance: instance.to_string(),
                    attempt: a,
                    newer: newest,
                }
                .into())
            }
            Some(a) => a,
            None => newest.checked_add(1).ok_or_else(|| {
                Error::from(CheckpointError::Invalid(format!(
                    "instance {instance}: no attempt left after {newest}"
                )))
            })?,
        };
        if storage.put_if_absent(&attempt_marker(instance, want), Vec::new())? {
            return Ok(want);
        }
        // Another writer took it between the listing and the put: list again.
    }
    Err(CheckpointError::Invalid(format!(
        "instance {instance}: 16 attempts to take an attempt number lost to other writers"
    ))
    .into())
}

/// The prefix of the markers of the old runs `instance` sweeps: `claimed/<instance>/`.
pub(crate) fn claims_prefix(instance: &str) -> String {
    format!("claimed/{instance}/")
}

/// `<instance>/<run>` of an object path `shared/<instance>/<run>/<name>`.
pub(crate) fn run_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("shared/")?;
    let mut it = rest.splitn(3, '/');
    let (inst, run, name) = (it.next()?, it.next()?, it.next()?);
    if inst.is_empty() || run.is_empty() || name.is_empty() {
        return None;
    }
    Some(&rest[..inst.len() + 1 + run.len()])
}

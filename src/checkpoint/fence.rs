//! Who owns what in a checkpoint root: attempt markers (`attempts/<instance>/<attempt>`, written
//! create-only, the newest fences every older writer of the instance name), claim markers
//! (`claimed/<instance>/…`), the run an object path belongs to and the attempt that wrote it. The protocol is in
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
pub(crate) async fn newest_attempt_async(
    storage: &CheckpointStorage,
    instance: &str,
) -> Result<u64> {
    let prefix = attempts_prefix(instance);
    Ok(storage
        .list_async(&prefix)
        .await?
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
    storage
        .io()
        .block_on(|| take_attempt_async(storage, instance, attempt))?
}

/// [`take_attempt`], awaited.
pub(crate) async fn take_attempt_async(
    storage: &CheckpointStorage,
    instance: &str,
    attempt: Option<u64>,
) -> Result<u64> {
    for _ in 0..16 {
        let newest = newest_attempt_async(storage, instance).await?;
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
        if storage
            .put_if_absent_async(&attempt_marker(instance, want), Vec::new())
            .await?
        {
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

/// The directory of a writer's uploads: `shared/<instance>/<run, 16 hex digits>-<attempt, 20 digits>/`.
/// The attempt in the name lets `gc` tell a fenced writer's run from one a live writer may still use.
pub(crate) fn run_dir(instance: &str, run: u64, attempt: u64) -> String {
    format!("shared/{instance}/{run:016x}-{attempt:020}/")
}

/// The attempt that wrote run `<instance>/<run>` (as [`run_of`] gives it): `None` for a run named
/// before attempts were part of the name (16 hex digits only).
pub(crate) fn attempt_of_run(run: &str) -> Option<u64> {
    let (_, name) = run.split_once('/')?;
    let (_, attempt) = name.split_once('-')?;
    attempt.parse().ok()
}

/// The instance names with attempt markers in the root (one listing of `attempts/`), with the newest
/// attempt of each.
pub(crate) async fn newest_attempts_async(
    storage: &CheckpointStorage,
) -> Result<std::collections::BTreeMap<String, u64>> {
    let mut out = std::collections::BTreeMap::new();
    for (path, _) in storage.list_async("attempts/").await? {
        let Some((inst, n)) = path
            .strip_prefix("attempts/")
            .and_then(|r| r.split_once('/'))
        else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        let e = out.entry(inst.to_string()).or_insert(0);
        *e = (*e).max(n);
    }
    Ok(out)
}

/// Claim mode needs the restored parts in this writer's own part of the root: a checkpoint of another job
/// (a fork, restored from [`CheckpointStorage::job`] of the source job) is never claimed, since its
/// objects are not this job's to delete. One listing of `chk-<id>/`.
pub(crate) fn check_parts_in_root(
    storage: &CheckpointStorage,
    metas: &[super::format::CheckpointMetadata],
) -> Result<()> {
    let Some(first) = metas.first() else {
        return Ok(());
    };
    let listed = storage.list(&format!("chk-{:020}/", first.checkpoint_id))?;
    for m in metas {
        let path = super::metadata_path(m.checkpoint_id, &m.instance);
        if !listed.iter().any(|(p, _)| *p == path) {
            return Err(CheckpointError::Invalid(format!(
                "claim mode: part {} of checkpoint {} is not in {} ({path} missing); a checkpoint of \
                 another job (a fork) is restored in no-claim mode",
                m.instance,
                m.checkpoint_id,
                storage.root_name()
            ))
            .into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_names_its_attempt_and_an_old_run_name_names_none() {
        let dir = run_dir("kg00000-00127", 0xabc, 7);
        let path = format!("{dir}3-1.sst");
        let run = run_of(&path).unwrap();
        assert_eq!(attempt_of_run(run), Some(7));
        assert_eq!(
            attempt_of_run(run_of("shared/kg0/0000000000000abc/3-1.sst").unwrap()),
            None
        );
    }
}

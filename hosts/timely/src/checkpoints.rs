//! Every call the host makes into keyed-state's checkpoints, in one place: the roots, the job's checkpoint
//! records, backends fresh or restored, checkpointers, the two parts of a checkpoint and confirmation.
//!
//! Layout of a job's root `ROOT` (`design/timely-host.md`):
//! - `ROOT/state/<operator>/` — a keyed-state checkpoint root per keyed operator; every worker's instance
//!   of the operator writes its part there (instance name = its key-group range). Checkpoint id = epoch + 1.
//! - `ROOT/job/chk-<id>.json` — the job's record of checkpoint `id`, written by the coordinator once every
//!   worker acknowledged it: the commit point. A checkpoint without a record is not complete.

use std::sync::Arc;
use std::time::Instant;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::{BackendConfig, StateBackend};
use keyed_state::checkpoint::{
    restore_heap, restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer,
    PendingCheckpoint, RestoreInfo, RestoreMode,
};
use keyed_state::env::StateEnv;
use keyed_state::serializer::KeySerializer;
use keyed_state::state::KeyedStateStore;

use crate::error::{Error, Result};
use crate::spec::{lsm_options, Backend, JobIdentity};

/// Confirmed checkpoints each instance keeps (the newest is what a restart restores).
pub const RETAIN: usize = 2;

/// A keyed-state error with what the host was doing.
fn ck(context: impl Into<String>) -> impl FnOnce(keyed_state::Error) -> Error {
    Error::state(context)
}

/// `root` joined with `rel` (a path or a URL).
fn join(root: &str, rel: &str) -> String {
    if root.contains("://") {
        format!("{}/{rel}", root.trim_end_matches('/'))
    } else {
        std::path::Path::new(root).join(rel).display().to_string()
    }
}

/// The job's record of one complete checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobCheckpoint {
    /// The checkpoint id (epoch + 1).
    pub id: u64,
    /// The last epoch it covers: its state holds every event before `offset` and nothing after.
    pub epoch: u64,
    /// The source offset to replay from: the number of events the job had consumed.
    pub offset: u64,
    /// What the job is (restoring another job's checkpoint is refused).
    pub job: JobIdentity,
    /// The keyed operators whose parts it holds.
    pub operators: Vec<String>,
    /// Processes and workers per process of the run that wrote it.
    pub processes: usize,
    /// Workers per process of the run that wrote it.
    pub workers: usize,
}

/// The name of checkpoint `id`'s record under `job/`.
fn record_path(id: u64) -> String {
    format!("job/chk-{id:020}.json")
}

/// A job's checkpoint root: its storages (the job's and every operator's) share the I/O runtime of the
/// process's [`StateEnv`].
pub struct JobRoot {
    root: String,
    storage: Arc<CheckpointStorage>,
    env: StateEnv,
}

impl JobRoot {
    /// Opens `root` (a directory or `s3://bucket/prefix`) on `env`'s I/O runtime.
    pub fn open(root: &str, env: &StateEnv) -> Result<Self> {
        let storage = env
            .open_storage(root)
            .map_err(ck(format!("opening checkpoint root {root}")))?;
        Ok(JobRoot {
            root: root.to_string(),
            storage,
            env: env.clone(),
        })
    }

    /// The root as given.
    pub fn name(&self) -> &str {
        &self.root
    }

    /// The keyed-state checkpoint root of operator `op`.
    pub fn operator_storage(&self, op: &str) -> Result<Arc<CheckpointStorage>> {
        let r = join(&self.root, &format!("state/{op}"));
        self.env
            .open_storage(&r)
            .map_err(ck(format!("opening checkpoint root {r}")))
    }

    /// Ids of the records in the root, ascending.
    fn record_ids(&self) -> Result<Vec<u64>> {
        let mut ids: Vec<u64> = self
            .storage
            .list("job/")
            .map_err(ck(format!("listing {}/job", self.root)))?
            .into_iter()
            .filter_map(|(p, _)| {
                p.strip_prefix("job/chk-")?
                    .strip_suffix(".json")?
                    .parse()
                    .ok()
            })
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// The newest complete checkpoint, if any.
    pub fn latest(&self) -> Result<Option<JobCheckpoint>> {
        let Some(id) = self.record_ids()?.last().copied() else {
            return Ok(None);
        };
        let path = record_path(id);
        let bytes = self
            .storage
            .get(&path)
            .map_err(ck(format!("reading {}/{path}", self.root)))?;
        let rec: JobCheckpoint = serde_json::from_slice(&bytes).map_err(|e| Error::Record {
            path: format!("{}/{path}", self.root),
            detail: e.to_string(),
        })?;
        if rec.id != id {
            return Err(Error::Record {
                path: format!("{}/{path}", self.root),
                detail: format!("holds checkpoint {} under the name of {id}", rec.id),
            });
        }
        Ok(Some(rec))
    }

    /// Whether the root holds anything of a job (a record or an operator's checkpoint).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self
            .storage
            .list("")
            .map_err(ck(format!("listing {}", self.root)))?
            .is_empty())
    }

    /// Writes the record of a complete checkpoint (the commit point), then deletes the records older than
    /// the previous one.
    pub fn commit(&self, rec: &JobCheckpoint) -> Result<()> {
        let path = record_path(rec.id);
        let bytes = serde_json::to_vec_pretty(rec).map_err(|e| Error::Record {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        self.storage
            .put(&path, bytes)
            .map_err(ck(format!("writing {}/{path}", self.root)))?;
        let ids = self.record_ids()?;
        let keep_from = ids.iter().rev().nth(RETAIN - 1).copied().unwrap_or(0);
        for id in ids.into_iter().filter(|&i| i < keep_from) {
            let p = record_path(id);
            self.storage
                .delete(&p)
                .map_err(ck(format!("deleting {}/{p}", self.root)))?;
        }
        Ok(())
    }

    /// Removes what incomplete checkpoints after `restored` (every one when `None`) left in the operators'
    /// roots: their parts' metadata, so that no later checkpoint with the same id mixes with them. Runs
    /// before the cluster connects, in every process (deleting twice is harmless).
    pub fn remove_incomplete(&self, restored: Option<u64>, operators: &[String]) -> Result<usize> {
        let mut removed = 0;
        for op in operators {
            let s = self.operator_storage(op)?;
            for (path, _) in s
                .list("")
                .map_err(ck(format!("listing {}/state/{op}", self.root)))?
            {
                let Some(id) = path
                    .strip_prefix("chk-")
                    .and_then(|r| r.split('/').next())
                    .and_then(|n| n.parse::<u64>().ok())
                else {
                    continue;
                };
                if path.ends_with("/_metadata") && restored.is_none_or(|r| id > r) {
                    s.delete(&path)
                        .map_err(ck(format!("deleting {}/state/{op}/{path}", self.root)))?;
                    removed += 1;
                }
            }
        }
        for id in self.record_ids()? {
            if restored.is_none_or(|r| id > r) {
                let p = record_path(id);
                self.storage
                    .delete(&p)
                    .map_err(ck(format!("deleting {}/{p}", self.root)))?;
            }
        }
        Ok(removed)
    }
}

/// What restoring one operator instance did.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// Files adopted (LSM) or tables read (heap).
    pub files: usize,
    /// Bytes fetched or linked.
    pub bytes: u64,
    /// Microseconds the restore took.
    pub micros: u64,
}

/// One operator instance's backend and checkpointer: fresh, or restored from checkpoint `restore` of
/// `storage` (claimed: the restored files are its incremental base and are deleted once subsumed). LSM
/// backends run on `env` (its background pool, memory budget and block cache); the RocksDB variant keeps
/// its own.
pub fn open_instance(
    env: &StateEnv,
    backend: Backend,
    storage: &Arc<CheckpointStorage>,
    config: BackendConfig,
    restore: Option<u64>,
    context: &str,
) -> Result<(Box<dyn StateBackend>, Checkpointer, Option<Restored>)> {
    let range = config.key_group_range;
    let t = Instant::now();
    let (b, info): (Box<dyn StateBackend>, Option<RestoreInfo>) = match (backend, restore) {
        (Backend::Heap, None) => (
            Box::new(HeapBackend::new(config.clone()).map_err(Error::state(context))?),
            None,
        ),
        (Backend::Lsm, None) => (
            Box::new(
                env.temp_lsm(config.clone(), lsm_options())
                    .map_err(Error::state(context))?,
            ),
            None,
        ),
        #[cfg(feature = "rocksdb")]
        (Backend::RocksDb, None) => (
            Box::new(
                keyed_state::backend::rocksdb::RocksDbBackend::temporary(
                    config.clone(),
                    keyed_state::backend::rocksdb::RocksDbOptions::default(),
                )
                .map_err(Error::state(context))?,
            ),
            None,
        ),
        (Backend::Heap, Some(id)) => {
            let (b, info) = restore_heap(storage, id, config.clone())
                .map_err(ck(format!("{context}: restoring checkpoint {id}")))?;
            (Box::new(b), Some(info))
        }
        (Backend::Lsm, Some(id)) => {
            let (b, info) =
                restore_lsm_temp(storage, id, config.clone(), env.lsm_options(lsm_options()))
                    .map_err(ck(format!("{context}: restoring checkpoint {id}")))?;
            (Box::new(b), Some(info))
        }
        #[cfg(feature = "rocksdb")]
        (Backend::RocksDb, Some(id)) => {
            let (b, info) = keyed_state::checkpoint::restore_rocksdb(
                storage,
                id,
                config.clone(),
                keyed_state::backend::rocksdb::RocksDbOptions::default(),
            )
            .map_err(ck(format!("{context}: restoring checkpoint {id}")))?;
            (Box::new(b), Some(info))
        }
        #[cfg(not(feature = "rocksdb"))]
        (Backend::RocksDb, _) => {
            return Err(Error::Config(
                "--backend rocksdb needs a build with `--features rocksdb`".into(),
            ))
        }
    };
    let checkpointer = Checkpointer::open(
        Arc::clone(storage),
        &config,
        CheckpointOptions {
            retain: RETAIN,
            ..CheckpointOptions::default()
        },
    )
    .map_err(ck(format!("{context}: opening the checkpointer")))?;
    let restored = match info {
        Some(info) => {
            checkpointer
                .restored_from(&info.parts, range, RestoreMode::Claim)
                .map_err(ck(format!("{context}: claiming the restored checkpoint")))?;
            Some(Restored {
                files: info.files_adopted + info.tables_read,
                bytes: info.bytes_fetched,
                micros: u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
            })
        }
        None => None,
    };
    Ok((b, checkpointer, restored))
}

/// What one instance's part of a checkpoint cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartStats {
    /// Microseconds of the synchronous part.
    pub sync_micros: u64,
    /// Microseconds of the asynchronous part.
    pub async_micros: u64,
    /// Bytes of every file of the part (the instance's state on storage).
    pub state_bytes: u64,
    /// Bytes uploaded by this checkpoint.
    pub bytes_written: u64,
}

/// The synchronous part of checkpoint `id` of `store`; returns the asynchronous part.
pub fn begin<K: KeySerializer>(
    store: &mut KeyedStateStore<K>,
    checkpointer: &Checkpointer,
    id: u64,
    context: &str,
) -> Result<AsyncPart> {
    let t = Instant::now();
    let pending = store
        .checkpoint(checkpointer, id)
        .map_err(ck(format!("{context}: checkpoint {id}, synchronous part")))?;
    Ok(AsyncPart {
        pending,
        sync_micros: u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
        context: context.to_string(),
    })
}

/// The asynchronous part of one instance's checkpoint: run it on any thread.
pub struct AsyncPart {
    pending: PendingCheckpoint,
    sync_micros: u64,
    context: String,
}

impl AsyncPart {
    /// Uploads what the incremental base lacks and writes the part's metadata.
    pub fn run(self) -> Result<PartStats> {
        let id = self.pending.id();
        let s = self
            .pending
            .run()
            .map_err(ck(format!("{}: checkpoint {id}, upload", self.context)))?;
        Ok(PartStats {
            sync_micros: self.sync_micros,
            async_micros: s.async_micros,
            state_bytes: s.state_size,
            bytes_written: s.bytes_written,
        })
    }
}

/// Confirms checkpoint `id` on one instance (it becomes the incremental base; retention and the sweep run).
pub fn confirm(checkpointer: &Checkpointer, id: u64, context: &str) -> Result<()> {
    checkpointer
        .notify_complete(id)
        .map_err(ck(format!("{context}: confirming checkpoint {id}")))
}

/// Writes operator `op`'s state in checkpoint `id` of `root` as one unified savepoint at `out` (the same
/// bytes from every backend for the same state); returns its size.
pub fn operator_savepoint(root: &JobRoot, op: &str, id: u64, out: &std::path::Path) -> Result<u64> {
    let storage = root.operator_storage(op)?;
    keyed_state::checkpoint::to_savepoint(&storage, id, out).map_err(ck(format!(
        "writing a savepoint of operator {op}, checkpoint {id} of {}",
        root.name()
    )))
}

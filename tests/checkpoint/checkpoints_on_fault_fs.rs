//! Object-store checkpoints of an LSM backend whose engine runs on the fault-injecting storage
//! ([`FaultFs`]): the checkpointer reads the captured files through the engine's storage, and a restore
//! writes its directory through the storage it is given, so both sides of a checkpoint are under the
//! crash enumeration.
//!
//! * A crash at every storage operation of a workload of writes, flushes, compactions and three
//!   checkpoints: the newest checkpoint that completed before the crash restores to the model as of its step,
//!   the root holds exactly what the completed checkpoints reference (a checkpoint the crash cut short
//!   removed its uploads), and a checkpointer opened after the crash checkpoints again.
//! * A crash at every storage operation of a restore (from an in-memory root and from a local directory,
//!   whose whole-file objects are imported rather than fetched): the restore fails with an error, never a
//!   panic, and a restore after the reboot holds the checkpoint's state.
//! * A restore onto `FaultFs` leaves no file in its real temporary directory; a multipart upload streams
//!   its file through the storage, and a read failing midway aborts it with an error naming the file.

use crate::common as checkpoint_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use checkpoint_common::*;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::BackendConfig;
use keyed_state::checkpoint::{restore_lsm_temp, CheckpointStorage};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state_lsm::storage::fault::FaultFs;
use keyed_state_lsm::storage::StorageHandle;
use keyed_state_lsm::Options;

type Model = BTreeMap<i64, i64>;

#[derive(Debug, Clone, Copy)]
enum Step {
    Put(i64, i64),
    Flush,
    Compact,
    /// Checkpoint with this id, then confirm it.
    Checkpoint(u64),
}

fn workload() -> Vec<Step> {
    use Step::*;
    let mut steps = Vec::new();
    for round in 0..3i64 {
        for i in 0..150 {
            steps.push(Put((round * 37 + i * 7) % 300, round * 1000 + i));
        }
        match round {
            0 => steps.push(Flush),
            1 => steps.push(Compact),
            _ => {}
        }
        steps.push(Checkpoint(round as u64 + 1));
    }
    steps
}

fn fault_options(fs: &FaultFs) -> Options {
    Options {
        memtable_size: 4 << 10,
        target_file_size: 4 << 10,
        // Only the workload's own flushes and compactions: the same operations in the same order every run.
        auto_compaction: false,
        storage: StorageHandle::from(Arc::new(fs.clone())),
        ..options()
    }
}

fn config() -> BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, MAX_P, all())
}

/// An instance whose engine is at `/db` of `fs`, checkpointing into `storage`.
fn instance_on(fs: &FaultFs, storage: &Arc<CheckpointStorage>) -> Result<Inst, keyed_state::Error> {
    let cfg = config();
    let backend = LsmBackend::open("/db", cfg.clone(), fault_options(fs))?;
    let engine = Some(backend.engine());
    Ok(inst_on(Box::new(backend), engine, storage, &cfg, 2))
}

/// Runs `steps` until one fails; returns the model after every completed checkpoint, by id.
fn run(fs: &FaultFs, storage: &Arc<CheckpointStorage>, steps: &[Step]) -> BTreeMap<u64, Model> {
    let mut done = BTreeMap::new();
    let Ok(mut x) = instance_on(fs, storage) else {
        return done;
    };
    let mut model = Model::new();
    for s in steps {
        let ok = match *s {
            Step::Put(k, v) => {
                let ok = x.put(k, v);
                if ok {
                    model.insert(k, v);
                }
                ok
            }
            Step::Flush => x.engine.as_ref().is_some_and(|e| e.flush().is_ok()),
            Step::Compact => x.engine.as_ref().is_some_and(|e| e.compact_all().is_ok()),
            Step::Checkpoint(id) => {
                let r =
                    x.ck.begin(id, x.store.backend_mut())
                        .and_then(|p| p.run())
                        .and_then(|_| x.ck.notify_complete(id));
                if r.is_ok() {
                    done.insert(id, model.clone());
                }
                r.is_ok()
            }
        };
        if !ok {
            break;
        }
    }
    done
}

fn holds(backend: LsmBackend, model: &Model) -> Result<(), String> {
    let cfg = config();
    let mut x = inst_on(
        Box::new(backend),
        None,
        &Arc::new(CheckpointStorage::in_memory().map_err(|e| e.to_string())?),
        &cfg,
        1,
    );
    for (k, v) in model {
        if x.get(*k) != Some(*v) {
            return Err(format!("key {k}: {:?}, {v} expected", x.get(*k)));
        }
    }
    let n = x.store.num_entries().map_err(|e| e.to_string())?;
    if n != model.len() as u64 {
        return Err(format!("{n} entries, {} expected", model.len()));
    }
    Ok(())
}

/// After a crash: the retained completed checkpoints restore to their models (onto the rebooted file
/// system, through a restore that writes through it), the root holds exactly what they reference, and a new
/// run checkpoints again.
fn check_after_crash(
    fs: &FaultFs,
    storage: &Arc<CheckpointStorage>,
    done: &BTreeMap<u64, Model>,
) -> Result<(), String> {
    fs.reboot();
    let newest = done.iter().next_back();
    if let Some((&id, model)) = newest {
        let (b, _) = restore_lsm_temp(storage, id, config(), fault_options(fs))
            .map_err(|e| format!("restore of checkpoint {id}: {e}"))?;
        holds(b, model).map_err(|e| format!("checkpoint {id}: {e}"))?;
    }
    let (objects, refs) = objects_and_references(storage);
    if objects != refs {
        return Err(format!(
            "root holds {} objects, completed checkpoints reference {}",
            objects.len(),
            refs.len()
        ));
    }
    let mut x = instance_on(fs, storage).map_err(|e| format!("reopen: {e}"))?;
    let next = newest.map_or(1, |(id, _)| id + 1);
    x.put(1, -1);
    x.ck.begin(next, x.store.backend_mut())
        .and_then(|p| p.run())
        .map_err(|e| format!("checkpoint after the crash: {e}"))?;
    Ok(())
}

#[test]
fn a_crash_at_every_storage_operation_leaves_every_completed_object_store_checkpoint_restorable() {
    let steps = workload();
    let clean = FaultFs::new();
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let done = run(&clean, &storage, &steps);
    assert_eq!(done.len(), 3, "the clean run completes its checkpoints");
    assert_storage_exact(&storage);
    let total = clean.ops();
    let mut failures = Vec::new();
    for n in 1..=total {
        let fs = FaultFs::new();
        fs.crash_at(n);
        let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
        let done = run(&fs, &storage, &steps);
        assert!(fs.crashed(), "crash point {n} of {total} was reached");
        if let Err(e) = check_after_crash(&fs, &storage, &done) {
            failures.push(format!(
                "crash at op {n} ({} checkpoints done): {e}",
                done.len()
            ));
        }
    }
    eprintln!(
        "campaign crash:object_store_checkpoints crash_points={total} inconsistencies={}",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {total} crash points:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A checkpoint of the workload in `storage`, and the model it holds.
fn checkpointed(storage: &Arc<CheckpointStorage>) -> (u64, Model) {
    let fs = FaultFs::new();
    let done = run(&fs, storage, &workload());
    let (id, model) = done.into_iter().next_back().unwrap();
    (id, model)
}

fn crash_every_restore_operation(storage: &Arc<CheckpointStorage>) -> u64 {
    let (id, model) = checkpointed(storage);
    let clean = FaultFs::new();
    let (b, _) = restore_lsm_temp(storage, id, config(), fault_options(&clean)).unwrap();
    holds(b, &model).unwrap();
    let total = clean.ops();
    assert!(
        total > 10,
        "a restore goes through the storage ({total} operations)"
    );
    for n in 1..=total {
        let fs = FaultFs::new();
        fs.crash_at(n);
        match restore_lsm_temp(storage, id, config(), fault_options(&fs)) {
            // A crash is an error of the engine or of a file, never one of the checkpoint's own.
            Err(e) if !matches!(e, keyed_state::Error::Checkpoint(_)) => {}
            Err(e) => panic!("crash at op {n}: unexpected error kind: {e}"),
            // Operations after the restore's last (the backend's own, at drop) may be the ones that crash.
            Ok((b, _)) => holds(b, &model).unwrap_or_else(|e| panic!("crash at op {n}: {e}")),
        }
        fs.reboot();
        let (b, _) = restore_lsm_temp(storage, id, config(), fault_options(&fs))
            .unwrap_or_else(|e| panic!("restore after a crash at op {n}: {e}"));
        holds(b, &model).unwrap_or_else(|e| panic!("restore after a crash at op {n}: {e}"));
    }
    total
}

#[test]
fn a_crash_at_every_storage_operation_of_a_restore_fails_it_cleanly_and_the_next_restore_holds_the_state(
) {
    let memory = Arc::new(CheckpointStorage::in_memory().unwrap());
    let n = crash_every_restore_operation(&memory);
    let dir = tempfile::tempdir().unwrap();
    let local = Arc::new(CheckpointStorage::local(dir.path()).unwrap());
    let m = crash_every_restore_operation(&local);
    eprintln!(
        "campaign crash:object_store_restores crash_points={} inconsistencies=0",
        n + m
    );
}

#[test]
fn a_restore_onto_a_fault_fs_writes_nothing_to_the_real_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(CheckpointStorage::local(&dir.path().join("root")).unwrap());
    let (id, model) = checkpointed(&storage);
    let fs = FaultFs::new();
    let (b, info) = restore_lsm_temp(&storage, id, config(), fault_options(&fs)).unwrap();
    assert!(info.files_adopted > 0);
    let tmp = b.path().parent().unwrap().to_path_buf();
    assert_eq!(
        files_under(&tmp),
        Vec::<std::path::PathBuf>::new(),
        "the restored engine's files are on the fault-injecting storage, not in {}",
        tmp.display()
    );
    holds(b, &model).unwrap();
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_multipart_upload_streams_its_file_and_a_failed_read_aborts_it() {
    use keyed_state::checkpoint::{Upload, UploadPart, MULTIPART_THRESHOLD};
    use keyed_state::internals::FaultStore;
    use keyed_state_lsm::storage::fault::{Effect, Fault, Op};
    use keyed_state_lsm::storage::Storage;
    use xxhash_rust::xxh3::xxh3_64;

    let fs = FaultFs::new();
    fs.create_dir_all(Path::new("/d")).unwrap();
    let len = MULTIPART_THRESHOLD as usize + 3 * (1 << 20) + 17;
    let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    for name in ["/d/000001.sst", "/d/000003.sst"] {
        fs.create(Path::new(name))
            .unwrap()
            .write_all(&bytes)
            .unwrap();
    }
    let files = keyed_state_lsm::storage::StorageHandle::from(Arc::new(fs.clone()));
    let fault = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
    let storage = CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap();
    let up = |path: &str, file: &str| Upload {
        path: path.into(),
        files: vec![
            UploadPart::File(Path::new(file).into()),
            UploadPart::Bytes(b"tail".to_vec()),
        ],
    };

    // Read 1 MiB at a time (one upload buffer): 9 reads hold the file's 8 MiB and 17 bytes, the size it had
    // when the upload began.
    let ops = fs.ops();
    let r = storage
        .upload_all(vec![up("shared/a", "/d/000001.sst")], files.clone())
        .unwrap();
    assert_eq!(len.div_ceil(1 << 20), 9);
    assert_eq!(fs.ops() - ops, 1 + 1 + 9, "file size, open, reads");
    assert_eq!(fault.multipart_uploads(), 1);
    let got = storage.get("shared/a").unwrap();
    assert_eq!(got.len(), len + 4);
    assert!(got[..len] == bytes[..] && &got[len..] == b"tail");
    assert_eq!(r[0].size, got.len() as u64);
    assert_eq!(r[0].checksum, xxh3_64(&got));
    assert_eq!(
        r[0].files,
        vec![(len as u64, xxh3_64(&bytes)), (4, xxh3_64(b"tail"))]
    );

    // The fifth read of file 3 fails, 4 MiB into it: a typed error naming the file, the upload aborted and
    // no object left; the other upload of the batch, already started, completes.
    fs.inject(Fault {
        op: Op::Read,
        path_contains: "000003".into(),
        skip: 1 + 1 + 4,
        times: 1,
        effect: Effect::Eio,
    });
    let err = storage
        .upload_all(
            vec![
                up("shared/b", "/d/000003.sst"),
                up("shared/c", "/d/000001.sst"),
            ],
            files.clone(),
        )
        .unwrap_err();
    assert!(
        matches!(&err, keyed_state::Error::Io { path, .. } if path.ends_with("000003.sst")),
        "{err}"
    );
    assert_eq!(fault.multipart_uploads(), 3);
    assert_eq!(fault.multipart_aborts(), 1);
    assert_eq!(storage.get("shared/c").unwrap(), got);
    let names: Vec<String> = storage
        .list("shared")
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, vec!["shared/a".to_string(), "shared/c".to_string()]);
}

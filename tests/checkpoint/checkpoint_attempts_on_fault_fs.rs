//! Two attempts of one instance name interleaved at every storage operation of a checkpoint, with both
//! engines on [`FaultFs`] and the root on [`FaultStore`] (`design/checkpoint-fencing.md`, "Tests").
//!
//! * The older attempt (a zombie) stops before each of its checkpoint's file-system calls and store
//!   requests in turn; a successor restores the newest confirmed checkpoint onto its own `FaultFs`,
//!   checkpoints and confirms; then the zombie goes on.
//! * The successor stops before each of its file-system calls and store requests (restore, open,
//!   checkpoint, confirmation) in turn, and the zombie runs a whole checkpoint in between.
//!
//! Every time the job's checkpoints all verify, the successor's confirmed checkpoint restores to its model,
//! and the zombie is fenced or its checkpoint is whole and restores to its own model.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::checkpoint::{restore_lsm_temp, tools, CheckpointStorage};
use keyed_state::internals::FaultStore;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state::ErrorKind;
use keyed_state_lsm::storage::fault::FaultFs;
use keyed_state_lsm::storage::{DirLock, FileBytes, NewFile, Storage, StorageHandle};
use keyed_state_lsm::Options;

type Model = BTreeMap<i64, i64>;

/// A [`FaultFs`] whose `n`-th call (counted from 1) waits until the test resumes it.
#[derive(Debug)]
struct PausingFs {
    fs: FaultFs,
    calls: AtomicU64,
    pause: Mutex<Option<(u64, Sender<()>, Receiver<()>)>>,
}

impl PausingFs {
    fn new(fs: FaultFs) -> Arc<Self> {
        Arc::new(PausingFs {
            fs,
            calls: AtomicU64::new(0),
            pause: Mutex::new(None),
        })
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// As `FaultStore::pause_at`: the receiver hears when call `n` arrives; dropping the sender resumes it.
    fn pause_at(&self, n: u64) -> (Receiver<()>, Sender<()>) {
        let (reached_tx, reached_rx) = channel();
        let (resume_tx, resume_rx) = channel();
        *self.pause.lock().unwrap() = Some((n, reached_tx, resume_rx));
        (reached_rx, resume_tx)
    }

    fn call(&self) {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let pause = {
            let mut p = self.pause.lock().unwrap();
            match &*p {
                Some((at, _, _)) if *at == n => p.take(),
                _ => None,
            }
        };
        if let Some((_, reached, resume)) = pause {
            let _ = reached.send(());
            let _ = resume.recv();
        }
    }
}

impl Storage for PausingFs {
    fn create(&self, path: &Path) -> io::Result<NewFile> {
        self.call();
        self.fs.create(path)
    }
    fn create_or_truncate(&self, path: &Path) -> io::Result<NewFile> {
        self.call();
        self.fs.create_or_truncate(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.call();
        self.fs.read(path)
    }
    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        self.call();
        self.fs.map(path)
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn io::Read + '_>> {
        self.call();
        self.fs.open_read(path)
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.call();
        self.fs.file_size(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.call();
        self.fs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.call();
        self.fs.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.call();
        self.fs.sync_dir(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.call();
        self.fs.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.call();
        self.fs.create_dir_all(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.call();
        self.fs.exists(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.call();
        self.fs.hard_link(from, to)
    }
    fn import(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.call();
        self.fs.import(from, to)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        self.call();
        self.fs.lock(path)
    }
}

fn fs_options(fs: &Arc<PausingFs>) -> Options {
    Options {
        memtable_size: 4 << 10,
        target_file_size: 4 << 10,
        auto_compaction: false,
        storage: StorageHandle::from(Arc::clone(fs)),
        ..options()
    }
}

fn config() -> keyed_state::backend::BackendConfig {
    KeyedStateStore::config_for(&LongSerializer, MAX_P, all())
}

fn round(inst: &mut Inst, model: &mut Model, round: i64, n: i64) {
    for k in 0..n {
        let v = round * 1000 + (k * 7) % 997;
        assert!(inst.put(k, v));
        model.insert(k, v);
    }
}

/// Checkpoint `id` of `job` restores, onto a fresh `FaultFs`, to `model`.
fn restores_to(job: &CheckpointStorage, id: u64, model: &Model) {
    let fs = PausingFs::new(FaultFs::new());
    let (b, _) = restore_lsm_temp(job, id, config(), fs_options(&fs))
        .unwrap_or_else(|e| panic!("restore of checkpoint {id}: {e}"));
    let mut x = inst_on(
        Box::new(b),
        None,
        &Arc::new(CheckpointStorage::in_memory().unwrap()),
        &config(),
        1,
    );
    for (k, v) in model {
        assert_eq!(x.get(*k), Some(*v), "checkpoint {id}, key {k}");
    }
    assert_eq!(x.store.num_entries().unwrap(), model.len() as u64);
}

/// Who stops, and where.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Nobody (the count of the calls and requests).
    Nowhere,
    /// The zombie's checkpoint before its `n`-th file-system call.
    ZombieFs(u64),
    /// The zombie's checkpoint before its `n`-th store request.
    ZombieStore(u64),
    /// The successor before its `n`-th file-system call.
    SuccessorFs(u64),
    /// The successor before its `n`-th store request.
    SuccessorStore(u64),
}

/// What one interleaving did: the calls and requests of the zombie's checkpoint and of the successor,
/// whether the stop was reached, and whether the zombie was fenced.
struct Outcome {
    zombie: (u64, u64),
    successor: (u64, u64),
    reached: bool,
    fenced: bool,
}

struct Zombie {
    inst: Inst,
    fs: Arc<PausingFs>,
    store: FaultStore,
}

/// The zombie: checkpoint 1 confirmed, round 2 written (not checkpointed yet).
fn zombie(inner: &Arc<dyn object_store::ObjectStore>) -> (Zombie, Model, Model) {
    let fs = PausingFs::new(FaultFs::new());
    let store = FaultStore::new(Arc::clone(inner));
    let root = CheckpointStorage::from_store(Arc::new(store.clone()), "", "zombie").unwrap();
    let job = Arc::new(root.job("j").unwrap());
    let backend = LsmBackend::open("/db", config(), fs_options(&fs)).unwrap();
    let engine = Some(backend.engine());
    let mut inst = inst_on(Box::new(backend), engine, &job, &config(), 2);
    let mut model = Model::new();
    round(&mut inst, &mut model, 1, 300);
    inst.engine.as_ref().unwrap().flush().unwrap();
    inst.checkpoint(1);
    inst.ck.notify_complete(1).unwrap();
    let at_one = model.clone();
    round(&mut inst, &mut model, 2, 200);
    (Zombie { inst, fs, store }, at_one, model)
}

/// The zombie's checkpoint 2 and its confirmation.
fn zombie_checkpoint(z: &mut Zombie) -> keyed_state::Result<()> {
    let x = &mut z.inst;
    x.ck.begin(2, x.store.backend_mut())
        .and_then(|p| p.run())
        .and_then(|_| x.ck.notify_complete(2))
}

/// The successor: restores checkpoint 1 onto its own `FaultFs`, checkpoints 5 and confirms it.
fn successor_run(
    fs: &Arc<PausingFs>,
    job: &Arc<CheckpointStorage>,
    mut model: Model,
) -> keyed_state::Result<Model> {
    let (backend, _) = restore_lsm_temp(job, 1, config(), fs_options(fs))?;
    let engine = Some(backend.engine());
    let mut s = inst_on(Box::new(backend), engine, job, &config(), 2);
    round(&mut s, &mut model, 5, 150);
    s.ck.begin(5, s.store.backend_mut())?.run()?;
    s.ck.notify_complete(5)?;
    s.ck.sweep()?;
    Ok(model)
}

/// Waits until `arrived` hears or `done` says the task ended.
fn wait_for(arrived: &Receiver<()>, done: impl Fn() -> bool) -> bool {
    while !done() {
        if arrived.recv_timeout(Duration::from_millis(20)).is_ok() {
            return true;
        }
    }
    arrived.try_recv().is_ok()
}

fn interleave(stop: Stop) -> Outcome {
    let inner: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let (mut z, at_one, zombie_model) = zombie(&inner);
    let sfs = PausingFs::new(FaultFs::new());
    let sstore = FaultStore::new(Arc::clone(&inner));
    let sroot = CheckpointStorage::from_store(Arc::new(sstore.clone()), "", "successor").unwrap();
    let sjob = Arc::new(sroot.job("j").unwrap());
    let check = CheckpointStorage::from_store(Arc::clone(&inner), "", "check")
        .unwrap()
        .job("j")
        .unwrap();
    let (z_fs0, z_st0) = (z.fs.calls(), z.store.requests());
    let (s_fs0, s_st0) = (sfs.calls(), sstore.requests());
    let mut reached = false;
    let (zombie_result, successor_model) = match stop {
        Stop::Nowhere | Stop::ZombieFs(_) | Stop::ZombieStore(_) => {
            let gate = match stop {
                Stop::ZombieFs(n) => Some(z.fs.pause_at(z_fs0 + n)),
                Stop::ZombieStore(n) => Some(z.store.pause_at(z_st0 + n)),
                _ => None,
            };
            let task = std::thread::spawn(move || {
                let r = zombie_checkpoint(&mut z);
                (r, z)
            });
            let mut successor = None;
            if let Some((arrived, _)) = &gate {
                reached = wait_for(arrived, || task.is_finished());
                if reached {
                    successor = Some(successor_run(&sfs, &sjob, at_one.clone()).unwrap());
                }
            }
            drop(gate);
            let (r, back) = task.join().unwrap();
            z = back;
            if successor.is_none() {
                successor = Some(successor_run(&sfs, &sjob, at_one.clone()).unwrap());
            }
            (r, successor)
        }
        Stop::SuccessorFs(_) | Stop::SuccessorStore(_) => {
            let gate = match stop {
                Stop::SuccessorFs(n) => sfs.pause_at(s_fs0 + n),
                Stop::SuccessorStore(n) => sstore.pause_at(s_st0 + n),
                _ => unreachable!(),
            };
            let (fs2, job2, m2) = (Arc::clone(&sfs), Arc::clone(&sjob), at_one.clone());
            let task = std::thread::spawn(move || successor_run(&fs2, &job2, m2));
            reached = wait_for(&gate.0, || task.is_finished());
            let r = zombie_checkpoint(&mut z);
            drop(gate);
            (r, Some(task.join().unwrap().unwrap()))
        }
    };
    let zombie_counts = (z.fs.calls() - z_fs0, z.store.requests() - z_st0);
    let successor_counts = (sfs.calls() - s_fs0, sstore.requests() - s_st0);
    let r = tools::verify(&check, None).unwrap();
    assert!(r.problems.is_empty(), "{stop:?}: {r:?}");
    if let Some(m) = &successor_model {
        restores_to(&check, 5, m);
    }
    let fenced = match zombie_result {
        Ok(()) => {
            restores_to(&check, 2, &zombie_model);
            false
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Busy, "{stop:?}: {e}");
            true
        }
    };
    Outcome {
        zombie: zombie_counts,
        successor: successor_counts,
        reached,
        fenced,
    }
}

#[test]
fn two_attempts_interleaved_at_every_file_system_call_and_request_of_a_checkpoint_lose_nothing() {
    let counts = interleave(Stop::Nowhere);
    let ((zf, zs), (sf, ss)) = (counts.zombie, counts.successor);
    assert!(zf > 0 && zs > 0 && sf > 0 && ss > 0, "{zf} {zs} {sf} {ss}");
    let mut stops = Vec::new();
    stops.extend((1..=zf).map(Stop::ZombieFs));
    stops.extend((1..=zs).map(Stop::ZombieStore));
    stops.extend((1..=sf).map(Stop::SuccessorFs));
    stops.extend((1..=ss).map(Stop::SuccessorStore));
    let (mut fenced, mut completed) = (0u64, 0u64);
    let mut unreached = Vec::new();
    for stop in &stops {
        let o = interleave(*stop);
        if !o.reached {
            // The counts come from a run without interleaving: the engine's background threads make some
            // of the zombie's file-system calls, and the successor's sweep deletes what the zombie left, so
            // the last few stops of a side may lie past its end in an interleaved run.
            unreached.push(*stop);
        }
        if o.fenced {
            fenced += 1;
        } else {
            completed += 1;
        }
    }
    assert!(fenced > 0, "no interleaving fenced the zombie");
    assert!(
        unreached.len() * 4 <= stops.len(),
        "{} stops ({zf} {zs} {sf} {ss}), unreached: {unreached:?}",
        stops.len()
    );
    eprintln!(
        "campaign fencing:attempts_on_fault_fs zombie_fs_calls={zf} zombie_requests={zs} \
         successor_fs_calls={sf} successor_requests={ss} interleavings={} zombie_fenced={fenced} \
         zombie_completed={completed} unreached={} losses=0",
        stops.len(),
        unreached.len()
    );
}

//! The async forms (upload, confirmation, abort, sweep, open, restore, savepoint conversion, gc) awaited
//! from current-thread and multi-thread tokio runtimes on memory, a local directory and S3; and the sweep
//! off the hot path: `begin` goes through while a sweep waits on storage, and a failed sweep is reported
//! apart from the confirmation and retried.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common as checkpoint_common;
#[cfg(feature = "s3")]
use crate::s3 as common_s3;

use checkpoint_common::*;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::StateBackend;
use keyed_state::checkpoint::{
    gc_async, restore_heap_async, restore_lsm_async, restore_lsm_temp_async, to_savepoint_async,
    CheckpointOptions, CheckpointStorage, Checkpointer,
};
use keyed_state::internals::FaultStore;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;

/// Two instances of `kind` (one key-group half each) checkpoint, confirm, abort and sweep through the
/// async forms; checkpoint 3 is restored (LSM: into a directory and a temporary one; heap) and checked
/// against the model, turned into a savepoint, and gc runs. While the first upload is awaited, another task of the same runtime keeps
/// running (the executor thread is not blocked).
fn every_async_form(make: &dyn Fn(&str) -> Arc<CheckpointStorage>, kind: Kind) {
    for (name, rt) in runtimes() {
        rt.block_on(async {
            let storage = make(name);
            let halves = [
                keyed_state::keygroup::KeyGroupRange::new(0, 7),
                keyed_state::keygroup::KeyGroupRange::new(8, 15),
            ];
            let mut insts = Vec::new();
            for range in halves {
                let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, range);
                let backend: Box<dyn StateBackend> = match kind {
                    Kind::Lsm => Box::new(
                        keyed_state::backend::lsm::LsmBackend::temp_with(cfg.clone(), options())
                            .unwrap(),
                    ),
                    _ => Box::new(HeapBackend::new(cfg.clone()).unwrap()),
                };
                let (store, counter) = store_on(backend);
                let ck = Checkpointer::open_async(
                    Arc::clone(&storage),
                    cfg,
                    CheckpointOptions {
                        retain: 2,
                        ..CheckpointOptions::default()
                    },
                )
                .await
                .unwrap();
                insts.push(Inst {
                    store,
                    counter,
                    ck,
                    engine: None,
                });
            }
            let mut model = std::collections::BTreeMap::new();
            for id in 1..=3u64 {
                for x in insts.iter_mut() {
                    for k in 0..400i64 {
                        if x.owns(k) {
                            x.put(k, k * id as i64);
                            model.insert(k, k * id as i64);
                        }
                    }
                }
                for (i, x) in insts.iter_mut().enumerate() {
                    let p = x.ck.begin(id, x.store.backend_mut()).unwrap();
                    if id == 1 && i == 0 {
                        // Another task runs while the upload is awaited.
                        let ticks = Arc::new(AtomicU64::new(0));
                        let stop = Arc::new(AtomicBool::new(false));
                        let ticker = tokio::spawn({
                            let (ticks, stop) = (Arc::clone(&ticks), Arc::clone(&stop));
                            async move {
                                while !stop.load(Ordering::Acquire) {
                                    ticks.fetch_add(1, Ordering::Relaxed);
                                    tokio::task::yield_now().await;
                                }
                            }
                        });
                        let s = p.run_async().await.unwrap();
                        stop.store(true, Ordering::Release);
                        ticker.await.unwrap();
                        assert!(s.files_new > 0, "{name}: {s:?}");
                        // On a current-thread runtime the ticker runs only while the upload is awaited
                        // (a blocking call would leave it none); on a multi-thread one it may run on the
                        // other worker at any time, so there it shows nothing.
                        if name == "current-thread" {
                            assert!(ticks.load(Ordering::Relaxed) > 0, "{name}");
                        }
                    } else {
                        p.run_async().await.unwrap();
                    }
                }
                for x in &insts {
                    if id == 2 {
                        x.ck.notify_aborted_async(id).await.unwrap();
                    } else {
                        x.ck.notify_complete_async(id).await.unwrap();
                    }
                }
            }
            for x in &insts {
                x.ck.sweep_async().await.unwrap();
                assert_eq!(x.ck.retained(), vec![1, 3], "{name}");
                let status = x.ck.wait_for_sweeps();
                assert!(status.last_error.is_none(), "{name}: {status:?}");
            }
            assert_storage_exact(&storage);

            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
            let dir = tempfile::tempdir().unwrap();
            let restored: Box<dyn StateBackend> = match kind {
                Kind::Lsm => {
                    let (b, info) = restore_lsm_async(
                        Arc::clone(&storage),
                        3,
                        dir.path().join("db"),
                        cfg.clone(),
                        options(),
                    )
                    .await
                    .unwrap();
                    assert_eq!(info.parts.len(), 2, "{name}");
                    drop(b);
                    let (b, _) = restore_lsm_temp_async(Arc::clone(&storage), 3, cfg, options())
                        .await
                        .unwrap();
                    Box::new(b)
                }
                _ => {
                    let (h, info) = restore_heap_async(Arc::clone(&storage), 3, cfg)
                        .await
                        .unwrap();
                    assert_eq!(info.parts.len(), 2, "{name}");
                    Box::new(h)
                }
            };
            let (mut r, counter) = store_on(restored);
            for (k, v) in &model {
                r.set_current_key(k).unwrap();
                assert_eq!(
                    r.value(&counter).unwrap().get().unwrap(),
                    Some(*v),
                    "{name}"
                );
            }
            let out = tempfile::tempdir().unwrap();
            to_savepoint_async(Arc::clone(&storage), 3, out.path().join("sp"))
                .await
                .unwrap();
            assert!(out.path().join("sp").exists(), "{name}");
            let report = gc_async(Arc::clone(&storage), 1, false).await.unwrap();
            assert_eq!(report.kept, vec![3], "{name}");
            for x in &insts {
                x.ck.close();
            }
            drop(insts);
            drop(storage);
        });
    }
}

/// A storage in memory whose puts each wait 2 ms on a timer, so that an upload is always awaited: an
/// in-memory put that completes at once would leave the executor no moment to run another task, and the
/// check that one runs while an upload is awaited would depend on the timing of the first poll.
fn slow_memory_storage() -> Arc<CheckpointStorage> {
    use object_store::throttle::{ThrottleConfig, ThrottledStore};
    let config = ThrottleConfig {
        wait_put_per_call: Duration::from_millis(2),
        ..ThrottleConfig::default()
    };
    let store = ThrottledStore::new(object_store::memory::InMemory::new(), config);
    Arc::new(CheckpointStorage::from_store(Arc::new(store), "", "memory:///").unwrap())
}

macro_rules! async_forms_on_every_store {
    ($kind:ident) => {
        #[test]
        fn memory() {
            super::every_async_form(&|_| super::slow_memory_storage(), Kind::$kind);
        }
        #[test]
        fn local_dir() {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_str().unwrap().to_string();
            super::every_async_form(
                &move |flavour| {
                    Arc::new(CheckpointStorage::open(&format!("{root}/{flavour}")).unwrap())
                },
                Kind::$kind,
            );
        }
        #[cfg(feature = "s3")]
        #[test]
        fn s3() {
            let test = concat!("async-forms-", stringify!($kind));
            if super::common_s3::storage(test).is_some() {
                super::every_async_form(
                    &|flavour| super::common_s3::storage(&format!("{test}-{flavour}")).unwrap(),
                    Kind::$kind,
                );
            }
        }
    };
}

mod async_lsm {
    use super::*;
    async_forms_on_every_store!(Lsm);
}

mod async_heap {
    use super::*;
    async_forms_on_every_store!(Heap);
}

/// A storage over a `FaultStore` in memory, and one over the same memory without faults.
fn fault_storage() -> (FaultStore, Arc<CheckpointStorage>, CheckpointStorage) {
    let mem = Arc::new(object_store::memory::InMemory::new());
    let fault = FaultStore::new(mem.clone());
    let storage =
        Arc::new(CheckpointStorage::from_store(Arc::new(fault.clone()), "", "fault").unwrap());
    let plain = CheckpointStorage::from_store(mem, "", "plain").unwrap();
    (fault, storage, plain)
}

/// Writes a round and takes checkpoint `id` (uploaded, not confirmed).
fn written(x: &mut Inst, id: u64) {
    for k in 0..300i64 {
        x.put(k, k + id as i64);
    }
    x.checkpoint(id);
}

#[test]
fn begin_goes_through_while_the_sweep_after_a_confirmation_waits_on_storage() {
    let (fault, storage, _) = fault_storage();
    let mut x = fresh(&storage, all(), 1);
    written(&mut x, 1);
    x.ck.notify_complete(1).unwrap();
    x.ck.wait_for_sweeps();
    written(&mut x, 2);
    // notify_complete makes two requests (the fence check, the deletion of checkpoint 1's metadata); the
    // sweep it queues stops at its first.
    let (reached, resume) = fault.pause_at(fault.requests() + 3);
    x.ck.notify_complete(2).unwrap();
    reached
        .recv_timeout(Duration::from_secs(60))
        .expect("the sweep reached storage");
    assert!(x.ck.sweep_status().pending);
    // The synchronous part of the next checkpoint does not wait for the sweep.
    let (tx, rx) = std::sync::mpsc::channel();
    let ck = x.ck.clone();
    let mut store = x.store;
    let t = std::thread::spawn(move || {
        for k in 0..10i64 {
            store.set_current_key(&k).unwrap();
        }
        let p = ck.begin(3, store.backend_mut());
        tx.send(p.is_ok()).unwrap();
        (store, p)
    });
    let began = rx.recv_timeout(Duration::from_secs(30));
    drop(resume);
    assert_eq!(began, Ok(true), "begin waited for the sweep");
    let (_store, p) = t.join().unwrap();
    p.unwrap().run().unwrap();
    x.ck.notify_complete(3).unwrap();
    let status = x.ck.wait_for_sweeps();
    assert!(status.last_error.is_none(), "{status:?}");
    assert_eq!(x.ck.retained(), vec![3]);
    assert_storage_exact(&storage);
}

#[test]
fn a_failed_sweep_is_reported_apart_from_the_confirmation_and_retried() {
    let (fault, storage, plain) = fault_storage();
    let mut x = fresh(&storage, all(), 1);
    written(&mut x, 1);
    x.ck.notify_complete(1).unwrap();
    x.ck.wait_for_sweeps();
    written(&mut x, 2);
    written(&mut x, 3);
    // notify_complete(3) makes three requests (the fence check, the deletion of the metadata of checkpoint
    // 1, out of retention, and of 2, subsumed); the sweep stops at its first.
    let (reached, resume) = fault.pause_at(fault.requests() + 4);
    // The confirmation took effect: checkpoint 3 is the one retained.
    x.ck.notify_complete(3).unwrap();
    assert_eq!(x.ck.retained(), vec![3]);
    reached.recv_timeout(Duration::from_secs(60)).unwrap();
    // From the sweep's first request on, storage fails.
    fault.fail_from(Some(fault.requests()));
    drop(resume);
    let failed = wait_until(&x.ck, |s| s.failed >= 2);
    assert!(failed.last_error.is_some() && !failed.fenced, "{failed:?}");
    assert!(failed.pending, "a failed sweep is retried: {failed:?}");
    // The metadata of 1 and 2 went with the confirmation; the objects only 2 uploaded are still there
    // (their deletion is the failed sweep's), read past the faults.
    assert!(plain.list("chk-00000000000000000002/").unwrap().is_empty());
    let (objects, refs) = objects_and_references(&plain);
    assert!(objects.len() > refs.len(), "{objects:?} {refs:?}");
    fault.fail_from(None);
    let healed = wait_until(&x.ck, |s| s.last_error.is_none() && !s.pending);
    assert!(healed.succeeded >= 2, "{healed:?}");
    assert_storage_exact(&storage);
}

/// Polls the checkpointer's sweep status until `done` holds (at most 60 s).
fn wait_until(
    ck: &Checkpointer,
    done: impl Fn(&keyed_state::checkpoint::SweepStatus) -> bool,
) -> keyed_state::checkpoint::SweepStatus {
    for _ in 0..6000 {
        let s = ck.sweep_status();
        if done(&s) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("sweep status never got there: {:?}", ck.sweep_status());
}

/// The native async forms' futures can be spawned on a multi-thread runtime (checked when this compiles).
#[test]
fn the_native_async_forms_are_send() {
    fn send<T: Send>(_: &T) {}
    let storage = Arc::new(CheckpointStorage::in_memory().unwrap());
    let mut x = fresh_on(Kind::Heap, &storage, all(), 1);
    x.put(1, 1);
    let p = x.ck.begin(1, x.store.backend_mut()).unwrap();
    let run = p.run_async();
    send(&run);
    send(&x.ck.notify_complete_async(1));
    send(&x.ck.notify_aborted_async(1));
    send(&storage.upload_all_async(Vec::new(), Default::default()));
    send(&storage.list_async(""));
    drop(run);
    x.ck.close();
}

/// Four uploads, then four confirmations, four aborts and a gc, awaited at once on a current-thread runtime with at
/// most one blocking thread, on a `FaultStore` that holds the four data puts until all four have arrived:
/// they get through only if no upload parks a thread of the caller's runtime while it waits on storage
/// (with one blocking thread, the first parked upload would wait forever for the other three). No blocking
/// thread of the caller's runtime starts at all. `kind` is the backend (an LSM backend waits for its flush
/// first, a heap backend serializes its tables).
fn no_thread_of_the_callers_runtime_waits_on_storage(kind: Kind) {
    const N: usize = 4;
    let (fault, storage, _) = fault_storage();
    let quarter = MAX_P as u16 / N as u16;
    let mut insts: Vec<Inst> = (0..N as u16)
        .map(|i| {
            let range =
                keyed_state::keygroup::KeyGroupRange::new(i * quarter, (i + 1) * quarter - 1);
            fresh_on(kind, &storage, range, 2)
        })
        .collect();
    for x in insts.iter_mut() {
        for k in 0..200i64 {
            if x.owns(k) {
                x.put(k, k);
            }
        }
    }
    let started = Arc::new(AtomicU64::new(0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .on_thread_start({
            let started = Arc::clone(&started);
            // A current-thread runtime has no worker threads: every thread it starts is a blocking one.
            move || {
                started.fetch_add(1, Ordering::SeqCst);
            }
        })
        .enable_all()
        .build()
        .unwrap();
    fault.gather_puts("shared/", N);
    let gc_storage = Arc::clone(&storage);
    let (tx, rx) = std::sync::mpsc::channel();
    // On a thread of its own, so that a hang fails the test instead of stopping it.
    std::thread::spawn(move || {
        let r = rt.block_on(async {
            let pending: Vec<_> = insts
                .iter_mut()
                .map(|x| x.ck.begin(1, x.store.backend_mut()).unwrap())
                .collect();
            let sums = futures::future::join_all(pending.into_iter().map(|p| p.run_async())).await;
            for s in &sums {
                assert!(s.as_ref().is_ok_and(|s| s.objects_written == 2), "{s:?}");
            }
            let confirmed =
                futures::future::join_all(insts.iter().map(|x| x.ck.notify_complete_async(1)))
                    .await;
            assert!(confirmed.iter().all(Result::is_ok), "{confirmed:?}");
            // A finished checkpoint aborted: its metadata's deletion is awaited too.
            for x in insts.iter_mut() {
                for k in 0..200i64 {
                    if x.owns(k) {
                        x.put(k, k + 1);
                    }
                }
            }
            let mut second = Vec::new();
            for x in insts.iter_mut() {
                second.push(x.ck.begin(2, x.store.backend_mut()).unwrap());
            }
            futures::future::join_all(second.into_iter().map(|p| p.run_async())).await;
            let aborted =
                futures::future::join_all(insts.iter().map(|x| x.ck.notify_aborted_async(2))).await;
            assert!(aborted.iter().all(Result::is_ok), "{aborted:?}");
            // Gc (a dry run: the sweeps finish later) lists and reads the root the same way.
            let report = gc_async(gc_storage, 1, true).await.unwrap();
            assert_eq!(report.kept, vec![1]);
            insts
        });
        let _ = tx.send(r);
    });
    let insts = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the uploads never all reached storage at once: an upload parked a thread");
    assert_eq!(
        started.load(Ordering::SeqCst),
        0,
        "threads of the caller's runtime were started"
    );
    for x in &insts {
        assert_eq!(x.ck.retained(), vec![1]);
        let status = x.ck.wait_for_sweeps();
        assert!(status.last_error.is_none(), "{status:?}");
    }
    assert_storage_exact(&storage);
}

#[test]
fn uploads_of_an_lsm_backend_park_no_thread_of_the_callers_runtime() {
    no_thread_of_the_callers_runtime_waits_on_storage(Kind::Lsm);
}

#[test]
fn uploads_of_a_heap_backend_park_no_thread_of_the_callers_runtime() {
    no_thread_of_the_callers_runtime_waits_on_storage(Kind::Heap);
}

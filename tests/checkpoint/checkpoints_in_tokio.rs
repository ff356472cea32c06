//! Every checkpoint and restore entry point called from inside a tokio runtime (current-thread and
//! multi-thread), on memory, a local directory and S3, with storages of their own and storages sharing a
//! `StateEnv`'s I/O runtime: no call panics ("Cannot start a runtime from within a runtime", or a runtime
//! dropped in an async context), and each does what it does on a plain thread.

use std::sync::Arc;

use crate::common as checkpoint_common;
#[cfg(feature = "s3")]
use crate::s3 as common_s3;

use checkpoint_common::*;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::StateBackend;
use keyed_state::checkpoint::{
    checkpoint_parts, list_completed, restore_heap, restore_lsm, restore_lsm_temp, to_savepoint,
    tools, CheckpointOptions, CheckpointStorage, Checkpointer, RestoreMode,
};
use keyed_state::env::{StateEnv, StateEnvOptions};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;

/// How a scenario gets its storage: made inside the runtime, and dropped there.
/// Opens a fresh root for one runtime flavour (named by the second argument): ids only grow in a root, and
/// every flavour runs the same ids.
type MakeStorage<'a> = &'a (dyn Fn(&StateEnv, &str) -> Arc<CheckpointStorage> + Sync);

/// Checkpoints, confirms, aborts, restores (LSM into a directory and a temporary one, heap), converts to a
/// savepoint, lists, verifies and collects garbage, all inside an async block of a runtime.
fn every_entry_point(make: MakeStorage<'_>, kind: Kind) {
    for (name, rt) in runtimes() {
        let env = StateEnv::new(StateEnvOptions {
            memory_budget: Some(64 << 20),
            background_threads: 2,
            ..StateEnvOptions::default()
        })
        .unwrap();
        rt.block_on(async {
            let storage = make(&env, name);
            let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
            let backend: Box<dyn StateBackend> = match kind {
                Kind::Lsm => Box::new(env.temp_lsm(cfg.clone(), options()).unwrap()),
                _ => Box::new(HeapBackend::new(cfg.clone()).unwrap()),
            };
            let (mut store, counter) = store_on(backend);
            let ck = Checkpointer::open(
                Arc::clone(&storage),
                &cfg,
                CheckpointOptions {
                    retain: 2,
                    ..CheckpointOptions::default()
                },
            )
            .unwrap();
            for id in 1..=3u64 {
                for k in 0..500i64 {
                    store.set_current_key(&k).unwrap();
                    store
                        .value(&counter)
                        .unwrap()
                        .update(&(k * id as i64))
                        .unwrap();
                }
                let p = store.checkpoint(&ck, id).unwrap();
                let s = p.run().unwrap();
                assert!(s.files_new + s.files_reused > 0, "{name}: {s:?}");
                if id == 2 {
                    ck.notify_aborted(id).unwrap();
                } else {
                    ck.notify_complete(id).unwrap();
                }
            }
            ck.sweep().unwrap();
            assert_eq!(ck.retained(), vec![1, 3], "{name}");
            let listed = list_completed(&storage).unwrap();
            assert!(listed.iter().any(|m| m.checkpoint_id == 3), "{name}");
            assert!(!checkpoint_parts(&storage, 3).unwrap().is_empty(), "{name}");
            tools::verify(&storage, Some(3)).unwrap();

            // Restores, into the environment's engines where the backend is LSM.
            let (mut restored, info): (Box<dyn StateBackend>, _) = match kind {
                Kind::Lsm => {
                    let dir = tempfile::tempdir().unwrap();
                    let (b, i) = restore_lsm(
                        &storage,
                        3,
                        &dir.path().join("db"),
                        cfg.clone(),
                        env.lsm_options(options()),
                    )
                    .unwrap();
                    drop(b);
                    let (b, i2) =
                        restore_lsm_temp(&storage, 3, cfg.clone(), env.lsm_options(options()))
                            .unwrap();
                    assert_eq!(i.parts.len(), i2.parts.len());
                    (Box::new(b), i2)
                }
                _ => {
                    let (b, i) = restore_heap(&storage, 3, cfg.clone()).unwrap();
                    (Box::new(b), i)
                }
            };
            let ck2 = Checkpointer::open(
                Arc::clone(&storage),
                &cfg,
                CheckpointOptions {
                    retain: 2,
                    instance: Some("restored".into()),
                    ..CheckpointOptions::default()
                },
            )
            .unwrap();
            ck2.restored_from(&info.parts, cfg.key_group_range, RestoreMode::NoClaim)
                .unwrap();
            let p = ck2.begin(4, restored.as_mut()).unwrap();
            p.run().unwrap();
            ck2.notify_complete(4).unwrap();
            ck2.close();
            let (mut r, counter) = store_on(restored);
            r.set_current_key(&7).unwrap();
            assert_eq!(
                r.value(&counter).unwrap().get().unwrap(),
                Some(21),
                "{name}"
            );

            let out = tempfile::tempdir().unwrap();
            to_savepoint(&storage, 3, &out.path().join("sp")).unwrap();
            tools::gc(&storage, 1, false).unwrap();
            ck.close();
            drop((ck, ck2, store, r));
            // The storage, and with it (unless shared) its I/O runtime, is dropped inside the runtime.
            drop(storage);
        });
        // The environment (its I/O runtime started inside the runtime) is dropped outside it.
        drop(env);
    }
}

/// A fresh S3 root per runtime flavour, on the storage's own I/O runtime.
#[cfg(feature = "s3")]
fn s3_roots(test: &'static str) -> impl Fn(&StateEnv, &str) -> Arc<CheckpointStorage> + Sync {
    move |_, flavour| common_s3::storage(&format!("{test}-{flavour}")).unwrap()
}

macro_rules! in_tokio_on_every_store {
    ($kind:ident) => {
        #[test]
        fn memory_own_runtime() {
            super::every_entry_point(
                &|_: &StateEnv, _: &str| Arc::new(CheckpointStorage::in_memory().unwrap()),
                Kind::$kind,
            );
        }
        #[test]
        fn local_dir_own_runtime() {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_str().unwrap().to_string();
            super::every_entry_point(
                &move |_: &StateEnv, flavour: &str| {
                    Arc::new(CheckpointStorage::open(&format!("{root}/{flavour}")).unwrap())
                },
                Kind::$kind,
            );
        }
        #[test]
        fn local_dir_on_the_env() {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_str().unwrap().to_string();
            super::every_entry_point(
                &move |env: &StateEnv, flavour: &str| {
                    env.open_storage(&format!("{root}/{flavour}")).unwrap()
                },
                Kind::$kind,
            );
        }
        #[cfg(feature = "s3")]
        #[test]
        fn s3_own_runtime() {
            let test = concat!("in-tokio-", stringify!($kind));
            if super::common_s3::storage(test).is_some() {
                super::every_entry_point(&super::s3_roots(test), Kind::$kind);
            }
        }
    };
}

mod lsm {
    use super::*;
    in_tokio_on_every_store!(Lsm);
}

mod heap {
    use super::*;
    in_tokio_on_every_store!(Heap);
}

#[test]
fn storages_opened_on_one_env_share_its_io_threads() {
    let env = StateEnv::new(StateEnvOptions {
        io_threads: 2,
        ..StateEnvOptions::default()
    })
    .unwrap();
    let dirs: Vec<_> = (0..8).map(|_| tempfile::tempdir().unwrap()).collect();
    let storages: Vec<_> = dirs
        .iter()
        .map(|d| env.open_storage(d.path().to_str().unwrap()).unwrap())
        .collect();
    assert!(
        !env.io().started(),
        "started at the first request, not at open"
    );
    for s in &storages {
        s.put("x", b"y".to_vec()).unwrap();
        assert!(Arc::ptr_eq(s.io(), env.io()));
    }
    assert!(env.io().started());
    assert_eq!(
        env.threads(),
        env.options().background_threads + env.options().io_threads
    );
}

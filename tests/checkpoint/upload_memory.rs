//! Upload buffers come from a pool charged to the memory budget of the environment a storage was opened
//! with: bounded by the budget (with one part guaranteed), shared by the environment's storages, freed
//! after the uploads.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use keyed_state::checkpoint::buffers::{BUFFER_SIZE, GUARANTEED_BUFFERS};
use keyed_state::checkpoint::{
    CheckpointStorage, Upload, UploadPart, MULTIPART_THRESHOLD, PARALLELISM,
};
use keyed_state::env::{StateEnv, StateEnvOptions};
use keyed_state_lsm::storage::{DirLock, FileBytes, NewFile, OsStorage, Storage, StorageHandle};
use keyed_state_lsm::MemoryBudget;

/// The real file system, recording the budget's reserved bytes whenever a file is opened for an upload.
#[derive(Debug)]
struct Recording {
    budget: Arc<MemoryBudget>,
    seen: Mutex<Vec<usize>>,
}

impl Recording {
    fn note(&self) {
        self.seen.lock().unwrap().push(self.budget.reserved_bytes());
    }
}

fn env(budget: usize, upload_buffer_bytes: usize) -> StateEnv {
    StateEnv::new(StateEnvOptions {
        memory_budget: Some(budget),
        background_threads: 1,
        io_threads: 2,
        upload_buffer_bytes,
        ..StateEnvOptions::default()
    })
    .unwrap()
}

fn up(path: &str, parts: Vec<UploadPart>) -> Upload {
    Upload {
        path: path.into(),
        files: parts,
    }
}

/// Writes `n` files of `len` bytes (each its own pattern) under `dir`; returns them with their bytes.
fn files(dir: &Path, name: &str, n: usize, len: usize) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{name}-{i}"));
            let bytes: Vec<u8> = (0..len)
                .map(|j| (j * 31 + i * 7 + j / 4099) as u8)
                .collect();
            std::fs::write(&p, &bytes).unwrap();
            (p, bytes)
        })
        .collect()
}

/// Uploads every file as object `shared/<name>-<i>` and checks what the store holds.
fn upload_and_check(
    storage: &CheckpointStorage,
    name: &str,
    files: &[(std::path::PathBuf, Vec<u8>)],
) {
    let uploads = files
        .iter()
        .enumerate()
        .map(|(i, (p, _))| {
            up(
                &format!("shared/{name}-{i}"),
                vec![UploadPart::File(p.clone())],
            )
        })
        .collect();
    let done = storage.upload_all(uploads, StorageHandle::os()).unwrap();
    for (i, ((_, bytes), u)) in files.iter().zip(&done).enumerate() {
        assert_eq!(u.size, bytes.len() as u64);
        assert_eq!(u.checksum, xxhash_rust::xxh3::xxh3_64(bytes));
        assert_eq!(
            u.files,
            vec![(bytes.len() as u64, xxhash_rust::xxh3::xxh3_64(bytes))]
        );
        assert!(
            storage.get(&format!("shared/{name}-{i}")).unwrap() == *bytes,
            "object {name}-{i} differs from its file"
        );
    }
}

impl Storage for Recording {
    fn create(&self, path: &Path) -> io::Result<NewFile> {
        OsStorage.create(path)
    }
    fn create_or_truncate(&self, path: &Path) -> io::Result<NewFile> {
        OsStorage.create_or_truncate(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.note();
        OsStorage.read(path)
    }
    fn read_append(&self, path: &Path, out: &mut Vec<u8>) -> io::Result<()> {
        self.note();
        OsStorage.read_append(path, out)
    }
    fn map(&self, path: &Path) -> io::Result<FileBytes> {
        OsStorage.map(path)
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn io::Read + '_>> {
        self.note();
        OsStorage.open_read(path)
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        OsStorage.file_size(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsStorage.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        OsStorage.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsStorage.sync_dir(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsStorage.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsStorage.create_dir_all(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        OsStorage.exists(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsStorage.hard_link(from, to)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn DirLock>> {
        OsStorage.lock(path)
    }
}

#[test]
fn upload_buffers_are_charged_to_the_environments_budget_while_they_are_held() {
    let env = env(256 << 20, 32 << 20);
    let dir = tempfile::tempdir().unwrap();
    let storage = env
        .open_storage(dir.path().join("root").to_str().unwrap())
        .unwrap();
    let (small, big) = (dir.path().join("small"), dir.path().join("big"));
    std::fs::write(&small, vec![7u8; 300_000]).unwrap();
    let big_len = MULTIPART_THRESHOLD as usize + (1 << 20);
    std::fs::write(&big, vec![9u8; big_len]).unwrap();
    let files = Arc::new(Recording {
        budget: Arc::clone(env.memory()),
        seen: Mutex::new(Vec::new()),
    });
    let handle = StorageHandle::new(Arc::clone(&files) as Arc<dyn Storage>);

    // A small object is read whole into one buffer, charged before the read.
    let done = storage
        .upload_all(
            vec![up(
                "shared/a",
                vec![
                    UploadPart::File(small.clone()),
                    UploadPart::Bytes(vec![1u8; 1000]),
                ],
            )],
            handle.clone(),
        )
        .unwrap();
    assert_eq!(done[0].size, 301_000);
    assert_eq!(*files.seen.lock().unwrap(), vec![BUFFER_SIZE]);
    assert_eq!(
        env.memory().reserved_bytes(),
        0,
        "given back after the upload"
    );

    // A large one is streamed in parts: what is charged is the buffers of the parts in flight, not the
    // object.
    files.seen.lock().unwrap().clear();
    storage
        .upload_all(vec![up("shared/b", vec![UploadPart::File(big)])], handle)
        .unwrap();
    let seen = files.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let most = (PARALLELISM + 1) * storage.part_size();
    assert!(
        seen[0] >= BUFFER_SIZE && seen[0] <= most && seen[0] < big_len,
        "charged {} for parts of at most {most}",
        seen[0]
    );
    assert!(env.upload_buffers().stats().peak_buffers * BUFFER_SIZE <= most);
    assert_eq!(storage.get("shared/b").unwrap(), vec![9u8; big_len]);
    assert_eq!(env.memory().reserved_bytes(), 0);
    assert_eq!(env.memory_usage().other_reserved(), 0);
}

#[test]
fn an_upload_waits_for_the_budget_and_proceeds_when_room_appears() {
    let env = env(32 << 20, 32 << 20);
    let pool = Arc::clone(env.upload_buffers());
    // Something else takes the whole budget.
    let filler = env.memory().reserve(32 << 20);
    let room_made = Arc::new(std::sync::atomic::AtomicBool::new(false));
    env.io()
        .block_on(|| async {
            // One part is guaranteed, budget or not.
            let first = pool.acquire(GUARANTEED_BUFFERS).await;
            assert_eq!(pool.charged(), GUARANTEED_BUFFERS * BUFFER_SIZE);
            // More waits (and a wait given up leaves nothing behind).
            assert!(
                tokio::time::timeout(Duration::from_millis(200), pool.acquire(1))
                    .await
                    .is_err(),
                "a buffer beyond the guaranteed part was made with the budget full"
            );
            assert_eq!(pool.stats().buffers, GUARANTEED_BUFFERS);
            // Room appears (the other user lets go): the waiting upload proceeds while `first` is held.
            let room = Arc::clone(&room_made);
            let freer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                room.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(filler);
            });
            let t = Instant::now();
            let second = tokio::time::timeout(Duration::from_secs(10), pool.acquire(3))
                .await
                .expect("the upload did not proceed when room appeared");
            assert!(room_made.load(std::sync::atomic::Ordering::SeqCst));
            assert!(t.elapsed() >= Duration::from_millis(90));
            assert_eq!(second.len(), 3);
            assert_eq!(pool.charged(), (GUARANTEED_BUFFERS + 3) * BUFFER_SIZE);
            freer.join().unwrap();
            drop((first, second));
        })
        .unwrap();
    // Nothing leased: the pool frees everything when told the uploads ended.
    pool.trim();
    assert_eq!(pool.charged(), 0);
    assert_eq!(env.memory().reserved_bytes(), 0);
}

/// A waker that counts its wakes.
struct CountWakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_waiting_upload_is_woken_the_moment_room_is_given_back() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let env = env(32 << 20, 32 << 20);
    let pool = Arc::clone(env.upload_buffers());
    let filler = env.memory().reserve(32 << 20);
    // Polled by hand in a runtime's context: no timer of the runtime runs in between.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();
    let wakes = Arc::new(CountWakes(std::sync::atomic::AtomicUsize::new(0)));
    let waker = std::task::Waker::from(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    let mut first = Box::pin(pool.acquire(GUARANTEED_BUFFERS));
    let Poll::Ready(first) = first.as_mut().poll(&mut cx) else {
        panic!("the guaranteed part waited");
    };
    let mut waiting = Box::pin(pool.acquire(2));
    assert!(waiting.as_mut().poll(&mut cx).is_pending());
    assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    drop(filler);
    assert!(
        wakes.0.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "giving the reservation back did not wake the waiting upload"
    );
    let Poll::Ready(second) = waiting.as_mut().poll(&mut cx) else {
        panic!("woken, the upload still found no room");
    };
    assert_eq!(second.len(), 2);
    drop((first, second));
}

#[test]
fn a_returned_buffer_goes_to_the_upload_that_waited_first() {
    let env = env(16 << 20, 32 << 20);
    let pool = Arc::clone(env.upload_buffers());
    let _filler = env.memory().reserve(16 << 20);
    env.io()
        .block_on(|| async {
            let held = pool.acquire(GUARANTEED_BUFFERS).await;
            let order = Arc::new(Mutex::new(Vec::new()));
            let waiter = |name: &'static str, n: usize| {
                let pool = Arc::clone(&pool);
                let order = Arc::clone(&order);
                tokio::spawn(async move {
                    let lease = pool.acquire(n).await;
                    order.lock().unwrap().push(name);
                    drop(lease);
                })
            };
            let big = waiter("five", GUARANTEED_BUFFERS);
            tokio::time::sleep(Duration::from_millis(50)).await;
            let small = waiter("one", 1);
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                order.lock().unwrap().is_empty(),
                "served with the budget full"
            );
            drop(held);
            big.await.unwrap();
            small.await.unwrap();
            assert_eq!(*order.lock().unwrap(), vec!["five", "one"]);
        })
        .unwrap();
    assert_eq!(pool.stats().peak_buffers, GUARANTEED_BUFFERS);
}

#[test]
fn with_the_budget_full_uploads_go_on_with_the_guaranteed_part() {
    let env = env(16 << 20, 32 << 20);
    let _filler = env.memory().reserve(16 << 20);
    let dir = tempfile::tempdir().unwrap();
    let storage = env
        .open_storage(dir.path().join("root").to_str().unwrap())
        .unwrap();
    let fs = files(dir.path(), "f", 6, 3 * (1 << 20) + 12345);
    upload_and_check(&storage, "f", &fs);
    let stats = env.upload_buffers().stats();
    assert!(
        stats.peak_buffers <= GUARANTEED_BUFFERS,
        "{stats:?}: more than the guaranteed part with the budget full"
    );
    assert_eq!(env.upload_buffers().charged(), 0);
}

#[test]
fn two_checkpointers_on_one_env_share_the_bound() {
    // Room in the budget for plenty; the environment's bound (8 buffers) is what limits.
    let env = env(256 << 20, 8 << 20);
    let dir = tempfile::tempdir().unwrap();
    let storages: Vec<_> = (0..2)
        .map(|i| {
            env.open_storage(dir.path().join(format!("root-{i}")).to_str().unwrap())
                .unwrap()
        })
        .collect();
    assert!(Arc::ptr_eq(storages[0].buffers(), storages[1].buffers()));
    let fs: Vec<_> = (0..2)
        .map(|i| files(dir.path(), &format!("c{i}"), 4, 6 * (1 << 20) + 999))
        .collect();
    std::thread::scope(|s| {
        for (i, (storage, fs)) in storages.iter().zip(&fs).enumerate() {
            s.spawn(move || upload_and_check(storage, &format!("c{i}"), fs));
        }
    });
    let stats = env.upload_buffers().stats();
    assert_eq!(env.upload_buffers().max_buffers(), 8);
    assert!(stats.peak_buffers <= 8, "{stats:?}");
    assert_eq!(env.upload_buffers().charged(), 0);
    assert_eq!(env.memory().reserved_bytes(), 0);
}

#[test]
fn a_checkpoint_of_a_backend_whose_memtables_fill_the_budget_completes() {
    use crate::common::{all, options, store_on, MAX_P};
    use keyed_state::backend::StateBackend;
    use keyed_state::checkpoint::{CheckpointOptions, Checkpointer};
    use keyed_state::serializer::LongSerializer;
    use keyed_state::state::KeyedStateStore;

    // Memtables may take the whole (small) budget.
    let env = StateEnv::new(StateEnvOptions {
        memory_budget: Some(4 << 20),
        write_buffer_ratio: 1.0,
        background_threads: 1,
        io_threads: 1,
        ..StateEnvOptions::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let storage = env
        .open_storage(dir.path().join("root").to_str().unwrap())
        .unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, MAX_P, all());
    let backend: Box<dyn StateBackend> = Box::new(env.temp_lsm(cfg.clone(), options()).unwrap());
    let (mut store, counter) = store_on(backend);
    let ck = Checkpointer::open(Arc::clone(&storage), &cfg, CheckpointOptions::default()).unwrap();
    for id in 1..=2u64 {
        for k in 0..60_000i64 {
            store.set_current_key(&k).unwrap();
            store
                .value(&counter)
                .unwrap()
                .update(&(k ^ id as i64))
                .unwrap();
        }
        let s = store.checkpoint(&ck, id).unwrap().run().unwrap();
        assert!(s.files_new > 0, "{s:?}");
        ck.notify_complete(id).unwrap();
    }
    let stats = env.upload_buffers().stats();
    assert!(stats.peak_buffers >= 1, "{stats:?}");
    assert_eq!(env.upload_buffers().charged(), 0);
}

/// The S3 root of a test on the environment's upload buffers, or `None` without the test server.
#[cfg(feature = "s3")]
fn s3_storage(env: &StateEnv, test: &str) -> Option<Arc<CheckpointStorage>> {
    let ep = crate::s3::endpoint(test)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let root = format!(
        "s3://{}/{test}-{}-{nanos}",
        crate::s3::bucket(),
        std::process::id()
    );
    let s = crate::s3::settings(&ep);
    let s: Vec<(&str, &str)> = s.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Some(env.open_storage_with(&root, &s).unwrap())
}

#[cfg(feature = "s3")]
#[test]
fn on_s3_with_the_budget_full_uploads_go_on_in_parts_of_the_guaranteed_size() {
    let env = env(16 << 20, 32 << 20);
    let Some(storage) = s3_storage(&env, "upload-full-budget") else {
        return;
    };
    assert_eq!(storage.part_size(), keyed_state::checkpoint::PART_SIZE);
    let _filler = env.memory().reserve(16 << 20);
    let dir = tempfile::tempdir().unwrap();
    // Multipart (three parts, the last short) and whole objects.
    let mut fs = files(dir.path(), "m", 2, 2 * storage.part_size() + 4321);
    fs.extend(files(dir.path(), "w", 2, 300_000));
    upload_and_check(&storage, "s", &fs);
    let stats = env.upload_buffers().stats();
    assert!(stats.peak_buffers <= GUARANTEED_BUFFERS, "{stats:?}");
    assert_eq!(env.upload_buffers().charged(), 0);
}

#[test]
fn a_store_that_keeps_what_it_was_given_gets_copies_and_the_buffers_come_back() {
    // The in-memory store keeps a put's bytes as they were handed to it.
    let env = env(64 << 20, 8 << 20);
    let storage = CheckpointStorage::in_memory()
        .unwrap()
        .with_memory(Arc::clone(env.memory()));
    let dir = tempfile::tempdir().unwrap();
    // More objects than the pool has buffers: kept buffers would leave the last uploads waiting forever.
    let fs = files(dir.path(), "k", 12, 700_000);
    upload_and_check(&storage, "k", &fs);
    assert_eq!(storage.buffers().charged(), 0);
    assert_eq!(env.memory().reserved_bytes(), 0);
}

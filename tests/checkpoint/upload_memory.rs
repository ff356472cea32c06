//! Upload buffers are charged to the memory budget of the environment a storage was opened with, for as
//! long as an upload holds them, and given back after.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use keyed_state::checkpoint::{Upload, UploadPart, MULTIPART_THRESHOLD, PARALLELISM, PART_SIZE};
use keyed_state::env::{StateEnv, StateEnvOptions};
use keyed_state_lsm::storage::{DirLock, FileBytes, NewFile, OsStorage, Storage, StorageHandle};
use keyed_state_lsm::MemoryBudget;

/// The real file system, recording the budget's reserved bytes whenever a file is read for an upload.
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
    let env = StateEnv::new(StateEnvOptions {
        memory_budget: Some(256 << 20),
        background_threads: 1,
        io_threads: 1,
        ..StateEnvOptions::default()
    })
    .unwrap();
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
    let up = |path: &str, parts: Vec<UploadPart>| Upload {
        path: path.into(),
        files: parts,
    };

    // A small object is read whole: its bytes (both parts) are charged before the first read.
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
    assert_eq!(*files.seen.lock().unwrap(), vec![301_000]);
    assert_eq!(
        env.memory().reserved_bytes(),
        0,
        "given back after the upload"
    );

    // A large one is streamed: what is charged is the parts it may hold, not the object.
    files.seen.lock().unwrap().clear();
    storage
        .upload_all(vec![up("shared/b", vec![UploadPart::File(big)])], handle)
        .unwrap();
    let seen = files.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let parts = ((PARALLELISM + 1) * PART_SIZE).min(big_len);
    assert!(
        seen[0] > parts && seen[0] <= parts + (2 << 20),
        "charged {} for parts of {parts}",
        seen[0]
    );
    assert_eq!(env.memory().reserved_bytes(), 0);
    assert_eq!(env.memory_usage().other_reserved(), 0);
}

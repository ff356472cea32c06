//! An open never deletes what it cannot prove obsolete (`design/durability.md`, "What an open deletes"): a
//! directory whose `CURRENT` is gone is a corruption error naming the directory and what it holds, with and
//! without `create_if_missing`, through `Db::open` and `LsmBackend::open_checkpoint`; the leftovers of an
//! open go only once it has succeeded; an adoption refuses a directory holding a database.

use std::collections::BTreeMap;
use std::path::Path;

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state_lsm::storage::OsStorage;
use keyed_state_lsm::{adopt_sst_files, AdoptFile, Db, ErrorKind, LsmError, Options};

/// Every file of `dir` with its bytes (the lock file aside).
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.ends_with("LOCK"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// Options with a synced write-ahead log.
fn logged() -> Options {
    Options {
        wal: true,
        wal_sync: true,
        ..Options::default()
    }
}

/// A closed database of two flushed SSTs and an unflushed log.
fn database(dir: &Path) {
    let db = Db::open(dir, logged()).unwrap();
    for round in 0..2u8 {
        for i in 0..100u32 {
            db.put(format!("k{i:04}").as_bytes(), &[round]).unwrap();
        }
        db.flush().unwrap();
    }
    db.put(b"unflushed", b"1").unwrap();
    db.abandon();
}

fn without_current(create_if_missing: bool) {
    let dir = tempfile::tempdir().unwrap();
    database(dir.path());
    std::fs::remove_file(dir.path().join("CURRENT")).unwrap();
    let before = contents(dir.path());
    assert!(before.keys().filter(|n| n.ends_with(".sst")).count() >= 2);
    let opts = Options {
        create_if_missing,
        ..Options::default()
    };
    match Db::open(dir.path(), opts) {
        Err(e @ LsmError::MissingCurrent { .. }) => {
            assert_eq!(e.kind(), ErrorKind::Corruption);
            let text = e.to_string();
            assert!(text.contains(&dir.path().display().to_string()), "{text}");
            assert!(
                text.contains(".sst") && text.contains("MANIFEST-"),
                "{text}"
            );
            assert!(text.contains("nothing was deleted"), "{text}");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("opened a database without CURRENT as a new one"),
    }
    assert_eq!(
        contents(dir.path()),
        before,
        "the failed open deleted or changed files"
    );
}

#[test]
fn a_missing_current_with_engine_files_is_a_corruption_error_that_deletes_nothing() {
    without_current(true);
}

#[test]
fn a_missing_current_is_the_same_error_without_create_if_missing() {
    without_current(false);
}

#[test]
fn a_creation_cut_off_before_current_opens_as_a_new_database_and_its_manifest_goes() {
    // What a crash between the first manifest and CURRENT leaves: a manifest naming no file.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.abandon();
    std::fs::remove_file(dir.path().join("CURRENT")).unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let left: Vec<String> = contents(dir.path()).into_keys().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("MANIFEST-"));
    let strict = Options {
        create_if_missing: false,
        ..Options::default()
    };
    match Db::open(dir.path(), strict) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotFound, "{e}"),
        Ok(_) => panic!("created a database with create_if_missing off"),
    }
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.close().unwrap();
    assert!(!contents(dir.path()).contains_key(&left[0]));
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"a").unwrap().unwrap().as_ref(), b"1");
}

#[test]
fn leftovers_are_deleted_only_after_the_open_succeeded() {
    let dir = tempfile::tempdir().unwrap();
    database(dir.path());
    // A leftover SST the manifest does not name, and a log damaged in the middle (strict recovery fails).
    let leftover = dir.path().join("000999.sst");
    std::fs::write(&leftover, b"not named by the manifest").unwrap();
    let log = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .unwrap();
    let good = std::fs::read(&log).unwrap();
    let mut bad = good.clone();
    let at = bad.windows(9).position(|w| w == b"unflushed").unwrap();
    bad[at] ^= 1;
    // A second, newer log makes the damaged one an older log: an error, not a torn tail.
    std::fs::write(&log, &bad).unwrap();
    let newer = dir.path().join("001000.log");
    std::fs::copy(&log, &newer).unwrap();
    std::fs::write(&newer, &good[..16.min(good.len())]).unwrap();
    let before = contents(dir.path());
    let err = Db::open(dir.path(), logged()).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    assert_eq!(contents(dir.path()), before, "a failed open deleted files");
    // Repaired, the open succeeds and only then removes what the manifest proves obsolete.
    std::fs::write(&log, &good).unwrap();
    std::fs::remove_file(&newer).unwrap();
    let db = Db::open(dir.path(), logged()).unwrap();
    assert_eq!(db.get(b"unflushed").unwrap().unwrap().as_ref(), b"1");
    assert_eq!(db.get(b"k0007").unwrap().unwrap().as_ref(), [1]);
    assert!(
        !leftover.exists(),
        "the unnamed SST is obsolete once the open succeeded"
    );
}

#[test]
fn an_adoption_refuses_a_directory_holding_a_database() {
    let dir = tempfile::tempdir().unwrap();
    database(dir.path());
    let before = contents(dir.path());
    let sst: u64 = before
        .keys()
        .find_map(|n| n.strip_suffix(".sst")?.parse().ok())
        .unwrap();
    let files = [AdoptFile {
        level: 1,
        number: sst,
        bounds: None,
    }];
    let err = adopt_sst_files(&OsStorage, dir.path(), &files, 0, 4).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("would orphan"), "{err}");
    assert_eq!(contents(dir.path()), before);
    let db = Db::open(dir.path(), logged()).unwrap();
    assert_eq!(db.get(b"unflushed").unwrap().unwrap().as_ref(), b"1");
}

#[test]
fn open_checkpoint_of_a_directory_without_current_fails_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = KeyedStateStore::config_for(&LongSerializer, 16, KeyGroupRange::all(16));
    let src = LsmBackend::temp(cfg.clone()).unwrap();
    let engine = src.engine();
    let mut store = KeyedStateStore::new(Box::new(src), LongSerializer).unwrap();
    let st = store
        .register_value(keyed_state::state::ValueStateDescriptor::new(
            "v",
            LongSerializer,
        ))
        .unwrap();
    for k in 0..200i64 {
        store.set_current_key(&k).unwrap();
        store.value(&st).unwrap().update(&k).unwrap();
    }
    let target = dir.path().join("ckpt");
    let states = store.states().to_vec();
    store.backend_mut().write_back().unwrap();
    engine.checkpoint(&target).unwrap();
    std::fs::remove_file(target.join("CURRENT")).unwrap();
    let before = contents(&target);
    let err = LsmBackend::open_checkpoint(&target, cfg, states, Options::default())
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    assert!(err.to_string().contains("no CURRENT"), "{err}");
    assert_eq!(contents(&target), before);
}

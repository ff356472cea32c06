//! Recovery from damaged files: a manifest whose record framing is damaged is an error, never a shorter tree
//! opened as if nothing happened; the on-disk formats of every version still open (fixtures in
//! `tests/fixtures/lsm-db-v*/`).

use std::path::{Path, PathBuf};

use keyed_state_lsm::{Db, Options, ReadOptions};

const KEYS: usize = 30_000;

fn key(i: usize) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    format!("value-{i}-{}", i * 7919 % 1000).into_bytes()
}

/// A directory holding `KEYS` keys, flushed and fully compacted, closed.
fn compacted_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for i in 0..KEYS {
        db.put(&key(i), &value(i)).unwrap();
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    db.close().unwrap();
    dir
}

fn file_named(dir: &Path, prefix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap()
}

/// A copy of `src` in a fresh directory: SST files hard-linked (open never writes them), the rest copied.
fn trial_copy(src: &Path) -> tempfile::TempDir {
    let dst = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_owned();
        if name == "LOCK" {
            continue;
        }
        if p.extension().is_some_and(|x| x == "sst") {
            std::fs::hard_link(&p, dst.path().join(&name)).unwrap();
        } else {
            std::fs::copy(&p, dst.path().join(&name)).unwrap();
        }
    }
    dst
}

/// Every key with its value, read one by one and by a full scan; `None` if the database reports an error.
fn missing_or_wrong(db: &Db) -> Option<usize> {
    let mut bad = 0;
    for i in 0..KEYS {
        match db.get(&key(i)) {
            Ok(Some(v)) if v.as_ref() == value(i).as_slice() => {}
            Ok(_) => bad += 1,
            Err(_) => return None,
        }
    }
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        if n >= KEYS || it.key() != key(n).as_slice() || it.value() != value(n).as_slice() {
            bad += 1;
        }
        n += 1;
        it.next();
    }
    if it.status().is_err() {
        return None;
    }
    Some(bad + KEYS.saturating_sub(n))
}

#[test]
fn no_single_bit_flip_in_the_manifest_head_opens_with_keys_missing() {
    let base = compacted_db();
    let manifest = file_named(base.path(), "MANIFEST-");
    let name = manifest.file_name().unwrap().to_owned();
    let bytes = std::fs::read(&manifest).unwrap();
    let opts = Options {
        auto_compaction: false,
        ..Options::default()
    };
    let (mut detected, mut harmless, mut wrong) = (0, 0, Vec::new());
    for byte in 0..bytes.len().min(120) {
        for bit in 0..8 {
            let trial = trial_copy(base.path());
            let mut b = bytes.clone();
            b[byte] ^= 1 << bit;
            std::fs::write(trial.path().join(&name), &b).unwrap();
            match Db::open(trial.path(), opts.clone()) {
                Err(_) => detected += 1,
                Ok(db) => match missing_or_wrong(&db) {
                    None => detected += 1,
                    Some(0) => harmless += 1,
                    Some(n) => wrong.push((byte, bit, n)),
                },
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} flips opened with keys missing or wrong and no error (byte, bit, bad keys): {wrong:?} \
         ({detected} detected, {harmless} harmless)",
        wrong.len(),
        detected + harmless + wrong.len()
    );
}

/// The contents of every format fixture: what [`write_format_fixture`] leaves after its last write.
fn fixture_expected() -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = std::collections::BTreeMap::new();
    for i in 0..300usize {
        m.insert(
            format!("k{i:04}").into_bytes(),
            format!("v{i}").into_bytes(),
        );
    }
    for i in 10..20usize {
        m.remove(format!("k{i:04}").as_bytes());
    }
    m.remove(b"k0250".as_slice());
    m.insert(b"k0001".to_vec(), b"rewritten".to_vec());
    m
}

/// Writes a format fixture into `dir`: keys `k0000..k0199` flushed to an SST, a range delete of
/// `k0010..k0020` flushed too, then `k0200..k0299`, a delete and an overwrite left in the WAL only (the
/// handle is abandoned, as in a crash, so nothing of that is flushed).
fn write_format_fixture(dir: &Path) {
    let opts = Options {
        wal: true,
        wal_sync: true,
        ..Options::default()
    };
    let db = Db::open(dir, opts).unwrap();
    for i in 0..200usize {
        db.put(format!("k{i:04}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
    db.flush().unwrap();
    db.delete_range(b"k0010", b"k0020").unwrap();
    db.flush().unwrap();
    for i in 200..300usize {
        db.put(format!("k{i:04}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
    db.delete(b"k0250").unwrap();
    db.put(b"k0001", b"rewritten").unwrap();
    db.abandon();
    let _ = std::fs::remove_file(dir.join("LOCK"));
}

/// Regenerates a fixture of the format this build writes: `KEYED_STATE_WRITE_FIXTURE=<dir> cargo test
/// --test lsm_recovery write_fixture -- --ignored` (the directory must not exist).
#[test]
#[ignore = "writes a fixture when asked to"]
fn write_fixture() {
    let dir = PathBuf::from(std::env::var("KEYED_STATE_WRITE_FIXTURE").unwrap());
    assert!(!dir.exists(), "{} exists", dir.display());
    write_format_fixture(&dir);
}

/// Opens a copy of fixture `name` and checks every key, by point reads and by a scan.
fn check_fixture(name: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap();
        if file != "README.md" {
            std::fs::copy(&p, dir.path().join(file)).unwrap();
        }
    }
    let expected = fixture_expected();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for (k, v) in &expected {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "{k:?}");
    }
    for i in 10..20usize {
        assert!(db.get(format!("k{i:04}").as_bytes()).unwrap().is_none());
    }
    let mut it = db.iter(ReadOptions::default());
    it.seek_to_first();
    let mut got = std::collections::BTreeMap::new();
    while it.valid() {
        got.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    assert!(it.status().is_ok());
    assert_eq!(got, expected);
    // Reopened after recovery (the open rewrote the manifest in this build's format), the same.
    drop(db);
    let manifest = std::fs::read(file_named(dir.path(), "MANIFEST-")).unwrap();
    assert_eq!(&manifest[..8], b"KSTMAN\0\0");
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for (k, v) in &expected {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "{k:?}");
    }
}

#[test]
fn a_format_1_directory_opens_with_all_its_keys() {
    check_fixture("lsm-db-v1");
}

#[test]
fn a_format_2_directory_opens_with_all_its_keys() {
    check_fixture("lsm-db-v2");
}

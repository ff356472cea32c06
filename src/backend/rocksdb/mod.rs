//! The RocksDB-backed variant of [`StateBackend`] (cargo feature `rocksdb`): the benchmark yardstick, and a
//! backend users may choose.
//!
//! It is configured the way Flink configures RocksDB (`EmbeddedRocksDBStateBackend` with `PredefinedOptions.DEFAULT`):
//! one column family per state, entries in Flink's working-state layout (`crate::layout`), a list-append
//! merge operator named `stringappendtest` that joins with `0x2C`, the write-ahead log off and no fsync.
//! See `design/rocksdb-backend.md` for the mapping to Flink's options and what differs.
//!
//! * **Column families.** The column family of a state is named by the state name, except that the names
//!   `default` (RocksDB's own column family, which Flink rejects) and names starting with
//!   [`ESCAPED_CF_PREFIX`] are stored as `ESCAPED_CF_PREFIX + name`. The mapping is injective.
//! * **Snapshots.** [`StateBackend::snapshot`] takes a RocksDB snapshot (a sequence number: O(1)) and hands
//!   it out together with a strong reference to the database, so the savepoint encoder can iterate it on
//!   any thread while the backend keeps writing.
//! * **Restore.** Restored entries are buffered per state and written as SST files (`SstFileWriter`) that
//!   are ingested into the state's column family, instead of going through the memtable.
//!
//! Modules: `options` (the settings and how they map to RocksDB's), `backend` (the [`StateBackend`]
//! implementation), `load` (restore through SST ingestion), `snapshot` ([`RocksDbSnapshot`]), `capture`
//! (the synchronous part of an incremental checkpoint: RocksDB's own checkpoint; restoring one is
//! `checkpoint::restore_rocksdb`'s), `engine` ([`RocksDbEngine`]), `ttl_filter` (the TTL compaction filter),
//! `shared` ([`RocksDbShared`]: one cache and one write-buffer manager for many backends, as Flink's
//! managed memory).

mod backend;
mod capture;
mod engine;
mod load;
mod options;
mod shared;
mod snapshot;
mod ttl_filter;

pub use backend::RocksDbBackend;
pub use engine::RocksDbEngine;
pub use options::{RocksDbCompression, RocksDbOptions};
pub use shared::{RocksDbShared, FLINK_WRITE_BUFFER_RATIO};
pub use snapshot::RocksDbSnapshot;

use std::sync::Arc;

use rocksdb::{BoundColumnFamily, DBWithThreadMode, MergeOperands, MultiThreaded, Options};

use crate::backend::StateId;
use crate::error::{Error, Result};
use crate::layout::LIST_DELIMITER;

/// The RocksDB database type: multi-threaded column-family handling, so column families can be created
/// through the shared (`Arc`) handle that open snapshots also hold.
type Db = DBWithThreadMode<MultiThreaded>;

/// The name of the merge operator, as Flink sets it (`RocksDBKeyedStateBackend.MERGE_OPERATOR_NAME`).
pub const MERGE_OPERATOR_NAME: &str = "stringappendtest";

/// Prefix of column-family names for states named `default` (or names that start with this prefix).
pub const ESCAPED_CF_PREFIX: &str = "_keyed-state/";

/// The merge operator: RocksDB's `stringappendtest` with delimiter `0x2C`. Joins the existing value and the
/// operands, in order, with one delimiter between non-empty parts (so the result is the list's elements
/// joined, as the heap backend's `append` builds them). Associative, so it also serves as partial merge.
fn string_append(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &MergeOperands,
) -> Option<Vec<u8>> {
    let len = existing.map_or(0, <[u8]>::len) + operands.iter().map(|o| o.len() + 1).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    for part in existing.into_iter().chain(operands.iter()) {
        if part.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(LIST_DELIMITER);
        }
        out.extend_from_slice(part);
    }
    Some(out)
}

/// The column-family name of a state (see the module doc).
pub fn column_family_name(state_name: &str) -> String {
    if state_name == rocksdb::DEFAULT_COLUMN_FAMILY_NAME
        || state_name.starts_with(ESCAPED_CF_PREFIX)
    {
        format!("{ESCAPED_CF_PREFIX}{state_name}")
    } else {
        state_name.to_string()
    }
}

/// Maps a RocksDB error into [`Error::RocksDb`].
fn rdb_error(context: impl Into<String>, e: rocksdb::Error) -> Error {
    Error::RocksDb {
        context: context.into(),
        detail: e.into_string(),
    }
}

/// The database, the column-family options (with the block cache and merge operator they reference) and, for
/// a temporary backend, its directory. Field order matters: the database is closed first, and the directory
/// is removed last. Shared by the backend and its open snapshots.
struct DbHolder {
    db: Db,
    cf_options: Options,
    /// The column families created so far, in state-id order (for [`RocksDbEngine`]'s summary).
    cf_names: parking_lot::Mutex<Vec<String>>,
    _dir: Option<tempfile::TempDir>,
}

/// The column-family handle of a state.
fn cf_handle<'a>(
    db: &'a Db,
    cf_names: &[String],
    state: StateId,
) -> Result<Arc<BoundColumnFamily<'a>>> {
    let name = cf_names
        .get(state)
        .ok_or_else(|| Error::UnknownStateId(state))?;
    db.cf_handle(name).ok_or_else(|| Error::RocksDb {
        context: format!("column family of state id {state}"),
        detail: format!("column family '{name}' does not exist"),
    })
}

#[cfg(test)]
mod tests {
    use super::load::LoadRun;
    use super::*;
    use crate::backend::{BackendConfig, EngineHandle, StateBackend};
    use crate::keygroup::KeyGroup;
    use crate::meta::{StateKind, StateMetaInfo};

    #[test]
    fn column_family_names_escape_default() {
        assert_eq!(column_family_name("v"), "v");
        assert_eq!(column_family_name("default"), "_keyed-state/default");
        assert_eq!(
            column_family_name("_keyed-state/default"),
            "_keyed-state/_keyed-state/default"
        );
    }

    #[test]
    fn options_describe_flink_defaults() {
        let d = RocksDbOptions::default().describe();
        assert!(d.contains("write_buffer=64MiBx2"), "{d}");
        assert!(d.contains("block_cache=8MiB"), "{d}");
        assert!(d.contains("block=4KiB"), "{d}");
        assert!(d.contains("compression=lz4"), "{d}");
        assert!(d.contains("bloom=off"), "{d}");
        assert!(d.contains("target_file=64MiB"), "{d}");
        assert!(d.contains("l1_base=256MiB"), "{d}");
        assert!(d.contains("wal=off"), "{d}");
        assert!(d.contains("fsync=off"), "{d}");
        assert!(d.contains("flush_on_close=off"), "{d}");
    }

    #[test]
    fn shared_memory_is_sized_as_flink_sizes_managed_memory() {
        let s = RocksDbShared::new(300 << 20).unwrap();
        // Flink: cache (3 - r) * B / 3, write-buffer manager 2 * r * B / 3, r = 0.5.
        assert_eq!(s.cache_capacity(), 250 << 20);
        assert_eq!(s.write_buffer_limit(), 100 << 20);
        assert_eq!(s.write_buffer_ratio(), FLINK_WRITE_BUFFER_RATIO);
        let s2 = RocksDbShared::with_write_buffer_ratio(300 << 20, 0.25).unwrap();
        assert_eq!(s2.cache_capacity(), 275 << 20);
        assert_eq!(s2.write_buffer_limit(), 50 << 20);
        for bad in [0.0, -0.1, 1.5, f64::NAN] {
            assert!(matches!(
                RocksDbShared::with_write_buffer_ratio(1 << 20, bad),
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(matches!(
            RocksDbShared::new(0),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(s, s.clone());
        assert_ne!(s, s2);
        let d = RocksDbOptions {
            shared: Some(s),
            ..RocksDbOptions::default()
        }
        .describe();
        assert!(
            d.contains("shared_memory=300MiB (cache 250MiB, write buffers 100MiB)"),
            "{d}"
        );
        assert!(RocksDbOptions::default()
            .describe()
            .contains("shared_memory=off"));
    }

    #[test]
    fn backends_on_shared_memory_charge_one_cache_and_one_write_buffer_manager() {
        let shared = RocksDbShared::new(64 << 20).unwrap();
        let options = RocksDbOptions {
            shared: Some(shared.clone()),
            ..RocksDbOptions::default()
        };
        let mut backends: Vec<RocksDbBackend> = (0..2)
            .map(|_| RocksDbBackend::temporary(config(), options.clone()).unwrap())
            .collect();
        let empty = shared.write_buffer_usage();
        for b in backends.iter_mut() {
            let v = b.register_state(meta("v", StateKind::Value)).unwrap();
            for i in 0..2000u32 {
                let key = [&[(i % 128) as u8][..], &i.to_be_bytes()].concat();
                b.put(v, (i % 128) as KeyGroup, &key, &[9u8; 100]).unwrap();
            }
        }
        // Both backends' memtables are counted by the one manager and charged to the one cache.
        let memtables = shared.write_buffer_usage();
        assert!(memtables > empty + 2 * 2000 * 100, "{:?}", shared.metrics());
        assert!(shared.cache_usage() >= memtables, "{:?}", shared.metrics());
        let usage = |b: &RocksDbBackend| {
            b.engine()
                .metrics()
                .into_iter()
                .find(|m| m.name == "rocksdb.block-cache-usage")
                .map(|m| m.value)
        };
        assert_eq!(usage(&backends[0]), usage(&backends[1]));
        assert_eq!(usage(&backends[0]), Some(shared.cache_usage() as u64));
        let keys = backends[0]
            .engine()
            .metrics()
            .into_iter()
            .find(|m| m.name == "rocksdb.estimate-num-keys")
            .map(|m| m.value);
        assert_eq!(keys, Some(2000));
        drop(backends);
        assert_eq!(shared.write_buffer_usage(), 0);
    }

    #[test]
    fn load_run_orders_and_keeps_last_duplicate() {
        let mut r = LoadRun::default();
        r.push(b"b", b"1");
        r.push(b"a", b"2");
        r.push(b"b", b"3");
        let got: Vec<(Vec<u8>, Vec<u8>)> = r
            .ordered()
            .into_iter()
            .map(|e| (r.key(e).to_vec(), r.value(e).to_vec()))
            .collect();
        assert_eq!(
            got,
            vec![
                (b"a".to_vec(), b"2".to_vec()),
                (b"b".to_vec(), b"3".to_vec())
            ]
        );
    }

    use crate::keygroup::KeyGroupRange;
    use crate::serializer::SerializerSnapshot;

    fn config() -> BackendConfig {
        BackendConfig {
            max_parallelism: 128,
            key_group_range: KeyGroupRange::all(128),
            key_serializer: SerializerSnapshot::simple("LongSerializer", 1),
        }
    }

    fn meta(name: &str, kind: StateKind) -> StateMetaInfo {
        StateMetaInfo {
            name: name.to_string(),
            kind,
            namespace_serializer: SerializerSnapshot::simple("VoidNamespaceSerializer", 1),
            value_serializer: SerializerSnapshot::simple("BytesSerializer", 1),
            ttl: None,
        }
    }

    #[test]
    fn merge_operator_joins_like_the_heap_backend() {
        let mut b = RocksDbBackend::temporary(config(), RocksDbOptions::default()).unwrap();
        let l = b.register_state(meta("l", StateKind::List)).unwrap();
        let key = [5u8, 1, 2];
        b.append(l, 5, &key, b"a").unwrap();
        b.append(l, 5, &key, b"").unwrap();
        b.append(l, 5, &key, b"b,c").unwrap();
        assert_eq!(b.get(l, 5, &key).unwrap(), Some(&b"a,b,c"[..]));
        b.put(l, 5, &key, b"x").unwrap();
        b.append(l, 5, &key, b"y").unwrap();
        assert_eq!(b.get(l, 5, &key).unwrap(), Some(&b"x,y"[..]));
        b.delete(l, 5, &key).unwrap();
        b.append(l, 5, &key, b"z").unwrap();
        assert_eq!(b.get(l, 5, &key).unwrap(), Some(&b"z"[..]));
        // Merges survive a flush to SST files (full merge in compaction / on read).
        b.holder
            .db
            .flush_cf(&b.holder.db.cf_handle("l").unwrap())
            .unwrap();
        b.append(l, 5, &key, b"w").unwrap();
        assert_eq!(b.get(l, 5, &key).unwrap(), Some(&b"z,w"[..]));
    }

    #[test]
    fn a_state_named_default_is_escaped_and_kinds_are_checked() {
        let mut b = RocksDbBackend::temporary(config(), RocksDbOptions::default()).unwrap();
        let d = b.register_state(meta("default", StateKind::Value)).unwrap();
        let m = b.register_state(meta("m", StateKind::Map)).unwrap();
        assert_eq!(
            b.register_state(meta("default", StateKind::Value)).unwrap(),
            d
        );
        assert!(matches!(
            b.register_state(meta("default", StateKind::List)),
            Err(Error::StateKindMismatch { .. })
        ));
        b.put(d, 1, &[1, 9], b"v").unwrap();
        assert_eq!(b.get(d, 1, &[1, 9]).unwrap(), Some(&b"v"[..]));
        assert!(b.holder.db.cf_handle("_keyed-state/default").is_some());
        assert!(matches!(b.get(m, 1, &[1, 9]), Err(Error::WrongKind { .. })));
        assert!(matches!(
            b.map_get(d, 1, &[1], &[9]),
            Err(Error::WrongKind { .. })
        ));
    }

    #[test]
    fn open_rejects_a_non_empty_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x"), b"x").unwrap();
        let e = RocksDbBackend::open(dir.path(), config(), RocksDbOptions::default()).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        let fresh = dir.path().join("db");
        let b = RocksDbBackend::open(&fresh, config(), RocksDbOptions::default()).unwrap();
        assert_eq!(b.path(), fresh.as_path());
    }

    #[test]
    fn restore_spills_sorts_dedups_and_ingests() {
        let options = RocksDbOptions {
            restore_buffer_size: 200,
            ..RocksDbOptions::default()
        };
        let mut b = RocksDbBackend::temporary(config(), options).unwrap();
        let v = b.register_state(meta("v", StateKind::Value)).unwrap();
        let m = b.register_state(meta("m", StateKind::Map)).unwrap();
        b.put(v, 0, &[0, 200], b"kept").unwrap();
        for kg in 1..4u8 {
            for i in 0..20u8 {
                b.load_entry(v, kg as KeyGroup, &[kg, i], &[i]).unwrap();
                b.load_entry(m, kg as KeyGroup, &[kg, 1, i], &[0, i])
                    .unwrap();
            }
        }
        // Out of order and a duplicate: the last arrival wins.
        b.load_entry(v, 9, &[9, 2], b"first").unwrap();
        b.load_entry(v, 9, &[9, 1], b"one").unwrap();
        b.load_entry(v, 9, &[9, 2], b"last").unwrap();
        b.finish_load().unwrap();
        assert!(!b.ingest_dir().exists());
        assert_eq!(b.num_entries().unwrap(), 1 + 60 + 60 + 2);
        assert_eq!(b.get(v, 0, &[0, 200]).unwrap(), Some(&b"kept"[..]));
        assert_eq!(b.get(v, 3, &[3, 7]).unwrap(), Some(&[7u8][..]));
        assert_eq!(b.get(v, 9, &[9, 2]).unwrap(), Some(&b"last"[..]));
        let mut seen = Vec::new();
        b.map_scan(m, 2, &[2, 1], &mut |uk, val| {
            seen.push((uk.to_vec(), val.to_vec()));
            true
        })
        .unwrap();
        assert_eq!(seen.len(), 20);
        assert_eq!(seen[19], (vec![19], vec![0, 19]));
        b.map_clear(m, 2, &[2, 1]).unwrap();
        assert_eq!(b.num_entries().unwrap(), 1 + 60 + 40 + 2);
    }

    #[test]
    fn snapshot_outlives_the_backend_and_reads_on_another_thread() {
        let mut b = RocksDbBackend::temporary(config(), RocksDbOptions::default()).unwrap();
        let v = b.register_state(meta("v", StateKind::Value)).unwrap();
        for i in 0..100u8 {
            b.put(v, (i % 4) as KeyGroup, &[i % 4, i], &[i]).unwrap();
        }
        let snap = b.snapshot().unwrap();
        let path = b.path().to_path_buf();
        for i in 0..100u8 {
            b.delete(v, (i % 4) as KeyGroup, &[i % 4, i]).unwrap();
        }
        // A state registered after the snapshot is not part of it.
        b.register_state(meta("later", StateKind::Value)).unwrap();
        drop(b);
        assert!(path.exists(), "the directory lives as long as a snapshot");
        let count = std::thread::spawn(move || {
            assert_eq!(snap.states().len(), 1);
            let mut n = 0;
            for kg in 0..4 {
                let mut last: Option<Vec<u8>> = None;
                snap.visit(0, kg, &mut |k, _| {
                    assert_eq!(k[0] as KeyGroup, kg);
                    assert!(last.as_deref().is_none_or(|l| l < k));
                    last = Some(k.to_vec());
                    n += 1;
                    Ok(())
                })
                .unwrap();
            }
            n
        })
        .join()
        .unwrap();
        assert_eq!(count, 100);
        assert!(!path.exists(), "removed with the last snapshot");
    }
}

//! [`RocksDbEngine`]: a handle on the database of a [`RocksDbBackend`](super::RocksDbBackend) for code that
//! drives RocksDB from outside the store (benchmarks, tools).

use std::sync::Arc;

use crate::backend::EngineHandle;
use crate::error::Result;

use super::{rdb_error, DbHolder};

/// A shared handle on the database of a [`RocksDbBackend`] ([`RocksDbBackend::engine`]) that stays valid after the
/// backend is moved into a store: for benchmarks that wait for flushes and compactions between phases.
#[derive(Clone)]
pub struct RocksDbEngine(pub(super) Arc<DbHolder>);

impl EngineHandle for RocksDbEngine {
    fn wait_for_background_work(&self) -> Result<()> {
        let mut opts = rocksdb::WaitForCompactOptions::default();
        opts.set_flush(false);
        self.0
            .db
            .wait_for_compact(&opts)
            .map_err(|e| rdb_error("waiting for flushes and compactions".to_string(), e))
    }

    /// Per database, summed over the states' column families: `rocksdb.estimate-num-keys`,
    /// `rocksdb.size-all-mem-tables`, `rocksdb.cur-size-all-mem-tables`, `rocksdb.live-sst-files-size`,
    /// `rocksdb.estimate-pending-compaction-bytes`, `rocksdb.estimate-table-readers-mem` (what open files
    /// hold outside the block cache), `rocksdb.num-files-at-level<N>` (0 to 6); and the block
    /// cache's `rocksdb.block-cache-usage` (the shared cache's, with [`RocksDbShared`](super::RocksDbShared)).
    fn metrics(&self) -> Vec<keyed_state_lsm::Metric> {
        let db = &self.0.db;
        let names = self.0.cf_names.lock().clone();
        let cfs: Vec<_> = names.iter().filter_map(|n| db.cf_handle(n)).collect();
        let sum = |property: &str| -> u64 {
            cfs.iter()
                .filter_map(|cf| db.property_int_value_cf(cf, property).ok().flatten())
                .sum()
        };
        let mut out: Vec<keyed_state_lsm::Metric> = [
            "rocksdb.estimate-num-keys",
            "rocksdb.size-all-mem-tables",
            "rocksdb.cur-size-all-mem-tables",
            "rocksdb.live-sst-files-size",
            "rocksdb.estimate-pending-compaction-bytes",
            "rocksdb.estimate-table-readers-mem",
        ]
        .into_iter()
        .map(|name| keyed_state_lsm::Metric {
            name: name.into(),
            value: sum(name),
        })
        .collect();
        for level in 0..7 {
            let name = format!("rocksdb.num-files-at-level{level}");
            out.push(keyed_state_lsm::Metric {
                value: sum(&name),
                name,
            });
        }
        // The block cache is one per database (or shared): read it once, not per column family.
        let cache = cfs
            .first()
            .and_then(|cf| {
                db.property_int_value_cf(cf, "rocksdb.block-cache-usage")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0);
        out.push(keyed_state_lsm::Metric {
            name: "rocksdb.block-cache-usage".into(),
            value: cache,
        });
        out
    }

    fn summary(&self) -> String {
        let db = &self.0.db;
        let mut parts = Vec::new();
        let names = self.0.cf_names.lock().clone();
        for name in &names {
            let Some(cf) = db.cf_handle(name) else {
                continue;
            };
            let files: Vec<u64> = (0..7)
                .map(|l| {
                    db.property_int_value_cf(&cf, format!("rocksdb.num-files-at-level{l}").as_str())
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                })
                .collect();
            let mem = db
                .property_int_value_cf(&cf, "rocksdb.cur-size-active-mem-table")
                .ok()
                .flatten()
                .unwrap_or(0);
            parts.push(format!(
                "{name}: files per level {files:?}, memtable {} KiB",
                mem >> 10
            ));
        }
        parts.join("; ")
    }
}

impl RocksDbEngine {
    /// Flushes the memtables of every column family to SST files (tests and benchmarks that force
    /// compactions at given times).
    pub fn flush_all(&self) -> Result<()> {
        let db = &self.0.db;
        for name in self.0.cf_names.lock().clone() {
            if let Some(cf) = db.cf_handle(&name) {
                db.flush_cf(&cf)
                    .map_err(|e| rdb_error(format!("flushing column family '{name}'"), e))?;
            }
        }
        Ok(())
    }

    /// Flushes and then compacts every column family over its whole key range (RocksDB rewrites the
    /// bottommost level too when a compaction filter is installed), so the TTL filter judges every value.
    pub fn compact_all(&self) -> Result<()> {
        self.flush_all()?;
        let db = &self.0.db;
        for name in self.0.cf_names.lock().clone() {
            if let Some(cf) = db.cf_handle(&name) {
                db.compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
            }
        }
        Ok(())
    }

    /// The bytes of every live SST file of the database (`rocksdb.live-sst-files-size`, summed over the
    /// column families), for benchmarks that compare on-disk size.
    pub fn live_sst_bytes(&self) -> u64 {
        let db = &self.0.db;
        self.0
            .cf_names
            .lock()
            .iter()
            .filter_map(|name| db.cf_handle(name))
            .filter_map(|cf| {
                db.property_int_value_cf(&cf, "rocksdb.live-sst-files-size")
                    .ok()
                    .flatten()
            })
            .sum()
    }
}

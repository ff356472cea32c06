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
    /// cache's `rocksdb.block-cache-usage` (the shared cache's, with [`RocksDbShared`](super::RocksDbShared));
    /// `rocksdb.actual-delayed-write-rate` (0 unless writes are slowed down now), the write stall counts by
    /// cause of `rocksdb.cf-write-stall-stats` (as `rocksdb.cf-write-stall-stats.<key>`, summed over the
    /// column families) and `rocksdb.stall.micros`,
    /// the database's write stall time (slowdowns and stops) as `rocksdb.dbstats` reports it ("Cumulative
    /// stall"), which needs no statistics object (off, as in Flink).
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
        out.push(keyed_state_lsm::Metric {
            name: "rocksdb.actual-delayed-write-rate".into(),
            value: db
                .property_int_value("rocksdb.actual-delayed-write-rate")
                .ok()
                .flatten()
                .unwrap_or(0),
        });
        // Write stalls by cause and condition, summed over the column families (RocksDB's
        // `rocksdb.cf-write-stall-stats` map, e.g. `l0-file-count-limit-delays`, `memtable-limit-stops`).
        let mut by_cause: Vec<(String, u64)> = Vec::new();
        for cf in &cfs {
            let text = db
                .property_value_cf(cf, "rocksdb.cf-write-stall-stats")
                .ok()
                .flatten()
                .unwrap_or_default();
            for (name, count) in write_stall_counts(&text) {
                match by_cause.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, c)) => *c += count,
                    None => by_cause.push((name, count)),
                }
            }
        }
        out.extend(
            by_cause
                .into_iter()
                .map(|(name, value)| keyed_state_lsm::Metric {
                    name: format!("rocksdb.cf-write-stall-stats.{name}"),
                    value,
                }),
        );
        if let Some(micros) = db
            .property_value("rocksdb.dbstats")
            .ok()
            .flatten()
            .and_then(|text| cumulative_stall_micros(&text))
        {
            out.push(keyed_state_lsm::Metric {
                name: "rocksdb.stall.micros".into(),
                value: micros,
            });
        }
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

/// The counts of a "Write Stall (count): name: N, name: N" line (`rocksdb.cf-write-stall-stats`).
fn write_stall_counts(text: &str) -> Vec<(String, u64)> {
    let Some(rest) = text.split("Write Stall (count): ").nth(1) else {
        return Vec::new();
    };
    rest.lines()
        .next()
        .unwrap_or("")
        .split(", ")
        .filter_map(|pair| {
            let (name, count) = pair.split_once(": ")?;
            Some((name.trim().to_string(), count.trim().parse().ok()?))
        })
        .collect()
}

/// The write stall time of `rocksdb.dbstats`'s "Cumulative stall: HH:MM:SS.sss H:M:S" line, in microseconds.
fn cumulative_stall_micros(dbstats: &str) -> Option<u64> {
    let rest = dbstats.split("Cumulative stall: ").nth(1)?;
    let hms = rest.split_whitespace().next()?.trim_end_matches(',');
    let mut parts = hms.split(':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    let seconds = h.parse::<f64>().ok()? * 3600.0
        + m.parse::<f64>().ok()? * 60.0
        + sec.parse::<f64>().ok()?;
    Some((seconds * 1e6).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::cumulative_stall_micros;

    #[test]
    fn the_cumulative_stall_of_dbstats_is_read_in_microseconds() {
        let text = "** DB Stats **\nUptime(secs): 12.0 total, 12.0 interval\n\
                    Cumulative stall: 00:01:2.500 H:M:S, 3.2 percent\n\
                    Interval stall: 00:00:0.000 H:M:S, 0.0 percent\n";
        assert_eq!(cumulative_stall_micros(text), Some(62_500_000));
        assert_eq!(cumulative_stall_micros("no stall line"), None);
    }

    #[test]
    fn write_stall_counts_are_read_by_cause() {
        let text = "Write Stall (count): l0-file-count-limit-delays: 3, memtable-limit-stops: 0\n";
        assert_eq!(
            super::write_stall_counts(text),
            vec![
                ("l0-file-count-limit-delays".to_string(), 3),
                ("memtable-limit-stops".to_string(), 0)
            ]
        );
    }
}

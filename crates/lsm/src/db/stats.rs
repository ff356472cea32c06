//! [`DbStats`]: the counters and sizes a database reports, and how they are gathered.

use std::sync::atomic::Ordering;

use crate::compaction;
use crate::inner::DbInner;
use crate::sst::ReaderMetadata;

/// Counters and sizes of a database.
#[derive(Debug, Clone, Default)]
pub struct DbStats {
    /// Bytes of user keys and values accepted by writes.
    pub user_bytes_written: u64,
    /// Bytes of SST files written by flushes.
    pub flush_bytes_written: u64,
    /// Bytes of SST files read as compaction inputs.
    pub compaction_bytes_read: u64,
    /// Bytes of SST files written by compactions.
    pub compaction_bytes_written: u64,
    /// Number of flushes.
    pub flushes: u64,
    /// Number of (non-trivial) compactions.
    pub compactions: u64,
    /// Number of trivial moves.
    pub trivial_moves: u64,
    /// Number of times a write waited for flush or compaction.
    pub write_stalls: u64,
    /// Microseconds writes spent stalled: from a write's first wait for flush or compaction until it
    /// proceeds (including the memtable switch that may end the wait).
    pub write_stall_micros: u64,
    /// Of [`write_stall_micros`](Self::write_stall_micros), the waits for compaction while L0 held
    /// `l0_stop_writes_trigger` sorted runs (RocksDB's `rocksdb.l0.num.files.stall.micros`).
    pub write_stall_l0_micros: u64,
    /// Of [`write_stall_micros`](Self::write_stall_micros), the waits for a flush while
    /// `max_immutable_memtables` memtables waited for theirs (RocksDB's `rocksdb.memtable.compaction.micros`).
    pub write_stall_memtables_micros: u64,
    /// Of [`write_stall_micros`](Self::write_stall_micros), the waits for flushes while the environment's
    /// memtables filled their share of the memory budget (`keyed-state.lsm.write-buffer-stall-micros`;
    /// summed over engines in `EnvStats::write_buffer_stall_micros`).
    pub write_stall_memory_micros: u64,
    /// Number of times a memtable's point index grew (each a rebuild by the writer, which waits for it).
    pub memtable_index_growths: u64,
    /// Microseconds writes spent growing memtable point indexes.
    pub memtable_index_growth_micros: u64,
    /// Number of files dropped whole by `delete_range`.
    pub files_dropped_by_range_delete: u64,
    /// Number of SST files that reads (point lookups and scans within one prefix) left unread because their
    /// prefix filter ruled the prefix out.
    pub prefix_filter_skips: u64,
    /// Number of wholly expired files (by their TTL range property) removed from the version without
    /// being read, because nothing below them could resurface.
    pub expired_files_dropped: u64,
    /// Files per level.
    pub level_files: Vec<usize>,
    /// Bytes per level.
    pub level_bytes: Vec<u64>,
    /// The level L0 compacts into: 1 with static level targets; with [`Options::dynamic_level_bytes`] the
    /// shallowest level the tree needs (the last one while it is small).
    ///
    /// [`Options::dynamic_level_bytes`]: crate::options::Options::dynamic_level_bytes
    pub base_level: usize,
    /// Bytes in the active and immutable memtables.
    pub memtable_bytes: usize,
    /// Number of immutable memtables waiting for flush.
    pub immutable_memtables: usize,
    /// The last sequence number.
    pub last_seqno: u64,
    /// Sorted runs in L0 (what the L0 triggers count: one per flush or ingestion, however many files).
    pub l0_sorted_runs: usize,
    /// Bytes of the checkpoint view's files that the version no longer holds: local disk the view alone
    /// keeps ([`Options::checkpoint_view`](crate::options::Options::checkpoint_view); 0 without a view).
    pub checkpoint_view_pinned_bytes: u64,
    /// Sorted runs in the checkpoint view's L0 (0 without a view).
    pub checkpoint_view_l0_runs: usize,
    /// Whether automatic compaction has work now (RocksDB's `rocksdb.compaction-pending`): false once
    /// [`Db::wait_for_background_work`](super::Db::wait_for_background_work) returned, until writes add
    /// work.
    pub compaction_pending: bool,
    /// Entries in the SST files (puts, deletes and merge operands; an estimate of the keys, as RocksDB's
    /// `rocksdb.estimate-num-keys` is).
    pub estimated_sst_entries: u64,
    /// Bytes in the engine's block cache (the environment's shared cache, with a memory budget).
    pub block_cache_usage: usize,
    /// What the engine's block cache may hold now.
    pub block_cache_capacity: usize,
    /// Bytes of entries in the engine's row cache ([`Options::row_cache_size`]; 0 when it is off); for
    /// the environment's shared row cache, its entries of every engine.
    ///
    /// [`Options::row_cache_size`]: crate::options::Options::row_cache_size
    pub row_cache_usage: usize,
    /// Entries (one per file and key) in the engine's row cache; for the environment's shared row cache,
    /// those of every engine.
    pub row_cache_rows: usize,
    /// The engine's file lookups the row cache answered.
    pub row_cache_hits: u64,
    /// The engine's file lookups the row cache could not answer (the file was read, and its answer cached
    /// if the key was admitted).
    pub row_cache_misses: u64,
    /// Row cache lookups, insertions and `contains` checks that went without the cache because an erase
    /// of deleted files' rows was working on their shard (a lookup then reads the file: counted in
    /// `row_cache_misses` too); for the environment's shared row cache, those of every engine.
    pub row_cache_busy_skips: u64,
    /// The open SST files' indexes and filters, summed: what they hold and what the readers keep in memory
    /// outside the block cache ([`Options::sst_metadata`](crate::options::Options::sst_metadata)).
    pub table_readers: ReaderMetadata,
}

/// One figure of a [`DbStats`] or an [`EnvStats`](crate::EnvStats) under the name RocksDB (and Flink's
/// RocksDB metrics) give it, or a name in the same style where RocksDB has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metric {
    /// The name, e.g. `rocksdb.cur-size-all-mem-tables`.
    pub name: String,
    /// The value (bytes, counts or microseconds, as the name says).
    pub value: u64,
}

impl Metric {
    fn new(name: impl Into<String>, value: impl TryInto<u64>) -> Metric {
        Metric {
            name: name.into(),
            value: value.try_into().unwrap_or(u64::MAX),
        }
    }
}

impl DbStats {
    /// The figures under RocksDB's property and statistics names (`rocksdb.cur-size-all-mem-tables`,
    /// `rocksdb.num-immutable-mem-table`, `rocksdb.estimate-num-keys`, `rocksdb.total-sst-files-size`,
    /// `rocksdb.num-files-at-level<N>`, `rocksdb.block-cache-usage`, `rocksdb.block-cache-capacity`,
    /// `rocksdb.compaction-pending`, `rocksdb.row.cache.hit`, `rocksdb.row.cache.miss`,
    /// `rocksdb.stall.micros` (and of it `rocksdb.l0.num.files.stall.micros`,
    /// `rocksdb.memtable.compaction.micros`), `rocksdb.flush.write.bytes`, `rocksdb.compact.read.bytes`,
    /// `rocksdb.compact.write.bytes`, `rocksdb.bytes.written`, `rocksdb.estimate-table-readers-mem`: what
    /// open files keep in memory outside the block cache), and in their style where RocksDB has none
    /// (`keyed-state.lsm.flushes`, `.compactions`, `.write-stalls`, `.write-buffer-stall-micros`,
    /// `.l0-sorted-runs`, the checkpoint view's `.checkpoint-view-pinned-bytes` and `.checkpoint-view-l0-runs`;
    /// the open files'
    /// `.index-bytes`, `.index-key-bytes`, `.filter-bytes` and `.data-blocks`, wherever they are held).
    pub fn metrics(&self) -> Vec<Metric> {
        let mut m = vec![
            Metric::new("rocksdb.cur-size-all-mem-tables", self.memtable_bytes),
            Metric::new("rocksdb.num-immutable-mem-table", self.immutable_memtables),
            Metric::new("rocksdb.estimate-num-keys", self.estimated_sst_entries),
            Metric::new(
                "rocksdb.total-sst-files-size",
                self.level_bytes.iter().sum::<u64>(),
            ),
            Metric::new("rocksdb.block-cache-usage", self.block_cache_usage),
            Metric::new("rocksdb.block-cache-capacity", self.block_cache_capacity),
            Metric::new("rocksdb.row.cache.hit", self.row_cache_hits),
            Metric::new("rocksdb.row.cache.miss", self.row_cache_misses),
            Metric::new("rocksdb.stall.micros", self.write_stall_micros),
            Metric::new(
                "rocksdb.l0.num.files.stall.micros",
                self.write_stall_l0_micros,
            ),
            Metric::new(
                "rocksdb.memtable.compaction.micros",
                self.write_stall_memtables_micros,
            ),
            Metric::new(
                "keyed-state.lsm.write-buffer-stall-micros",
                self.write_stall_memory_micros,
            ),
            Metric::new("rocksdb.bytes.written", self.user_bytes_written),
            Metric::new("rocksdb.flush.write.bytes", self.flush_bytes_written),
            Metric::new("rocksdb.compact.read.bytes", self.compaction_bytes_read),
            Metric::new("rocksdb.compact.write.bytes", self.compaction_bytes_written),
            Metric::new("keyed-state.lsm.flushes", self.flushes),
            Metric::new("keyed-state.lsm.compactions", self.compactions),
            Metric::new("keyed-state.lsm.write-stalls", self.write_stalls),
            Metric::new("keyed-state.lsm.l0-sorted-runs", self.l0_sorted_runs),
            Metric::new(
                "keyed-state.lsm.checkpoint-view-pinned-bytes",
                self.checkpoint_view_pinned_bytes,
            ),
            Metric::new(
                "keyed-state.lsm.checkpoint-view-l0-runs",
                self.checkpoint_view_l0_runs,
            ),
            Metric::new(
                "rocksdb.estimate-table-readers-mem",
                self.table_readers.resident_bytes,
            ),
            Metric::new(
                "keyed-state.lsm.index-bytes",
                self.table_readers.index_bytes,
            ),
            Metric::new(
                "keyed-state.lsm.index-key-bytes",
                self.table_readers.index_key_bytes,
            ),
            Metric::new(
                "keyed-state.lsm.filter-bytes",
                self.table_readers.filter_bytes,
            ),
            Metric::new(
                "keyed-state.lsm.data-blocks",
                self.table_readers.data_blocks,
            ),
            Metric::new(
                "rocksdb.compaction-pending",
                u64::from(self.compaction_pending),
            ),
        ];
        for (level, files) in self.level_files.iter().enumerate() {
            m.push(Metric::new(
                format!("rocksdb.num-files-at-level{level}"),
                *files,
            ));
        }
        m
    }

    /// (flush + compaction bytes written) / user bytes written.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            return 0.0;
        }
        (self.flush_bytes_written + self.compaction_bytes_written) as f64
            / self.user_bytes_written as f64
    }
}

impl DbInner {
    /// The current counters and sizes (see [`Db::stats`](super::Db::stats)).
    pub(super) fn stats(&self) -> DbStats {
        let c = &self.counters;
        let (rc_hits, rc_misses) = self
            .row_cache
            .as_ref()
            .map_or((0, 0), |rc| rc.hits_and_misses());
        let st = self.state.lock();
        let (live_growths, live_growth_micros) = std::iter::once(&st.mem)
            .chain(st.imm.iter())
            .map(|m| m.index_growth_stats())
            .fold((0, 0), |(g, t), (mg, mt)| (g + mg, t + mt));
        DbStats {
            user_bytes_written: c.user_bytes.load(Ordering::Relaxed),
            flush_bytes_written: c.flush_bytes.load(Ordering::Relaxed),
            compaction_bytes_read: c.compaction_read.load(Ordering::Relaxed),
            compaction_bytes_written: c.compaction_written.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            trivial_moves: c.trivial_moves.load(Ordering::Relaxed),
            write_stalls: c.stalls.load(Ordering::Relaxed),
            write_stall_micros: c.stall_micros.load(Ordering::Relaxed),
            write_stall_l0_micros: c.stall_l0_micros.load(Ordering::Relaxed),
            write_stall_memtables_micros: c.stall_memtables_micros.load(Ordering::Relaxed),
            write_stall_memory_micros: c.stall_memory_micros.load(Ordering::Relaxed),
            memtable_index_growths: c.index_growths.load(Ordering::Relaxed) + live_growths,
            memtable_index_growth_micros: c.index_growth_micros.load(Ordering::Relaxed)
                + live_growth_micros,
            files_dropped_by_range_delete: c.files_dropped.load(Ordering::Relaxed),
            prefix_filter_skips: c.prefix_skips.load(Ordering::Relaxed),
            expired_files_dropped: c.expired_files_dropped.load(Ordering::Relaxed),
            level_files: st.version.levels.iter().map(|l| l.len()).collect(),
            level_bytes: st.version.level_bytes(),
            base_level: compaction::base_level(&st.version, &self.opts),
            memtable_bytes: st.mem.approximate_bytes()
                + st.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>(),
            immutable_memtables: st.imm.len(),
            last_seqno: self.last_seqno.load(Ordering::SeqCst),
            l0_sorted_runs: st.version.l0_runs,
            checkpoint_view_pinned_bytes: st
                .view
                .as_ref()
                .map_or(0, |v| crate::checkpoint_view::bytes_outside(v, &st.version)),
            checkpoint_view_l0_runs: st.view.as_ref().map_or(0, |v| v.l0_runs),
            compaction_pending: compaction::needs_compaction(&st.version, &self.opts),
            estimated_sst_entries: st
                .version
                .levels
                .iter()
                .flatten()
                .map(|f| f.reader.properties().entries)
                .sum(),
            block_cache_usage: self.cache.usage(),
            block_cache_capacity: self.cache.capacity(),
            row_cache_usage: self.row_cache.as_ref().map_or(0, |rc| rc.usage()),
            row_cache_rows: self.row_cache.as_ref().map_or(0, |rc| rc.rows()),
            row_cache_hits: rc_hits,
            row_cache_misses: rc_misses,
            row_cache_busy_skips: self.row_cache.as_ref().map_or(0, |rc| rc.busy_skips()),
            table_readers: st.version.levels.iter().flatten().fold(
                ReaderMetadata::default(),
                |mut sum, f| {
                    sum += f.reader.metadata();
                    sum
                },
            ),
        }
    }
}

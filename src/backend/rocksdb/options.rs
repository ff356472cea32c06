//! The settings of a [`RocksDbBackend`](super::RocksDbBackend), Flink's benchmark configuration by default, and
//! how they map to RocksDB's database and column-family options.

use std::fmt;

use rocksdb::{BlockBasedOptions, Cache, DBCompactionStyle, DBCompressionType, Options};

use crate::error::Result;

use super::{rdb_error, string_append, RocksDbShared, MERGE_OPERATOR_NAME};

const MIB: usize = 1 << 20;

/// Block compression of SST files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RocksDbCompression {
    /// No compression.
    None,
    /// LZ4 (the only codec compiled into this build; Flink's default is Snappy).
    Lz4,
}

impl RocksDbCompression {
    fn to_rocksdb(self) -> DBCompressionType {
        match self {
            RocksDbCompression::None => DBCompressionType::None,
            RocksDbCompression::Lz4 => DBCompressionType::Lz4,
        }
    }
}

impl fmt::Display for RocksDbCompression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RocksDbCompression::None => "none",
            RocksDbCompression::Lz4 => "lz4",
        })
    }
}

/// The RocksDB settings of a [`RocksDbBackend`]. [`Default`] gives Flink's benchmark configuration
/// (`PredefinedOptions.DEFAULT` with `RocksDBConfigurableOptions` defaults), except LZ4 for Snappy.
/// [`Display`](fmt::Display) prints every setting on one line, for benchmark reports.
#[derive(Debug, Clone, PartialEq)]
pub struct RocksDbOptions {
    /// Memtable size per column family (Flink: 64 MiB).
    pub write_buffer_size: usize,
    /// Memtables per column family (Flink: 2).
    pub max_write_buffer_number: i32,
    /// Memtables merged per flush (Flink: 1).
    pub min_write_buffer_number_to_merge: i32,
    /// LRU block cache shared by all column families (Flink: 8 MiB).
    pub block_cache_size: usize,
    /// Data block size (Flink: 4 KiB).
    pub block_size: usize,
    /// Metadata (index) block size (Flink: 4 KiB).
    pub metadata_block_size: usize,
    /// SST block compression (Flink: Snappy; LZ4 here).
    pub compression: RocksDbCompression,
    /// Bloom filter bits per key, `None` for no filter (Flink: off).
    pub bloom_filter_bits_per_key: Option<f64>,
    /// Level compaction's dynamic level sizing (Flink: off).
    pub level_compaction_dynamic_level_bytes: bool,
    /// Target SST file size at L1 (Flink: 64 MiB).
    pub target_file_size_base: u64,
    /// Size of L1 (Flink: 256 MiB).
    pub max_bytes_for_level_base: u64,
    /// Background flush and compaction jobs (Flink: 2 threads).
    pub max_background_jobs: i32,
    /// Open-file limit, -1 for unlimited (Flink: -1).
    pub max_open_files: i32,
    /// Disables the write-ahead log for every write (Flink: disabled).
    pub disable_wal: bool,
    /// Uses fsync instead of fdatasync where RocksDB syncs (Flink: false).
    pub use_fsync: bool,
    /// Skips flushing memtables when the database closes (Flink: true; the state is discarded anyway).
    pub avoid_flush_during_shutdown: bool,
    /// Size at which batched writes (map clear, value migration) are flushed (Flink: 2 MiB).
    pub write_batch_size: usize,
    /// Restored entries buffered in memory before they are written out as SST files.
    pub restore_buffer_size: usize,
    /// Memory shared with other backends, as Flink's managed memory configures it (default `None`: the
    /// backend's own cache of `block_cache_size` and no limit on memtables but their number and size).
    /// When set, `block_cache_size` is not used: the backend's blocks go to the shared cache, index and
    /// filter blocks too (with high priority, the top level pinned), and its memtables are limited and
    /// charged to that cache by the shared write-buffer manager.
    pub shared: Option<RocksDbShared>,
}

impl Default for RocksDbOptions {
    fn default() -> Self {
        RocksDbOptions {
            write_buffer_size: 64 * MIB,
            max_write_buffer_number: 2,
            min_write_buffer_number_to_merge: 1,
            block_cache_size: 8 * MIB,
            block_size: 4 * 1024,
            metadata_block_size: 4 * 1024,
            compression: RocksDbCompression::Lz4,
            bloom_filter_bits_per_key: None,
            level_compaction_dynamic_level_bytes: false,
            target_file_size_base: 64 * MIB as u64,
            max_bytes_for_level_base: 256 * MIB as u64,
            max_background_jobs: 2,
            max_open_files: -1,
            disable_wal: true,
            use_fsync: false,
            avoid_flush_during_shutdown: true,
            write_batch_size: 2 * MIB,
            restore_buffer_size: 64 * MIB,
            shared: None,
        }
    }
}

/// Formats a byte size compactly (`64MiB`, `4KiB`, `100B`).
fn size(n: u64) -> String {
    if n >= MIB as u64 && n % MIB as u64 == 0 {
        format!("{}MiB", n / MIB as u64)
    } else if n >= 1024 && n % 1024 == 0 {
        format!("{}KiB", n / 1024)
    } else {
        format!("{n}B")
    }
}

impl RocksDbOptions {
    /// Every setting on one line, `name=value` separated by commas.
    pub fn describe(&self) -> String {
        self.to_string()
    }

    /// The block cache of a backend: the shared one, else a new one of `block_cache_size`.
    pub(super) fn block_cache(&self) -> Cache {
        match &self.shared {
            Some(shared) => shared.cache().clone(),
            None => Cache::new_lru_cache(self.block_cache_size),
        }
    }

    /// The column-family options: everything per state, including the merge operator and block cache.
    pub(super) fn column_options(&self, cache: &Cache) -> Options {
        let mut o = Options::default();
        o.set_write_buffer_size(self.write_buffer_size);
        o.set_max_write_buffer_number(self.max_write_buffer_number);
        o.set_min_write_buffer_number_to_merge(self.min_write_buffer_number_to_merge);
        o.set_compression_type(self.compression.to_rocksdb());
        o.set_compaction_style(DBCompactionStyle::Level);
        o.set_level_compaction_dynamic_level_bytes(self.level_compaction_dynamic_level_bytes);
        o.set_target_file_size_base(self.target_file_size_base);
        o.set_max_bytes_for_level_base(self.max_bytes_for_level_base);
        let mut table = BlockBasedOptions::default();
        table.set_block_size(self.block_size);
        table.set_metadata_block_size(self.metadata_block_size);
        table.set_block_cache(cache);
        if let Some(bits) = self.bloom_filter_bits_per_key {
            table.set_bloom_filter(bits, false);
        }
        if self.shared.is_some() {
            // Flink's `RocksDBResourceContainer` with shared (managed) memory.
            table.set_cache_index_and_filter_blocks(true);
            table.set_cache_index_and_filter_blocks_with_high_priority(true);
            table.set_pin_top_level_index_and_filter(true);
        }
        o.set_block_based_table_factory(&table);
        o.set_merge_operator_associative(MERGE_OPERATOR_NAME, string_append);
        o
    }

    /// The database-wide options.
    pub(super) fn db_options(&self) -> Result<Options> {
        let mut o = Options::default();
        o.create_if_missing(true);
        o.set_max_background_jobs(self.max_background_jobs);
        o.set_max_open_files(self.max_open_files);
        o.set_use_fsync(self.use_fsync);
        o.set_stats_dump_period_sec(0);
        if let Some(shared) = &self.shared {
            o.set_write_buffer_manager(shared.write_buffer_manager());
        }
        // The default column family stays empty; give it the same codec so no other one is needed.
        o.set_compression_type(self.compression.to_rocksdb());
        // Not exposed by the crate's `Options` setters: go through RocksDB's option-string parser.
        let avoid_flush = format!(
            "avoid_flush_during_shutdown={}",
            self.avoid_flush_during_shutdown
        );
        o.get_options_from_string(&avoid_flush)
            .map_err(|e| rdb_error(format!("setting {avoid_flush}"), e))
    }
}

impl fmt::Display for RocksDbOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "write_buffer={}x{} (merge {}), block_cache={}, block={}, metadata_block={}, compression={}, \
             bloom={}, compaction=level (dynamic_level_bytes={}), target_file={}, l1_base={}, \
             background_jobs={}, max_open_files={}, wal={}, fsync={}, flush_on_close={}, write_batch={}, restore_buffer={}, \
             merge_operator={MERGE_OPERATOR_NAME}(0x2C), shared_memory={}",
            size(self.write_buffer_size as u64),
            self.max_write_buffer_number,
            self.min_write_buffer_number_to_merge,
            size(self.block_cache_size as u64),
            size(self.block_size as u64),
            size(self.metadata_block_size as u64),
            self.compression,
            match self.bloom_filter_bits_per_key {
                Some(bits) => format!("{bits}bits"),
                None => "off".to_string(),
            },
            self.level_compaction_dynamic_level_bytes,
            size(self.target_file_size_base),
            size(self.max_bytes_for_level_base),
            self.max_background_jobs,
            self.max_open_files,
            if self.disable_wal { "off" } else { "on" },
            if self.use_fsync { "on" } else { "off" },
            if self.avoid_flush_during_shutdown {
                "off"
            } else {
                "on"
            },
            size(self.write_batch_size as u64),
            size(self.restore_buffer_size as u64),
            match &self.shared {
                Some(s) => format!(
                    "{} (cache {}, write buffers {})",
                    size(s.budget() as u64),
                    size(s.cache_capacity() as u64),
                    size(s.write_buffer_limit() as u64)
                ),
                None => "off".to_string(),
            },
        )
    }
}

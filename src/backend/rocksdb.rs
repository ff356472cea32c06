//! The RocksDB-backed variant of [`StateBackend`] (cargo feature `rocksdb`): the benchmark yardstick, and a
//! backend users may choose.
//!
//! It is configured the way Flink configures RocksDB (`flink-formats.md` §2, `flink-semantics.md` §2.1):
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

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, BoundColumnFamily, Cache, DBCompactionStyle, DBCompressionType,
    DBWithThreadMode, IngestExternalFileOptions, MergeOperands, MultiThreaded, Options,
    ReadOptions, SnapshotWithThreadMode, SstFileWriter, WriteBatch, WriteOptions,
};

use super::{BackendConfig, BackendSnapshot, StateBackend, StateId};
use crate::error::{Error, Result};
use crate::keygroup::{
    key_group_prefix_len, read_key_group_prefix, write_key_group_prefix, KeyGroup,
};
use crate::layout::LIST_DELIMITER;
use crate::lsm::prefix::prefix_successor;
use crate::meta::{StateKind, StateMetaInfo};

/// The RocksDB database type: multi-threaded column-family handling, so column families can be created
/// through the shared (`Arc`) handle that open snapshots also hold.
type Db = DBWithThreadMode<MultiThreaded>;

/// The name of the merge operator, as Flink sets it (`RocksDBKeyedStateBackend.MERGE_OPERATOR_NAME`).
pub const MERGE_OPERATOR_NAME: &str = "stringappendtest";

/// Prefix of column-family names for states named `default` (or names that start with this prefix).
pub const ESCAPED_CF_PREFIX: &str = "_keyed-state/";

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

    /// The column-family options: everything per state, including the merge operator and block cache.
    fn column_options(&self, cache: &Cache) -> Options {
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
        o.set_block_based_table_factory(&table);
        o.set_merge_operator_associative(MERGE_OPERATOR_NAME, string_append);
        o
    }

    /// The database-wide options.
    fn db_options(&self) -> Result<Options> {
        let mut o = Options::default();
        o.create_if_missing(true);
        o.set_max_background_jobs(self.max_background_jobs);
        o.set_max_open_files(self.max_open_files);
        o.set_use_fsync(self.use_fsync);
        o.set_stats_dump_period_sec(0);
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
             merge_operator={MERGE_OPERATOR_NAME}(0x2C)",
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
        )
    }
}

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
        .ok_or_else(|| Error::UnknownState(format!("id {state}")))?;
    db.cf_handle(name).ok_or_else(|| Error::RocksDb {
        context: format!("column family of state id {state}"),
        detail: format!("column family '{name}' does not exist"),
    })
}

/// Restored entries of one state not yet written out, in arrival order.
#[derive(Default)]
struct LoadRun {
    /// Keys and values back to back.
    data: Vec<u8>,
    /// (offset, key length, value length) per entry.
    entries: Vec<(usize, usize, usize)>,
    /// Whether keys arrived strictly ascending.
    sorted: bool,
}

impl LoadRun {
    fn key(&self, e: (usize, usize, usize)) -> &[u8] {
        &self.data[e.0..e.0 + e.1]
    }

    fn value(&self, e: (usize, usize, usize)) -> &[u8] {
        &self.data[e.0 + e.1..e.0 + e.1 + e.2]
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        if self.entries.is_empty() {
            self.sorted = true;
        } else if let Some(&last) = self.entries.last() {
            self.sorted &= self.key(last) < key;
        }
        self.entries.push((self.data.len(), key.len(), value.len()));
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
    }

    /// The entries in ascending key order, the last arrival winning for duplicate keys.
    fn ordered(&self) -> Vec<(usize, usize, usize)> {
        let mut v = self.entries.clone();
        if !self.sorted {
            // Stable: equal keys stay in arrival order, then keep the last of each run of equal keys.
            v.sort_by(|a, b| self.key(*a).cmp(self.key(*b)));
            let mut out: Vec<(usize, usize, usize)> = Vec::with_capacity(v.len());
            for e in v {
                match out.last_mut() {
                    Some(last) if self.key(*last) == self.key(e) => *last = e,
                    _ => out.push(e),
                }
            }
            v = out;
        }
        v
    }

    fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
    }
}

/// Restore state: buffered runs and the SST files written so far, per state.
#[derive(Default)]
struct Loader {
    runs: Vec<LoadRun>,
    files: Vec<Vec<PathBuf>>,
    buffered: usize,
    next_file: u64,
}

/// Writes into one column family through write batches flushed at `write_batch_size`, keeping the first
/// error. `put` and `delete` return `false` once an error occurred (to stop an iteration).
struct BatchWriter<'a> {
    backend: &'a RocksDbBackend,
    cf: Arc<BoundColumnFamily<'a>>,
    batch: WriteBatch,
    state: StateId,
    op: &'static str,
    failure: Option<Error>,
}

impl<'a> BatchWriter<'a> {
    fn new(backend: &'a RocksDbBackend, state: StateId, op: &'static str) -> Result<Self> {
        Ok(BatchWriter {
            cf: cf_handle(&backend.holder.db, &backend.cf_names, state)?,
            backend,
            batch: WriteBatch::default(),
            state,
            op,
            failure: None,
        })
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> bool {
        self.batch.put_cf(&self.cf, key, value);
        self.maybe_flush()
    }

    fn delete(&mut self, key: &[u8]) -> bool {
        self.batch.delete_cf(&self.cf, key);
        self.maybe_flush()
    }

    fn maybe_flush(&mut self) -> bool {
        if self.batch.size_in_bytes() >= self.backend.options.write_batch_size {
            if let Err(e) = self.flush() {
                self.failure = Some(e);
            }
        }
        self.failure.is_none()
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.backend
            .holder
            .db
            .write_opt(batch, &self.backend.write_opts)
            .map_err(|e| rdb_error(self.backend.context(self.op, self.state), e))
    }

    /// Writes what is left and returns the first error.
    fn finish(mut self) -> Result<()> {
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        self.flush()
    }
}

/// The RocksDB backend. See the module documentation.
pub struct RocksDbBackend {
    holder: Arc<DbHolder>,
    config: BackendConfig,
    options: RocksDbOptions,
    prefix_len: usize,
    states: Vec<StateMetaInfo>,
    cf_names: Vec<String>,
    read_opts: ReadOptions,
    write_opts: WriteOptions,
    value_buf: Vec<u8>,
    key_buf: Vec<u8>,
    loader: Loader,
}

impl fmt::Debug for RocksDbBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbBackend")
            .field("path", &self.holder.db.path())
            .field("config", &self.config)
            .field("options", &self.options)
            .field("states", &self.cf_names)
            .finish()
    }
}

impl RocksDbBackend {
    /// Opens a fresh backend in `dir`, which must be absent or empty (state is restored from savepoints,
    /// never from a previous working directory, as in Flink). The directory is left in place on drop.
    pub fn open(dir: &Path, config: BackendConfig, options: RocksDbOptions) -> Result<Self> {
        Self::open_in(dir, None, config, options)
    }

    /// Opens a fresh backend in a new temporary directory that is deleted when the backend and all its
    /// snapshots are dropped.
    pub fn temporary(config: BackendConfig, options: RocksDbOptions) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("keyed-state-rocksdb-")
            .tempdir()
            .map_err(|e| Error::io("creating a temporary RocksDB directory", e))?;
        let path = dir.path().to_path_buf();
        Self::open_in(&path, Some(dir), config, options)
    }

    fn open_in(
        dir: &Path,
        temp: Option<tempfile::TempDir>,
        config: BackendConfig,
        options: RocksDbOptions,
    ) -> Result<Self> {
        crate::keygroup::check_max_parallelism(config.max_parallelism)?;
        let range = config.key_group_range;
        if !range.is_empty() && range.end() as u32 >= config.max_parallelism {
            return Err(Error::InvalidArgument(format!(
                "key-group range {range} does not fit max parallelism {}",
                config.max_parallelism
            )));
        }
        match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "RocksDB directory {} is not empty (the backend starts empty and restores from savepoints)",
                        dir.display()
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
            }
            Err(e) => return Err(Error::io(format!("reading {}", dir.display()), e)),
        }
        let cache = Cache::new_lru_cache(options.block_cache_size);
        let cf_options = options.column_options(&cache);
        let db = Db::open(&options.db_options()?, dir)
            .map_err(|e| rdb_error(format!("opening {}", dir.display()), e))?;
        let mut write_opts = WriteOptions::default();
        write_opts.disable_wal(options.disable_wal);
        write_opts.set_sync(false);
        Ok(RocksDbBackend {
            holder: Arc::new(DbHolder {
                db,
                cf_options,
                _dir: temp,
            }),
            prefix_len: key_group_prefix_len(config.max_parallelism),
            config,
            options,
            states: Vec::new(),
            cf_names: Vec::new(),
            read_opts: ReadOptions::default(),
            write_opts,
            value_buf: Vec::new(),
            key_buf: Vec::new(),
            loader: Loader::default(),
        })
    }

    /// The RocksDB settings in use.
    pub fn options(&self) -> &RocksDbOptions {
        &self.options
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        self.holder.db.path()
    }

    /// Writes `key_ns | user_key` (a map entry's key) into the reusable key buffer.
    fn set_map_key(&mut self, key_ns: &[u8], user_key: &[u8]) {
        self.key_buf.clear();
        self.key_buf.extend_from_slice(key_ns);
        self.key_buf.extend_from_slice(user_key);
    }

    /// Checks the state id, its kind against the operation (map operations on map states, the others on
    /// the rest) and the key group.
    #[inline]
    fn check(&self, state: StateId, kg: KeyGroup, map: bool, op: &'static str) -> Result<()> {
        super::check_access(
            &self.states,
            self.config.key_group_range,
            state,
            kg,
            map,
            op,
        )
    }

    fn context(&self, op: &str, state: StateId) -> String {
        match self.states.get(state) {
            Some(m) => format!("{op} on state '{}'", m.name),
            None => format!("{op} on state id {state}"),
        }
    }

    /// Visits the entries of a state from `lower` (inclusive) to `upper` (exclusive, `None` = to the end)
    /// in key order, until `f` returns `false`.
    fn iterate(
        &self,
        state: StateId,
        lower: &[u8],
        upper: Option<Vec<u8>>,
        op: &'static str,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let db = &self.holder.db;
        let cf = cf_handle(db, &self.cf_names, state)?;
        let mut ro = ReadOptions::default();
        if let Some(upper) = upper {
            ro.set_iterate_upper_bound(upper);
        }
        let mut it = db.raw_iterator_cf_opt(&cf, ro);
        if lower.is_empty() {
            it.seek_to_first();
        } else {
            it.seek(lower);
        }
        while let Some((k, v)) = it.item() {
            if !f(k, v) {
                return Ok(());
            }
            it.next();
        }
        it.status()
            .map_err(|e| rdb_error(self.context(op, state), e))
    }

    /// The directory SST files for restore are written to (inside the database directory).
    fn ingest_dir(&self) -> PathBuf {
        self.holder.db.path().join("keyed-state-ingest")
    }

    /// Writes every buffered restore run out as one SST file per state.
    fn spill_runs(&mut self) -> Result<()> {
        let dir = self.ingest_dir();
        if self.loader.runs.iter().any(|r| !r.entries.is_empty()) {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        for state in 0..self.loader.runs.len() {
            let run = &self.loader.runs[state];
            if run.entries.is_empty() {
                continue;
            }
            let path = dir.join(format!("restore-{:06}.sst", self.loader.next_file));
            self.loader.next_file += 1;
            let context = || self.context("writing a restore SST file", state);
            let mut writer = SstFileWriter::create(&self.holder.cf_options);
            writer.open(&path).map_err(|e| rdb_error(context(), e))?;
            for e in run.ordered() {
                writer
                    .put(run.key(e), run.value(e))
                    .map_err(|e| rdb_error(context(), e))?;
            }
            writer.finish().map_err(|e| rdb_error(context(), e))?;
            if self.loader.files.len() <= state {
                self.loader.files.resize_with(state + 1, Vec::new);
            }
            self.loader.files[state].push(path);
            self.loader.runs[state].clear();
        }
        self.loader.buffered = 0;
        Ok(())
    }
}

impl StateBackend for RocksDbBackend {
    fn backend_name(&self) -> &'static str {
        "rocksdb"
    }

    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn register_state(&mut self, meta: StateMetaInfo) -> Result<StateId> {
        if let Some(id) = super::reregister(&mut self.states, &meta)? {
            return Ok(id);
        }
        let cf_name = column_family_name(&meta.name);
        self.holder
            .db
            .create_cf(&cf_name, &self.holder.cf_options)
            .map_err(|e| {
                rdb_error(
                    format!(
                        "creating column family '{cf_name}' for state '{}'",
                        meta.name
                    ),
                    e,
                )
            })?;
        self.cf_names.push(cf_name);
        self.states.push(meta);
        Ok(self.states.len() - 1)
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    #[inline]
    fn get(&mut self, state: StateId, kg: KeyGroup, key: &[u8]) -> Result<Option<&[u8]>> {
        self.check(state, kg, false, "get")?;
        let db = &self.holder.db;
        let cf = cf_handle(db, &self.cf_names, state)?;
        let found = db
            .get_pinned_cf_opt(&cf, key, &self.read_opts)
            .map_err(|e| rdb_error(self.context("get", state), e))?;
        match found {
            Some(v) => {
                self.value_buf.clear();
                self.value_buf.extend_from_slice(&v);
                Ok(Some(&self.value_buf))
            }
            None => Ok(None),
        }
    }

    #[inline]
    fn put(&mut self, state: StateId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<()> {
        self.check(state, kg, false, "put")?;
        let db = &self.holder.db;
        let cf = cf_handle(db, &self.cf_names, state)?;
        db.put_cf_opt(&cf, key, value, &self.write_opts)
            .map_err(|e| rdb_error(self.context("put", state), e))
    }

    #[inline]
    fn delete(&mut self, state: StateId, kg: KeyGroup, key: &[u8]) -> Result<()> {
        self.check(state, kg, false, "delete")?;
        let db = &self.holder.db;
        let cf = cf_handle(db, &self.cf_names, state)?;
        db.delete_cf_opt(&cf, key, &self.write_opts)
            .map_err(|e| rdb_error(self.context("delete", state), e))
    }

    fn append(&mut self, state: StateId, kg: KeyGroup, key: &[u8], elements: &[u8]) -> Result<()> {
        self.check(state, kg, false, "append")?;
        if elements.is_empty() {
            return Ok(());
        }
        let db = &self.holder.db;
        let cf = cf_handle(db, &self.cf_names, state)?;
        db.merge_cf_opt(&cf, key, elements, &self.write_opts)
            .map_err(|e| rdb_error(self.context("append", state), e))
    }

    fn map_get(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
    ) -> Result<Option<&[u8]>> {
        self.check(state, kg, true, "map_get")?;
        self.set_map_key(key_ns, user_key);
        let db = &self.holder.db;
        let cf = cf_handle(db, &self.cf_names, state)?;
        let found = db
            .get_pinned_cf_opt(&cf, &self.key_buf, &self.read_opts)
            .map_err(|e| rdb_error(self.context("map_get", state), e))?;
        match found {
            Some(v) => {
                self.value_buf.clear();
                self.value_buf.extend_from_slice(&v);
                Ok(Some(&self.value_buf))
            }
            None => Ok(None),
        }
    }

    fn map_put(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        self.check(state, kg, true, "map_put")?;
        self.set_map_key(key_ns, user_key);
        let db = &self.holder.db;
        let cf = cf_handle(db, &self.cf_names, state)?;
        db.put_cf_opt(&cf, &self.key_buf, value, &self.write_opts)
            .map_err(|e| rdb_error(self.context("map_put", state), e))
    }

    fn map_remove(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
    ) -> Result<()> {
        self.check(state, kg, true, "map_remove")?;
        self.set_map_key(key_ns, user_key);
        let db = &self.holder.db;
        let cf = cf_handle(db, &self.cf_names, state)?;
        db.delete_cf_opt(&cf, &self.key_buf, &self.write_opts)
            .map_err(|e| rdb_error(self.context("map_remove", state), e))
    }

    fn map_scan(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.check(state, kg, true, "map_scan")?;
        self.iterate(
            state,
            key_ns,
            prefix_successor(key_ns),
            "map_scan",
            &mut |k, v| match k.strip_prefix(key_ns) {
                Some(user_key) => f(user_key, v),
                None => false,
            },
        )
    }

    fn map_clear(&mut self, state: StateId, kg: KeyGroup, key_ns: &[u8]) -> Result<()> {
        // As Flink's `RocksDBMapState.clear`: iterate the prefix and delete each entry in write batches
        // (range tombstones would slow every later read of the column family).
        self.check(state, kg, true, "map_clear")?;
        let mut batch = BatchWriter::new(self, state, "map_clear")?;
        self.iterate(
            state,
            key_ns,
            prefix_successor(key_ns),
            "map_clear",
            &mut |k, _| k.starts_with(key_ns) && batch.delete(k),
        )?;
        batch.finish()
    }

    fn scan_state(
        &mut self,
        state: StateId,
        f: &mut dyn FnMut(KeyGroup, &[u8], &[u8]) -> bool,
    ) -> Result<()> {
        if state >= self.states.len() {
            return Err(Error::UnknownState(format!("id {state}")));
        }
        let prefix_len = self.prefix_len;
        let mut bad: Option<Vec<u8>> = None;
        self.iterate(
            state,
            &[],
            None,
            "scan_state",
            &mut |k, v| match read_key_group_prefix(k, prefix_len) {
                Some(kg) => f(kg, k, v),
                None => {
                    bad = Some(k.to_vec());
                    false
                }
            },
        )?;
        match bad {
            Some(k) => Err(Error::Corruption {
                location: self.context("scan_state", state),
                detail: format!("entry key {k:02x?} has no key-group prefix"),
            }),
            None => Ok(()),
        }
    }

    fn transform_values(
        &mut self,
        state: StateId,
        f: &mut dyn FnMut(&[u8]) -> Result<Option<Vec<u8>>>,
    ) -> Result<()> {
        // The iterator reads an implicit snapshot, so batches can be written while it is open.
        let mut batch = BatchWriter::new(self, state, "transform_values")?;
        let mut failure: Option<Error> = None;
        self.iterate(
            state,
            &[],
            None,
            "transform_values",
            &mut |k, v| match f(v) {
                Ok(Some(new)) => batch.put(k, &new),
                Ok(None) => batch.delete(k),
                Err(e) => {
                    failure = Some(e);
                    false
                }
            },
        )?;
        if let Some(e) = failure {
            return Err(e);
        }
        batch.finish()
    }

    fn load_entry(&mut self, state: StateId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<()> {
        if state >= self.states.len() {
            return Err(Error::UnknownState(format!("id {state}")));
        }
        if !self.config.key_group_range.contains(kg) {
            return Err(Error::KeyGroupOutOfRange {
                key_group: kg,
                range: self.config.key_group_range,
            });
        }
        if self.loader.runs.len() <= state {
            self.loader.runs.resize_with(state + 1, LoadRun::default);
        }
        self.loader.runs[state].push(key, value);
        self.loader.buffered += key.len() + value.len() + 24;
        if self.loader.buffered >= self.options.restore_buffer_size {
            self.spill_runs()?;
        }
        Ok(())
    }

    fn finish_load(&mut self) -> Result<()> {
        self.spill_runs()?;
        let files = std::mem::take(&mut self.loader.files);
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        let db = &self.holder.db;
        for (state, paths) in files.into_iter().enumerate() {
            if paths.is_empty() {
                continue;
            }
            let cf = cf_handle(db, &self.cf_names, state)?;
            // One file at a time: later files (later arrivals) must win where key ranges overlap.
            for path in paths {
                db.ingest_external_file_cf_opts(&cf, &ingest, vec![&path])
                    .map_err(|e| rdb_error(self.context("ingesting restored entries", state), e))?;
            }
        }
        self.loader = Loader::default();
        let dir = self.ingest_dir();
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing {}", dir.display()), e)),
        }
    }

    fn num_entries(&mut self) -> Result<u64> {
        let mut n = 0u64;
        for state in 0..self.states.len() {
            self.iterate(state, &[], None, "num_entries", &mut |_, _| {
                n += 1;
                true
            })?;
        }
        Ok(n)
    }

    fn engine_summary(&self) -> Option<String> {
        let db = &self.holder.db;
        let mut parts = Vec::new();
        for (i, name) in self.cf_names.iter().enumerate() {
            let Ok(cf) = cf_handle(db, &self.cf_names, i) else {
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
        Some(parts.join("; "))
    }

    fn wait_for_background_work(&mut self) -> Result<()> {
        let mut opts = rocksdb::WaitForCompactOptions::default();
        opts.set_flush(false);
        self.holder
            .db
            .wait_for_compact(&opts)
            .map_err(|e| rdb_error("waiting for flushes and compactions".to_string(), e))
    }

    fn snapshot(&mut self) -> Result<Box<dyn BackendSnapshot>> {
        Ok(Box::new(RocksDbSnapshot::new(
            Arc::clone(&self.holder),
            self.config.clone(),
            self.states.clone(),
            self.cf_names.clone(),
            self.prefix_len,
        )))
    }
}

/// A point-in-time view of a [`RocksDbBackend`]: a RocksDB snapshot plus a strong reference to the database,
/// readable on any thread while the backend keeps writing.
pub struct RocksDbSnapshot {
    // Field order is part of the soundness argument in `new`: `snapshot` borrows `holder.db` and must be
    // dropped (releasing the RocksDB snapshot) before `holder` (possibly closing the database).
    snapshot: SnapshotWithThreadMode<'static, Db>,
    holder: Arc<DbHolder>,
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    cf_names: Vec<String>,
    prefix_len: usize,
}

impl RocksDbSnapshot {
    fn new(
        holder: Arc<DbHolder>,
        config: BackendConfig,
        states: Vec<StateMetaInfo>,
        cf_names: Vec<String>,
        prefix_len: usize,
    ) -> Self {
        let db: *const Db = &holder.db;
        // SAFETY: `db` points into the heap allocation of the `Arc<DbHolder>`, which never moves and is freed
        // only when the last strong reference is dropped. The returned struct keeps a strong reference in
        // `holder`, declared after `snapshot`, so the database outlives the snapshot that borrows it (fields
        // drop in declaration order; there is no `Drop` impl that could reorder this). The `'static` borrow
        // never escapes: both fields are private, neither is moved out or replaced, and the snapshot is only
        // read through `raw_iterator_cf_opt(&self, ..)`, whose iterators borrow `self` (never through
        // `iterator_opt`, which would return an iterator carrying the `'static` lifetime). `Db` is `Sync`,
        // so sharing the reference across threads is sound.
        let db: &'static Db = unsafe { &*db };
        RocksDbSnapshot {
            snapshot: db.snapshot(),
            holder,
            config,
            states,
            cf_names,
            prefix_len,
        }
    }
}

impl BackendSnapshot for RocksDbSnapshot {
    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let meta = self
            .states
            .get(state)
            .ok_or_else(|| Error::UnknownState(format!("id {state}")))?;
        if !self.config.key_group_range.contains(kg) {
            return Ok(());
        }
        let cf = cf_handle(&self.holder.db, &self.cf_names, state)?;
        let mut lower = Vec::with_capacity(2);
        write_key_group_prefix(&mut lower, kg, self.prefix_len);
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        ro.set_iterate_lower_bound(lower.clone());
        // kg < max parallelism <= 2^15, so kg + 1 still fits the prefix.
        if let Some(next) = kg.checked_add(1) {
            let mut upper = Vec::with_capacity(2);
            write_key_group_prefix(&mut upper, next, self.prefix_len);
            ro.set_iterate_upper_bound(upper);
        }
        // Like the heap backend: empty values are never stored by the state API except for timers.
        let keep_empty = meta.kind == StateKind::Timers;
        let mut it = self.snapshot.raw_iterator_cf_opt(&cf, ro);
        it.seek(&lower);
        while let Some((k, v)) = it.item() {
            if keep_empty || !v.is_empty() {
                f(k, v)?;
            }
            it.next();
        }
        it.status().map_err(|e| {
            rdb_error(
                format!("reading snapshot of state '{}', key group {kg}", meta.name),
                e,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn savepoint_bytes(snap: &dyn BackendSnapshot) -> Vec<u8> {
        let mut out = Vec::new();
        crate::savepoint::encode(snap, &crate::savepoint::WriteOptions::default(), &mut out)
            .unwrap();
        out
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

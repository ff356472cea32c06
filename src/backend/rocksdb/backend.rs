//! [`RocksDbBackend`]: the [`StateBackend`] implementation over one column family per state.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rocksdb::{
    BoundColumnFamily, IngestExternalFileOptions, ReadOptions, WriteBatch, WriteOptions,
};

use crate::backend::{BackendConfig, BackendSnapshot, StateBackend, StateId};
use crate::error::{Error, Result};
use crate::keygroup::{key_group_prefix_len, read_key_group_prefix, KeyGroup};
use crate::meta::StateMetaInfo;
use keyed_state_lsm::prefix_successor;

use super::load::{LoadRun, Loader};
use super::ttl_filter::TtlSlots;
use super::{
    cf_handle, column_family_name, rdb_error, Db, DbHolder, RocksDbEngine, RocksDbOptions,
    RocksDbSnapshot,
};

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
    pub(super) holder: Arc<DbHolder>,
    pub(super) config: BackendConfig,
    pub(super) options: RocksDbOptions,
    pub(super) prefix_len: usize,
    pub(super) states: Vec<StateMetaInfo>,
    pub(super) cf_names: Vec<String>,
    pub(super) read_opts: ReadOptions,
    pub(super) write_opts: WriteOptions,
    pub(super) value_buf: Vec<u8>,
    pub(super) key_buf: Vec<u8>,
    pub(super) loader: Loader,
    pub(super) ttl: TtlSlots,
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
            .map_err(Error::io_at(
                "creating a temporary directory in",
                std::env::temp_dir(),
            ))?;
        let path = dir.path().to_path_buf();
        Self::open_in(&path, Some(dir), config, options)
    }

    fn open_in(
        dir: &Path,
        temp: Option<tempfile::TempDir>,
        config: BackendConfig,
        options: RocksDbOptions,
    ) -> Result<Self> {
        config.validate()?;
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
                    .map_err(Error::io_at("creating the directory", dir))?;
            }
            Err(e) => return Err(Error::io("listing", dir, e)),
        }
        let cache = options.block_cache();
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
                cf_names: parking_lot::Mutex::new(Vec::new()),
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
            ttl: TtlSlots::default(),
        })
    }

    /// A shared handle on the database, valid after this backend is moved into a store.
    pub fn engine(&self) -> RocksDbEngine {
        RocksDbEngine(Arc::clone(&self.holder))
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
        crate::backend::check_access(
            &self.states,
            self.config.key_group_range,
            state,
            kg,
            map,
            op,
        )
    }

    /// Opens the RocksDB database in `dir` that a checkpoint restore put there (RocksDB's own files, one
    /// column family per state of `states`, in id order) as a backend for `config`; `temp`, if given, is
    /// removed with the backend. Nothing is clipped: see [`clip_to`](Self::clip_to).
    #[cfg(feature = "checkpoints")]
    pub(crate) fn open_restored(
        dir: &Path,
        temp: Option<tempfile::TempDir>,
        config: BackendConfig,
        states: Vec<StateMetaInfo>,
        options: &RocksDbOptions,
    ) -> Result<Self> {
        let cache = options.block_cache();
        let cf_options = options.column_options(&cache);
        let names: Vec<String> = states.iter().map(|s| column_family_name(&s.name)).collect();
        // TTL states get their compaction filter at open, as `register_state` gives it to new ones.
        let mut ttl = TtlSlots::default();
        let cfs: Vec<rocksdb::ColumnFamilyDescriptor> = names
            .iter()
            .zip(&states)
            .map(|(n, meta)| {
                let opts = ttl
                    .column_options(&cf_options, meta)
                    .unwrap_or_else(|| cf_options.clone());
                rocksdb::ColumnFamilyDescriptor::new(n, opts)
            })
            .collect();
        let db = Db::open_cf_descriptors(&options.db_options()?, dir, cfs)
            .map_err(|e| rdb_error(format!("opening the restored {}", dir.display()), e))?;
        let mut write_opts = WriteOptions::default();
        write_opts.disable_wal(options.disable_wal);
        write_opts.set_sync(false);
        Ok(RocksDbBackend {
            holder: Arc::new(DbHolder {
                db,
                cf_options,
                cf_names: parking_lot::Mutex::new(names.clone()),
                _dir: temp,
            }),
            prefix_len: key_group_prefix_len(config.max_parallelism),
            config,
            options: options.clone(),
            states,
            cf_names: names,
            read_opts: ReadOptions::default(),
            write_opts,
            value_buf: Vec::new(),
            key_buf: Vec::new(),
            loader: Loader::default(),
            ttl,
        })
    }

    /// Deletes every key outside key groups `keep`, per column family, by range deletion (a restore that
    /// opened an old instance's database for a smaller range).
    #[cfg(feature = "checkpoints")]
    pub(crate) fn clip_to(&self, keep: crate::keygroup::KeyGroupRange) -> Result<()> {
        let max = self.config.max_parallelism;
        let p = self.prefix_len;
        let db = &self.holder.db;
        for state in 0..self.cf_names.len() {
            let cf = cf_handle(db, &self.cf_names, state)?;
            let mut lo = Vec::new();
            crate::keygroup::write_key_group_prefix(&mut lo, keep.start(), p);
            if keep.start() > 0 {
                db.delete_range_cf(&cf, Vec::new(), lo.clone())
                    .map_err(|e| rdb_error("clipping restored key groups", e))?;
            }
            if u32::from(keep.end()) + 1 < max {
                let mut last = Vec::new();
                crate::keygroup::write_key_group_prefix(&mut last, keep.end(), p);
                if let Some(hi) = prefix_successor(&last) {
                    db.delete_range_cf(&cf, hi, vec![0xFF; p + 1])
                        .map_err(|e| rdb_error("clipping restored key groups", e))?;
                }
            }
        }
        Ok(())
    }

    /// The directory SST files for restore are written to (inside the database directory).
    pub(super) fn ingest_dir(&self) -> std::path::PathBuf {
        self.holder.db.path().join("keyed-state-ingest")
    }

    /// Writes every buffered restore run out as one SST file per state.
    fn spill_runs(&mut self) -> Result<()> {
        let dir = self.ingest_dir();
        let states = &self.states;
        let context = |state: usize| match states.get(state) {
            Some(m) => format!("writing a restore SST file on state '{}'", m.name),
            None => format!("writing a restore SST file on state id {state}"),
        };
        self.loader.spill(&dir, &self.holder.cf_options, &context)
    }

    pub(super) fn context(&self, op: &str, state: StateId) -> String {
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
}

impl StateBackend for RocksDbBackend {
    fn backend_name(&self) -> &'static str {
        "rocksdb"
    }

    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn register_state(&mut self, meta: StateMetaInfo) -> Result<StateId> {
        if let Some(id) = crate::backend::reregister(&mut self.states, &meta)? {
            return Ok(id);
        }
        let cf_name = column_family_name(&meta.name);
        let ttl_options = self.ttl.column_options(&self.holder.cf_options, &meta);
        let created = self.holder.db.create_cf(
            &cf_name,
            ttl_options.as_ref().unwrap_or(&self.holder.cf_options),
        );
        if created.is_err() {
            self.ttl.pop();
        }
        created.map_err(|e| {
            rdb_error(
                format!(
                    "creating column family '{cf_name}' for state '{}'",
                    meta.name
                ),
                e,
            )
        })?;
        self.holder.cf_names.lock().push(cf_name.clone());
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

    fn map_scan_from(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        // One seek to `key_ns | from`: timer queues look for a key group's next head this way, without
        // stepping over the tombstones of the timers already removed before it.
        self.check(state, kg, true, "map_scan")?;
        self.set_map_key(key_ns, from);
        let lower = std::mem::take(&mut self.key_buf);
        let result = self.iterate(
            state,
            &lower,
            prefix_successor(key_ns),
            "map_scan",
            &mut |k, v| match k.strip_prefix(key_ns) {
                Some(user_key) => f(user_key, v),
                None => false,
            },
        );
        self.key_buf = lower;
        result
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
            return Err(Error::UnknownStateId(state));
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
            Some(k) => Err(Error::CorruptState {
                state: self.context("scan_state", state),
                detail: format!("entry key {k:02x?} has no key-group prefix"),
            }),
            None => Ok(()),
        }
    }

    fn scan_key_group(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        if state >= self.states.len() {
            return Err(Error::UnknownStateId(state));
        }
        let range = self.config.key_group_range;
        if !range.contains(kg) {
            return Err(crate::backend::out_of_range(range, kg));
        }
        let mut prefix = Vec::with_capacity(2);
        crate::keygroup::write_key_group_prefix(&mut prefix, kg, self.prefix_len);
        let upper = prefix_successor(&prefix);
        self.iterate(state, &prefix, upper, "scan_key_group", &mut |k, v| {
            k.starts_with(&prefix) && f(k, v)
        })
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
            return Err(Error::UnknownStateId(state));
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
            Err(e) => Err(Error::io("removing the directory", dir, e)),
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

    fn checkpoint_capture(&mut self) -> Result<Box<dyn crate::backend::CheckpointCapture>> {
        super::capture::capture(&self.holder)
    }

    fn set_ttl_filter(&mut self, state: StateId, filter: Option<crate::ttl::TtlStateFilter>) {
        self.ttl.set(state, self.states.get(state), filter);
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

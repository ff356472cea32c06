//! Opening an LSM backend: in a temporary directory, in a directory of its own, on an engine checkpoint or
//! on adopted files; the engine options the backend installs (merge operator, TTL filters, prefix
//! extractor) and the backend made around an open engine.

use std::path::Path;
use std::sync::Arc;

use super::engine::Shared;
use super::keys::STATE_PREFIX_LEN;
use super::{LsmBackend, RmwCacheStepping, LOAD_BUFFER_BYTES};
use crate::backend::lsm_load::{LoadRun, Loader};
use crate::backend::lsm_merge::{StateMergeOperator, ValueMerges};
use crate::backend::lsm_ttl::{TtlFilterFactory, TtlFilters};
use crate::backend::state_prefix::StateKeyPrefix;
use crate::backend::BackendConfig;
use crate::error::{Error, Result};
use crate::keygroup::key_group_prefix_len;
use crate::meta::StateMetaInfo;
use keyed_state_lsm::{Db, Options};

/// What the backend shares with the engine's options: the prefix extractor, the TTL filters and the merge
/// operator's states.
struct EngineParts {
    prefixes: Option<Arc<StateKeyPrefix>>,
    ttl: Arc<TtlFilters>,
    merges: Arc<ValueMerges>,
}

impl LsmBackend {
    /// Engine options for tests: small memtables and files, so flushes and compactions run on small data.
    pub fn small_options() -> Options {
        Options {
            memtable_size: 64 << 10,
            target_file_size: 256 << 10,
            level_base_size: 1 << 20,
            block_cache_size: 4 << 20,
            ..Options::default()
        }
    }

    /// An LSM backend in a fresh temporary directory (removed when the backend and its snapshots are gone),
    /// with default engine options.
    pub fn temp(config: BackendConfig) -> Result<Self> {
        Self::temp_with(config, Options::default())
    }

    /// An LSM backend in a fresh temporary directory with the given engine options.
    pub fn temp_with(config: BackendConfig, options: Options) -> Result<Self> {
        let tmp = tempfile::Builder::new()
            .prefix("keyed-state-lsm-")
            .tempdir()
            .map_err(|e| Error::io("creating a temporary directory in", std::env::temp_dir(), e))?;
        let (options, parts) = Self::engine_options(options, &config, &[]);
        let db = Db::open(tmp.path(), options)?;
        Self::from_db(config, Vec::new(), db, parts, Some(tmp))
    }

    /// An LSM backend whose engine lives in `dir` (created if missing). The directory is working storage:
    /// whatever an earlier run left there is discarded (state comes back through savepoints).
    pub fn open(dir: impl AsRef<Path>, config: BackendConfig, options: Options) -> Result<Self> {
        let (options, parts) = Self::engine_options(options, &config, &[]);
        let db = Db::open(dir.as_ref(), options)?;
        let mut b = Self::from_db(config, Vec::new(), db, parts, None)?;
        b.delete_all()?;
        Ok(b)
    }

    /// Opens an engine checkpoint written by [`checkpoint`](Self::checkpoint) of a backend holding
    /// `states` (in id order), as a backend for `config`, and clips it to `config`'s key-group range: the
    /// engine-level rescale path (Flink's RocksDB rescaling from an incremental checkpoint). The checkpoint
    /// directory becomes this backend's working directory.
    pub fn open_checkpoint(
        dir: impl AsRef<Path>,
        config: BackendConfig,
        states: Vec<StateMetaInfo>,
        options: Options,
    ) -> Result<Self> {
        // The states are mapped before the engine opens: it may flush or compact their keys at once.
        let (options, parts) = Self::engine_options(options, &config, &states);
        let db = Db::open(dir.as_ref(), options)?;
        let range = config.key_group_range;
        let mut b = Self::from_db(config, states, db, parts, None)?;
        b.clip_to(range)?;
        Ok(b)
    }

    #[cfg(feature = "checkpoints")]
    /// Opens directory `dir` whose files were adopted with bounds inside `config`'s key-group range: nothing
    /// outside it is visible, so nothing is clipped. `tmp`, if given, is removed when the backend and its
    /// snapshots are gone.
    pub(crate) fn open_adopted(
        dir: &Path,
        tmp: Option<tempfile::TempDir>,
        config: BackendConfig,
        states: Vec<StateMetaInfo>,
        options: Options,
    ) -> Result<Self> {
        let (options, prefixes) = Self::engine_options(options, &config, &states);
        let db = Db::open(dir, options)?;
        Self::from_db(config, states, db, prefixes, tmp)
    }

    /// The engine options the backend needs: its merge operator and its own prefix extractor with `states`
    /// mapped (always replacing any extractor in `options`: none when `options.sst.prefix_bloom_bits_per_key`
    /// is 0 or serialized keys vary in length).
    fn engine_options(
        mut options: Options,
        config: &BackendConfig,
        states: &[StateMetaInfo],
    ) -> (Options, EngineParts) {
        let merges = Arc::new(ValueMerges::default());
        for (id, meta) in states.iter().enumerate() {
            merges.register(id, meta.kind);
        }
        options.merge_operator = Some(Arc::new(StateMergeOperator(Arc::clone(&merges))));
        options.partition_prefix_len = STATE_PREFIX_LEN;
        let ttl = Arc::new(TtlFilters::default());
        options.compaction_filter_factory = Some(Arc::new(TtlFilterFactory(Arc::clone(&ttl))));
        let prefixes = if options.sst.prefix_bloom_bits_per_key > 0 {
            StateKeyPrefix::new(config.max_parallelism, &config.key_serializer).map(Arc::new)
        } else {
            None
        };
        if let Some(x) = &prefixes {
            for (id, meta) in states.iter().enumerate() {
                x.register(id, meta);
            }
        }
        options.sst.prefix_extractor = prefixes
            .clone()
            .map(|x| x as Arc<dyn keyed_state_lsm::PrefixExtractor>);
        (
            options,
            EngineParts {
                prefixes,
                ttl,
                merges,
            },
        )
    }

    fn from_db(
        config: BackendConfig,
        states: Vec<StateMetaInfo>,
        db: Db,
        parts: EngineParts,
        tmp: Option<tempfile::TempDir>,
    ) -> Result<Self> {
        config.validate()?;
        if states.len() > usize::from(u16::MAX) + 1 {
            return Err(Error::InvalidArgument(format!(
                "{} states exceed the LSM backend's limit of 65536",
                states.len()
            )));
        }
        let load = states.iter().map(|_| LoadRun::default()).collect();
        let mut b = LsmBackend {
            prefix_len: key_group_prefix_len(config.max_parallelism),
            config,
            states,
            shared: Arc::new(Shared {
                db,
                prefixes: parts.prefixes,
                ttl: parts.ttl,
                merges: parts.merges,
                unsynced: std::sync::atomic::AtomicBool::new(false),
                step: Default::default(),
                _tmp: tmp,
            }),
            kbuf: Vec::with_capacity(64),
            vbuf: Vec::new(),
            load,
            load_bytes: 0,
            loader: Loader::default(),
            load_buffer_bytes: LOAD_BUFFER_BYTES,
            cache: None,
            cache_charge: None,
            share: None,
            cache_first_touch: false,
            cache_stepping: RmwCacheStepping::DEFAULT,
            map_slots: Vec::new(),
        };
        b.use_default_cache()?;
        Ok(b)
    }
}

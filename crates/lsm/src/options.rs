//! Engine options.

use std::fmt;
use std::sync::Arc;

use super::env::SharedEnv;
use super::filter::CompactionFilterFactory;
use super::merge::MergeOperator;
use super::snapshot::Snapshot;
pub use super::sst::MetadataPlacement;
use super::sst::SstOptions;
use super::storage::StorageHandle;

/// Options of a [`Db`](super::db::Db).
#[derive(Clone)]
pub struct Options {
    /// Memtable size at which it is switched to immutable and flushed (default 64 MiB). Includes each
    /// memtable's point index (charged as it grows, ≈ 17 bytes per distinct key).
    pub memtable_size: usize,
    /// Immutable memtables allowed before writes stall (default 2).
    pub max_immutable_memtables: usize,
    /// Number of L0 sorted runs that triggers an L0 compaction (default 4). A run is what one flush or one
    /// ingestion added, however many files it was cut into (L0 files whose sequence numbers overlap).
    pub l0_compaction_trigger: usize,
    /// Number of L0 sorted runs at which writes stall until compaction catches up (default 20).
    pub l0_stop_writes_trigger: usize,
    /// L0 compacts into the base level only once it holds this fraction of the base level's bytes (default
    /// 0.25), or `max(l0_compaction_trigger, l0_stop_writes_trigger / 2)` sorted runs (at most the run count
    /// at which writes stop); until then at least `l0_compaction_trigger` adjacent runs merge into one run
    /// (one file) within L0, each older run taken while it holds at most the bytes of the newer runs taken
    /// (the size-ratio rule of universal compaction), so that small flushes (one per checkpoint) do not
    /// rewrite the whole base level every few flushes (`design/lsm-many-states.md`). Held back, L0 stays
    /// under the run count at which writes stop, so holding it back never stalls writes. While the base
    /// level is empty, or with 0, L0 goes into the base level at `l0_compaction_trigger` runs (the leveled
    /// rule).
    pub l0_base_ratio: f64,
    /// Number of levels, L0 included (default 7).
    pub num_levels: usize,
    /// Target total size of the level L0 compacts into, in bytes (default 256 MiB): L1 in static mode; with
    /// [`Options::dynamic_level_bytes`] the upper bound of the base level's target and the floor of every
    /// level's target.
    pub level_base_size: u64,
    /// Size ratio between adjacent levels (default 10).
    pub level_multiplier: u64,
    /// Dynamic level sizing, as RocksDB's `level_compaction_dynamic_level_bytes` (default true, as in
    /// RocksDB 11.8): the last level's target is its actual size, each level above is `level_multiplier`
    /// times smaller, L0 compacts straight into the *base level* (the shallowest level the tree needs) and
    /// the levels between L1 and the base level stay empty. `false`: static targets, L1 =
    /// `level_base_size`, Ln = L1 * `level_multiplier`^(n-1), L0 compacts into L1.
    pub dynamic_level_bytes: bool,
    /// Which file of a level L1+ a size-triggered compaction takes (default
    /// [`CompactionPriority::MinOverlappingRatio`], as RocksDB's default `kMinOverlappingRatio`).
    pub compaction_priority: CompactionPriority,
    /// Target size of one SST written by flush or compaction (default 64 MiB).
    pub target_file_size: u64,
    /// SST writer options.
    pub sst: SstOptions,
    /// Block cache capacity in bytes (default 64 MiB) of an engine with a block cache of its own (no
    /// environment, or one without a memory budget; with a budget the environment's shared block cache is
    /// used and this is ignored). Such an engine's default row cache shares this capacity with the block
    /// cache ([`row_cache_size`](Self::row_cache_size) `None`): each is charged what it holds, each may hold
    /// what the other leaves and at least its guaranteed share when it wants it (the row cache
    /// [`row_cache_min_share`](Self::row_cache_min_share), the block cache the rest), and together they hold at most this
    /// (the row cache's doorkeeper table, 1/32 of it, 2 MiB for the default, included from the row cache's
    /// first miss). With `row_cache_size` `Some(_)` the block cache has this alone.
    pub block_cache_size: usize,
    /// The row cache (default `None`: on, see below). The row cache keeps what point lookups found per
    /// file and key (an entry of about 100 bytes plus its key and about 65 bytes of bookkeeping) rather than
    /// whole blocks, so hot keys scattered over more blocks than the block cache holds are still read from
    /// memory; RocksDB's `row_cache`. A key's rows are cached on its second miss within a while (a
    /// doorkeeper of 1/32 of the capacity remembers the first), so keys read once do not fill it. Reads at
    /// an older snapshot bypass it for files newer than the snapshot.
    ///
    /// - `None`: on an environment with a memory budget, the environment's one row cache, shared with its
    ///   other engines as the block cache is ([`EnvOptions::row_cache_ratio`](crate::EnvOptions::row_cache_ratio));
    ///   otherwise (no environment, or one without a budget: the engine has its own block cache) a row cache
    ///   of its own sharing [`block_cache_size`](Self::block_cache_size) with the block cache (no memory on
    ///   top of it);
    /// - `Some(0)`: no row cache;
    /// - `Some(bytes)`: a row cache of its own of `bytes`, on top of the engine's block cache (on an
    ///   environment with a memory budget, charged to the budget: the shared block cache holds that much
    ///   less).
    ///
    /// Every row cache charges the environment's budget what it holds, at most its capacity
    /// (`design/decisions/0008-row-cache.md`).
    pub row_cache_size: Option<usize>,
    /// The share of [`block_cache_size`](Self::block_cache_size) the default row cache of an engine with a
    /// block cache of its own keeps when it wants it (default 1/8: 8 MiB of the default 64 MiB, its
    /// doorkeeper's 2 MiB included), from 1/32 (the doorkeeper's size, which the row cache cannot evict) to
    /// 1; [`Db::open`](crate::Db::open) rejects any other value (NaN too) with
    /// [`LsmError::InvalidArgument`](crate::LsmError::InvalidArgument). Rows take what the block cache
    /// leaves (all of it where blocks are stored raw and read from the map), and when the block cache grows
    /// they are evicted down to this share, never below it. Used only when the two share one capacity
    /// ([`row_cache_size`](Self::row_cache_size) `None`, no memory budget). Why 1/8:
    /// `design/decisions/0008-row-cache.md`, "One capacity for an engine's own caches".
    pub row_cache_min_share: f64,
    /// Where open SST files keep their decoded index and bloom filter (default
    /// [`MetadataPlacement::Resident`]; `design/lsm-engine.md`, "Table readers").
    pub sst_metadata: MetadataPlacement,
    /// Whether writes are logged to a WAL (default off: durability comes from checkpoints).
    pub wal: bool,
    /// Whether every write syncs the WAL before it is acknowledged (default false).
    pub wal_sync: bool,
    /// What opening does when a WAL record other than the newest log's torn tail is damaged (default
    /// [`WalRecovery::Strict`]; see `design/durability.md`).
    pub wal_recovery: WalRecovery,
    /// The merge operator (default: none; merging then fails).
    pub merge_operator: Option<Arc<dyn MergeOperator>>,
    /// The compaction filter factory (default: none).
    pub compaction_filter_factory: Option<Arc<dyn CompactionFilterFactory>>,
    /// Nice increment of the flush and compaction threads (Linux; default 5, 0 keeps the caller's priority).
    /// Background work then yields the CPU to the threads that read and write when cores are short, and
    /// catches up when they idle; write stalls (memtables or L0 full) bound how far it can fall behind.
    /// RocksDB's equivalent is `Env::LowerThreadPoolCPUPriority`.
    pub background_nice: i32,
    /// Whether the flush and compaction threads run under `SCHED_BATCH` (Linux; default true): a background
    /// thread woken by a write (a memtable switch, a checkpoint) then never preempts the thread that woke
    /// it, but waits for the scheduler's next tick. Without it, on a machine whose cores are busy with
    /// compaction, the woken flush thread takes the writer's core for a time slice (1.5–5 ms measured,
    /// `design/bench-results/2026-12-02-sched-batch/`) in the middle of the call that woke it.
    pub background_batch_policy: bool,
    /// Whether the background thread compacts automatically (default true). Without it, writes never
    /// stall on a deep L0; only `compact_all`/`compact_range` compact.
    pub auto_compaction: bool,
    /// Create the database if missing (default true).
    pub create_if_missing: bool,
    /// Compaction and ingestion start a new SST file whenever the first this-many bytes of the user key
    /// change (default 0: never), as RocksDB's `SstPartitionerFixedPrefix`, except into L0: a flush or a
    /// merge within L0 writes one L0 run whatever it holds. The LSM state backend sets it to its state-id width, so no file below L0 spans
    /// two states (`design/checkpoints.md`, "Restore").
    pub partition_prefix_len: usize,
    /// Whether checkpoints capture the *checkpoint view* (default true): the files the last checkpoint
    /// captured plus the files flushed (and capture files adopted) since, instead of the whole version, so
    /// that a checkpoint's new files are its flushes and not the compactions in between
    /// (`design/checkpoint-view.md`). The view keeps its files on disk after compactions replace them; a
    /// capture takes the whole version instead (and the view becomes it) when the view is past one of the
    /// bounds below, after an ingestion, and at the first checkpoint after opening. The view exists from the
    /// first capture on: an engine never checkpointed keeps nothing for it.
    pub checkpoint_view: bool,
    /// The view's bound on L0 sorted runs (default 10, half of `l0_stop_writes_trigger`'s default), unless
    /// the version itself holds more: a restore adopts a checkpoint's L0 files as L0 runs.
    pub checkpoint_view_max_l0_runs: usize,
    /// The view's bound on L0 sorted runs once a host takes background materializations (default 24, four
    /// above `l0_stop_writes_trigger`'s default), unless the version itself holds more: past
    /// `checkpoint_view_max_l0_runs`, the capture keeps the view while a background materialization takes
    /// it forward (one in flight, or one the checkpoint starts), so that a merge into the base level while
    /// the engine's compactions lag (its own L0 up to the stop trigger) is uploaded in the background, not
    /// in the checkpoint's path. A restore of a checkpoint taken then starts with as many L0 runs: past the
    /// stop trigger, its writes wait for its first merge into the base level (`design/checkpoint-view.md`).
    pub checkpoint_view_hard_l0_runs: usize,
    /// The view's bound on the bytes of its files no longer in the engine's version (local disk the view
    /// alone keeps), as a fraction of the version's bytes (default 2.0: above 1.0, so that after a merge into
    /// the base level, which pins the old base level, a background materialization takes the view forward
    /// instead of the next capture).
    pub checkpoint_view_max_pinned_ratio: f64,
    /// The view's trigger, in L0 sorted runs, for a *background* materialization (default 5, half of
    /// `checkpoint_view_max_l0_runs`): [`Db::checkpoint_view_due`](crate::Db::checkpoint_view_due) says so,
    /// and a host that uploads in the background takes [`Db::begin_view_materialization`](crate::Db::begin_view_materialization)
    /// (`design/checkpoint-view.md`, "In the background"). `usize::MAX`: never.
    pub checkpoint_view_background_l0_runs: usize,
    /// The view's trigger, in pinned bytes against the version's, for a background materialization
    /// (default 0.5).
    pub checkpoint_view_background_pinned_ratio: f64,
    /// Where the database's files live (default: the real file system, [`StorageHandle::os`]). Every
    /// durable byte goes through it: SST files, WAL, manifest, `CURRENT`, directory syncs, renames,
    /// deletes, listings and the directory lock. Tests pass a
    /// `FaultFs` (feature `test-util`) to lose unsynced bytes at a simulated crash or to fail
    /// chosen operations.
    pub storage: StorageHandle,
    /// The environment the database shares with others: memory budget and background threads (default
    /// `None`: a private one, two threads at [`background_nice`](Options::background_nice) and no budget).
    /// With an environment, [`background_nice`](Options::background_nice) and
    /// [`background_batch_policy`](Options::background_batch_policy) are the environment's, and with a
    /// memory budget [`memtable_size`](Options::memtable_size) is at most a quarter of the memtables' share
    /// of it.
    pub env: Option<SharedEnv>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memtable_size: 64 << 20,
            max_immutable_memtables: 2,
            l0_compaction_trigger: 4,
            l0_stop_writes_trigger: 20,
            l0_base_ratio: 0.25,
            num_levels: 7,
            level_base_size: 256 << 20,
            level_multiplier: 10,
            dynamic_level_bytes: true,
            compaction_priority: CompactionPriority::MinOverlappingRatio,
            target_file_size: 64 << 20,
            sst: SstOptions::default(),
            block_cache_size: 64 << 20,
            row_cache_size: None,
            row_cache_min_share: 0.125,
            sst_metadata: MetadataPlacement::Resident,
            wal: false,
            wal_sync: false,
            wal_recovery: WalRecovery::Strict,
            merge_operator: None,
            compaction_filter_factory: None,
            background_nice: 5,
            background_batch_policy: true,
            auto_compaction: true,
            create_if_missing: true,
            partition_prefix_len: 0,
            checkpoint_view: true,
            checkpoint_view_max_l0_runs: 10,
            checkpoint_view_hard_l0_runs: 24,
            checkpoint_view_max_pinned_ratio: 2.0,
            checkpoint_view_background_l0_runs: 5,
            checkpoint_view_background_pinned_ratio: 0.5,
            storage: StorageHandle::os(),
            env: None,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("memtable_size", &self.memtable_size)
            .field("max_immutable_memtables", &self.max_immutable_memtables)
            .field("l0_compaction_trigger", &self.l0_compaction_trigger)
            .field("l0_stop_writes_trigger", &self.l0_stop_writes_trigger)
            .field("l0_base_ratio", &self.l0_base_ratio)
            .field("num_levels", &self.num_levels)
            .field("level_base_size", &self.level_base_size)
            .field("level_multiplier", &self.level_multiplier)
            .field("dynamic_level_bytes", &self.dynamic_level_bytes)
            .field("compaction_priority", &self.compaction_priority)
            .field("target_file_size", &self.target_file_size)
            .field("block_cache_size", &self.block_cache_size)
            .field("row_cache_size", &self.row_cache_size)
            .field("row_cache_min_share", &self.row_cache_min_share)
            .field("sst_metadata", &self.sst_metadata)
            .field("background_nice", &self.background_nice)
            .field("background_batch_policy", &self.background_batch_policy)
            .field("wal", &self.wal)
            .field("wal_sync", &self.wal_sync)
            .field("wal_recovery", &self.wal_recovery)
            .field("checkpoint_view", &self.checkpoint_view)
            .field(
                "checkpoint_view_max_l0_runs",
                &self.checkpoint_view_max_l0_runs,
            )
            .field(
                "checkpoint_view_hard_l0_runs",
                &self.checkpoint_view_hard_l0_runs,
            )
            .field(
                "checkpoint_view_max_pinned_ratio",
                &self.checkpoint_view_max_pinned_ratio,
            )
            .field(
                "checkpoint_view_background_l0_runs",
                &self.checkpoint_view_background_l0_runs,
            )
            .field(
                "checkpoint_view_background_pinned_ratio",
                &self.checkpoint_view_background_pinned_ratio,
            )
            .field("storage", &self.storage)
            .field("env", &self.env)
            .field(
                "merge_operator",
                &self.merge_operator.as_ref().map(|m| m.name().to_string()),
            )
            .finish_non_exhaustive()
    }
}

/// How WAL replay treats a damaged record (RocksDB's `WALRecoveryMode`). In every mode replay stops at the
/// first record that is not whole, across the whole sequence of logs, and applies nothing after it; a torn
/// tail of the newest log (a write cut off by a crash) is normal and silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WalRecovery {
    /// Any other damage (a bad checksum or record header, a torn record before the end of the newest log,
    /// a batch that does not decode) fails the open with [`LsmError::DamagedLog`](super::LsmError)
    /// naming the file and offset (RocksDB's `kAbsoluteConsistency` for damage).
    #[default]
    Strict,
    /// Recover to the last consistent point before the damage, drop the rest, and say what was dropped in
    /// [`Db::recovery_report`](super::Db::recovery_report) and a `tracing` warning (RocksDB's
    /// `kPointInTimeRecovery`).
    PointInTime,
}

/// How a size-triggered compaction of a level L1+ picks its input file (L0 compactions take every L0 file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompactionPriority {
    /// The file whose overlapping bytes in the output level, divided by its own size, are the smallest
    /// (RocksDB's `kMinOverlappingRatio`): the least rewriting per byte moved down.
    #[default]
    MinOverlappingRatio,
    /// The file after the one the level's previous compaction took, in key order (a per-level compaction
    /// pointer, wrapping around; RocksDB's `kRoundRobin`).
    RoundRobin,
}

/// Options of one read or iterator.
#[derive(Default, Clone)]
pub struct ReadOptions<'a> {
    /// Read as of this snapshot (default: latest).
    pub snapshot: Option<&'a Snapshot>,
    /// Inclusive lower bound of user keys.
    pub lower_bound: Option<Vec<u8>>,
    /// Exclusive upper bound of user keys.
    pub upper_bound: Option<Vec<u8>>,
    /// Only keys starting with this prefix.
    pub prefix: Option<Vec<u8>>,
}

//! Meta information about registered states: name, kind, serializer snapshots, TTL configuration.
//!
//! This is what a savepoint header records per state, and what a restore checks new registrations against.

use crate::serializer::SerializerSnapshot;

/// The kind of a keyed state. The numeric codes are part of the savepoint format (`design/savepoint-format.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// `ValueState`: one value per (key, namespace).
    Value,
    /// `ListState`: elements joined with `0x2C` per (key, namespace).
    List,
    /// `MapState`: one entry per (key, namespace, user key).
    Map,
    /// `ReducingState`: the reduced value per (key, namespace).
    Reducing,
    /// `AggregatingState`: the accumulator per (key, namespace).
    Aggregating,
    /// Reserved: a timer queue, entries `[KG :: TS :: K :: NS]` with empty values.
    Timers,
}

impl StateKind {
    /// The code written into savepoints.
    pub fn code(self) -> u8 {
        match self {
            StateKind::Value => 0,
            StateKind::List => 1,
            StateKind::Map => 2,
            StateKind::Reducing => 3,
            StateKind::Aggregating => 4,
            StateKind::Timers => 5,
        }
    }

    /// The kind for a savepoint code, if known.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => StateKind::Value,
            1 => StateKind::List,
            2 => StateKind::Map,
            3 => StateKind::Reducing,
            4 => StateKind::Aggregating,
            5 => StateKind::Timers,
            _ => return None,
        })
    }

    /// Flink's `StateDescriptor.Type` name (or `PRIORITY_QUEUE` for timers).
    pub fn flink_name(self) -> &'static str {
        match self {
            StateKind::Value => "VALUE",
            StateKind::List => "LIST",
            StateKind::Map => "MAP",
            StateKind::Reducing => "REDUCING",
            StateKind::Aggregating => "AGGREGATING",
            StateKind::Timers => "PRIORITY_QUEUE",
        }
    }
}

impl std::fmt::Display for StateKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Map => "map",
            StateKind::Reducing => "reducing",
            StateKind::Aggregating => "aggregating",
            StateKind::Timers => "timers",
        })
    }
}

/// When the TTL timestamp of an entry is refreshed (Flink's `StateTtlConfig.UpdateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TtlUpdateType {
    /// TTL is disabled.
    Disabled,
    /// Refreshed on creation and on every write (the default).
    OnCreateAndWrite,
    /// Refreshed on reads too.
    OnReadAndWrite,
}

/// Whether expired values that are still stored may be returned (Flink's `StateTtlConfig.StateVisibility`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TtlVisibility {
    /// Return an expired value once if it has not been cleaned up yet.
    ReturnExpiredIfNotCleanedUp,
    /// Never return an expired value (the default).
    NeverReturnExpired,
}

/// TTL configuration of a state (Flink's `StateTtlConfig`). Recorded in savepoints from format v1 on; the
/// value layout `i64 BE last-access timestamp | value` is Flink's `TtlValue`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TtlConfig {
    /// Time to live in milliseconds.
    pub ttl_millis: u64,
    /// When the timestamp is refreshed.
    pub update_type: TtlUpdateType,
    /// Whether expired values may be returned.
    pub visibility: TtlVisibility,
    /// Drop expired entries when writing full snapshots and savepoints.
    pub cleanup_full_snapshot: bool,
    /// Heap incremental cleanup: entries checked per access, and whether on every record; `None` = off.
    pub cleanup_incremental: Option<(u32, bool)>,
    /// LSM compaction-filter cleanup: refresh the clock every N entries; `None` = off.
    pub cleanup_compaction_filter: Option<u64>,
    /// Files older than this many milliseconds are rewritten so that keys nobody touches still expire
    /// (Flink's `periodicCompactionTime`); `None` = never.
    pub periodic_compaction_millis: Option<u64>,
}

impl TtlConfig {
    /// A TTL of `ttl_millis` with Flink's defaults (OnCreateAndWrite, NeverReturnExpired, background cleanup).
    pub fn new(ttl_millis: u64) -> Self {
        TtlConfig {
            ttl_millis,
            update_type: TtlUpdateType::OnCreateAndWrite,
            visibility: TtlVisibility::NeverReturnExpired,
            cleanup_full_snapshot: false,
            cleanup_incremental: Some((5, false)),
            cleanup_compaction_filter: Some(1000),
            periodic_compaction_millis: Some(DEFAULT_PERIODIC_COMPACTION_MILLIS),
        }
    }

    /// A TTL of `ttl` with Flink's defaults (Flink's `StateTtlConfig.newBuilder(ttl)`).
    pub fn new_builder(ttl: std::time::Duration) -> Self {
        Self::new(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
    }

    /// Sets when timestamps are refreshed.
    pub fn with_update_type(mut self, update_type: TtlUpdateType) -> Self {
        self.update_type = update_type;
        self
    }

    /// Sets whether expired values may be returned.
    pub fn with_visibility(mut self, visibility: TtlVisibility) -> Self {
        self.visibility = visibility;
        self
    }

    /// Drops expired entries from full snapshots and savepoints.
    pub fn cleanup_full_snapshot(mut self) -> Self {
        self.cleanup_full_snapshot = true;
        self
    }

    /// Heap incremental cleanup: check `entries` entries per state access (and per record if
    /// `every_record`).
    pub fn cleanup_incrementally(mut self, entries: u32, every_record: bool) -> Self {
        self.cleanup_incremental = Some((entries, every_record));
        self
    }

    /// LSM compaction-filter cleanup, reading the clock every `query_time_after_entries` entries.
    pub fn cleanup_in_compaction_filter(mut self, query_time_after_entries: u64) -> Self {
        self.cleanup_compaction_filter = Some(query_time_after_entries);
        self
    }

    /// Rewrites files older than `bound` (`None`: never).
    pub fn with_periodic_compaction(mut self, bound: Option<std::time::Duration>) -> Self {
        self.periodic_compaction_millis =
            bound.map(|b| u64::try_from(b.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// No background cleanup: neither incremental nor compaction filter (Flink's
    /// `disableCleanupInBackground`).
    pub fn disable_cleanup_in_background(mut self) -> Self {
        self.cleanup_incremental = None;
        self.cleanup_compaction_filter = None;
        self
    }

    /// Whether reads refresh the timestamp.
    pub fn updates_on_read(&self) -> bool {
        self.update_type == TtlUpdateType::OnReadAndWrite
    }

    /// Whether an expired value that is still stored is returned (once).
    pub fn returns_expired(&self) -> bool {
        self.visibility == TtlVisibility::ReturnExpiredIfNotCleanedUp
    }
}

/// Flink's default periodic compaction time: 30 days.
pub const DEFAULT_PERIODIC_COMPACTION_MILLIS: u64 = 30 * 24 * 60 * 60 * 1000;

/// Everything recorded about one registered state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StateMetaInfo {
    /// The state's name, unique within a backend.
    pub name: String,
    /// Its kind.
    pub kind: StateKind,
    /// Snapshot of the namespace serializer.
    pub namespace_serializer: SerializerSnapshot,
    /// Snapshot of the state serializer: the value (Value), a list serializer over the element (List), a map
    /// serializer over user key and value (Map), the reduced value (Reducing), the accumulator (Aggregating),
    /// or the timer element serializer (Timers).
    pub value_serializer: SerializerSnapshot,
    /// TTL configuration, if the state has TTL.
    pub ttl: Option<TtlConfig>,
}

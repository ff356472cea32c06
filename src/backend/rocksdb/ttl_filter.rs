//! The RocksDB variant's TTL compaction filter: the same byte-level expiry rule as the LSM engine's
//! ([`TtlStateFilter`]), run by RocksDB's compaction-filter callback as a Rust closure (not Flink's JNI route).
//!
//! Every state with a TTL configuration gets its column family created with a compaction-filter factory
//! that reads the state's slot in [`TtlSlots`]: the store fills the slot through
//! [`StateBackend::set_ttl_filter`](crate::backend::StateBackend::set_ttl_filter) once the state is
//! registered, and empties it for a state whose TTL does not ask for compaction-filter cleanup. A column
//! family holds one state, so the slot needs no key prefix. The clock is read when a compaction starts and
//! again every `query_time_after_entries` entries (Flink's `queryTimeAfterNumEntries`).
//!
//! What the filter sees is what RocksDB's filter API shows: values (`Put`s) — values, reducing and
//! aggregating accumulators, map entries and **merged** lists. RocksDB hands neither merge operands nor
//! the result of a merge done inside the same compaction to the filter, so an expired list element in an
//! operand is dropped only after a later compaction has merged it into a value and the next one filters
//! that value (the LSM engine's filter also judges single operands). Reads never return expired elements
//! either way: the typed layer filters them.
//!
//! RocksDB applies the filter to entries a snapshot still sees (the C API sets `IgnoreSnapshots`), as
//! Flink's filter does: an open savepoint snapshot may lose entries that expired after it was taken.

use std::ffi::CStr;
use std::sync::Arc;

use parking_lot::RwLock;
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};

use crate::backend::StateId;
use crate::meta::StateMetaInfo;
use crate::ttl::{TtlStateFilter, TtlVerdict};

/// The name RocksDB logs for the factory and its filters.
const FILTER_NAME: &CStr = c"keyed-state.ttl";

/// One TTL state's filter and how often a compaction reads its clock.
#[derive(Clone)]
struct ActiveFilter {
    filter: TtlStateFilter,
    query_every: u64,
}

/// The slot of one state: empty until the store installs the state's filter.
type Slot = Arc<RwLock<Option<ActiveFilter>>>;

/// The filter slots of a backend's TTL states, by state id (`None`: the state has no TTL, so its column
/// family has no filter factory).
#[derive(Default)]
pub(super) struct TtlSlots(Vec<Option<Slot>>);

impl TtlSlots {
    /// The column-family options of a new state: `base`, plus the TTL filter factory when the state has a
    /// TTL configuration. Records the state's slot under the next state id.
    pub(super) fn column_options(
        &mut self,
        base: &rocksdb::Options,
        meta: &StateMetaInfo,
    ) -> Option<rocksdb::Options> {
        let slot = meta.ttl.as_ref().map(|_| Slot::default());
        let options = slot.as_ref().map(|slot| {
            let mut o = base.clone();
            o.set_compaction_filter_factory(TtlFilterFactory(Arc::clone(slot)));
            o
        });
        self.0.push(slot);
        options
    }

    /// Forgets the slot recorded by the last [`column_options`](Self::column_options) (its column family
    /// could not be created).
    pub(super) fn pop(&mut self) {
        self.0.pop();
    }

    /// Installs (or, with `None`, removes) the filter of `state`. Only states whose TTL configuration asks
    /// for compaction-filter cleanup keep one; other states ignore the call.
    pub(super) fn set(
        &self,
        state: StateId,
        meta: Option<&StateMetaInfo>,
        filter: Option<TtlStateFilter>,
    ) {
        let Some(Some(slot)) = self.0.get(state) else {
            return;
        };
        let query_every = meta
            .and_then(|m| m.ttl.as_ref())
            .and_then(|t| t.cleanup_compaction_filter);
        *slot.write() = match (filter, query_every) {
            (Some(filter), Some(n)) => Some(ActiveFilter {
                filter,
                query_every: n.max(1),
            }),
            _ => None,
        };
    }
}

/// The factory of one column family: a filter per compaction, over the state's current slot.
struct TtlFilterFactory(Slot);

impl CompactionFilterFactory for TtlFilterFactory {
    type Filter = TtlCompactionFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> TtlCompactionFilter {
        let active = self.0.read().clone();
        let now = active.as_ref().map_or(0, |a| a.filter.now());
        TtlCompactionFilter {
            active,
            now,
            seen: 0,
            replacement: Vec::new(),
        }
    }

    fn name(&self) -> &CStr {
        FILTER_NAME
    }
}

/// The filter of one compaction of one column family.
struct TtlCompactionFilter {
    active: Option<ActiveFilter>,
    /// The time last read from the state's clock.
    now: i64,
    /// Entries judged since the clock was last read.
    seen: u64,
    /// The last replacement value handed to RocksDB.
    replacement: Vec<u8>,
}

impl TtlCompactionFilter {
    /// The verdict on one stored value, reading the clock every `query_every` entries.
    fn judge(&mut self, value: &[u8]) -> TtlVerdict {
        let Some(a) = &self.active else {
            return TtlVerdict::Keep;
        };
        self.seen += 1;
        if self.seen >= a.query_every {
            self.seen = 0;
            self.now = a.filter.now();
        }
        a.filter.judge(value, self.now)
    }
}

impl CompactionFilter for TtlCompactionFilter {
    fn filter(&mut self, _level: u32, _key: &[u8], value: &[u8]) -> Decision {
        match self.judge(value) {
            TtlVerdict::Keep => Decision::Keep,
            TtlVerdict::Remove => Decision::Remove,
            TtlVerdict::Replace(v) => {
                self.replacement = v;
                // SAFETY: the crate's `Decision::Change` wants a `'static` slice, but RocksDB only reads it
                // until the callback returns: its C shim (`rocksdb_compactionfilter_t::Filter` in `c.cc`)
                // copies the bytes into its own string right after the call. A filter from a factory is
                // used by one compaction thread at a time, so `replacement` is not touched again before
                // that copy; the next call replaces it only after RocksDB is done with these bytes.
                let bytes: &'static [u8] = unsafe {
                    std::slice::from_raw_parts(self.replacement.as_ptr(), self.replacement.len())
                };
                Decision::Change(bytes)
            }
        }
    }

    fn name(&self) -> &CStr {
        FILTER_NAME
    }
}

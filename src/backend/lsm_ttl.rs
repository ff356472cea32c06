//! The LSM backend's TTL compaction filter: drops expired values and map entries, and expired list elements
//! inside merged values and inside single merge operands, never an unexpired one.
//!
//! The store hands the backend one [`TtlStateFilter`] per TTL state (layout, time to live, clock); the engine
//! key's two-byte state prefix picks the state's filter. The clock is read once per compaction and again
//! every `query_time_after_entries` entries of a state (Flink's `queryTimeAfterNumEntries`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::StateId;
use crate::lsm::filter::{
    CompactionFilter, CompactionFilterContext, CompactionFilterFactory, FilterDecision,
    FilterEntryKind,
};
use crate::ttl::{TtlLayout, TtlStateFilter, TtlVerdict};

/// One TTL state's filter and how often its clock is read.
#[derive(Clone)]
struct StateFilter {
    filter: TtlStateFilter,
    query_every: u64,
}

/// The filters of every TTL state of one backend, shared with the engine's compactions.
#[derive(Default)]
pub(crate) struct TtlFilters {
    by_state: RwLock<Vec<Option<StateFilter>>>,
    active: AtomicBool,
}

impl TtlFilters {
    /// Sets (or, with `None`, removes) the filter of `state`.
    pub(crate) fn set(&self, state: StateId, filter: Option<TtlStateFilter>, query_every: u64) {
        let mut v = self.by_state.write();
        if v.len() <= state {
            v.resize(state + 1, None);
        }
        v[state] = filter.map(|filter| StateFilter {
            filter,
            query_every: query_every.max(1),
        });
        self.active
            .store(v.iter().any(|f| f.is_some()), Ordering::Release);
    }
}

/// The factory the LSM backend installs in its engine.
pub(crate) struct TtlFilterFactory(pub(crate) Arc<TtlFilters>);

impl CompactionFilterFactory for TtlFilterFactory {
    fn name(&self) -> &str {
        "keyed-state.ttl"
    }

    fn is_active(&self) -> bool {
        self.0.active.load(Ordering::Acquire)
    }

    fn create(&self, _ctx: &CompactionFilterContext) -> Box<dyn CompactionFilter> {
        let states: Vec<Option<(StateFilter, i64, u64)>> = self
            .0
            .by_state
            .read()
            .iter()
            .map(|f| {
                f.as_ref().map(|f| {
                    let now = f.filter.now();
                    (f.clone(), now, 0)
                })
            })
            .collect();
        Box::new(TtlCompactionFilter { states })
    }
}

/// The filter of one compaction: per state, its filter, the time last read and entries since.
struct TtlCompactionFilter {
    states: Vec<Option<(StateFilter, i64, u64)>>,
}

impl CompactionFilter for TtlCompactionFilter {
    fn filter(&mut self, key: &[u8], kind: FilterEntryKind, value: &[u8]) -> FilterDecision {
        let Some(sid) = key
            .get(..2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        else {
            return FilterDecision::Keep;
        };
        let Some(Some((f, now, seen))) = self.states.get_mut(sid) else {
            return FilterDecision::Keep;
        };
        *seen += 1;
        if *seen >= f.query_every {
            *seen = 0;
            *now = f.filter.now();
        }
        // Only list states have merge operands; anything else in an operand is left alone.
        if kind == FilterEntryKind::MergeOperand && !matches!(f.filter.layout, TtlLayout::List(_)) {
            return FilterDecision::Keep;
        }
        match f.filter.judge(value, *now) {
            TtlVerdict::Keep => FilterDecision::Keep,
            TtlVerdict::Remove => FilterDecision::Remove,
            TtlVerdict::Replace(v) => FilterDecision::Replace(v),
        }
    }
}

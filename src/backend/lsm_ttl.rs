//! The LSM backend's TTL compaction filter: drops expired values and map entries, and expired list elements
//! inside merged values and inside single merge operands, never an unexpired one.
//!
//! The store hands the backend one [`TtlStateFilter`] per TTL state (layout, time to live, clock); the engine
//! key's two-byte state prefix picks the state's filter. The clock is read once per compaction and again
//! every `query_time_after_entries` entries of a state (Flink's `queryTimeAfterNumEntries`).
//!
//! Every file written while a filter is installed records, in the user property `PROP_TTL_RANGE`, the
//! smallest and largest TTL timestamp of its entries and the latest moment one of them expires — when every
//! entry of the file is a value, map entry or list (operand) of a TTL state. A file whose latest expiry has
//! passed is compacted on its own, picked from that property without reading the file — or, when nothing
//! below it could resurface, dropped from the version without being read at all.
//!
//! Every such file also records when it was written (`PROP_TTL_WRITTEN`, by the TTL clock); a file written
//! longer ago than the smallest periodic-compaction bound of the TTL states (Flink's
//! `periodicCompactionTime`) is rewritten on its own, so that keys nobody touches still expire.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::StateId;
use crate::ttl::{
    decode_ttl_range, decode_ttl_written, expiration_timestamp, split_list, timestamp_at,
    TtlLayout, TtlStateFilter, TtlVerdict, PROP_TTL_RANGE, PROP_TTL_WRITTEN,
};
use keyed_state_lsm::{
    CompactionFilter, CompactionFilterContext, CompactionFilterFactory, FilterDecision,
    FilterEntryKind, ParsedKey, PropertiesCollector, SstProperties, ValueKind,
};

/// One TTL state's filter and how often its clock is read.
#[derive(Clone)]
struct StateFilter {
    filter: TtlStateFilter,
    query_every: u64,
    /// Files older than this many milliseconds are rewritten; `None`: never.
    periodic_millis: Option<u64>,
}

/// The filters of every TTL state of one backend, shared with the engine's compactions.
#[derive(Default)]
pub(crate) struct TtlFilters {
    by_state: RwLock<Vec<Option<StateFilter>>>,
    active: AtomicBool,
}

impl TtlFilters {
    /// Sets (or, with `None`, removes) the filter of `state`.
    pub(crate) fn set(
        &self,
        state: StateId,
        filter: Option<TtlStateFilter>,
        query_every: u64,
        periodic_millis: Option<u64>,
    ) {
        let mut v = self.by_state.write();
        if v.len() <= state {
            v.resize(state + 1, None);
        }
        v[state] = filter.map(|filter| StateFilter {
            filter,
            query_every: query_every.max(1),
            periodic_millis: periodic_millis.filter(|m| *m > 0),
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

    fn properties_collector(&self) -> Option<Box<dyn PropertiesCollector>> {
        let states = self.0.by_state.read().clone();
        let written = states.iter().flatten().map(|f| f.filter.now()).min();
        Some(Box::new(TtlRangeCollector {
            states,
            range: None,
            poisoned: false,
            written,
        }))
    }

    fn file_due_for_rewrite(&self, properties: &SstProperties) -> bool {
        let Some(written) = properties
            .user
            .iter()
            .find(|(k, _)| k == PROP_TTL_WRITTEN)
            .and_then(|(_, v)| decode_ttl_written(v))
        else {
            return false;
        };
        let states = self.0.by_state.read();
        let bound = states
            .iter()
            .flatten()
            .filter_map(|f| f.periodic_millis)
            .min();
        let now = states.iter().flatten().map(|f| f.filter.now()).min();
        match (bound, now) {
            (Some(bound), Some(now)) => expiration_timestamp(written, bound) <= now,
            _ => false,
        }
    }

    fn file_expired(&self, properties: &SstProperties) -> bool {
        let Some((_, v)) = properties.user.iter().find(|(k, _)| k == PROP_TTL_RANGE) else {
            return false;
        };
        let Some((_, _, latest)) = decode_ttl_range(v) else {
            return false;
        };
        let now = self
            .0
            .by_state
            .read()
            .iter()
            .flatten()
            .map(|f| f.filter.now())
            .min();
        now.is_some_and(|now| latest <= now)
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

/// Collects `PROP_TTL_RANGE` for one file.
struct TtlRangeCollector {
    states: Vec<Option<StateFilter>>,
    /// (smallest timestamp, largest timestamp, latest expiration) so far.
    range: Option<(i64, i64, i64)>,
    /// An entry without TTL timestamps was seen: no range property.
    poisoned: bool,
    /// When the file is written, by the TTL clock.
    written: Option<i64>,
}

impl TtlRangeCollector {
    fn note(&mut self, ts: i64, ttl: u64) {
        let exp = expiration_timestamp(ts, ttl);
        self.range = Some(match self.range {
            None => (ts, ts, exp),
            Some((lo, hi, e)) => (lo.min(ts), hi.max(ts), e.max(exp)),
        });
    }
}

impl PropertiesCollector for TtlRangeCollector {
    fn add(&mut self, ikey_bytes: &[u8], value: &[u8]) {
        if self.poisoned {
            return;
        }
        let Some(p) = ParsedKey::parse(ikey_bytes) else {
            self.poisoned = true;
            return;
        };
        let sid = p
            .user_key
            .get(..2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])));
        let filter = sid.and_then(|sid| self.states.get(sid).cloned().flatten());
        let Some(f) = filter.filter(|_| matches!(p.kind, ValueKind::Put | ValueKind::Merge)) else {
            self.poisoned = true;
            return;
        };
        let ttl = f.filter.ttl_millis;
        let found = match &f.filter.layout {
            TtlLayout::Value => timestamp_at(value, 0)
                .map(|ts| self.note(ts, ttl))
                .is_some(),
            TtlLayout::MapEntry => timestamp_at(value, 1)
                .map(|ts| self.note(ts, ttl))
                .is_some(),
            TtlLayout::List(len) => match split_list(value, len) {
                Some(elements) if !elements.is_empty() => {
                    for e in elements {
                        if let Some(ts) = timestamp_at(e, 0) {
                            self.note(ts, ttl);
                        }
                    }
                    true
                }
                _ => false,
            },
        };
        if !found {
            self.poisoned = true;
        }
    }

    fn finish(&mut self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        if let (false, Some((lo, hi, exp))) = (self.poisoned, self.range) {
            let mut v = Vec::with_capacity(24);
            for x in [lo, hi, exp] {
                v.extend_from_slice(&x.to_be_bytes());
            }
            out.push((PROP_TTL_RANGE.to_string(), v));
        }
        if let Some(t) = self.written {
            out.push((PROP_TTL_WRITTEN.to_string(), t.to_be_bytes().to_vec()));
        }
        out
    }
}

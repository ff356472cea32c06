//! Timer queues: key-group partitioned priority queues of `(timestamp, key, namespace)` (Flink's
//! `KeyGroupPartitionedPriorityQueue`) — the handles, the in-memory heads and the registration of a queue.
//! The store's operations on them (adding, removing, firing: Flink's `InternalTimerService`) are in
//! `timers`.
//!
//! A timer queue is a state of kind `Timers` whose entries are Flink's `KG | (TS ^ i64::MIN) BE | K | NS` with
//! empty values (`layout::timer_key`), stored through the backends' ordered-entry (`map_*`) operations with the
//! key-group prefix as the map and `TS | K | NS` (the *element*) as the user key: an in-memory ordered table per
//! key group on the heap backend, engine entries on the LSM backend. The store keeps, in memory, each key
//! group's smallest element and an ordered set of those heads, so peeking never touches the backend; only
//! removing a key group's head reads it (one seek for the next head). Elements order by timestamp, then key
//! bytes, then namespace bytes — on every backend the same — and the queue is a set: adding a timer twice keeps
//! one.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::descriptor::meta;
use super::descriptor::{HandleCore, StateHandle};
use super::registration::{ns_compat, Registered};
use crate::backend::StateId;
use crate::error::Error;
use crate::keygroup::KeyGroup;
use crate::meta::StateKind;
use crate::serializer::{Compatibility, SerializerSnapshot, TypeSerializer};

/// Flink's `TimerSerializerSnapshot` identifier (nested: key and namespace serializers).
pub const TIMER_SNAPSHOT_ID: &str =
    "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot";
/// Name prefix of the event-time queue of a timer service (Flink's column-family name).
pub const EVENT_TIMERS_PREFIX: &str = "_timer_state/event_";
/// Name prefix of the processing-time queue of a timer service.
pub const PROCESSING_TIMERS_PREFIX: &str = "_timer_state/processing_";

/// A timer: fires for `key` in `namespace` once time reaches `timestamp` (Flink's `InternalTimer`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Timer<K, N> {
    /// When it fires, in milliseconds.
    pub timestamp: i64,
    /// The key it fires for (the current key while it fires).
    pub key: K,
    /// The namespace it fires in (e.g. a window).
    pub namespace: N,
}

/// A registered timer queue (Flink's priority-queue state of timers). Cheap to clone.
pub struct TimerQueue<N: TypeSerializer> {
    pub(crate) core: HandleCore<N>,
}

impl<N: TypeSerializer> Clone for TimerQueue<N> {
    fn clone(&self) -> Self {
        TimerQueue {
            core: self.core.clone(),
        }
    }
}

impl<N: TypeSerializer> StateHandle for TimerQueue<N> {
    type Namespace = N;
    fn id(&self) -> StateId {
        self.core.id
    }
    fn name(&self) -> &str {
        &self.core.name
    }
    fn kind(&self) -> StateKind {
        StateKind::Timers
    }
    fn core(&self) -> &HandleCore<N> {
        &self.core
    }
}

/// A timer service: an event-time and a processing-time queue (Flink's `InternalTimerService`). Cheap to
/// clone; used through the store ([`KeyedStateStore::register_event_time_timer`](super::KeyedStateStore::register_event_time_timer),
/// [`KeyedStateStore::advance_watermark`](super::KeyedStateStore::advance_watermark), ...).
pub struct TimerService<N: TypeSerializer> {
    /// The event-time timers (`_timer_state/event_<name>`).
    pub event: TimerQueue<N>,
    /// The processing-time timers (`_timer_state/processing_<name>`).
    pub processing: TimerQueue<N>,
}

impl<N: TypeSerializer> Clone for TimerService<N> {
    fn clone(&self) -> Self {
        TimerService {
            event: self.event.clone(),
            processing: self.processing.clone(),
        }
    }
}

/// How many elements after a key group's head one backend read caches: firing removes heads in order, and
/// without the cache every removal costs a seek (Flink's RocksDB queue caches a batch per key group too).
pub(super) const RUN_BATCH: usize = 64;

/// The elements cached after one key group's head. Invariant: the key group's elements greater than its head
/// and not greater than the last cached one are exactly `next`, in order; when `complete`, `next` holds every
/// element greater than the head.
#[derive(Debug, Default)]
pub(super) struct Run {
    pub(super) next: VecDeque<Vec<u8>>,
    pub(super) complete: bool,
}

impl Run {
    /// Notes a new element greater than the head, if it falls in the cached range. The run stays at most
    /// [`RUN_BATCH`] long: past that its last element is forgotten (and the run is no longer complete).
    pub(super) fn add(&mut self, el: &[u8]) {
        if self.complete || self.next.back().is_some_and(|b| el < b.as_slice()) {
            let at = self.next.partition_point(|e| e.as_slice() < el);
            self.next.insert(at, el.to_vec());
            if self.next.len() > RUN_BATCH {
                self.next.pop_back();
                self.complete = false;
            }
        }
    }

    /// Forgets a removed element that is not the head.
    pub(super) fn remove(&mut self, el: &[u8]) {
        let at = self.next.partition_point(|e| e.as_slice() < el);
        if self.next.get(at).is_some_and(|e| e.as_slice() == el) {
            self.next.remove(at);
        }
    }
}

/// The in-memory part of one queue: each key group's head (and the elements cached after it), the heads in
/// order, the size and the queue's time.
#[derive(Debug, Default)]
pub(crate) struct QueueHeads {
    pub(super) loaded: bool,
    pub(super) heads: foldhash::HashMap<KeyGroup, Vec<u8>>,
    pub(super) runs: foldhash::HashMap<KeyGroup, Run>,
    pub(super) order: BTreeSet<(Vec<u8>, KeyGroup)>,
    pub(super) len: u64,
    /// The watermark (event time) or processing time the queue was last advanced to.
    pub(super) time: Option<i64>,
}

impl QueueHeads {
    /// Forgets what is cached (after a restore): the next use reads the heads from the backend again.
    pub(crate) fn invalidate(&mut self) {
        self.loaded = false;
        self.heads.clear();
        self.runs.clear();
        self.order.clear();
        self.len = 0;
    }

    pub(super) fn first(&self) -> Option<&(Vec<u8>, KeyGroup)> {
        self.order.first()
    }

    pub(super) fn set_head(&mut self, kg: KeyGroup, head: Option<Vec<u8>>) {
        if let Some(old) = self.heads.remove(&kg) {
            self.order.remove(&(old, kg));
        }
        if let Some(h) = head {
            self.order.insert((h.clone(), kg));
            self.heads.insert(kg, h);
        }
    }
}

/// Builds a timer element `TS ^ i64::MIN (BE) | K | NS`.
pub(super) fn element(out: &mut Vec<u8>, ts: i64, key: &[u8], ns: &[u8]) {
    out.clear();
    out.extend_from_slice(&((ts ^ i64::MIN) as u64).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(ns);
}

/// The registration of a timer queue: Flink's `TimerSerializer` snapshot over the key and namespace
/// serializers; both must be compatible as they are (timer entries are keys: never migrated).
pub(super) fn timer_registration<K: TypeSerializer, N: TypeSerializer>(
    name: &str,
    key: &K,
    ns: &Arc<N>,
) -> Registered {
    let element = SerializerSnapshot::composite(
        TIMER_SNAPSHOT_ID,
        crate::serializer::COMPOSITE_SNAPSHOT_VERSION,
        vec![key.snapshot(), ns.snapshot()],
    );
    let current = element.clone();
    Registered {
        meta: meta(name, StateKind::Timers, ns.snapshot(), element, None),
        ns_compat: ns_compat(ns),
        value_compat: Arc::new(move |old| {
            if *old == current {
                Compatibility::CompatibleAsIs
            } else {
                Compatibility::Incompatible(format!(
                    "timer element serializer {current} cannot read timers written by {old}"
                ))
            }
        }),
        migrate: Arc::new(|prev, _| {
            Err(Error::InvalidArgument(format!(
                "timers written by {prev} cannot be migrated"
            )))
        }),
        ttl_layout: None,
    }
}

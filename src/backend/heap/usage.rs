//! The size of a heap backend's state: entries counted exactly, bytes estimated, published to
//! [`HeapEngine`] handles and, for a backend opened on a [`StateEnv`](crate::env::StateEnv), charged to the
//! environment's memory budget (without a cap: a heap backend never refuses a write for memory).
//!
//! * **Entries** are the sum of the tables' lengths (O(states × key groups), no walk).
//! * **Bytes** are entries × the mean size of an entry, measured on a sample of at most
//!   [`SAMPLE_ENTRIES`] entries spread over the tables: key and value bytes plus [`ENTRY_OVERHEAD`] for the
//!   entry's slot in its table. The mean is measured again when the entries doubled or halved since the
//!   last sample, or after 4 × as many writes as there were entries.
//! * The figures are refreshed every [`REFRESH_WRITES`] writes (8 per table of (state, key group) when that is
//!   more, so that counting stays under a table length read per 8 writes), after bulk changes (restore, value
//!   transformation, TTL cleanup steps), at snapshots and checkpoints, and on
//!   [`HeapBackend::refresh_usage`](super::HeapBackend::refresh_usage).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use keyed_state_lsm::{MemoryReservation, Metric};

use crate::backend::EngineHandle;
use crate::error::Result;

/// Writes between two refreshes of the figures, at least (a refresh reads every table's length, so with
/// more than `REFRESH_WRITES / 8` tables it comes every 8 writes per table).
pub const REFRESH_WRITES: u32 = 1024;

/// At most this many entries are visited to measure the mean entry size.
pub const SAMPLE_ENTRIES: usize = 65_536;

/// Bytes counted per entry beside its key and value: its table slot (two 16-byte inline-or-shared byte
/// strings and a control byte, rounded down).
pub const ENTRY_OVERHEAD: u64 = 32;

/// The figures a [`HeapBackend`](super::HeapBackend) publishes.
#[derive(Debug, Default)]
pub(crate) struct HeapFigures {
    entries: AtomicU64,
    bytes: AtomicU64,
    states: AtomicU64,
}

/// A shared handle on the size figures of a [`HeapBackend`](super::HeapBackend)
/// ([`HeapBackend::engine`](super::HeapBackend::engine)), valid after the backend is moved into a store.
#[derive(Debug, Clone)]
pub struct HeapEngine(pub(crate) Arc<HeapFigures>);

impl HeapEngine {
    /// Entries of every state at the last refresh (map states: one per user key).
    pub fn estimated_entries(&self) -> u64 {
        self.0.entries.load(Ordering::Relaxed)
    }

    /// Estimated bytes of the state at the last refresh (see the module documentation).
    pub fn estimated_bytes(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }
}

impl EngineHandle for HeapEngine {
    /// Nothing runs in the background: returns at once.
    fn wait_for_background_work(&self) -> Result<()> {
        Ok(())
    }

    fn summary(&self) -> String {
        format!(
            "{} states, {} entries, ~{} KiB",
            self.0.states.load(Ordering::Relaxed),
            self.estimated_entries(),
            self.estimated_bytes() >> 10
        )
    }

    /// `rocksdb.estimate-num-keys` (entries), `keyed-state.heap.estimate-state-bytes` and
    /// `keyed-state.heap.states`.
    fn metrics(&self) -> Vec<Metric> {
        [
            ("rocksdb.estimate-num-keys", self.estimated_entries()),
            (
                "keyed-state.heap.estimate-state-bytes",
                self.estimated_bytes(),
            ),
            (
                "keyed-state.heap.states",
                self.0.states.load(Ordering::Relaxed),
            ),
        ]
        .into_iter()
        .map(|(name, value)| Metric {
            name: name.into(),
            value,
        })
        .collect()
    }
}

/// A heap backend's charge to an environment: a reservation of its budget, and the environment's gauge of
/// heap state (the part of the budget's reservations that heap backends hold).
#[derive(Debug)]
pub(crate) struct HeapCharge {
    reservation: MemoryReservation,
    gauge: Arc<AtomicUsize>,
}

impl HeapCharge {
    pub(crate) fn new(reservation: MemoryReservation, gauge: Arc<AtomicUsize>) -> HeapCharge {
        let held = reservation.bytes();
        gauge.fetch_add(held, Ordering::Relaxed);
        HeapCharge { reservation, gauge }
    }

    fn resize(&mut self, bytes: usize) {
        let old = self.reservation.bytes();
        if bytes == old {
            return;
        }
        if bytes > old {
            self.gauge.fetch_add(bytes - old, Ordering::Relaxed);
        } else {
            self.gauge.fetch_sub(old - bytes, Ordering::Relaxed);
        }
        self.reservation.resize(bytes);
    }
}

impl Drop for HeapCharge {
    fn drop(&mut self) {
        self.gauge
            .fetch_sub(self.reservation.bytes(), Ordering::Relaxed);
    }
}

/// The backend's side: when to refresh, the last mean entry size, the charge.
#[derive(Debug, Default)]
pub(crate) struct UsageTracker {
    pub(crate) figures: Arc<HeapFigures>,
    charge: Option<HeapCharge>,
    writes: u32,
    /// Writes between refreshes: [`REFRESH_WRITES`], or 8 per table when more.
    refresh_every: u32,
    writes_since_sample: u64,
    sampled_at_entries: u64,
    mean_entry_bytes: f64,
}

impl UsageTracker {
    pub(crate) fn set_charge(&mut self, charge: HeapCharge) {
        self.charge = Some(charge);
    }

    /// Sets the refresh interval for a backend of `tables` tables.
    pub(crate) fn set_tables(&mut self, tables: usize) {
        self.refresh_every = u32::try_from(tables.saturating_mul(8))
            .unwrap_or(u32::MAX)
            .max(REFRESH_WRITES);
    }

    /// Counts one write; whether the figures are due for a refresh.
    #[inline]
    pub(crate) fn tick(&mut self) -> bool {
        self.writes += 1;
        self.writes >= self.refresh_every.max(REFRESH_WRITES)
    }

    /// Whether the mean entry size should be measured again for `entries` entries.
    pub(crate) fn needs_sample(&self, entries: u64) -> bool {
        let at = self.sampled_at_entries;
        entries > 0
            && (at == 0
                || entries > 2 * at
                || entries < at / 2
                || self.writes_since_sample > 4 * at.max(SAMPLE_ENTRIES as u64))
    }

    /// Publishes `entries` (and `sample`: sampled entries and their bytes, if measured now).
    pub(crate) fn publish(&mut self, states: usize, entries: u64, sample: Option<(u64, u64)>) {
        self.writes_since_sample += u64::from(self.writes);
        self.writes = 0;
        if let Some((n, bytes)) = sample {
            if n > 0 {
                self.mean_entry_bytes = bytes as f64 / n as f64;
            }
            self.sampled_at_entries = entries;
            self.writes_since_sample = 0;
        }
        let bytes = (entries as f64 * self.mean_entry_bytes) as u64;
        self.figures.entries.store(entries, Ordering::Relaxed);
        self.figures.bytes.store(bytes, Ordering::Relaxed);
        self.figures.states.store(states as u64, Ordering::Relaxed);
        if let Some(c) = &mut self.charge {
            c.resize(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
    }
}

/// The estimated bytes of one entry.
#[inline]
pub(crate) fn entry_bytes(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64 + ENTRY_OVERHEAD
}

//! The job's input: the Nexmark generator's events, cut into epochs.
//!
//! Event `n` (0-based, `n < events`) is the generator's `n`-th event. Epoch `e` holds events
//! `[e·K, (e+1)·K)` (K events per epoch), whatever the number of workers: worker `w` of `W` emits the events
//! of each epoch with `n % W == w`. An epoch is a timely timestamp, so "the frontier passed epoch `e`" means
//! every event before `(e+1)·K` has been processed. Event times never decrease with `n` (the generator runs
//! with out-of-order groups of 1), so after epoch `e` the event-time watermark is one millisecond before the
//! first event of epoch `e+1`; after the last epoch it is `i64::MAX`.

use nexmark::config::NexmarkConfig;
use nexmark::event::{Event, EventType};
use nexmark::EventGenerator;

/// Milliseconds of the generator's base time: 2026-01-01T00:00:00Z (a multiple of every window size).
pub const BASE_TIME_MS: u64 = 1_767_225_600_000;
/// Nexmark's default event rate (events per second of event time).
pub const DEFAULT_EVENT_RATE: usize = 10_000;
/// Events of a full Nexmark proportion cycle (1 person, 3 auctions, 46 bids).
const PROPORTION_DENOMINATOR: usize = 50;

/// What the sources generate: `events` events of seed `seed` at `rate` events per second of event time, in
/// epochs of `per_epoch` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventSpec {
    /// Events in the whole job.
    pub events: u64,
    /// The seed: the generator starts at event id `seed × 50 000` (so ids, prices and choices differ by seed).
    pub seed: u64,
    /// Events per epoch.
    pub per_epoch: u64,
    /// Events per second of event time.
    pub rate: usize,
}

impl EventSpec {
    /// The default epoch size for `events` events: about 200 epochs, at least 100 events each and at most
    /// 50 000.
    pub fn default_per_epoch(events: u64) -> u64 {
        (events / 200).clamp(100, 50_000)
    }

    /// The generator's configuration.
    pub fn config(&self) -> NexmarkConfig {
        let seed_offset = usize::try_from(self.seed)
            .unwrap_or(usize::MAX / 2)
            .saturating_mul(PROPORTION_DENOMINATOR * 1000);
        NexmarkConfig {
            base_time: BASE_TIME_MS,
            first_event_id: seed_offset,
            first_rate: self.rate,
            next_rate: self.rate,
            out_of_order_group_size: 1,
            ..NexmarkConfig::default()
        }
    }

    /// The number of epochs (at least 1).
    pub fn epochs(&self) -> u64 {
        self.events.div_ceil(self.per_epoch.max(1)).max(1)
    }

    /// The last epoch.
    pub fn last_epoch(&self) -> u64 {
        self.epochs() - 1
    }

    /// Events `[start, end)` of epoch `e`.
    pub fn epoch_events(&self, e: u64) -> (u64, u64) {
        let start = e.saturating_mul(self.per_epoch).min(self.events);
        let end = (e + 1).saturating_mul(self.per_epoch).min(self.events);
        (start, end)
    }

    /// The event-time watermark once epoch `e` is complete: every later event is at or after it + 1 ms.
    pub fn watermark_after(&self, e: u64) -> i64 {
        if e >= self.last_epoch() {
            return i64::MAX;
        }
        let next = self.epoch_events(e).1;
        let ts = EventGenerator::new(self.config())
            .with_offset(next)
            .timestamp();
        i64::try_from(ts).unwrap_or(i64::MAX) - 1
    }

    /// The events of epoch `e` that worker `worker` of `workers` emits, in order.
    pub fn worker_events(&self, e: u64, worker: u64, workers: u64) -> impl Iterator<Item = Event> {
        let (start, end) = self.epoch_events(e);
        let first = start + (worker + workers - start % workers) % workers;
        let count = if first >= end {
            0
        } else {
            (end - first).div_ceil(workers)
        };
        EventGenerator::new(self.config())
            .with_offset(first)
            .with_step(workers.max(1))
            .take(usize::try_from(count).unwrap_or(usize::MAX))
    }

    /// How many of worker `worker`'s `workers` share of epoch `e` there are (the events it accounts for,
    /// whichever types it generates).
    pub fn worker_share(&self, e: u64, worker: u64, workers: u64) -> u64 {
        let (start, end) = self.epoch_events(e);
        let first = start + (worker + workers - start % workers) % workers;
        if first >= end {
            0
        } else {
            (end - first).div_ceil(workers)
        }
    }

    /// The events of type `kind` in epoch `e` that worker `worker` of `workers` emits: the type's `k`-th
    /// event (counting that type only) goes to worker `k % workers`. The generator makes only these, so a
    /// query that reads bids never pays for generating people and auctions.
    pub fn worker_events_of(
        &self,
        e: u64,
        kind: EventType,
        worker: u64,
        workers: u64,
    ) -> impl Iterator<Item = Event> {
        let (start, end) = self.epoch_events(e);
        let (k0, k1) = (type_count(kind, start), type_count(kind, end));
        let first = k0 + (worker + workers - k0 % workers) % workers;
        let count = if first >= k1 {
            0
        } else {
            (k1 - first).div_ceil(workers)
        };
        EventGenerator::new(self.config())
            .with_type_filter(kind)
            .with_offset(first)
            .with_step(workers.max(1))
            .take(usize::try_from(count).unwrap_or(usize::MAX))
    }

    /// Every event of the job, in order (the tests' references read this).
    pub fn all_events(&self) -> impl Iterator<Item = Event> {
        EventGenerator::new(self.config()).take(usize::try_from(self.events).unwrap_or(usize::MAX))
    }
}

/// Events of type `kind` among events `0..n` (Nexmark's fixed proportions: of every 50 events, event 0 is a
/// person, 1–3 are auctions, 4–49 are bids).
pub fn type_count(kind: EventType, n: u64) -> u64 {
    let (full, rem) = (n / 50, n % 50);
    match kind {
        EventType::Person => full + rem.min(1),
        EventType::Auction => full * 3 + rem.saturating_sub(1).min(3),
        EventType::Bid => full * 46 + rem.saturating_sub(4),
    }
}

/// An event's time in milliseconds.
pub fn event_time(e: &Event) -> i64 {
    i64::try_from(e.timestamp()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_split_every_epoch_exactly() {
        let spec = EventSpec {
            events: 1_003,
            seed: 3,
            per_epoch: 100,
            rate: 1_000,
        };
        let all: Vec<Event> = spec.all_events().collect();
        for workers in [1u64, 2, 3, 7] {
            let mut got = Vec::new();
            for e in 0..spec.epochs() {
                let mut per: Vec<Vec<Event>> = (0..workers)
                    .map(|w| spec.worker_events(e, w, workers).collect())
                    .collect();
                // Interleave back into event order.
                let (s, end) = spec.epoch_events(e);
                for n in s..end {
                    let w = (n % workers) as usize;
                    got.push(per[w].remove(0));
                }
                assert!(per.iter().all(Vec::is_empty));
            }
            assert_eq!(got, all, "{workers} workers");
        }
    }

    #[test]
    fn typed_shares_generate_exactly_the_events_of_each_type() {
        let spec = EventSpec {
            events: 2_345,
            seed: 2,
            per_epoch: 300,
            rate: 1_000,
        };
        let all: Vec<Event> = spec.all_events().collect();
        for workers in [1u64, 3] {
            for kind in [EventType::Person, EventType::Auction, EventType::Bid] {
                let mut got = Vec::new();
                for e in 0..spec.epochs() {
                    for w in 0..workers {
                        got.extend(spec.worker_events_of(e, kind, w, workers));
                    }
                }
                got.sort_by_key(|x| (x.timestamp(), format!("{x:?}")));
                let mut want: Vec<Event> = all
                    .iter()
                    .filter(|x| x.event_type() == kind)
                    .cloned()
                    .collect();
                want.sort_by_key(|x| (x.timestamp(), format!("{x:?}")));
                assert_eq!(got, want, "{kind:?}, {workers} workers");
            }
        }
    }

    #[test]
    fn watermark_is_below_every_later_event() {
        let spec = EventSpec {
            events: 5_000,
            seed: 1,
            per_epoch: 250,
            rate: 1_000,
        };
        let all: Vec<Event> = spec.all_events().collect();
        for e in 0..spec.last_epoch() {
            let wm = spec.watermark_after(e);
            let (_, end) = spec.epoch_events(e);
            assert!(all[end as usize..].iter().all(|x| event_time(x) > wm));
            assert_eq!(event_time(&all[end as usize]), wm + 1);
        }
        assert_eq!(spec.watermark_after(spec.last_epoch()), i64::MAX);
    }
}

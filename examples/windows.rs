//! Sliding and session event-time windows over the public API: a reducing state per window (the window is
//! the namespace, Flink's `TimeWindow`), one event-time timer per window at its last millisecond, fired by the
//! watermark; session windows merge (Flink's `MergingWindowSet`, kept in a map state: a merged window keeps
//! the state namespace of the first, the others' state is merged into it, their timers are replaced by one).
//! `cargo run --release --example windows`.

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{
    LongSerializer, SerializerError, SerializerSnapshot, TypeSerializer,
};
use keyed_state::state::{
    KeyedStateStore, MapState, MapStateDescriptor, ReducingState, ReducingStateDescriptor,
    TimerService,
};

/// A window `[start, end)` (Flink's `TimeWindow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct TimeWindow {
    start: i64,
    end: i64,
}

impl TimeWindow {
    /// The last timestamp in the window: its timer fires when the watermark passes it.
    fn max_timestamp(&self) -> i64 {
        self.end - 1
    }

    /// Whether the windows overlap or touch (Flink's `TimeWindow.intersects`).
    fn intersects(&self, o: &TimeWindow) -> bool {
        self.start <= o.end && self.end >= o.start
    }

    /// The smallest window covering both (Flink's `TimeWindow.cover`).
    fn cover(&self, o: &TimeWindow) -> TimeWindow {
        TimeWindow {
            start: self.start.min(o.start),
            end: self.end.max(o.end),
        }
    }
}

type Store = KeyedStateStore<LongSerializer>;
type Sums = ReducingState<LongSerializer, TimeWindowSerializer>;
type WindowSet = MapState<TimeWindowSerializer, TimeWindowSerializer>;

/// Adds a session-window event of the current key: its window `[ts, ts + gap)` merges with every active
/// window it touches.
fn session_event(
    store: &mut Store,
    (sums, set, timers): (&Sums, &WindowSet, &TimerService<TimeWindowSerializer>),
    ts: i64,
    gap: i64,
) -> keyed_state::Result<()> {
    let new = TimeWindow {
        start: ts,
        end: ts + gap,
    };
    let touching: Vec<(TimeWindow, TimeWindow)> = store
        .map(set)?
        .entries()
        .filter(|e| e.as_ref().map_or(true, |(w, _)| w.intersects(&new)))
        .collect::<keyed_state::Result<_>>()?;
    let state_window = match touching.as_slice() {
        [] => {
            store.map(set)?.put(&new, &new)?;
            store.register_event_time_timer(timers, &new, new.max_timestamp())?;
            new
        }
        [(w, sw)] if w.start <= new.start && new.end <= w.end => *sw,
        [(_, target), rest @ ..] => {
            let merged = touching.iter().fold(new, |m, (w, _)| m.cover(w));
            for (w, _) in &touching {
                store.map(set)?.remove(w)?;
                store.delete_event_time_timer(timers, w, w.max_timestamp())?;
            }
            let sources: Vec<TimeWindow> = rest.iter().map(|(_, sw)| *sw).collect();
            if !sources.is_empty() {
                store.merge_reducing_namespaces(sums, target, &sources)?;
            }
            store.map(set)?.put(&merged, target)?;
            store.register_event_time_timer(timers, &merged, merged.max_timestamp())?;
            *target
        }
    };
    store.reducing_in(sums, &state_window)?.add(&1)
}

/// Flink's `TimeWindow.Serializer`: `i64 start, i64 end`, 16 bytes.
struct TimeWindowSerializer;

impl TypeSerializer for TimeWindowSerializer {
    type Value = TimeWindow;

    fn serialize(&self, w: &TimeWindow, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        out.extend_from_slice(&w.start.to_be_bytes());
        out.extend_from_slice(&w.end.to_be_bytes());
        Ok(())
    }

    fn deserialize(&self, input: &mut &[u8]) -> Result<TimeWindow, SerializerError> {
        let start = LongSerializer.deserialize(input)?;
        let end = LongSerializer.deserialize(input)?;
        Ok(TimeWindow { start, end })
    }

    fn fixed_length(&self) -> Option<usize> {
        Some(16)
    }

    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(
            "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot",
            1,
        )
    }
}

/// The windows an event at `ts` belongs to: of length `size`, starting every `slide` (tumbling: slide = size).
fn assign(ts: i64, size: i64, slide: i64) -> Vec<TimeWindow> {
    let last_start = ts - ts.rem_euclid(slide);
    let mut out = Vec::new();
    let mut start = last_start;
    while start > ts - size {
        out.push(TimeWindow {
            start,
            end: start + size,
        });
        start -= slide;
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let mut store = KeyedStateStore::new(Box::new(LsmBackend::temp(config)?), LongSerializer)?;
    let sums = store.register_reducing(
        ReducingStateDescriptor::new("window-sums", LongSerializer, |a, b| a + b)
            .with_namespace(TimeWindowSerializer),
    )?;
    let timers = store.register_timer_service("window-timers", TimeWindowSerializer)?;

    // 10-second windows sliding by 5 seconds; events from 50 users over two minutes, 1 second out of order.
    let (size, slide, lateness) = (10_000, 5_000, 1_000);
    let mut results: Vec<(i64, TimeWindow, i64)> = Vec::new();
    let mut max_ts = i64::MIN;
    let mut x: u64 = 42;
    for i in 0..20_000i64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let user = (x >> 40) as i64 % 50;
        let ts = i * 6 + (x >> 20) as i64 % lateness;
        store.set_current_key(&user)?;
        for w in assign(ts, size, slide) {
            store.reducing_in(&sums, &w)?.add(&1)?;
            store.register_event_time_timer(&timers, &w, w.max_timestamp())?;
        }
        max_ts = max_ts.max(ts);
        if i % 100 == 99 {
            // The watermark trails the largest timestamp by the allowed lateness.
            store.advance_watermark(&timers, max_ts - lateness, |s, t| {
                let n = s.reducing_in(&sums, &t.namespace)?.get()?.unwrap_or(0);
                s.reducing_in(&sums, &t.namespace)?.clear()?;
                results.push((t.key, t.namespace, n));
                Ok(())
            })?;
        }
    }
    store.advance_watermark(&timers, i64::MAX, |s, t| {
        let n = s.reducing_in(&sums, &t.namespace)?.get()?.unwrap_or(0);
        s.reducing_in(&sums, &t.namespace)?.clear()?;
        results.push((t.key, t.namespace, n));
        Ok(())
    })?;
    let total: i64 = results.iter().map(|r| r.2).sum();
    println!(
        "{} windows fired, {total} window assignments (2 per event), {} entries left",
        results.len(),
        store.num_entries()?
    );
    for (user, w, n) in results.iter().take(5) {
        println!(
            "user {user:2} window [{:6}, {:6}) count {n}",
            w.start, w.end
        );
    }

    // Session windows with a 2-second gap: 20 users, bursts of activity with pauses.
    let session_sums = store.register_reducing(
        ReducingStateDescriptor::new("session-counts", LongSerializer, |a, b| a + b)
            .with_namespace(TimeWindowSerializer),
    )?;
    let set = store.register_map(MapStateDescriptor::new(
        "merging-window-set",
        TimeWindowSerializer,
        TimeWindowSerializer,
    ))?;
    let session_timers = store.register_timer_service("session-timers", TimeWindowSerializer)?;
    let gap = 2_000;
    let mut sessions: Vec<(i64, TimeWindow, i64)> = Vec::new();
    let fire = |s: &mut Store, t: keyed_state::state::Timer<i64, TimeWindow>, out: &mut Vec<_>| {
        let Some(sw) = s.map(&set)?.get(&t.namespace)? else {
            return Ok(());
        };
        let n = s.reducing_in(&session_sums, &sw)?.get()?.unwrap_or(0);
        s.reducing_in(&session_sums, &sw)?.clear()?;
        s.map(&set)?.remove(&t.namespace)?;
        out.push((t.key, t.namespace, n));
        Ok(())
    };
    let mut ts = 0i64;
    for i in 0..10_000i64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let user = (x >> 40) as i64 % 20;
        // Mostly 10 ms apart, now and then a 5-second pause.
        ts += if (x >> 24) % 500 == 0 { 5_000 } else { 10 };
        store.set_current_key(&user)?;
        session_event(&mut store, (&session_sums, &set, &session_timers), ts, gap)?;
        if i % 100 == 99 {
            store.advance_watermark(&session_timers, ts - gap, |s, t| fire(s, t, &mut sessions))?;
        }
    }
    store.advance_watermark(&session_timers, i64::MAX, |s, t| fire(s, t, &mut sessions))?;
    let events: i64 = sessions.iter().map(|r| r.2).sum();
    println!(
        "{} sessions fired over {events} events, {} entries left",
        sessions.len(),
        store.num_entries()?
    );
    for (user, w, n) in sessions.iter().take(5) {
        println!(
            "user {user:2} session [{:6}, {:6}) events {n}",
            w.start, w.end
        );
    }
    Ok(())
}

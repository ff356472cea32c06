//! Tumbling and sliding event-time windows over the public API: a reducing state per window (the window is
//! the namespace, Flink's `TimeWindow`), one event-time timer per window at its last millisecond, fired by the
//! watermark. `cargo run --release --example windows`.

use keyed_state::backend::lsm::LsmBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{
    LongSerializer, SerializerError, SerializerSnapshot, TypeSerializer,
};
use keyed_state::state::{KeyedStateStore, ReducingStateDescriptor};

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
    Ok(())
}

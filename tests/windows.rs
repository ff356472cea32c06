//! Windows as the proof of the timer service (public API only): tumbling and sliding event-time windows with
//! reducing state in `TimeWindow` namespaces and one timer per window, fired by the watermark, checked against
//! a plain `BTreeMap` computation, on the heap and LSM backends, with a savepoint and rescale mid-stream.

use std::collections::BTreeMap;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::keygroup::{key_group_range_for_operator, KeyGroupRange};
use keyed_state::savepoint::{encode, Compression, SavepointReader, WriteOptions};
use keyed_state::serializer::{
    LongSerializer, SerializerError, SerializerSnapshot, TypeSerializer,
};
use keyed_state::state::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct TimeWindow {
    start: i64,
    end: i64,
}

/// Flink's `TimeWindow.Serializer`: `i64 start, i64 end`.
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
        SerializerSnapshot::simple("test/TimeWindow", 1)
    }
}

fn assign(ts: i64, size: i64, slide: i64) -> Vec<TimeWindow> {
    let mut out = Vec::new();
    let mut start = ts - ts.rem_euclid(slide);
    while start > ts - size {
        out.push(TimeWindow {
            start,
            end: start + size,
        });
        start -= slide;
    }
    out
}

struct Op {
    s: KeyedStateStore<LongSerializer>,
    sums: ReducingState<LongSerializer, TimeWindowSerializer>,
    timers: TimerService<TimeWindowSerializer>,
}

fn operator(lsm: bool, range: KeyGroupRange, from: &[SavepointReader]) -> Op {
    let cfg = KeyedStateStore::config_for(&LongSerializer, 64, range);
    let b: Box<dyn StateBackend> = if lsm {
        Box::new(LsmBackend::temp_with(cfg, LsmBackend::small_options()).unwrap())
    } else {
        Box::new(HeapBackend::new(cfg).unwrap())
    };
    let mut s = KeyedStateStore::new(b, LongSerializer).unwrap();
    let sums = s
        .register_reducing(
            ReducingStateDescriptor::new("sums", LongSerializer, |a, b| a + b)
                .with_namespace(TimeWindowSerializer),
        )
        .unwrap();
    let timers = s
        .register_timer_service("window-timers", TimeWindowSerializer)
        .unwrap();
    if !from.is_empty() {
        s.restore(from).unwrap();
    }
    Op { s, sums, timers }
}

type Fired = Vec<(i64, TimeWindow, i64)>;

impl Op {
    fn event(&mut self, key: i64, ts: i64, v: i64, size: i64, slide: i64) {
        self.s.set_current_key(&key).unwrap();
        for w in assign(ts, size, slide) {
            self.s.reducing_in(&self.sums, &w).unwrap().add(&v).unwrap();
            self.s
                .register_event_time_timer(&self.timers, &w, w.end - 1)
                .unwrap();
        }
    }

    fn watermark(&mut self, wm: i64, out: &mut Fired) {
        let sums = self.sums.clone();
        self.s
            .advance_watermark(&self.timers, wm, |s, t| {
                let n = s.reducing_in(&sums, &t.namespace)?.get()?.unwrap_or(0);
                s.reducing_in(&sums, &t.namespace)?.clear()?;
                out.push((t.key, t.namespace, n));
                Ok(())
            })
            .unwrap();
    }

    fn savepoint(&mut self) -> SavepointReader {
        let snap = self.s.snapshot().unwrap();
        let mut bytes = Vec::new();
        encode(
            &*snap,
            &WriteOptions {
                compression: Compression::None,
            },
            &mut bytes,
        )
        .unwrap();
        SavepointReader::from_bytes(bytes).unwrap()
    }
}

fn run(lsm: bool, size: i64, slide: i64) {
    let events: Vec<(i64, i64, i64)> = (0..3000i64)
        .map(|i| ((i * 7919) % 23, i * 5 + (i * 31) % 400, i % 10))
        .collect();
    // The expected result: every window's sum per key, fired once the watermark passes its end.
    let mut want: BTreeMap<(i64, TimeWindow), i64> = BTreeMap::new();
    for &(k, ts, v) in &events {
        for w in assign(ts, size, slide) {
            *want.entry((k, w)).or_default() += v;
        }
    }
    let lateness = 400;
    let mut ops = vec![operator(lsm, KeyGroupRange::all(64), &[])];
    let mut fired: Fired = Vec::new();
    let mut max_ts = i64::MIN;
    for (i, &(k, ts, v)) in events.iter().enumerate() {
        let kg = ops[0].s.key_group_of(&k).unwrap();
        let op = ops
            .iter_mut()
            .find(|o| o.s.config().key_group_range.contains(kg))
            .unwrap();
        op.event(k, ts, v, size, slide);
        max_ts = max_ts.max(ts);
        if i % 50 == 49 {
            for op in ops.iter_mut() {
                op.watermark(max_ts - lateness, &mut fired);
            }
        }
        if i == 1500 {
            // Savepoint and rescale 1 -> 3 mid-stream (on the other backend).
            let sps: Vec<SavepointReader> = ops.iter_mut().map(|o| o.savepoint()).collect();
            ops = (0..3)
                .map(|j| operator(!lsm, key_group_range_for_operator(64, 3, j).unwrap(), &sps))
                .collect();
        }
    }
    for op in ops.iter_mut() {
        op.watermark(i64::MAX, &mut fired);
        assert_eq!(op.s.num_entries().unwrap(), 0, "every window was cleared");
    }
    let got: BTreeMap<(i64, TimeWindow), i64> =
        fired.iter().map(|(k, w, n)| ((*k, *w), *n)).collect();
    assert_eq!(got.len(), fired.len(), "every window fired once");
    assert_eq!(got, want);
}

#[test]
fn tumbling_event_time_windows_fire_their_sums() {
    run(false, 1000, 1000);
    run(true, 1000, 1000);
}

#[test]
fn sliding_event_time_windows_fire_their_sums() {
    run(false, 1000, 250);
    run(true, 1000, 250);
}

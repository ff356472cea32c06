//! Windows as the proof of the timer service (public API only): tumbling and sliding event-time windows with
//! reducing state in `TimeWindow` namespaces and one timer per window, fired by the watermark, and session
//! windows (Flink's `MergingWindowSet`: windows merged with their state namespaces and timers), checked
//! against a plain `BTreeMap` computation, on the heap and LSM backends, with a savepoint and rescale
//! mid-stream.

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

impl TimeWindow {
    /// Flink's `TimeWindow.intersects`: the windows overlap or touch.
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
    /// Session windows: each active window of the current key → the window whose namespace holds its state
    /// (Flink's `MergingWindowSet`, kept in keyed state).
    sessions: MapState<TimeWindowSerializer, TimeWindowSerializer>,
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
    let sessions = s
        .register_map(MapStateDescriptor::new(
            "merging-window-set",
            TimeWindowSerializer,
            TimeWindowSerializer,
        ))
        .unwrap();
    if !from.is_empty() {
        s.restore(from).unwrap();
    }
    Op {
        s,
        sums,
        timers,
        sessions,
    }
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

    /// A session-window event (Flink's `WindowOperator` with a `MergingWindowSet`): the event's window
    /// `[ts, ts + gap)` merges with every active window it intersects; the merged window keeps the state
    /// namespace of the first, the others' state is merged into it, their timers are deleted and one timer
    /// is registered for the merged window.
    fn session_event(&mut self, key: i64, ts: i64, v: i64, gap: i64) {
        let s = &mut self.s;
        s.set_current_key(&key).unwrap();
        let new = TimeWindow {
            start: ts,
            end: ts + gap,
        };
        let overlapping: Vec<(TimeWindow, TimeWindow)> = s
            .map(&self.sessions)
            .unwrap()
            .entries()
            .map(Result::unwrap)
            .filter(|(w, _)| w.intersects(&new))
            .collect();
        let state_window = match overlapping.as_slice() {
            [] => {
                s.map(&self.sessions).unwrap().put(&new, &new).unwrap();
                s.register_event_time_timer(&self.timers, &new, new.end - 1)
                    .unwrap();
                new
            }
            // Inside an active window: nothing merges.
            [(w, sw)] if w.start <= new.start && new.end <= w.end => *sw,
            [(_, target), rest @ ..] => {
                let merged = overlapping.iter().fold(new, |m, (w, _)| m.cover(w));
                for (w, _) in &overlapping {
                    s.map(&self.sessions).unwrap().remove(w).unwrap();
                    s.delete_event_time_timer(&self.timers, w, w.end - 1)
                        .unwrap();
                }
                let sources: Vec<TimeWindow> = rest.iter().map(|(_, sw)| *sw).collect();
                if !sources.is_empty() {
                    s.merge_reducing_namespaces(&self.sums, target, &sources)
                        .unwrap();
                }
                s.map(&self.sessions).unwrap().put(&merged, target).unwrap();
                s.register_event_time_timer(&self.timers, &merged, merged.end - 1)
                    .unwrap();
                *target
            }
        };
        s.reducing_in(&self.sums, &state_window)
            .unwrap()
            .add(&v)
            .unwrap();
    }

    /// Fires the session windows the watermark has passed: the sum in each window's state namespace.
    fn session_watermark(&mut self, wm: i64, out: &mut Fired) {
        let (sums, sessions) = (self.sums.clone(), self.sessions.clone());
        self.s
            .advance_watermark(&self.timers, wm, |s, t| {
                let sw = s
                    .map(&sessions)?
                    .get(&t.namespace)?
                    .expect("a fired session window is active");
                let n = s.reducing_in(&sums, &sw)?.get()?.unwrap_or(0);
                s.reducing_in(&sums, &sw)?.clear()?;
                s.map(&sessions)?.remove(&t.namespace)?;
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

/// Sessions per key from all events at once: each key's timestamps in order, a session running on while the
/// next event's window `[ts, ts + gap)` touches it.
fn sessions_model(events: &[(i64, i64, i64)], gap: i64) -> BTreeMap<(i64, TimeWindow), i64> {
    let mut by_key: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for &(k, ts, v) in events {
        by_key.entry(k).or_default().push((ts, v));
    }
    let mut out = BTreeMap::new();
    for (k, mut evs) in by_key {
        evs.sort();
        let mut cur: Option<(TimeWindow, i64)> = None;
        for (ts, v) in evs {
            cur = match cur {
                Some((w, n)) if ts <= w.end => Some((
                    TimeWindow {
                        start: w.start,
                        end: w.end.max(ts + gap),
                    },
                    n + v,
                )),
                other => {
                    if let Some((w, n)) = other {
                        out.insert((k, w), n);
                    }
                    Some((
                        TimeWindow {
                            start: ts,
                            end: ts + gap,
                        },
                        v,
                    ))
                }
            };
        }
        if let Some((w, n)) = cur {
            out.insert((k, w), n);
        }
    }
    out
}

fn run_sessions(lsm: bool, gap: i64) {
    let events: Vec<(i64, i64, i64)> = (0..3000i64)
        .map(|i| ((i * 7919) % 23, i * 5 + (i * 31) % 400, i % 10 + 1))
        .collect();
    let want = sessions_model(&events, gap);
    // Events are at most `lateness` out of order; the watermark trails by that and the gap, so no event
    // arrives for a session that already fired.
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
        op.session_event(k, ts, v, gap);
        max_ts = max_ts.max(ts);
        if i % 50 == 49 {
            for op in ops.iter_mut() {
                op.session_watermark(max_ts - lateness - gap, &mut fired);
            }
        }
        if i == 1500 {
            // Savepoint and rescale 1 -> 3 mid-stream (on the other backend): window sets, merged state and
            // timers move with their key groups.
            let sps: Vec<SavepointReader> = ops.iter_mut().map(|o| o.savepoint()).collect();
            ops = (0..3)
                .map(|j| operator(!lsm, key_group_range_for_operator(64, 3, j).unwrap(), &sps))
                .collect();
        }
    }
    for op in ops.iter_mut() {
        op.session_watermark(i64::MAX, &mut fired);
        assert_eq!(
            op.s.num_entries().unwrap(),
            0,
            "every session and its window set entry were cleared"
        );
    }
    let got: BTreeMap<(i64, TimeWindow), i64> =
        fired.iter().map(|(k, w, n)| ((*k, *w), *n)).collect();
    assert_eq!(got.len(), fired.len(), "every session fired once");
    assert!(
        want.len() < events.len(),
        "some events merged into shared sessions"
    );
    assert_eq!(got, want);
}

#[test]
fn session_windows_merge_state_and_timers_and_fire_their_sums() {
    run_sessions(false, 150);
    run_sessions(true, 150);
}

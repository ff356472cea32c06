//! Timers and key-group partitioned priority queues (Flink's `InternalPriorityQueueTestBase`) against every backend.

use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{LongSerializer, VoidNamespace, VoidNamespaceSerializer};
use keyed_state::state::*;

use super::{savepoint_of, store_long, Factory};

type Store = KeyedStateStore<LongSerializer>;

/// Two keys in different key groups of a job with max parallelism 128.
fn two_keys(s: &Store) -> (i64, i64) {
    let a = 1;
    let ka = s.key_group_of(&a).unwrap();
    let b = (2..1000)
        .find(|k| s.key_group_of(k).unwrap() != ka)
        .unwrap();
    (a, b)
}

fn add(s: &mut Store, q: &TimerQueue<VoidNamespaceSerializer>, key: i64, ts: i64) -> bool {
    s.set_current_key(&key).unwrap();
    s.add_timer(q, ts, &VoidNamespace).unwrap()
}

fn remove(s: &mut Store, q: &TimerQueue<VoidNamespaceSerializer>, key: i64, ts: i64) -> bool {
    s.set_current_key(&key).unwrap();
    s.remove_timer(q, ts, &VoidNamespace).unwrap()
}

fn pair(t: &Timer<i64, VoidNamespace>) -> (i64, i64) {
    (t.key, t.timestamp)
}

pub fn timers_key_grouped_priority_queue_walkthrough(f: &Factory) {
    // testKeyGroupedInternalPriorityQueue: (a,44), (b,1), (b,1) again, (b,3), (a,42).
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let q = s
        .register_timer_queue("pq", VoidNamespaceSerializer)
        .unwrap();
    let (a, b) = two_keys(&s);
    let (kga, kgb) = (s.key_group_of(&a).unwrap(), s.key_group_of(&b).unwrap());
    assert!(add(&mut s, &q, a, 44), "first element: the head changed");
    assert!(add(&mut s, &q, b, 1), "b1 is the new head");
    assert!(
        !add(&mut s, &q, b, 1),
        "a duplicate is rejected (set semantics)"
    );
    assert!(!add(&mut s, &q, b, 3));
    assert!(!add(&mut s, &q, a, 42));
    assert_eq!(s.timer_count(&q).unwrap(), 4);
    let sub = |s: &mut Store, kg| -> Vec<(i64, i64)> {
        s.timers_in_key_group(&q, kg)
            .unwrap()
            .iter()
            .map(pair)
            .collect()
    };
    assert_eq!(sub(&mut s, kga), vec![(a, 42), (a, 44)]);
    assert_eq!(sub(&mut s, kgb), vec![(b, 1), (b, 3)]);
    assert_eq!(s.peek_timer(&q).unwrap().map(|t| pair(&t)), Some((b, 1)));
    assert_eq!(s.poll_timer(&q).unwrap().map(|t| pair(&t)), Some((b, 1)));
    assert_eq!(s.peek_timer(&q).unwrap().map(|t| pair(&t)), Some((b, 3)));
    let mut all: Vec<(i64, i64)> = s.all_timers(&q).unwrap().iter().map(pair).collect();
    all.sort();
    let mut want = vec![(a, 42), (a, 44), (b, 3)];
    want.sort();
    assert_eq!(all, want);
    assert_eq!(s.timer_count(&q).unwrap(), 3);
    assert!(!remove(&mut s, &q, b, 1), "already gone");
    assert!(remove(&mut s, &q, b, 3), "the head was removed");
    assert_eq!(s.peek_timer(&q).unwrap().map(|t| pair(&t)), Some((a, 42)));
}

pub fn timers_queue_peek_poll_order_and_set_semantics(f: &Factory) {
    // InternalPriorityQueueTestBase: testPeekPollOrder, testPoll, testIsEmpty, testAdd, testRemove,
    // testRemoveInsertMixKeepsOrder.
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let q = s
        .register_timer_queue("pq", VoidNamespaceSerializer)
        .unwrap();
    assert!(s.poll_timer(&q).unwrap().is_none(), "poll on empty");
    assert_eq!(s.timer_count(&q).unwrap(), 0);
    let mut x: u64 = 7;
    let mut model = std::collections::BTreeSet::new();
    for i in 0..300 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = (x >> 33) as i64 % 50;
        let ts = (x >> 20) as i64 % 200 - 100;
        if i % 4 == 3 {
            remove(&mut s, &q, key, ts);
            model.remove(&(ts, key));
        } else {
            add(&mut s, &q, key, ts);
            model.insert((ts, key));
        }
    }
    assert_eq!(s.timer_count(&q).unwrap(), model.len() as u64);
    let mut polled = Vec::new();
    while let Some(t) = s.poll_timer(&q).unwrap() {
        polled.push((t.timestamp, t.key));
    }
    let want: Vec<(i64, i64)> = model.into_iter().collect();
    assert_eq!(polled, want, "non-decreasing priority, every element once");
    assert_eq!(s.timer_count(&q).unwrap(), 0);
}

pub fn timers_fire_in_order_with_the_current_key_set(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let svc = s
        .register_timer_service("user-timers", LongSerializer)
        .unwrap();
    let seen = s
        .register_value(ValueStateDescriptor::new("seen", LongSerializer))
        .unwrap();
    assert_eq!(s.current_watermark(&svc), i64::MIN);
    for k in 0..20i64 {
        s.set_current_key(&k).unwrap();
        s.register_event_time_timer(&svc, &(k % 3), 100 - k)
            .unwrap();
        s.register_event_time_timer(&svc, &(k % 3), 100 - k)
            .unwrap();
        s.register_processing_time_timer(&svc, &0, 1000 + k)
            .unwrap();
    }
    s.set_current_key(&5).unwrap();
    s.delete_event_time_timer(&svc, &2, 95).unwrap();
    let mut fired = Vec::new();
    let n = s
        .advance_watermark(&svc, 90, |s, t| {
            // The timer's key is the current key while it fires.
            assert_eq!(s.current_key().unwrap(), Some(t.key));
            s.value(&seen).unwrap().update(&t.timestamp)?;
            fired.push((t.timestamp, t.key, t.namespace));
            // A new timer due before the watermark fires in this call; one after does not.
            if t.key == 19 && t.timestamp == 81 {
                s.register_event_time_timer(&svc, &7, 85)?;
                s.register_event_time_timer(&svc, &7, 500)?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(s.current_watermark(&svc), 90);
    let mut want: Vec<(i64, i64, i64)> = (10..20).map(|k| (100 - k, k, k % 3)).collect();
    want.sort();
    want.push((85, 19, 7));
    want.sort();
    assert_eq!(fired, want);
    assert_eq!(n, 11);
    s.set_current_key(&12).unwrap();
    assert_eq!(s.value(&seen).unwrap().get().unwrap(), Some(88));
    // Key 5's timer at 95 was deleted.
    let mut later = Vec::new();
    s.advance_watermark(&svc, 1000, |_, t| {
        later.push((t.timestamp, t.key));
        Ok(())
    })
    .unwrap();
    let mut want: Vec<(i64, i64)> = (0..10).filter(|k| *k != 5).map(|k| (100 - k, k)).collect();
    want.sort();
    want.push((500, 19));
    assert_eq!(later, want);
    // Processing time is separate.
    let mut proc = Vec::new();
    s.advance_processing_time(&svc, 1009, |_, t| {
        proc.push(t.key);
        Ok(())
    })
    .unwrap();
    assert_eq!(proc, (0..10).collect::<Vec<_>>());
    assert_eq!(s.timer_count(&svc.processing).unwrap(), 10);
}

pub fn timers_survive_savepoint_and_rescale(f: &Factory) {
    // Timers restore with their key groups: 1 instance -> 2 -> 1.
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let svc = s
        .register_timer_service("window-timers", LongSerializer)
        .unwrap();
    for k in 0..200i64 {
        s.set_current_key(&k).unwrap();
        s.register_event_time_timer(&svc, &(k * 10), 1_000 + k)
            .unwrap();
    }
    let sp = savepoint_of(&mut s);
    assert_eq!(
        sp.header().states[0].name,
        "_timer_state/event_window-timers"
    );
    assert_eq!(
        sp.header().states[0].kind,
        keyed_state::meta::StateKind::Timers
    );
    let mut halves = Vec::new();
    let mut fired = Vec::new();
    for (i, range) in [KeyGroupRange::new(0, 63), KeyGroupRange::new(64, 127)]
        .into_iter()
        .enumerate()
    {
        let mut t = store_long(f, 128, range);
        let svc = t
            .register_timer_service("window-timers", LongSerializer)
            .unwrap();
        t.restore(std::slice::from_ref(&sp)).unwrap();
        // Fire the first few on one half, then savepoint what is left.
        let mut mine = Vec::new();
        t.advance_watermark(&svc, 1_050, |s, timer| {
            assert!(range.contains(s.current_key_group().unwrap()));
            assert_eq!(timer.namespace, timer.key * 10);
            mine.push(timer.timestamp);
            Ok(())
        })
        .unwrap();
        assert!(
            mine.windows(2).all(|w| w[0] <= w[1]),
            "instance {i} in order"
        );
        fired.extend(mine);
        halves.push(savepoint_of(&mut t));
    }
    fired.sort();
    assert_eq!(fired, (1_000..=1_050).collect::<Vec<_>>());
    let mut u = store_long(f, 128, KeyGroupRange::all(128));
    let svc = u
        .register_timer_service("window-timers", LongSerializer)
        .unwrap();
    u.restore(&halves).unwrap();
    assert_eq!(u.timer_count(&svc.event).unwrap(), 149);
    let mut rest = Vec::new();
    u.advance_watermark(&svc, i64::MAX, |_, t| {
        rest.push(t.timestamp);
        Ok(())
    })
    .unwrap();
    assert_eq!(rest, (1_051..1_200).collect::<Vec<_>>());
}

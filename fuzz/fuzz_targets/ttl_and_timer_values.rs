//! Fuzzes the decoders of TTL values and timer elements: arbitrary stored bytes must give a value, a verdict
//! or a typed error, never a panic — in the SST TTL-range property decoder, the byte-level expiry rule (`ttl::TtlStateFilter::judge`, used by the
//! LSM compaction filter and snapshot cleanup) and in the typed reads of TTL states and timer queues.
#![no_main]

use std::sync::Arc;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{LongSerializer, StringSerializer, VoidNamespaceSerializer};
use keyed_state::state::*;
use keyed_state::ttl::{ManualClock, TtlLayout, TtlStateFilter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let now = data.first().map_or(0, |b| i64::from(*b) * 1000);
    let clock = ManualClock::new(now);
    let layouts = [
        TtlLayout::Value,
        TtlLayout::MapEntry,
        TtlLayout::List(Arc::new(|b: &[u8]| (b.len() >= 16).then_some(16))),
        TtlLayout::List(Arc::new(|b: &[u8]| Some(8 + usize::from(*b.get(8)?)))),
    ];
    let _ = keyed_state::ttl::decode_ttl_range(data);
    let _ = keyed_state::ttl::decode_ttl_written(data);
    for layout in layouts {
        let f = TtlStateFilter { layout, ttl_millis: 100, clock: clock.clone() };
        let _ = f.judge(data, now);
    }

    // The typed reads over arbitrary stored bytes.
    let cfg = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
    let Ok(b) = HeapBackend::new(cfg) else { return };
    let Ok(mut s) = KeyedStateStore::new(Box::new(b), LongSerializer) else { return };
    s.set_ttl_time_provider(clock);
    let ttl = StateTtlConfig::new(100);
    let (Ok(v), Ok(l), Ok(m), Ok(q)) = (
        s.register_value(ValueStateDescriptor::new("v", StringSerializer).with_ttl(ttl.clone())),
        s.register_list(ListStateDescriptor::new("l", StringSerializer).with_ttl(ttl.clone())),
        s.register_map(MapStateDescriptor::new("m", LongSerializer, StringSerializer).with_ttl(ttl)),
        s.register_timer_queue("t", VoidNamespaceSerializer),
    ) else {
        return;
    };
    if s.set_current_key(&1).is_err() {
        return;
    }
    let Some(kg) = s.current_key_group() else { return };
    let mut key = vec![kg as u8];
    key.extend_from_slice(&1i64.to_be_bytes());
    key.push(0);
    let backend = s.backend_mut();
    let _ = backend.put(v.id(), kg, &key, data);
    let _ = backend.put(l.id(), kg, &key, data);
    let _ = backend.map_put(m.id(), kg, &key, &7i64.to_be_bytes(), data);
    let _ = backend.map_put(q.id(), kg, &[kg as u8], data, &[]);
    let _ = s.value(&v).and_then(|mut a| a.get());
    let _ = s.list(&l).and_then(|mut a| a.get());
    let _ = s
        .map(&m)
        .and_then(|mut a| a.entries().collect::<keyed_state::Result<Vec<_>>>());
    let _ = s.peek_timer(&q);
    let _ = s.all_timers(&q);
});

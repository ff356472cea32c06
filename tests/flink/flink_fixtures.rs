//! Our entry bytes are Flink's: for the logical state in `tests/fixtures/flink/expected.json`, the entries
//! our savepoint holds equal the canonical entries Flink 2.3.0 wrote (`DUMP.txt` of the canonical
//! savepoints of both Flink backends), TTL timestamps aside. The TTL state is written through our TTL API
//! and the timers through our timer service, so their entries come out of the store like every other.

use std::collections::{BTreeMap, BTreeSet};

use keyed_state::backend::heap::HeapBackend;
use keyed_state::keygroup::key_group_range_for_operator;
use keyed_state::serializer::{
    LongSerializer, StringSerializer, VoidNamespace, VoidNamespaceSerializer,
};
use keyed_state::state::*;
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// (state name, key hex) → value hex, from a DUMP.txt of a canonical savepoint.
fn flink_entries(fixture: &str) -> BTreeMap<(String, String), String> {
    let path = format!("{FIXTURES}/{fixture}/DUMP.txt");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {path}: {e} (see tests/fixtures/flink/README.md)"));
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix('[') else {
            continue;
        };
        let Some((head, kv)) = rest.split_once("] key=") else {
            continue;
        };
        let name = head
            .split_once(' ')
            .map(|(_, n)| n)
            .unwrap_or(head)
            .to_string();
        let (key, value) = kv.split_once(" value=").unwrap_or((kv, ""));
        let prev = out.insert((name, key.to_string()), value.to_string());
        assert!(prev.is_none(), "duplicate entry in {fixture}");
    }
    out
}

/// Our entries for the logical state of expected.json, from heap stores at parallelism 2.
fn our_entries() -> BTreeMap<(String, String), String> {
    our_entries_for(&format!("{FIXTURES}/expected.json"), false)
}

/// Our entries (state name, key hex) → value hex for the logical state of the fixture job's `expected`
/// file (an `expected.json` of the job, as every Flink version's run writes it), from heap stores at
/// parallelism 2: after all records, or with `phase1` after the first phase (each key's `after_phase1`
/// fields; the timers are registered by then).
pub(crate) fn our_entries_for(expected: &str, phase1: bool) -> BTreeMap<(String, String), String> {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(expected).expect("expected.json"))
            .expect("json");
    let max_p = expected["max_parallelism"].as_u64().unwrap() as u32;
    let keys = expected["keys"].as_object().unwrap();
    let mut out = BTreeMap::new();
    for subtask in 0..2 {
        let range = key_group_range_for_operator(max_p, 2, subtask).unwrap();
        let cfg = KeyedStateStore::config_for(&LongSerializer, max_p, range);
        let mut s =
            KeyedStateStore::new(Box::new(HeapBackend::new(cfg).unwrap()), LongSerializer).unwrap();
        let sum = s
            .register_value(ValueStateDescriptor::new("sum", LongSerializer))
            .unwrap();
        let list = s
            .register_list(ListStateDescriptor::new("list", LongSerializer))
            .unwrap();
        let map = s
            .register_map(MapStateDescriptor::new(
                "map",
                StringSerializer,
                LongSerializer,
            ))
            .unwrap();
        let name = s
            .register_value(ValueStateDescriptor::new("name", StringSerializer))
            .unwrap();
        // Flink's job: a one-day TTL, OnCreateAndWrite, NeverReturnExpired.
        let ttl = s
            .register_value(
                ValueStateDescriptor::new("ttl-value", LongSerializer)
                    .with_ttl(StateTtlConfig::new(86_400_000)),
            )
            .unwrap();
        let timers = s
            .register_timer_service("user-timers", VoidNamespaceSerializer)
            .unwrap();
        for (k, all) in keys {
            let key: i64 = k.parse().unwrap();
            if all["subtask"].as_u64().unwrap() != subtask as u64 {
                continue;
            }
            let st = if phase1 { &all["after_phase1"] } else { all };
            s.set_current_key(&key).unwrap();
            assert_eq!(
                s.current_key_group().unwrap() as u64,
                all["key_group"].as_u64().unwrap()
            );
            s.value(&sum)
                .unwrap()
                .update(&st["sum"].as_i64().unwrap())
                .unwrap();
            for v in st["list"].as_array().unwrap() {
                s.list(&list).unwrap().add(&v.as_i64().unwrap()).unwrap();
            }
            for (uk, uv) in st["map"].as_object().unwrap() {
                s.map(&map).unwrap().put(uk, &uv.as_i64().unwrap()).unwrap();
            }
            if let Some(n) = st["name"].as_str() {
                s.value(&name).unwrap().update(&n.to_string()).unwrap();
            }
            s.value(&ttl)
                .unwrap()
                .update(&st["ttl_value"].as_i64().unwrap())
                .unwrap();
            s.register_event_time_timer(
                &timers,
                &VoidNamespace,
                all["event_timer"].as_i64().unwrap(),
            )
            .unwrap();
            if let Some(p) = all["processing_timer"].as_i64() {
                s.register_processing_time_timer(&timers, &VoidNamespace, p)
                    .unwrap();
            }
        }
        let snap = s.snapshot().unwrap();
        for (id, meta) in snap.states().iter().enumerate() {
            for kg in range.iter() {
                snap.visit(id, kg, &mut |k, v| {
                    out.insert((meta.name.clone(), hex(k)), hex(v));
                    Ok(())
                })
                .unwrap();
            }
        }
    }
    out
}

fn check(fixture: &str) {
    let flink = flink_entries(fixture);
    let ours = our_entries();
    assert_eq!(
        flink.len(),
        752,
        "{fixture}: Flink's dump has 752 canonical entries"
    );
    let fk: BTreeSet<_> = flink.keys().collect();
    let ok: BTreeSet<_> = ours.keys().collect();
    assert_eq!(fk, ok, "{fixture}: the same entry keys");
    for (k, fv) in &flink {
        let ov = &ours[k];
        if k.0 == "ttl-value" {
            // i64 BE last-access timestamp (wall clock in the fixture), then the value.
            assert_eq!(fv.len(), ov.len(), "{k:?}");
            assert_eq!(
                fv[16..],
                ov[16..],
                "{fixture}: ttl-value {k:?} value after the timestamp"
            );
        } else {
            assert_eq!(fv, ov, "{fixture}: entry {k:?}");
        }
    }
}

#[test]
fn entries_equal_flink_heap_canonical_savepoint() {
    check("hashmap-canonical-savepoint");
}

#[test]
fn entries_equal_flink_rocksdb_canonical_savepoint() {
    check("rocksdb-canonical-savepoint");
}

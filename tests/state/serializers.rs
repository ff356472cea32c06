//! Serializer tests: round trips, truncation, compatibility, migration, Flink's UTF-16 string rules.

use std::collections::BTreeMap;

use keyed_state::keygroup::{bytes_hash, java_bool_hash, java_double_hash};
use keyed_state::serializer::dynamic::{decode_to_json, is_fixed_length};
use keyed_state::serializer::{
    from_bytes, to_bytes, BooleanSerializer, BytesSerializer, Compatibility, DoubleSerializer,
    IntSerializer, KeySerializer, ListSerializer, LongSerializer, MapSerializer, OptionSerializer,
    SerdeSerializer, SerializerError, SerializerSnapshot, StringSerializer, TtlSerializer,
    TtlValue, TypeSerializer, VoidNamespace, VoidNamespaceSerializer, INT_SNAPSHOT_ID,
    LONG_SNAPSHOT_ID,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Serializes, checks the fixed length, reads back (exactly), re-serializes to the same bytes, checks that
/// every proper prefix fails without panicking, and that the dynamic decoder (if built-in) consumes it all.
fn check<S: TypeSerializer>(s: &S, v: &S::Value) -> Result<S::Value, TestCaseError> {
    let bytes = to_bytes(s, v).map_err(|e| TestCaseError::fail(e.to_string()))?;
    if let Some(n) = s.fixed_length() {
        if s.snapshot() != VoidNamespaceSerializer.snapshot() {
            prop_assert_eq!(bytes.len(), n);
        }
    }
    let back = from_bytes(s, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(
        hex(&to_bytes(s, &back).map_err(|e| TestCaseError::fail(e.to_string()))?),
        hex(&bytes)
    );
    for cut in 0..bytes.len() {
        let mut input = &bytes[..cut];
        prop_assert!(
            s.deserialize(&mut input).is_err(),
            "prefix of {} of {} bytes decoded",
            cut,
            bytes.len()
        );
        let mut input = &bytes[..cut];
        if let Some(r) = decode_to_json(&s.snapshot(), &mut input) {
            prop_assert!(r.is_err(), "dynamic decode of a prefix succeeded");
        }
    }
    let mut input = &bytes[..];
    if let Some(r) = decode_to_json(&s.snapshot(), &mut input) {
        prop_assert!(r.is_ok(), "dynamic decode failed: {:?}", r);
        prop_assert!(input.is_empty());
    }
    if let Some(Some(n)) = is_fixed_length(&s.snapshot()) {
        prop_assert_eq!(bytes.len(), n);
    }
    Ok(back)
}

/// A user type through serde.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reading {
    sensor: String,
    value: f64,
    tags: BTreeMap<String, i32>,
    last: Option<Vec<u8>>,
}

fn reading() -> impl Strategy<Value = Reading> {
    (
        ".{0,12}",
        any::<f64>().prop_filter("not NaN", |f| !f.is_nan()),
        prop::collection::btree_map(".{0,4}", any::<i32>(), 0..4),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..8)),
    )
        .prop_map(|(sensor, value, tags, last)| Reading {
            sensor,
            value,
            tags,
            last,
        })
}

proptest! {
    #[test]
    fn primitives_round_trip(l in any::<i64>(), i in any::<i32>(), b in any::<bool>(), s in any::<String>(),
                             d in any::<f64>(), bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        prop_assert_eq!(check(&LongSerializer, &l)?, l);
        prop_assert_eq!(check(&IntSerializer, &i)?, i);
        prop_assert_eq!(check(&BooleanSerializer, &b)?, b);
        prop_assert_eq!(check(&StringSerializer, &s)?, s.clone());
        prop_assert_eq!(check(&BytesSerializer, &bytes)?, bytes);
        let back = check(&DoubleSerializer, &d)?;
        if d.is_nan() {
            prop_assert!(back.is_nan());
            prop_assert_eq!(back.to_bits(), 0x7ff8_0000_0000_0000);
        } else {
            prop_assert_eq!(back.to_bits(), d.to_bits());
        }
        check(&VoidNamespaceSerializer, &VoidNamespace)?;
    }

    #[test]
    fn composites_round_trip(list in prop::collection::vec(any::<String>(), 0..6),
                             map in prop::collection::btree_map(any::<i64>(), prop::collection::vec(any::<bool>(), 0..3), 0..6),
                             opt in prop::option::of(any::<i32>()),
                             ts in any::<i64>(),
                             nested in prop::collection::vec(prop::option::of(prop::collection::vec(any::<u8>(), 0..4)), 0..4)) {
        prop_assert_eq!(check(&ListSerializer::new(StringSerializer), &list)?, list.clone());
        let m = MapSerializer::new(LongSerializer, ListSerializer::new(BooleanSerializer));
        prop_assert_eq!(check(&m, &map)?, map.clone());
        prop_assert_eq!(check(&OptionSerializer::new(IntSerializer), &opt)?, opt);
        let ttl = TtlSerializer::new(ListSerializer::new(StringSerializer));
        let tv = TtlValue::new(list.clone(), ts);
        prop_assert_eq!(check(&ttl, &tv)?, tv);
        let n = ListSerializer::new(OptionSerializer::new(BytesSerializer));
        prop_assert_eq!(check(&n, &nested)?, nested.clone());
    }

    #[test]
    fn serde_round_trip(r in reading(), v in prop::collection::vec(reading(), 0..3)) {
        let s = SerdeSerializer::<Reading>::new("Reading", 1);
        prop_assert_eq!(check(&s, &r)?, r.clone());
        let l = ListSerializer::new(s);
        prop_assert_eq!(check(&l, &v)?, v);
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = LongSerializer.deserialize(&mut &bytes[..]);
        let _ = StringSerializer.deserialize(&mut &bytes[..]);
        let _ = BytesSerializer.deserialize(&mut &bytes[..]);
        let _ = BooleanSerializer.deserialize(&mut &bytes[..]);
        let _ = ListSerializer::new(StringSerializer).deserialize(&mut &bytes[..]);
        let _ = MapSerializer::new(StringSerializer, OptionSerializer::new(DoubleSerializer)).deserialize(&mut &bytes[..]);
        let _ = TtlSerializer::new(BytesSerializer).deserialize(&mut &bytes[..]);
        let _ = SerdeSerializer::<Reading>::new("Reading", 1).deserialize(&mut &bytes[..]);
        let snap = MapSerializer::new(StringSerializer, ListSerializer::new(BytesSerializer)).snapshot();
        let _ = decode_to_json(&snap, &mut &bytes[..]);
    }
}

#[test]
fn flink_string_rules() {
    let s = StringSerializer;
    let key = "key-13/n=2/ключ-é-€-😀".to_string();
    let expected = "176b65792d31332f6e3d322fba08bb08ce08c7082de9012dac412dbdb00380bc03";
    assert_eq!(hex(&to_bytes(&s, &key).unwrap()), expected);
    assert_eq!(from_bytes(&s, &unhex(expected)).unwrap(), key);
    // Empty string and U+0000 (one unit, written as a 00 byte).
    assert_eq!(hex(&to_bytes(&s, &String::new()).unwrap()), "01");
    assert_eq!(hex(&to_bytes(&s, &"\0".to_string()).unwrap()), "0200");
    // A supplementary character is two UTF-16 units, each a 3-byte varint.
    assert_eq!(
        hex(&to_bytes(&s, &"😀".to_string()).unwrap()),
        "03bdb00380bc03"
    );
    // Lone surrogates cannot be a Rust String: rejected on read, never panicking.
    assert!(matches!(
        from_bytes(&s, &unhex("02bdb003")),
        Err(SerializerError::Invalid { .. })
    ));
    // Flink's null string (00) has no Rust value.
    assert!(from_bytes(&s, &[0]).is_err());
    // Longer than 127 units: the length takes two varint bytes (200 + 1 = 0xc9 0x01).
    let long = "x".repeat(200);
    let bytes = to_bytes(&s, &long).unwrap();
    assert_eq!(hex(&bytes[..3]), "c90178");
    assert_eq!(bytes.len(), 202);
    assert_eq!(from_bytes(&s, &bytes).unwrap(), long);
    let long_uni = "é".repeat(130);
    let bytes = to_bytes(&s, &long_uni).unwrap();
    assert_eq!(hex(&bytes[..4]), "8301e901");
    assert_eq!(from_bytes(&s, &bytes).unwrap(), long_uni);
    // A UTF-16 unit above 0xffff is rejected.
    assert!(from_bytes(&s, &unhex("02ffff07")).is_err());
    // A huge declared length with little input fails without allocating it.
    assert!(from_bytes(&s, &unhex("ffffffff07")).is_err());
    // A length varint overflowing 32 bits is invalid rather than silently truncated.
    assert!(matches!(
        from_bytes(&s, &unhex("ffffffff1f")),
        Err(SerializerError::Invalid { .. })
    ));
}

#[test]
fn exact_flink_encodings() {
    assert_eq!(
        hex(&to_bytes(&DoubleSerializer, &1.0).unwrap()),
        "3ff0000000000000"
    );
    assert_eq!(
        hex(&to_bytes(&DoubleSerializer, &-0.0).unwrap()),
        "8000000000000000"
    );
    assert_eq!(hex(&to_bytes(&BooleanSerializer, &true).unwrap()), "01");
    assert!(from_bytes(&BooleanSerializer, &[2]).is_err());
    assert_eq!(
        hex(&to_bytes(&BytesSerializer, &vec![0xab]).unwrap()),
        "00000001ab"
    );
    assert!(from_bytes(&BytesSerializer, &unhex("ffffffff")).is_err());
    assert!(from_bytes(&BytesSerializer, &unhex("7fffffff00")).is_err());
    let l = ListSerializer::new(IntSerializer);
    assert_eq!(
        hex(&to_bytes(&l, &vec![1, 2]).unwrap()),
        "000000020000000100000002"
    );
    assert!(from_bytes(&l, &unhex("7fffffff")).is_err());
    assert!(from_bytes(&l, &unhex("80000000")).is_err());
    let m = MapSerializer::new(StringSerializer, LongSerializer);
    let mut v = BTreeMap::new();
    v.insert("b".to_string(), 2);
    v.insert("a".to_string(), 1);
    // Written in key order: size, key, isNull=00, value.
    assert_eq!(
        hex(&to_bytes(&m, &v).unwrap()),
        [
            "00000002",
            "0261",
            "00",
            "0000000000000001",
            "0262",
            "00",
            "0000000000000002"
        ]
        .concat()
    );
    // Flink's map in another order reads fine; null values and duplicate keys are rejected.
    let flink = unhex("0000000202620000000000000000020261000000000000000001");
    assert_eq!(from_bytes(&m, &flink).unwrap(), v);
    assert!(from_bytes(&m, &unhex("00000001026101")).is_err());
    let dup = unhex("0000000202610000000000000000010261000000000000000002");
    assert!(from_bytes(&m, &dup).is_err());
    let ttl = TtlSerializer::new(StringSerializer);
    assert_eq!(
        hex(&to_bytes(&ttl, &TtlValue::new("a".to_string(), 5)).unwrap()),
        "00000000000000050261"
    );
    let o = OptionSerializer::new(LongSerializer);
    assert_eq!(hex(&to_bytes(&o, &None).unwrap()), "00");
    assert_eq!(hex(&to_bytes(&o, &Some(1)).unwrap()), "010000000000000001");
    assert!(from_bytes(&o, &[2]).is_err());
}

#[test]
fn key_hashes() {
    assert_eq!(
        BooleanSerializer.key_hash(&true, &[1]),
        java_bool_hash(true)
    );
    assert_eq!(DoubleSerializer.key_hash(&1.5, &[]), java_double_hash(1.5));
    let b = vec![1u8, 2];
    let ser = to_bytes(&BytesSerializer, &b).unwrap();
    assert_eq!(BytesSerializer.key_hash(&b, &ser), bytes_hash(&ser));
}

#[test]
fn snapshots() {
    let s = TtlSerializer::new(MapSerializer::new(StringSerializer, DoubleSerializer)).snapshot();
    assert_eq!(
        s.identifier,
        "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
    );
    assert_eq!(s.version, 3);
    assert_eq!(s.nested[0], LongSerializer.snapshot());
    assert_eq!(
        s.nested[1].identifier,
        "org.apache.flink.api.common.typeutils.base.MapSerializerSnapshot"
    );
    assert_eq!(
        s.nested[1].nested[1].identifier,
        "org.apache.flink.api.common.typeutils.base.DoubleSerializer$DoubleSerializerSnapshot"
    );
    assert_eq!(
        ListSerializer::new(BooleanSerializer).snapshot().nested[0].identifier,
        "org.apache.flink.api.common.typeutils.base.BooleanSerializer$BooleanSerializerSnapshot"
    );
    assert_eq!(
        BytesSerializer.snapshot().identifier,
        "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot"
    );
    // Snapshots survive their byte codec.
    let bytes = s.to_bytes();
    assert_eq!(SerializerSnapshot::decode(&mut &bytes[..]).unwrap(), s);
}

/// The snapshots of every built-in, each paired with its name.
fn all_snapshots() -> Vec<(
    &'static str,
    SerializerSnapshot,
    Box<dyn Fn(&SerializerSnapshot) -> Compatibility>,
)> {
    vec![
        (
            "long",
            LongSerializer.snapshot(),
            Box::new(|p| LongSerializer.compatibility(p)),
        ),
        (
            "int",
            IntSerializer.snapshot(),
            Box::new(|p| IntSerializer.compatibility(p)),
        ),
        (
            "double",
            DoubleSerializer.snapshot(),
            Box::new(|p| DoubleSerializer.compatibility(p)),
        ),
        (
            "bool",
            BooleanSerializer.snapshot(),
            Box::new(|p| BooleanSerializer.compatibility(p)),
        ),
        (
            "string",
            StringSerializer.snapshot(),
            Box::new(|p| StringSerializer.compatibility(p)),
        ),
        (
            "bytes",
            BytesSerializer.snapshot(),
            Box::new(|p| BytesSerializer.compatibility(p)),
        ),
        (
            "void",
            VoidNamespaceSerializer.snapshot(),
            Box::new(|p| VoidNamespaceSerializer.compatibility(p)),
        ),
        (
            "list<long>",
            ListSerializer::new(LongSerializer).snapshot(),
            Box::new(|p| ListSerializer::new(LongSerializer).compatibility(p)),
        ),
        (
            "list<int>",
            ListSerializer::new(IntSerializer).snapshot(),
            Box::new(|p| ListSerializer::new(IntSerializer).compatibility(p)),
        ),
        (
            "map<string,long>",
            MapSerializer::new(StringSerializer, LongSerializer).snapshot(),
            Box::new(|p| MapSerializer::new(StringSerializer, LongSerializer).compatibility(p)),
        ),
        (
            "option<long>",
            OptionSerializer::new(LongSerializer).snapshot(),
            Box::new(|p| OptionSerializer::new(LongSerializer).compatibility(p)),
        ),
        (
            "ttl<long>",
            TtlSerializer::new(LongSerializer).snapshot(),
            Box::new(|p| TtlSerializer::new(LongSerializer).compatibility(p)),
        ),
        (
            "serde Reading v1",
            SerdeSerializer::<Reading>::new("Reading", 1).snapshot(),
            Box::new(|p| SerdeSerializer::<Reading>::new("Reading", 1).compatibility(p)),
        ),
    ]
}

#[test]
fn compatibility_matrix() {
    let all = all_snapshots();
    for (i, (name_new, _, compat)) in all.iter().enumerate() {
        for (j, (name_prev, prev, _)) in all.iter().enumerate() {
            let c = compat(prev);
            if i == j {
                assert_eq!(c, Compatibility::CompatibleAsIs, "{name_new} vs itself");
            } else {
                assert!(c.is_incompatible(), "{name_new} reading {name_prev}: {c:?}");
            }
        }
    }
    // Long reading Int: incompatible, and the reason names both.
    match LongSerializer.compatibility(&IntSerializer.snapshot()) {
        Compatibility::Incompatible(reason) => {
            assert!(
                reason.contains(LONG_SNAPSHOT_ID) && reason.contains(INT_SNAPSHOT_ID),
                "{reason}"
            );
        }
        other => panic!("expected incompatible, got {other:?}"),
    }
    // The nested reason comes through composites.
    match ListSerializer::new(LongSerializer)
        .compatibility(&ListSerializer::new(IntSerializer).snapshot())
    {
        Compatibility::Incompatible(reason) => {
            assert!(reason.contains(INT_SNAPSHOT_ID), "{reason}")
        }
        other => panic!("expected incompatible, got {other:?}"),
    }
    // A simple snapshot of an older snapshot version is still the same format.
    let old_long = SerializerSnapshot::simple(LONG_SNAPSHOT_ID, 2);
    assert_eq!(
        LongSerializer.compatibility(&old_long),
        Compatibility::CompatibleAsIs
    );
    // A composite whose nested count differs is incompatible.
    let bad = SerializerSnapshot::composite(
        "org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot",
        3,
        vec![],
    );
    assert!(ListSerializer::new(LongSerializer)
        .compatibility(&bad)
        .is_incompatible());
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CounterV1 {
    count: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CounterV2 {
    count: u64,
    label: String,
}

fn v2() -> SerdeSerializer<CounterV2> {
    SerdeSerializer::<CounterV2>::new("Counter", 2).with_serde_migration::<CounterV1>(1, |old| {
        CounterV2 {
            count: u64::from(old.count),
            label: "migrated".into(),
        }
    })
}

#[test]
fn serde_migration() {
    let v1 = SerdeSerializer::<CounterV1>::new("Counter", 1);
    let new = v2();
    let prev = v1.snapshot();
    assert_eq!(
        new.compatibility(&prev),
        Compatibility::CompatibleAfterMigration
    );
    assert_eq!(
        new.compatibility(&new.snapshot()),
        Compatibility::CompatibleAsIs
    );
    // Unknown versions, newer versions and other type names are incompatible.
    assert!(new
        .compatibility(&SerdeSerializer::<CounterV1>::new("Counter", 0).snapshot())
        .is_incompatible());
    assert!(new
        .compatibility(&SerdeSerializer::<CounterV1>::new("Counter", 3).snapshot())
        .is_incompatible());
    assert!(new
        .compatibility(&SerdeSerializer::<CounterV1>::new("Other", 1).snapshot())
        .is_incompatible());
    assert!(v1.compatibility(&new.snapshot()).is_incompatible());

    let old_bytes = to_bytes(&v1, &CounterV1 { count: 7 }).unwrap();
    let mut input = &old_bytes[..];
    let migrated = new.deserialize_previous(&prev, &mut input).unwrap();
    assert!(input.is_empty());
    assert_eq!(
        migrated,
        CounterV2 {
            count: 7,
            label: "migrated".into()
        }
    );
    // Not migratable from a version without migration.
    let other = SerdeSerializer::<CounterV1>::new("Counter", 0).snapshot();
    assert!(matches!(
        new.deserialize_previous(&other, &mut &old_bytes[..]),
        Err(SerializerError::NotMigratable { .. })
    ));
}

#[test]
fn composite_migration() {
    let v1 = SerdeSerializer::<CounterV1>::new("Counter", 1);
    let values = vec![CounterV1 { count: 1 }, CounterV1 { count: 2 }];

    // List: element-wise migration.
    let old = ListSerializer::new(v1.clone());
    let new = ListSerializer::new(v2());
    assert_eq!(
        new.compatibility(&old.snapshot()),
        Compatibility::CompatibleAfterMigration
    );
    let bytes = to_bytes(&old, &values).unwrap();
    let mut input = &bytes[..];
    let got = new
        .deserialize_previous(&old.snapshot(), &mut input)
        .unwrap();
    assert!(input.is_empty());
    assert_eq!(got.iter().map(|c| c.count).collect::<Vec<_>>(), vec![1, 2]);

    // Map: keys as-is, values migrated.
    let old = MapSerializer::new(StringSerializer, v1.clone());
    let new = MapSerializer::new(StringSerializer, v2());
    assert_eq!(
        new.compatibility(&old.snapshot()),
        Compatibility::CompatibleAfterMigration
    );
    let mut m = BTreeMap::new();
    m.insert("x".to_string(), CounterV1 { count: 9 });
    let bytes = to_bytes(&old, &m).unwrap();
    let got = new
        .deserialize_previous(&old.snapshot(), &mut &bytes[..])
        .unwrap();
    assert_eq!(got["x"].count, 9);

    // TTL and option.
    let old = TtlSerializer::new(OptionSerializer::new(v1.clone()));
    let new = TtlSerializer::new(OptionSerializer::new(v2()));
    assert_eq!(
        new.compatibility(&old.snapshot()),
        Compatibility::CompatibleAfterMigration
    );
    let bytes = to_bytes(&old, &TtlValue::new(Some(CounterV1 { count: 3 }), 42)).unwrap();
    let got = new
        .deserialize_previous(&old.snapshot(), &mut &bytes[..])
        .unwrap();
    assert_eq!(got.timestamp, 42);
    assert_eq!(got.value.map(|c| c.count), Some(3));

    // Incompatible element: incompatible whole, and deserialize_previous refuses.
    let new = ListSerializer::new(LongSerializer);
    let prev = ListSerializer::new(v1).snapshot();
    assert!(new.compatibility(&prev).is_incompatible());
    assert!(new
        .deserialize_previous(&prev, &mut &[0u8, 0, 0, 0][..])
        .is_err());
    // A TTL snapshot whose timestamp serializer is not Long is incompatible.
    let mut odd = TtlSerializer::new(LongSerializer).snapshot();
    odd.nested[0] = IntSerializer.snapshot();
    assert!(TtlSerializer::new(LongSerializer)
        .compatibility(&odd)
        .is_incompatible());
}

/// A hand-written user serializer: a 2D point as two big-endian i32, with a version 2 that reads version 1
/// (where the point was two i16).
#[derive(Debug, Clone, Copy)]
struct PointSerializer;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Point {
    x: i32,
    y: i32,
}

const POINT_ID: &str = "example/point";

impl TypeSerializer for PointSerializer {
    type Value = Point;
    fn serialize(&self, p: &Point, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        IntSerializer.serialize(&p.x, out)?;
        IntSerializer.serialize(&p.y, out)
    }
    fn deserialize(&self, input: &mut &[u8]) -> Result<Point, SerializerError> {
        Ok(Point {
            x: IntSerializer.deserialize(input)?,
            y: IntSerializer.deserialize(input)?,
        })
    }
    fn fixed_length(&self) -> Option<usize> {
        Some(8)
    }
    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(POINT_ID, 2)
    }
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        match (previous.identifier.as_str(), previous.version) {
            (POINT_ID, 2) => Compatibility::CompatibleAsIs,
            (POINT_ID, 1) => Compatibility::CompatibleAfterMigration,
            _ => Compatibility::Incompatible(format!(
                "{POINT_ID} cannot read {}",
                previous.identifier
            )),
        }
    }
    fn deserialize_previous(
        &self,
        previous: &SerializerSnapshot,
        input: &mut &[u8],
    ) -> Result<Point, SerializerError> {
        if previous.identifier != POINT_ID || previous.version != 1 {
            return Err(SerializerError::NotMigratable {
                previous: previous.identifier.clone(),
                new: POINT_ID.into(),
            });
        }
        if input.len() < 4 {
            return Err(SerializerError::Truncated {
                what: "point v1",
                needed: 4 - input.len(),
            });
        }
        let x = i16::from_be_bytes([input[0], input[1]]);
        let y = i16::from_be_bytes([input[2], input[3]]);
        *input = &input[4..];
        Ok(Point {
            x: x.into(),
            y: y.into(),
        })
    }
}

impl KeySerializer for PointSerializer {}

#[test]
fn hand_written_user_serializer() {
    let p = Point { x: -3, y: 70000 };
    let bytes = to_bytes(&PointSerializer, &p).unwrap();
    assert_eq!(hex(&bytes), "fffffffd00011170");
    assert_eq!(from_bytes(&PointSerializer, &bytes).unwrap(), p);
    assert_eq!(PointSerializer.key_hash(&p, &bytes), bytes_hash(&bytes));
    // Composes with the built-in composites, including migration and dynamic decoding (not built-in: None).
    let m = MapSerializer::new(PointSerializer, StringSerializer);
    let mut v = BTreeMap::new();
    v.insert(p, "here".to_string());
    assert_eq!(from_bytes(&m, &to_bytes(&m, &v).unwrap()).unwrap(), v);
    let prev = SerializerSnapshot::composite(
        "org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot",
        3,
        vec![SerializerSnapshot::simple(POINT_ID, 1)],
    );
    let l = ListSerializer::new(PointSerializer);
    assert_eq!(
        l.compatibility(&prev),
        Compatibility::CompatibleAfterMigration
    );
    let old = unhex("00000001fffd0007");
    let got = l.deserialize_previous(&prev, &mut &old[..]).unwrap();
    assert_eq!(got, vec![Point { x: -3, y: 7 }]);
    assert!(decode_to_json(&l.snapshot(), &mut &old[..]).is_none());
    assert_eq!(is_fixed_length(&PointSerializer.snapshot()), None);
}

#[test]
fn zero_sized_elements_and_hostile_sizes() {
    // A serde unit type writes no bytes; a list of them still round-trips.
    let units = ListSerializer::new(SerdeSerializer::<()>::new("unit", 1));
    let v = vec![(), (), ()];
    assert_eq!(
        from_bytes(&units, &to_bytes(&units, &v).unwrap()).unwrap(),
        v
    );
    // A non-zero-sized element must take bytes: a huge list size over little input fails fast.
    let l = ListSerializer::new(SerdeSerializer::<u64>::new("u64", 1));
    assert!(from_bytes(&l, &unhex("7fffffff01")).is_err());
    let m = MapSerializer::new(IntSerializer, IntSerializer);
    assert!(from_bytes(&m, &unhex("7fffffff")).is_err());
}

#[test]
fn dynamic_json_of_ttl_list() {
    let s = ListSerializer::new(TtlSerializer::new(MapSerializer::new(
        StringSerializer,
        BytesSerializer,
    )));
    let mut m = BTreeMap::new();
    m.insert("k".to_string(), vec![0xde, 0xad]);
    let bytes = to_bytes(&s, &vec![TtlValue::new(m, 12)]).unwrap();
    let mut input = &bytes[..];
    let json = decode_to_json(&s.snapshot(), &mut input).unwrap().unwrap();
    assert_eq!(
        json,
        serde_json::json!([{"timestamp": 12, "value": [["k", {"hex": "dead"}]]}])
    );
    assert!(input.is_empty());
}

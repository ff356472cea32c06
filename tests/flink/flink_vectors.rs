//! Checks every vector of `tests/fixtures/flink/flink-vectors.json` (computed by Apache Flink 2.3.0): murmur
//! hashes, Java hash codes, key groups, serialized key bytes, operator ranges and default max parallelism.

use keyed_state::keygroup::{
    default_max_parallelism, java_int_hash, java_long_hash, java_string_hash, key_group_for_hash,
    key_group_range_for_operator, murmur_hash, operator_index_for_key_group,
};
use keyed_state::serializer::{
    from_bytes, to_bytes, IntSerializer, LongSerializer, StringSerializer, TypeSerializer,
};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/flink/flink-vectors.json"
);

fn vectors() -> Value {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| {
        panic!(
            "cannot read the Flink test vectors at {VECTORS}: {e} (see tests/fixtures/flink/README.md)"
        )
    });
    serde_json::from_str(&text).expect("flink-vectors.json is valid JSON")
}

fn array<'a>(v: &'a Value, field: &str) -> &'a Vec<Value> {
    let a = v[field]
        .as_array()
        .unwrap_or_else(|| panic!("`{field}` is not an array"));
    assert!(!a.is_empty(), "`{field}` is empty");
    a
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn int(v: &Value) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("{v} is not an integer"))
}

/// Checks `kg` (max parallelism → key group) for `hash`; returns how many were checked.
fn check_key_groups(what: &str, hash: i32, kg: &Value) -> usize {
    let kg = kg.as_object().expect("`kg` is an object");
    assert!(!kg.is_empty());
    for (mp, expected) in kg {
        let mp: u32 = mp.parse().expect("max parallelism is a number");
        assert_eq!(
            key_group_for_hash(hash, mp) as i64,
            int(expected),
            "{what}: key group at max parallelism {mp}"
        );
    }
    kg.len()
}

/// Serializes `key`, compares with the hex `bytes`, and deserializes the bytes back.
fn check_bytes<S: TypeSerializer>(what: &str, s: &S, key: &S::Value, bytes: &Value)
where
    S::Value: PartialEq + std::fmt::Debug,
{
    let expected = bytes.as_str().expect("`bytes` is a hex string");
    let written = to_bytes(s, key).expect("serializes");
    assert_eq!(hex(&written), expected, "{what}: serialized bytes");
    assert_eq!(
        &from_bytes(s, &written).expect("deserializes"),
        key,
        "{what}: read back"
    );
    if let Some(n) = s.fixed_length() {
        assert_eq!(written.len(), n, "{what}: fixed length");
    }
}

#[test]
fn murmur_hashes() {
    let v = vectors();
    for pair in array(&v, "murmur") {
        let (input, expected) = (int(&pair[0]), int(&pair[1]));
        let input = i32::try_from(input).expect("murmur input fits i32");
        assert_eq!(murmur_hash(input) as i64, expected, "murmur_hash({input})");
    }
}

#[test]
fn long_keys() {
    let v = vectors();
    let mut checked = 0;
    for e in array(&v, "long_keys") {
        let key: i64 = e["key"]
            .as_str()
            .expect("long key is a decimal string")
            .parse()
            .expect("long key parses");
        let what = format!("long key {key}");
        let hash = java_long_hash(key);
        assert_eq!(hash as i64, int(&e["hash"]), "{what}: Java hash");
        checked += check_key_groups(&what, hash, &e["kg"]);
        check_bytes(&what, &LongSerializer, &key, &e["bytes"]);
    }
    assert!(checked > 0);
}

#[test]
fn int_keys() {
    let v = vectors();
    for e in array(&v, "int_keys") {
        let key = i32::try_from(int(&e["key"])).expect("int key fits i32");
        let what = format!("int key {key}");
        let hash = java_int_hash(key);
        if let Some(h) = e.get("hash") {
            assert_eq!(hash as i64, int(h), "{what}: Java hash");
        }
        check_key_groups(&what, hash, &e["kg"]);
        check_bytes(&what, &IntSerializer, &key, &e["bytes"]);
    }
}

#[test]
fn string_keys() {
    let v = vectors();
    for e in array(&v, "string_keys") {
        let key = e["key"].as_str().expect("string key").to_string();
        let what = format!("string key {key:?}");
        let hash = java_string_hash(&key);
        assert_eq!(hash as i64, int(&e["hash"]), "{what}: Java hash");
        check_key_groups(&what, hash, &e["kg"]);
        check_bytes(&what, &StringSerializer, &key, &e["bytes"]);
    }
}

#[test]
fn operator_ranges() {
    let v = vectors();
    for e in array(&v, "operator_ranges") {
        let mp = u32::try_from(int(&e["max_parallelism"])).expect("max parallelism");
        let p = u32::try_from(int(&e["parallelism"])).expect("parallelism");
        let ranges = array(e, "ranges");
        assert_eq!(
            ranges.len(),
            p as usize,
            "one range per operator (mp {mp}, p {p})"
        );
        for (i, r) in ranges.iter().enumerate() {
            let range = key_group_range_for_operator(mp, p, i as u32).expect("valid range");
            assert_eq!(
                (range.start() as i64, range.end() as i64),
                (int(&r[0]), int(&r[1])),
                "range of operator {i} (mp {mp}, p {p})"
            );
            // Every key group of the range maps back to this operator.
            for kg in range.iter() {
                assert_eq!(operator_index_for_key_group(mp, p, kg), i as u32);
            }
        }
        for pair in array(e, "operator_of_kg") {
            let kg = u16::try_from(int(&pair[0])).expect("key group fits u16");
            assert_eq!(
                operator_index_for_key_group(mp, p, kg) as i64,
                int(&pair[1]),
                "operator of key group {kg} (mp {mp}, p {p})"
            );
        }
    }
}

#[test]
fn default_max_parallelisms() {
    let v = vectors();
    for pair in array(&v, "default_max_parallelism") {
        let p = u32::try_from(int(&pair[0])).expect("parallelism");
        assert_eq!(
            default_max_parallelism(p) as i64,
            int(&pair[1]),
            "default max parallelism for {p}"
        );
    }
}

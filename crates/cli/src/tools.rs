//! What the `inspect` and `dump` commands print, as library functions (so they are tested).

use std::io::Write;

use serde_json::{json, Value};

use keyed_state::keygroup::{key_group_prefix_len, read_key_group_prefix};
use keyed_state::layout::{variable_int_len, LIST_DELIMITER, MAP_VALUE_NULL, MAP_VALUE_PRESENT};
use keyed_state::meta::{StateKind, StateMetaInfo};
use keyed_state::savepoint::SavepointReader;
use keyed_state::serializer::dynamic::{decode_to_json, is_fixed_length};
use keyed_state::serializer::{SerializerSnapshot, TTL_SNAPSHOT_ID};
use keyed_state::{Error, Result};

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn hex_value(bytes: &[u8]) -> Value {
    json!({ "hex": hex(bytes) })
}

/// Decodes one value that must use exactly `bytes`; `{"hex": ...}` where no built-in serializer applies or
/// the bytes do not decode.
fn decode_exact(snapshot: &SerializerSnapshot, bytes: &[u8]) -> Value {
    let mut input = bytes;
    match decode_to_json(snapshot, &mut input) {
        Some(Ok(v)) if input.is_empty() => v,
        _ => hex_value(bytes),
    }
}

/// Decodes one value from the front of `input`, advancing it; `None` if it cannot.
fn decode_front(snapshot: &SerializerSnapshot, input: &mut &[u8]) -> Option<Value> {
    let mut probe = *input;
    match decode_to_json(snapshot, &mut probe) {
        Some(Ok(v)) => {
            *input = probe;
            Some(v)
        }
        _ => None,
    }
}

/// The JSON object `dump --json` prints for one entry.
pub fn entry_json(
    key_serializer: &SerializerSnapshot,
    max_parallelism: u32,
    meta: &StateMetaInfo,
    key: &[u8],
    value: &[u8],
) -> Value {
    let prefix_len = key_group_prefix_len(max_parallelism);
    let kg = read_key_group_prefix(key, prefix_len)
        .map(|k| k as i64)
        .unwrap_or(-1);
    let mut rest = key.get(prefix_len..).unwrap_or(&[]);
    let mut obj = serde_json::Map::new();
    obj.insert("state".into(), json!(meta.name));
    obj.insert("key_group".into(), json!(kg));

    if meta.kind == StateKind::Timers {
        // KG | TS ^ i64::MIN | K | NS
        let ts = rest
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(|b| (u64::from_be_bytes(b) as i64) ^ i64::MIN);
        rest = rest.get(8..).unwrap_or(&[]);
        let k = decode_front(key_serializer, &mut rest);
        obj.insert(
            "timestamp".into(),
            ts.map(|t| json!(t)).unwrap_or(Value::Null),
        );
        match k {
            Some(k) => {
                obj.insert("key".into(), k);
                obj.insert(
                    "namespace".into(),
                    decode_exact(&meta.namespace_serializer, rest),
                );
            }
            None => {
                obj.insert("key".into(), hex_value(rest));
                obj.insert("namespace".into(), Value::Null);
            }
        }
        return Value::Object(obj);
    }

    let ambiguous = is_fixed_length(key_serializer) == Some(None)
        && is_fixed_length(&meta.namespace_serializer) == Some(None);
    let start = rest;
    let parsed_key = decode_front(key_serializer, &mut rest);
    let mut parsed_ns = None;
    if let Some(k) = &parsed_key {
        let klen = start.len() - rest.len();
        if ambiguous {
            rest = rest.get(variable_int_len(klen as u32)..).unwrap_or(&[]);
        }
        let ns_start = rest;
        if let Some(n) = decode_front(&meta.namespace_serializer, &mut rest) {
            if ambiguous {
                let nlen = ns_start.len() - rest.len();
                rest = rest.get(variable_int_len(nlen as u32)..).unwrap_or(&[]);
            }
            parsed_ns = Some(n);
        }
        obj.insert("key".into(), k.clone());
    }
    match parsed_ns {
        Some(n) => {
            obj.insert("namespace".into(), n);
            if meta.kind == StateKind::Map {
                let uk = match meta.value_serializer.nested.first() {
                    Some(s) => decode_exact(s, rest),
                    None => hex_value(rest),
                };
                obj.insert("user_key".into(), uk);
            }
        }
        None => {
            // Not decodable with the built-in serializers: the whole key after the prefix as hex.
            obj.insert("key".into(), hex_value(start));
            obj.insert("namespace".into(), Value::Null);
            if meta.kind == StateKind::Map {
                obj.insert("user_key".into(), Value::Null);
            }
        }
    }
    let (v, ttl) = value_json(meta, value);
    obj.insert("value".into(), v);
    if let Some(ts) = ttl {
        obj.insert("ttl_timestamp".into(), ts);
    }
    Value::Object(obj)
}

/// The user serializer inside Flink's TTL wrapper (`TtlValue` = `i64 BE timestamp | user value`).
fn ttl_user(s: &SerializerSnapshot) -> Option<&SerializerSnapshot> {
    (s.identifier == TTL_SNAPSHOT_ID && s.nested.len() == 2).then(|| &s.nested[1])
}

/// Splits a TTL value at the front of `input` into its timestamp and user value.
fn decode_ttl_front(user: &SerializerSnapshot, input: &mut &[u8]) -> Option<(Value, Value)> {
    let ts = i64::from_be_bytes(input.get(..8)?.try_into().ok()?);
    let mut rest = &input[8..];
    let v = decode_front(user, &mut rest)?;
    *input = rest;
    Some((v, json!(ts)))
}

fn decode_ttl_exact(user: &SerializerSnapshot, bytes: &[u8]) -> Option<(Value, Value)> {
    let mut input = bytes;
    let r = decode_ttl_front(user, &mut input)?;
    input.is_empty().then_some(r)
}

/// The value's JSON and, for state with TTL, its last-access timestamp(s).
fn value_json(meta: &StateMetaInfo, value: &[u8]) -> (Value, Option<Value>) {
    match meta.kind {
        StateKind::List => {
            let Some(el) = meta.value_serializer.nested.first() else {
                return (hex_value(value), None);
            };
            let ttl = ttl_user(el);
            let mut items = Vec::new();
            let mut stamps = Vec::new();
            let mut input = value;
            while !input.is_empty() {
                let item = match ttl {
                    Some(user) => decode_ttl_front(user, &mut input).map(|(v, ts)| {
                        stamps.push(ts);
                        v
                    }),
                    None => decode_front(el, &mut input),
                };
                match item {
                    Some(v) => items.push(v),
                    None => return (hex_value(value), None),
                }
                if let Some((d, tail)) = input.split_first() {
                    if *d != LIST_DELIMITER {
                        return (hex_value(value), None);
                    }
                    input = tail;
                }
            }
            (Value::Array(items), ttl.map(|_| Value::Array(stamps)))
        }
        StateKind::Map => match (value.split_first(), meta.value_serializer.nested.get(1)) {
            (Some((&MAP_VALUE_NULL, [])), _) => (Value::Null, None),
            (Some((&MAP_VALUE_PRESENT, rest)), Some(s)) => match ttl_user(s) {
                Some(user) => match decode_ttl_exact(user, rest) {
                    Some((v, ts)) => (v, Some(ts)),
                    None => (hex_value(value), None),
                },
                None => (decode_exact(s, rest), None),
            },
            _ => (hex_value(value), None),
        },
        StateKind::Timers => (Value::Null, None),
        _ => match ttl_user(&meta.value_serializer) {
            Some(user) => match decode_ttl_exact(user, value) {
                Some((v, ts)) => (v, Some(ts)),
                None => (hex_value(value), None),
            },
            None => (decode_exact(&meta.value_serializer, value), None),
        },
    }
}

/// Writes one JSON object per line and per entry of every key group (the `dump --json` output).
pub fn dump_json(reader: &SavepointReader, out: &mut dyn Write) -> Result<u64> {
    let header = reader.header();
    let mut n = 0u64;
    for block in reader.key_groups() {
        reader.read_key_group(block.key_group, &mut |state, key, value| {
            let meta = header
                .states
                .get(state)
                .ok_or_else(|| Error::CorruptState {
                    state: format!("#{state}"),
                    detail: format!(
                        "key group {} holds an entry of a state the savepoint header does not list",
                        block.key_group
                    ),
                })?;
            let line = entry_json(
                &header.key_serializer,
                header.max_parallelism,
                meta,
                key,
                value,
            );
            writeln!(out, "{line}").map_err(|e| Error::io("writing the dump to", "<output>", e))?;
            n += 1;
            Ok(())
        })?;
    }
    Ok(n)
}

/// The `inspect` report: header, states with their serializers and entry/byte counts, key groups.
pub fn inspect(reader: &SavepointReader) -> Result<String> {
    use std::fmt::Write as _;
    let h = reader.header();
    let mut entries = vec![0u64; h.states.len()];
    let mut bytes = vec![0u64; h.states.len()];
    for block in reader.key_groups() {
        reader.read_key_group(block.key_group, &mut |state, k, v| {
            if let (Some(e), Some(b)) = (entries.get_mut(state), bytes.get_mut(state)) {
                *e += 1;
                *b += (k.len() + v.len()) as u64;
            }
            Ok(())
        })?;
    }
    let mut s = String::new();
    let _ = writeln!(s, "format version:   {}", h.format_version);
    let _ = writeln!(s, "file size:        {} bytes", reader.len());
    let _ = writeln!(s, "max parallelism:  {}", h.max_parallelism);
    let _ = writeln!(s, "key-group range:  {}", h.key_group_range);
    let _ = writeln!(s, "compression:      {:?}", h.compression);
    let _ = writeln!(s, "key serializer:   {}", h.key_serializer);
    let _ = writeln!(
        s,
        "key groups:       {} with data of {} in range",
        reader.key_groups().len(),
        h.key_group_range.len()
    );
    let _ = writeln!(s, "states:           {}", h.states.len());
    for (i, m) in h.states.iter().enumerate() {
        let _ = writeln!(s, "  [{i}] {} ({})", m.name, m.kind);
        let _ = writeln!(s, "      namespace serializer: {}", m.namespace_serializer);
        let _ = writeln!(s, "      value serializer:     {}", m.value_serializer);
        if let Some(t) = &m.ttl {
            let _ = writeln!(
                s,
                "      ttl:                  {} ms, {:?}, {:?}",
                t.ttl_millis, t.update_type, t.visibility
            );
        }
        let _ = writeln!(s, "      entries:              {}", entries[i]);
        let _ = writeln!(s, "      key+value bytes:      {}", bytes[i]);
    }
    let _ = writeln!(
        s,
        "total:            {} entries, {} key+value bytes",
        entries.iter().sum::<u64>(),
        bytes.iter().sum::<u64>()
    );
    Ok(s)
}

/// Writes one tab-separated line per entry: state, key group, key, namespace, user key (maps), value.
pub fn dump_text(reader: &SavepointReader, out: &mut dyn Write) -> Result<u64> {
    let header = reader.header();
    let mut n = 0u64;
    for block in reader.key_groups() {
        reader.read_key_group(block.key_group, &mut |state, key, value| {
            let meta = header
                .states
                .get(state)
                .ok_or_else(|| Error::CorruptState {
                    state: format!("#{state}"),
                    detail: format!(
                        "key group {} holds an entry of a state the savepoint header does not list",
                        block.key_group
                    ),
                })?;
            let v = entry_json(
                &header.key_serializer,
                header.max_parallelism,
                meta,
                key,
                value,
            );
            let field = |name: &str| v.get(name).map(|x| x.to_string()).unwrap_or_default();
            let mut line = format!(
                "{}\t{}\t{}\t{}",
                meta.name,
                field("key_group"),
                field("key"),
                field("namespace")
            );
            if meta.kind == StateKind::Map {
                line.push('\t');
                line.push_str(&field("user_key"));
            }
            line.push('\t');
            line.push_str(&field("value"));
            writeln!(out, "{line}").map_err(|e| Error::io("writing the dump to", "<output>", e))?;
            n += 1;
            Ok(())
        })?;
    }
    Ok(n)
}

//! Decoding bytes to JSON from a serializer snapshot alone (for `dump`), for the built-in serializers.
//!
//! JSON shapes, by snapshot identifier:
//!
//! | serializer | JSON |
//! |---|---|
//! | Long, Int | integer (exact, never a float) |
//! | Double | number; NaN and infinities as the strings `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | Boolean | `true` / `false` |
//! | String | string |
//! | byte array | `{"hex": "00ff…"}` |
//! | void namespace | `null` |
//! | List | array |
//! | Map | array of `[key, value]` pairs in stored order (keys need not be strings); a Flink `null` value is `null` |
//! | Option | `null` or the value |
//! | TTL value | `{"timestamp": i64, "value": …}` |
//! | Flink `TimeWindow` | `{"start": i64, "end": i64}` |
//! | Flink tuple | array of the fields |
//! | Flink timer | `{"timestamp": i64, "key": …, "namespace": …}` |
//!
//! Snapshots whose identifier (or any nested identifier) is not one of these give `None`.

use serde_json::{json, Value};

use super::builtin::{
    read_bool, read_len_i32, take, BOOLEAN_SNAPSHOT_ID, BYTES_SNAPSHOT_ID, DOUBLE_SNAPSHOT_ID,
    INT_SNAPSHOT_ID, LONG_SNAPSHOT_ID, STRING_SNAPSHOT_ID, VOID_NAMESPACE_SNAPSHOT_ID,
};
use super::composite::{LIST_SNAPSHOT_ID, MAP_SNAPSHOT_ID, OPTION_SNAPSHOT_ID, TTL_SNAPSHOT_ID};
use super::snapshot::MAX_SNAPSHOT_DEPTH;
use super::{
    DoubleSerializer, IntSerializer, LongSerializer, SerializerError, SerializerSnapshot,
    StringSerializer, TypeSerializer,
};

/// Flink's `TimeWindow.Serializer` snapshot identifier (`i64 start | i64 end`).
pub const TIME_WINDOW_SNAPSHOT_ID: &str =
    "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot";
/// Flink's `TupleSerializerSnapshot` identifier (the fields one after another).
pub const TUPLE_SNAPSHOT_ID: &str =
    "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot";
/// Flink's `TimerSerializerSnapshot` identifier (`i64 timestamp ^ i64::MIN | key | namespace`).
pub const TIMER_SNAPSHOT_ID: &str =
    "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot";

/// Nesting accepted by the decoder (snapshots decoded from bytes are limited to [`MAX_SNAPSHOT_DEPTH`]).
const MAX_DEPTH: usize = MAX_SNAPSHOT_DEPTH + 1;

/// The built-in kinds the decoder knows.
#[derive(Clone, Copy)]
enum Kind {
    Long,
    Int,
    Double,
    Bool,
    String,
    Bytes,
    Void,
    List,
    Map,
    Option,
    Ttl,
    TimeWindow,
    Tuple,
    Timer,
}

fn kind_of(snapshot: &SerializerSnapshot) -> Option<Kind> {
    let (kind, nested) = match snapshot.identifier.as_str() {
        LONG_SNAPSHOT_ID => (Kind::Long, 0),
        INT_SNAPSHOT_ID => (Kind::Int, 0),
        DOUBLE_SNAPSHOT_ID => (Kind::Double, 0),
        BOOLEAN_SNAPSHOT_ID => (Kind::Bool, 0),
        STRING_SNAPSHOT_ID => (Kind::String, 0),
        BYTES_SNAPSHOT_ID => (Kind::Bytes, 0),
        VOID_NAMESPACE_SNAPSHOT_ID => (Kind::Void, 0),
        LIST_SNAPSHOT_ID => (Kind::List, 1),
        MAP_SNAPSHOT_ID => (Kind::Map, 2),
        OPTION_SNAPSHOT_ID => (Kind::Option, 1),
        TTL_SNAPSHOT_ID => (Kind::Ttl, 2),
        TIME_WINDOW_SNAPSHOT_ID => (Kind::TimeWindow, 0),
        TUPLE_SNAPSHOT_ID => (Kind::Tuple, snapshot.nested.len()),
        TIMER_SNAPSHOT_ID => (Kind::Timer, 2),
        _ => return None,
    };
    (snapshot.nested.len() == nested).then_some(kind)
}

/// Whether the snapshot and all its nested snapshots are built-ins this module can decode.
pub fn is_builtin(snapshot: &SerializerSnapshot) -> bool {
    fn go(s: &SerializerSnapshot, depth: usize) -> bool {
        depth <= MAX_DEPTH && kind_of(s).is_some() && s.nested.iter().all(|n| go(n, depth + 1))
    }
    go(snapshot, 0)
}

/// Decodes one value from the front of `bytes` (advancing it) using only `snapshot`; `None` when the
/// snapshot is not (entirely) built-in. See the [module docs](self) for the JSON shapes.
pub fn decode_to_json(
    snapshot: &SerializerSnapshot,
    bytes: &mut &[u8],
) -> Option<Result<Value, SerializerError>> {
    if !is_builtin(snapshot) {
        return None;
    }
    Some(decode(snapshot, bytes, 0))
}

/// The number of bytes every value takes as *written* (`Some(Some(n))`), `Some(None)` when it varies, or
/// `None` when it is not built-in (a list, map or option of non-built-ins still gives `Some(None)`). Unlike `TypeSerializer::fixed_length`, the void namespace
/// gives 1 (the byte it writes), so that tools can split entry keys.
pub fn is_fixed_length(snapshot: &SerializerSnapshot) -> Option<Option<usize>> {
    fn go(s: &SerializerSnapshot, depth: usize) -> Option<Option<usize>> {
        if depth > MAX_DEPTH {
            return None;
        }
        Some(match kind_of(s)? {
            Kind::Long | Kind::Double => Some(8),
            Kind::Int => Some(4),
            Kind::Bool | Kind::Void => Some(1),
            Kind::TimeWindow => Some(16),
            Kind::String | Kind::Bytes | Kind::List | Kind::Map | Kind::Option => None,
            Kind::Tuple => {
                let mut total = Some(0usize);
                for n in &s.nested {
                    total = match (total, go(n, depth + 1)?) {
                        (Some(a), Some(b)) => a.checked_add(b),
                        _ => None,
                    };
                }
                total
            }
            Kind::Timer => {
                let k = go(s.nested.first()?, depth + 1)?;
                let n = go(s.nested.get(1)?, depth + 1)?;
                match (k, n) {
                    (Some(a), Some(b)) => a.checked_add(b).and_then(|x| x.checked_add(8)),
                    _ => None,
                }
            }
            Kind::Ttl => {
                let ts = go(s.nested.first()?, depth + 1)?;
                let user = go(s.nested.get(1)?, depth + 1)?;
                match (ts, user) {
                    (Some(a), Some(b)) => a.checked_add(b),
                    _ => None,
                }
            }
        })
    }
    go(snapshot, 0)
}

fn nested(s: &SerializerSnapshot, i: usize) -> Result<&SerializerSnapshot, SerializerError> {
    s.nested.get(i).ok_or_else(|| SerializerError::Invalid {
        what: "serializer snapshot",
        detail: format!("{} lacks nested serializer #{i}", s.identifier),
    })
}

fn decode(
    s: &SerializerSnapshot,
    input: &mut &[u8],
    depth: usize,
) -> Result<Value, SerializerError> {
    if depth > MAX_DEPTH {
        return Err(SerializerError::Invalid {
            what: "serializer snapshot",
            detail: "nested too deeply".into(),
        });
    }
    let kind = kind_of(s).ok_or_else(|| SerializerError::Invalid {
        what: "serializer snapshot",
        detail: format!("{} is not a built-in serializer", s.identifier),
    })?;
    Ok(match kind {
        Kind::Long => Value::from(LongSerializer.deserialize(input)?),
        Kind::Int => Value::from(IntSerializer.deserialize(input)?),
        Kind::Double => double_json(DoubleSerializer.deserialize(input)?),
        Kind::Bool => Value::Bool(read_bool(input, "bool")?),
        Kind::String => Value::String(StringSerializer.deserialize(input)?),
        Kind::Bytes => {
            let len = read_len_i32(input, "byte array length")?;
            json!({ "hex": hex(take(input, len, "byte array")?) })
        }
        Kind::Void => {
            take(input, 1, "void namespace")?;
            Value::Null
        }
        Kind::List => {
            let element = nested(s, 0)?;
            let size = read_len_i32(input, "list size")?;
            // Every built-in element takes at least one byte.
            if size > input.len() {
                return Err(SerializerError::Truncated {
                    what: "list elements",
                    needed: size - input.len(),
                });
            }
            let mut out = Vec::with_capacity(size);
            for _ in 0..size {
                out.push(decode(element, input, depth + 1)?);
            }
            Value::Array(out)
        }
        Kind::Map => {
            let (k, v) = (nested(s, 0)?, nested(s, 1)?);
            let size = read_len_i32(input, "map size")?;
            if size > input.len() {
                return Err(SerializerError::Truncated {
                    what: "map entries",
                    needed: size - input.len(),
                });
            }
            let mut out = Vec::with_capacity(size);
            for _ in 0..size {
                let key = decode(k, input, depth + 1)?;
                let value = if read_bool(input, "map value null flag")? {
                    Value::Null
                } else {
                    decode(v, input, depth + 1)?
                };
                out.push(Value::Array(vec![key, value]));
            }
            Value::Array(out)
        }
        Kind::Option => {
            if read_bool(input, "option flag")? {
                decode(nested(s, 0)?, input, depth + 1)?
            } else {
                Value::Null
            }
        }
        Kind::Ttl => {
            let timestamp = decode(nested(s, 0)?, input, depth + 1)?;
            let value = decode(nested(s, 1)?, input, depth + 1)?;
            json!({ "timestamp": timestamp, "value": value })
        }
        Kind::TimeWindow => {
            let start = LongSerializer.deserialize(input)?;
            let end = LongSerializer.deserialize(input)?;
            json!({ "start": start, "end": end })
        }
        Kind::Tuple => {
            let mut out = Vec::with_capacity(s.nested.len());
            for n in &s.nested {
                out.push(decode(n, input, depth + 1)?);
            }
            Value::Array(out)
        }
        Kind::Timer => {
            let timestamp = LongSerializer.deserialize(input)? ^ i64::MIN;
            let key = decode(nested(s, 0)?, input, depth + 1)?;
            let namespace = decode(nested(s, 1)?, input, depth + 1)?;
            json!({ "timestamp": timestamp, "key": key, "namespace": namespace })
        }
    })
}

fn double_json(v: f64) -> Value {
    if v.is_nan() {
        Value::String("NaN".into())
    } else if v.is_infinite() {
        Value::String(if v > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        Value::from(v)
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serializer::{
        to_bytes, BytesSerializer, ListSerializer, MapSerializer, OptionSerializer, TtlSerializer,
        TtlValue, VoidNamespaceSerializer,
    };
    use std::collections::BTreeMap;

    fn dump<S: TypeSerializer>(s: &S, v: &S::Value) -> Value {
        let bytes = to_bytes(s, v).unwrap();
        let mut input = &bytes[..];
        let out = decode_to_json(&s.snapshot(), &mut input).unwrap().unwrap();
        assert!(input.is_empty());
        out
    }

    #[test]
    fn shapes() {
        assert_eq!(dump(&LongSerializer, &i64::MIN), json!(i64::MIN));
        assert_eq!(dump(&DoubleSerializer, &1.5), json!(1.5));
        assert_eq!(dump(&DoubleSerializer, &f64::NAN), json!("NaN"));
        assert_eq!(
            dump(&BytesSerializer, &vec![0, 255]),
            json!({"hex": "00ff"})
        );
        assert_eq!(
            dump(&VoidNamespaceSerializer, &crate::serializer::VoidNamespace),
            Value::Null
        );
        let m = MapSerializer::new(IntSerializer, ListSerializer::new(StringSerializer));
        let mut v = BTreeMap::new();
        v.insert(2, vec!["a".to_string()]);
        v.insert(1, vec![]);
        assert_eq!(dump(&m, &v), json!([[1, []], [2, ["a"]]]));
        let t = TtlSerializer::new(OptionSerializer::new(LongSerializer));
        assert_eq!(
            dump(&t, &TtlValue::new(Some(7), 99)),
            json!({"timestamp": 99, "value": 7})
        );
        assert_eq!(
            dump(&t, &TtlValue::new(None, 1)),
            json!({"timestamp": 1, "value": null})
        );
    }

    #[test]
    fn flink_window_tuple_and_timer_shapes() {
        let tw = SerializerSnapshot::simple(TIME_WINDOW_SNAPSHOT_ID, 3);
        let mut b = Vec::new();
        b.extend_from_slice(&5i64.to_be_bytes());
        b.extend_from_slice(&10i64.to_be_bytes());
        assert_eq!(
            decode_to_json(&tw, &mut &b[..]).unwrap().unwrap(),
            json!({"start": 5, "end": 10})
        );
        assert_eq!(is_fixed_length(&tw), Some(Some(16)));
        let tuple = SerializerSnapshot::composite(
            TUPLE_SNAPSHOT_ID,
            3,
            vec![LongSerializer.snapshot(), StringSerializer.snapshot()],
        );
        let mut b = 7i64.to_be_bytes().to_vec();
        b.extend_from_slice(&[3, b'h', b'i']);
        assert_eq!(
            decode_to_json(&tuple, &mut &b[..]).unwrap().unwrap(),
            json!([7, "hi"])
        );
        assert_eq!(is_fixed_length(&tuple), Some(None));
    }

    #[test]
    fn fixed_lengths_and_unknown() {
        assert_eq!(
            is_fixed_length(&VoidNamespaceSerializer.snapshot()),
            Some(Some(1))
        );
        assert_eq!(
            is_fixed_length(&TtlSerializer::new(IntSerializer).snapshot()),
            Some(Some(12))
        );
        assert_eq!(is_fixed_length(&StringSerializer.snapshot()), Some(None));
        let unknown = SerializerSnapshot::simple("x", 1);
        assert_eq!(is_fixed_length(&unknown), None);
        let list = SerializerSnapshot::composite(LIST_SNAPSHOT_ID, 3, vec![unknown]);
        assert!(decode_to_json(&list, &mut &[0u8, 0, 0, 0][..]).is_none());
    }
}

//! Writing the keyed-state stream header (`KeyedBackendSerializationProxy`, version 6) from our state meta
//! information, as Flink 2.3 writes it: per key/value state the option `KEYED_STATE_TYPE` and the
//! serializers `VALUE_SERIALIZER`, `NAMESPACE_SERIALIZER`; per timer queue (`PRIORITY_QUEUE`) no options
//! and `VALUE_SERIALIZER` = the timer serializer.

use super::input::encode_modified_utf8;
use super::proxy::{
    BackendStateType, FlinkSnapshot, FlinkStateMeta, KEYED_STATE_TYPE, NAMESPACE_SERIALIZER,
    PROXY_VERSION, VALUE_SERIALIZER,
};
use super::typeser::{is_writable, write_top_level_snapshot, FLINK_SNAPSHOT_VERSION};
use super::FlinkError;
use keyed_state::meta::{StateKind, StateMetaInfo};
use keyed_state::serializer::dynamic::TIMER_SNAPSHOT_ID;
use keyed_state::serializer::{SerializerSnapshot, LONG_SNAPSHOT_ID, TTL_SNAPSHOT_ID};

fn known(s: SerializerSnapshot) -> FlinkSnapshot {
    FlinkSnapshot {
        snapshot: s,
        raw_because: None,
    }
}

/// `s` wrapped in Flink's TTL serializer (`i64 timestamp | value`), unless it already is.
fn ttl_wrapped(s: &SerializerSnapshot) -> SerializerSnapshot {
    if s.identifier == TTL_SNAPSHOT_ID {
        return s.clone();
    }
    SerializerSnapshot::composite(
        TTL_SNAPSHOT_ID,
        FLINK_SNAPSHOT_VERSION as u32,
        vec![
            SerializerSnapshot::simple(LONG_SNAPSHOT_ID, FLINK_SNAPSHOT_VERSION as u32),
            s.clone(),
        ],
    )
}

/// The value serializer Flink registers for a state with TTL: the TTL wrapper around the value (value,
/// reducing, aggregating), around the list element, or around the map value. Our entry values of TTL
/// state already hold `i64 timestamp | value`.
fn with_ttl(kind: StateKind, v: &SerializerSnapshot) -> SerializerSnapshot {
    let mut out = v.clone();
    match kind {
        StateKind::List if out.nested.len() == 1 => out.nested[0] = ttl_wrapped(&v.nested[0]),
        StateKind::Map if out.nested.len() == 2 => out.nested[1] = ttl_wrapped(&v.nested[1]),
        StateKind::List | StateKind::Map | StateKind::Timers => {}
        _ => out = ttl_wrapped(v),
    }
    out
}

/// Flink's meta information for one of our states. `key` is the key serializer (a timer's serializer
/// nests it). Serializers Flink cannot read back (this crate's own, such as `keyed-state/option`) are
/// [`FlinkError::UnsupportedState`] naming them.
pub fn flink_state_meta(
    meta: &StateMetaInfo,
    key: &SerializerSnapshot,
) -> Result<FlinkStateMeta, FlinkError> {
    let check = |s: &SerializerSnapshot, role: &str| -> Result<(), FlinkError> {
        if is_writable(s) {
            Ok(())
        } else {
            Err(FlinkError::UnsupportedState {
                file: "export".into(),
                state: meta.name.clone(),
                detail: format!("the {role} serializer {s} has no Flink counterpart"),
            })
        }
    };
    if meta.kind == StateKind::Timers {
        let timer = if meta.value_serializer.identifier == TIMER_SNAPSHOT_ID {
            meta.value_serializer.clone()
        } else {
            SerializerSnapshot::composite(
                TIMER_SNAPSHOT_ID,
                FLINK_SNAPSHOT_VERSION as u32,
                vec![key.clone(), meta.namespace_serializer.clone()],
            )
        };
        check(&timer, "timer")?;
        return Ok(FlinkStateMeta {
            name: meta.name.clone(),
            backend_type: BackendStateType::PriorityQueue,
            options: Vec::new(),
            serializers: vec![(VALUE_SERIALIZER.to_string(), known(timer))],
        });
    }
    let value = match &meta.ttl {
        Some(_) => with_ttl(meta.kind, &meta.value_serializer),
        None => meta.value_serializer.clone(),
    };
    check(&value, "value")?;
    check(&meta.namespace_serializer, "namespace")?;
    Ok(FlinkStateMeta {
        name: meta.name.clone(),
        backend_type: BackendStateType::KeyValue,
        options: vec![(
            KEYED_STATE_TYPE.to_string(),
            meta.kind.flink_name().to_string(),
        )],
        serializers: vec![
            (VALUE_SERIALIZER.to_string(), known(value)),
            (
                NAMESPACE_SERIALIZER.to_string(),
                known(meta.namespace_serializer.clone()),
            ),
        ],
    })
}

fn put_utf(out: &mut Vec<u8>, s: &str) -> Result<(), FlinkError> {
    let e = encode_modified_utf8(s);
    let n = u16::try_from(e.len()).map_err(|_| {
        FlinkError::Inconsistent(format!(
            "name of {} bytes is too long for Java's writeUTF",
            e.len()
        ))
    })?;
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(&e);
    Ok(())
}

/// Writes the serialization proxy (version 6): the compression flag, the key serializer, then every state
/// (its index is its `kvStateId` in the key-group data).
pub fn write_proxy(
    compressed: bool,
    key: &SerializerSnapshot,
    states: &[FlinkStateMeta],
    out: &mut Vec<u8>,
) -> Result<(), FlinkError> {
    if !is_writable(key) {
        return Err(FlinkError::Inconsistent(format!(
            "the key serializer {key} has no Flink counterpart"
        )));
    }
    let n = i16::try_from(states.len()).map_err(|_| {
        FlinkError::Inconsistent(format!("{} states (at most 32767)", states.len()))
    })?;
    out.extend_from_slice(&PROXY_VERSION.to_be_bytes());
    out.push(compressed as u8);
    write_top_level_snapshot(key, out);
    out.extend_from_slice(&n.to_be_bytes());
    for s in states {
        put_utf(out, &s.name)?;
        out.extend_from_slice(&s.backend_type.ordinal().to_be_bytes());
        out.extend_from_slice(&(s.options.len() as i32).to_be_bytes());
        for (k, v) in &s.options {
            put_utf(out, k)?;
            put_utf(out, v)?;
        }
        out.extend_from_slice(&(s.serializers.len() as i32).to_be_bytes());
        for (k, ser) in &s.serializers {
            put_utf(out, k)?;
            write_top_level_snapshot(&ser.snapshot, out);
        }
    }
    Ok(())
}

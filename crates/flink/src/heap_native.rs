//! The HashMap backend's native snapshot format (heap checkpoints and NATIVE savepoints,
//! `HeapSnapshotStrategy`), turned into canonical entries.
//!
//! Per key group at its offset: `i32 key group`, then for every state of the header `i16 state id | i32
//! count | count × (namespace, key, state value)` (key/value states, each value whole: a list or map with
//! its own size) or `count × element` (priority queues: timers). Entries are rebuilt as the canonical
//! stream holds them: `KG | K | [lenK] | NS | [lenNS]` keys, lists joined with `0x2C`, one entry per map
//! user key with the null flag, timers `KG | element`. Every serializer must be one whose byte length can
//! be read (`serializer::dynamic`); uncompressed streams only.

use super::input::DataInput;
use super::FlinkError;
use keyed_state::keygroup::{key_group_prefix_len, KeyGroup};
use keyed_state::layout::{list_append, CompositeKeyBuilder};
use keyed_state::meta::{StateKind, StateMetaInfo};
use keyed_state::serializer::dynamic::{decode_to_json, is_fixed_length};
use keyed_state::serializer::SerializerSnapshot;
use keyed_state::Location;

/// The bytes one value of `s` takes at the front of `d`, consumed.
fn value<'a>(
    d: &mut DataInput<'a>,
    s: &SerializerSnapshot,
    state: &str,
) -> Result<&'a [u8], FlinkError> {
    let at = d.pos();
    let mut rest = &d.data()[at..];
    match decode_to_json(s, &mut rest) {
        Some(Ok(_)) => {
            let n = d.remaining() - rest.len();
            d.bytes(n, "state value")
        }
        Some(Err(e)) => Err(d.malformed(at, "state value", format!("state '{state}': {e}"))),
        None => Err(FlinkError::UnsupportedState {
            file: d.file().to_string(),
            state: state.to_string(),
            detail: format!(
                "the native heap format can only be imported when every serializer is known; {} is not",
                s.identifier
            ),
        }),
    }
}

/// Reads key group `kg` at `offset` and calls `f(state id, key, value)` with canonical entries. `states`
/// are the header's states (by Flink id) mapped to ours; `key_serializer` is the header's.
#[allow(clippy::too_many_arguments)]
pub fn read_native_key_group(
    data: &[u8],
    offset: usize,
    kg: KeyGroup,
    max_parallelism: u32,
    key_serializer: &SerializerSnapshot,
    states: &[StateMetaInfo],
    file: &str,
    f: &mut dyn FnMut(usize, Vec<u8>, Vec<u8>) -> Result<(), FlinkError>,
) -> Result<usize, FlinkError> {
    let bad = |detail: String| FlinkError::BadKeyGroup {
        at: Location::at(file, offset as u64),
        key_group: kg,
        detail,
    };
    let mut d = DataInput::new(data, file);
    if offset >= data.len() {
        return Err(bad(format!("offset {offset} outside the stream")));
    }
    d.seek(offset);
    let id = d.i32("key group id")?;
    if id != kg as i32 {
        return Err(bad(format!("the stream holds key group {id} here")));
    }
    let prefix_len = key_group_prefix_len(max_parallelism);
    let key_var = is_fixed_length(key_serializer) == Some(None);
    let mut seen = vec![false; states.len()];
    for _ in 0..states.len() {
        let sid = d.u16("state id")? as usize;
        let Some(meta) = states.get(sid) else {
            return Err(bad(format!("state id {sid} of {}", states.len())));
        };
        if std::mem::replace(&mut seen[sid], true) {
            return Err(bad(format!("state '{}' twice", meta.name)));
        }
        let count = d.count("number of entries", 1)?;
        let name = meta.name.as_str();
        if meta.kind == StateKind::Timers {
            for _ in 0..count {
                let e = value(&mut d, &meta.value_serializer, name)?;
                let mut key = Vec::with_capacity(prefix_len + e.len());
                keyed_state::keygroup::write_key_group_prefix(&mut key, kg, prefix_len);
                key.extend_from_slice(e);
                f(sid, key, Vec::new())?;
            }
            continue;
        }
        let ambiguous = key_var && is_fixed_length(&meta.namespace_serializer) == Some(None);
        let mut b = CompositeKeyBuilder::new(prefix_len, ambiguous);
        for _ in 0..count {
            let ns = value(&mut d, &meta.namespace_serializer, name)?;
            let k = value(&mut d, key_serializer, name)?;
            b.set_key(kg, k);
            b.set_namespace(ns);
            let vs = &meta.value_serializer;
            match meta.kind {
                StateKind::List => {
                    let el = vs.nested.first().ok_or_else(|| {
                        bad(format!("state '{name}': list serializer without element"))
                    })?;
                    let n = d.count("list size", 1)?;
                    let mut joined = Vec::new();
                    for _ in 0..n {
                        list_append(&mut joined, value(&mut d, el, name)?);
                    }
                    if n > 0 {
                        f(sid, b.key_and_namespace().to_vec(), joined)?;
                    }
                }
                StateKind::Map => {
                    let (uk, uv) = match (vs.nested.first(), vs.nested.get(1)) {
                        (Some(a), Some(c)) => (a, c),
                        _ => {
                            return Err(bad(format!(
                                "state '{name}': map serializer without key and value"
                            )))
                        }
                    };
                    let n = d.count("map size", 2)?;
                    for _ in 0..n {
                        let ukb = value(&mut d, uk, name)?;
                        let null = d.bool("map value null flag")?;
                        let mut v = vec![u8::from(null)];
                        if !null {
                            v.extend_from_slice(value(&mut d, uv, name)?);
                        }
                        f(sid, b.with_user_key(ukb).to_vec(), v)?;
                    }
                }
                _ => {
                    let v = value(&mut d, vs, name)?;
                    f(sid, b.key_and_namespace().to_vec(), v.to_vec())?;
                }
            }
        }
    }
    Ok(d.pos())
}

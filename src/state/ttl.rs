//! TTL in the typed layer: the `TtlValue` bytes of values, list elements and map entries, and the
//! full-snapshot cleanup (a snapshot view without expired state).

use crate::backend::{BackendConfig, BackendSnapshot, StateId};
use crate::error::{Error, Result};
use crate::keygroup::KeyGroup;
use crate::meta::StateMetaInfo;
use crate::serializer::TypeSerializer;
use crate::ttl::{TtlStateFilter, TtlVerdict};

/// Appends `ts | value` (Flink's `TtlValue`) to `out`.
pub(crate) fn write_ttl_value<S: TypeSerializer>(
    name: &str,
    ser: &S,
    ts: i64,
    value: &S::Value,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.extend_from_slice(&ts.to_be_bytes());
    ser.serialize(value, out)
        .map_err(|e| Error::serializer(name, e))
}

/// Reads `ts | value` from the front of `input`.
pub(crate) fn read_ttl_value<S: TypeSerializer>(
    name: &str,
    ser: &S,
    input: &mut &[u8],
) -> Result<(i64, S::Value)> {
    let Some((ts, rest)) = input.split_first_chunk::<8>() else {
        return Err(Error::CorruptState {
            state: name.to_string(),
            detail: format!(
                "a TTL value needs an 8-byte timestamp, {} bytes are left",
                input.len()
            ),
        });
    };
    let ts = i64::from_be_bytes(*ts);
    *input = rest;
    let v = ser
        .deserialize(input)
        .map_err(|e| Error::serializer(name, e))?;
    Ok((ts, v))
}

/// Reads one whole `ts | value`, which must use up `bytes`.
pub(crate) fn decode_ttl_value<S: TypeSerializer>(
    name: &str,
    ser: &S,
    bytes: &[u8],
) -> Result<(i64, S::Value)> {
    let mut input = bytes;
    let out = read_ttl_value(name, ser, &mut input)?;
    if !input.is_empty() {
        return Err(Error::CorruptState {
            state: name.to_string(),
            detail: format!("{} trailing bytes after a TTL value", input.len()),
        });
    }
    Ok(out)
}

/// A snapshot that shows the states of `filters` without what has expired at `now` (Flink's
/// `cleanupFullSnapshot` transformer); other states pass through unchanged.
pub(crate) struct CleaningSnapshot {
    inner: Box<dyn BackendSnapshot>,
    filters: Vec<(StateId, TtlStateFilter)>,
    now: i64,
}

impl CleaningSnapshot {
    pub(crate) fn new(
        inner: Box<dyn BackendSnapshot>,
        filters: Vec<(StateId, TtlStateFilter)>,
        now: i64,
    ) -> Self {
        CleaningSnapshot {
            inner,
            filters,
            now,
        }
    }
}

impl BackendSnapshot for CleaningSnapshot {
    fn config(&self) -> &BackendConfig {
        self.inner.config()
    }

    fn states(&self) -> &[StateMetaInfo] {
        self.inner.states()
    }

    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let Some((_, filter)) = self.filters.iter().find(|(id, _)| *id == state) else {
            return self.inner.visit(state, kg, f);
        };
        let now = self.now;
        self.inner
            .visit(state, kg, &mut |k, v| match filter.judge(v, now) {
                TtlVerdict::Keep => f(k, v),
                TtlVerdict::Remove => Ok(()),
                TtlVerdict::Replace(nv) => f(k, &nv),
            })
    }
}

/// Decodes a joined TTL list (`ts1 e1 , ts2 e2 , ...`).
pub(crate) fn decode_ttl_list<E: TypeSerializer>(
    name: &str,
    el: &E,
    bytes: &[u8],
) -> Result<Vec<(i64, E::Value)>> {
    let mut out = Vec::new();
    let mut input = bytes;
    while !input.is_empty() {
        out.push(read_ttl_value(name, el, &mut input)?);
        if let Some((d, rest)) = input.split_first() {
            if *d != crate::layout::LIST_DELIMITER || rest.is_empty() {
                return Err(Error::CorruptState {
                    state: name.to_string(),
                    detail: format!(
                        "expected delimiter 0x2c between TTL elements, found {d:#04x}{}",
                        if rest.is_empty() { " at the end" } else { "" }
                    ),
                });
            }
            input = rest;
        }
    }
    Ok(out)
}

/// Joins `(ts, element)` pairs as a TTL list into `out` (cleared first).
pub(crate) fn encode_ttl_list<'v, E: TypeSerializer>(
    name: &str,
    el: &E,
    items: impl Iterator<Item = (i64, &'v E::Value)>,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    for (i, (ts, v)) in items.enumerate() {
        if i > 0 {
            out.push(crate::layout::LIST_DELIMITER);
        }
        write_ttl_value(name, el, ts, v, out)?;
    }
    Ok(())
}

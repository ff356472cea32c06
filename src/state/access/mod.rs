//! Accessors: short-lived views of one state at the current key and one namespace.
//!
//! `store.value(&h)` / `store.value_in(&h, &ns)` serialize the namespace once and borrow the store; every
//! method then applies to (current key, namespace).

use super::descriptor::*;
use super::store::KeyedStateStore;
use super::ttl::{decode_ttl_list, decode_ttl_value, encode_ttl_list, write_ttl_value};
use crate::error::{Error, Result};
use crate::keygroup::KeyGroup;
use crate::layout::{LIST_DELIMITER, MAP_VALUE_NULL, MAP_VALUE_PRESENT};
use crate::serializer::{KeySerializer, TypeSerializer, VoidNamespace, VoidNamespaceSerializer};

mod list;
mod map;
mod reducing;
mod value;

pub use list::ListAccess;
pub use map::{
    MapAccess, MapEntries, MapEntryItems, MapIter, MapKeyItems, MapKeys, MapProjection,
    MapValueItems, MapValues, MAP_BATCH,
};
pub use reducing::{AggregatingAccess, ReducingAccess};
pub use value::ValueAccess;

fn ser_err(name: &str) -> impl Fn(crate::serializer::SerializerError) -> Error + '_ {
    move |e| Error::serializer(name, e)
}

/// Decodes a joined list value (`e1 , e2 , ...`) with the element serializer.
pub(crate) fn decode_list<E: TypeSerializer>(
    name: &str,
    el: &E,
    bytes: &[u8],
) -> Result<Vec<E::Value>> {
    let mut out = Vec::new();
    let mut input = bytes;
    while !input.is_empty() {
        out.push(el.deserialize(&mut input).map_err(ser_err(name))?);
        if let Some((d, rest)) = input.split_first() {
            if *d != LIST_DELIMITER {
                return Err(Error::CorruptState {
                    state: name.to_string(),
                    detail: format!("expected delimiter 0x2c between elements, found {d:#04x}"),
                });
            }
            input = rest;
            if input.is_empty() {
                return Err(Error::CorruptState {
                    state: name.to_string(),
                    detail: "trailing delimiter".into(),
                });
            }
        }
    }
    Ok(out)
}

/// Serializes elements joined with `0x2C` into `out` (cleared first).
fn encode_list<E: TypeSerializer>(
    name: &str,
    el: &E,
    items: &[E::Value],
    out: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            out.push(LIST_DELIMITER);
        }
        el.serialize(v, out).map_err(ser_err(name))?;
    }
    Ok(())
}

impl<K: KeySerializer> KeyedStateStore<K> {
    /// The value state `h` at the current key (void namespace).
    #[inline]
    pub fn value<'a, V: TypeSerializer>(
        &'a mut self,
        h: &'a ValueState<V, VoidNamespaceSerializer>,
    ) -> Result<ValueAccess<'a, K, V, VoidNamespaceSerializer>> {
        self.value_in(h, &VoidNamespace)
    }

    /// The value state `h` at the current key in namespace `ns`.
    #[inline]
    pub fn value_in<'a, V: TypeSerializer, N: TypeSerializer>(
        &'a mut self,
        h: &'a ValueState<V, N>,
        ns: &N::Value,
    ) -> Result<ValueAccess<'a, K, V, N>> {
        self.ttl_accessed(&h.core)?;
        let kg = self.build_key_ns(&h.core, ns)?;
        Ok(ValueAccess { store: self, h, kg })
    }

    /// The list state `h` at the current key (void namespace).
    pub fn list<'a, E: TypeSerializer>(
        &'a mut self,
        h: &'a ListState<E, VoidNamespaceSerializer>,
    ) -> Result<ListAccess<'a, K, E, VoidNamespaceSerializer>> {
        self.list_in(h, &VoidNamespace)
    }

    /// The list state `h` at the current key in namespace `ns`.
    pub fn list_in<'a, E: TypeSerializer, N: TypeSerializer>(
        &'a mut self,
        h: &'a ListState<E, N>,
        ns: &N::Value,
    ) -> Result<ListAccess<'a, K, E, N>> {
        self.ttl_accessed(&h.core)?;
        let kg = self.build_key_ns(&h.core, ns)?;
        Ok(ListAccess { store: self, h, kg })
    }

    /// The map state `h` at the current key (void namespace).
    pub fn map<'a, UK: TypeSerializer, UV: TypeSerializer>(
        &'a mut self,
        h: &'a MapState<UK, UV, VoidNamespaceSerializer>,
    ) -> Result<MapAccess<'a, K, UK, UV, VoidNamespaceSerializer>> {
        self.map_in(h, &VoidNamespace)
    }

    /// The map state `h` at the current key in namespace `ns`.
    pub fn map_in<'a, UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer>(
        &'a mut self,
        h: &'a MapState<UK, UV, N>,
        ns: &N::Value,
    ) -> Result<MapAccess<'a, K, UK, UV, N>> {
        self.ttl_accessed(&h.core)?;
        let kg = self.build_key_ns(&h.core, ns)?;
        Ok(MapAccess { store: self, h, kg })
    }

    /// The reducing state `h` at the current key (void namespace).
    pub fn reducing<'a, V: TypeSerializer>(
        &'a mut self,
        h: &'a ReducingState<V, VoidNamespaceSerializer>,
    ) -> Result<ReducingAccess<'a, K, V, VoidNamespaceSerializer>> {
        self.reducing_in(h, &VoidNamespace)
    }

    /// The reducing state `h` at the current key in namespace `ns`.
    pub fn reducing_in<'a, V: TypeSerializer, N: TypeSerializer>(
        &'a mut self,
        h: &'a ReducingState<V, N>,
        ns: &N::Value,
    ) -> Result<ReducingAccess<'a, K, V, N>> {
        self.ttl_accessed(&h.core)?;
        let kg = self.build_key_ns(&h.core, ns)?;
        Ok(ReducingAccess { store: self, h, kg })
    }

    /// The aggregating state `h` at the current key (void namespace).
    pub fn aggregating<'a, F, A>(
        &'a mut self,
        h: &'a AggregatingState<F, A, VoidNamespaceSerializer>,
    ) -> Result<AggregatingAccess<'a, K, F, A, VoidNamespaceSerializer>>
    where
        F: AggregateFunction,
        A: TypeSerializer<Value = F::Acc>,
    {
        self.aggregating_in(h, &VoidNamespace)
    }

    /// The aggregating state `h` at the current key in namespace `ns`.
    pub fn aggregating_in<'a, F, A, N>(
        &'a mut self,
        h: &'a AggregatingState<F, A, N>,
        ns: &N::Value,
    ) -> Result<AggregatingAccess<'a, K, F, A, N>>
    where
        F: AggregateFunction,
        A: TypeSerializer<Value = F::Acc>,
        N: TypeSerializer,
    {
        self.ttl_accessed(&h.core)?;
        let kg = self.build_key_ns(&h.core, ns)?;
        Ok(AggregatingAccess { store: self, h, kg })
    }

    /// The incremental TTL cleanup hook of every state access.
    #[inline]
    fn ttl_accessed<N>(&mut self, core: &HandleCore<N>) -> Result<()> {
        match core.ttl {
            Some(t) if t.cleanup_per_access > 0 => self.ttl_cleanup(core.id, t.cleanup_per_access),
            _ => Ok(()),
        }
    }

    /// Reads a whole TTL value at `key_ns` with Flink's TTL semantics: an expired value is deleted (and
    /// returned once under `ReturnExpiredIfNotCleanedUp`); under `OnReadAndWrite` a live one is re-stamped.
    fn ttl_read_whole<S: TypeSerializer, N>(
        &mut self,
        core: &HandleCore<N>,
        ttl: TtlParams,
        kg: KeyGroup,
        ser: &S,
    ) -> Result<Option<S::Value>> {
        let Some(bytes) = self.backend.get(core.id, kg, &self.key_ns)? else {
            return Ok(None);
        };
        let (ts, v) = decode_ttl_value(&core.name, ser, bytes)?;
        let now = self.ttl_now();
        if ttl.expired(ts, now) {
            self.backend.delete(core.id, kg, &self.key_ns)?;
            return Ok(ttl.return_expired.then_some(v));
        }
        if ttl.update_on_read {
            self.ttl_write_whole(core, kg, ser, &v)?;
        }
        Ok(Some(v))
    }

    /// The stored value unless it has expired and expired values are not returned (Flink's
    /// `getUnexpired`); no side effects (the caller overwrites it).
    fn ttl_unexpired<S: TypeSerializer, N>(
        &mut self,
        core: &HandleCore<N>,
        ttl: TtlParams,
        kg: KeyGroup,
        ser: &S,
    ) -> Result<Option<S::Value>> {
        let Some(bytes) = self.backend.get(core.id, kg, &self.key_ns)? else {
            return Ok(None);
        };
        let (ts, v) = decode_ttl_value(&core.name, ser, bytes)?;
        let now = self.ttl_now();
        Ok((ttl.return_expired || !ttl.expired(ts, now)).then_some(v))
    }

    /// Writes `now | value` at `key_ns`.
    fn ttl_write_whole<S: TypeSerializer, N>(
        &mut self,
        core: &HandleCore<N>,
        kg: KeyGroup,
        ser: &S,
        value: &S::Value,
    ) -> Result<()> {
        let now = self.ttl_now();
        self.scratch.clear();
        write_ttl_value(&core.name, ser, now, value, &mut self.scratch)?;
        self.backend.put(core.id, kg, &self.key_ns, &self.scratch)
    }

    /// Merges the list state's `sources` namespaces into `target` at the current key and deletes the
    /// sources (window merging). Elements are moved as bytes, in source order, after the target's.
    pub fn merge_list_namespaces<E: TypeSerializer, N: TypeSerializer>(
        &mut self,
        h: &ListState<E, N>,
        target: &N::Value,
        sources: &[N::Value],
    ) -> Result<()> {
        let mut moved: Vec<u8> = Vec::new();
        for s in sources {
            let kg = self.build_key_ns(&h.core, s)?;
            let id = h.core.id;
            if let Some(v) = self.backend.get(id, kg, &self.key_ns)? {
                if !v.is_empty() {
                    if !moved.is_empty() {
                        moved.push(LIST_DELIMITER);
                    }
                    moved.extend_from_slice(v);
                }
            }
            self.backend.delete(id, kg, &self.key_ns)?;
        }
        let kg = self.build_key_ns(&h.core, target)?;
        if !moved.is_empty() {
            self.backend.append(h.core.id, kg, &self.key_ns, &moved)?;
        }
        Ok(())
    }

    /// Merges the reducing state's `sources` namespaces into `target` with the reduce function and deletes
    /// the sources.
    pub fn merge_reducing_namespaces<V: TypeSerializer, N: TypeSerializer>(
        &mut self,
        h: &ReducingState<V, N>,
        target: &N::Value,
        sources: &[N::Value],
    ) -> Result<()> {
        let reduce = h.reduce.clone();
        self.merge_whole_namespaces(&h.core, &*h.serializer, target, sources, |a, b| {
            reduce(&a, &b)
        })
    }

    /// Merges the aggregating state's `sources` namespaces into `target` (merging accumulators) and deletes
    /// the sources.
    pub fn merge_aggregating_namespaces<F, A, N>(
        &mut self,
        h: &AggregatingState<F, A, N>,
        target: &N::Value,
        sources: &[N::Value],
    ) -> Result<()>
    where
        F: AggregateFunction,
        A: TypeSerializer<Value = F::Acc>,
        N: TypeSerializer,
    {
        let function = h.function.clone();
        self.merge_whole_namespaces(&h.core, &*h.accumulator, target, sources, |a, b| {
            function.merge(a, b)
        })
    }

    /// Folds the values of `sources` and `target` with `combine` into `target`, deleting the sources.
    fn merge_whole_namespaces<S: TypeSerializer, N: TypeSerializer>(
        &mut self,
        core: &HandleCore<N>,
        ser: &S,
        target: &N::Value,
        sources: &[N::Value],
        combine: impl Fn(S::Value, S::Value) -> S::Value,
    ) -> Result<()> {
        let mut acc: Option<S::Value> = None;
        for s in sources.iter().chain(std::iter::once(target)) {
            let kg = self.build_key_ns(core, s)?;
            let v = match core.ttl {
                // TTL: an expired value is left out (Flink's `getUnexpired` in the TTL reduce and merge
                // functions).
                Some(ttl) => self.ttl_unexpired(core, ttl, kg, ser)?,
                None => match self.backend.get(core.id, kg, &self.key_ns)? {
                    Some(bytes) => Some(
                        crate::serializer::from_bytes(ser, bytes).map_err(ser_err(&core.name))?,
                    ),
                    None => None,
                },
            };
            if let Some(v) = v {
                acc = Some(match acc {
                    Some(a) => combine(a, v),
                    None => v,
                });
            }
            self.backend.delete(core.id, kg, &self.key_ns)?;
        }
        if let Some(a) = acc {
            let kg = self.build_key_ns(core, target)?;
            if core.ttl.is_some() {
                return self.ttl_write_whole(core, kg, ser, &a);
            }
            self.scratch.clear();
            ser.serialize(&a, &mut self.scratch)
                .map_err(ser_err(&core.name))?;
            self.backend.put(core.id, kg, &self.key_ns, &self.scratch)?;
        }
        Ok(())
    }
}

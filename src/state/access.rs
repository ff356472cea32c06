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
                return Err(Error::Corruption {
                    location: format!("list state '{name}'"),
                    detail: format!("expected delimiter 0x2c between elements, found {d:#04x}"),
                });
            }
            input = rest;
            if input.is_empty() {
                return Err(Error::Corruption {
                    location: format!("list state '{name}'"),
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

/// A value state at (current key, namespace).
pub struct ValueAccess<'a, K: KeySerializer, V: TypeSerializer, N: TypeSerializer> {
    store: &'a mut KeyedStateStore<K>,
    h: &'a ValueState<V, N>,
    kg: KeyGroup,
}

impl<K: KeySerializer, V: TypeSerializer, N: TypeSerializer> ValueAccess<'_, K, V, N> {
    /// The value, or the descriptor's default (a fresh copy) when there is none.
    #[inline]
    pub fn get(&mut self) -> Result<Option<V::Value>> {
        let s = &mut *self.store;
        if let Some(ttl) = self.h.core.ttl {
            let v = s.ttl_read_whole(&self.h.core, ttl, self.kg, &*self.h.serializer)?;
            return Ok(v.or_else(|| self.h.default.as_deref().cloned()));
        }
        match s.backend.get(self.h.core.id, self.kg, &s.key_ns)? {
            Some(bytes) => crate::serializer::from_bytes(&*self.h.serializer, bytes)
                .map(Some)
                .map_err(ser_err(&self.h.core.name)),
            None => Ok(self.h.default.as_deref().cloned()),
        }
    }

    /// Sets the value.
    #[inline]
    pub fn update(&mut self, value: &V::Value) -> Result<()> {
        let s = &mut *self.store;
        if self.h.core.ttl.is_some() {
            return s.ttl_write_whole(&self.h.core, self.kg, &*self.h.serializer, value);
        }
        s.scratch.clear();
        self.h
            .serializer
            .serialize(value, &mut s.scratch)
            .map_err(ser_err(&self.h.core.name))?;
        s.backend
            .put(self.h.core.id, self.kg, &s.key_ns, &s.scratch)
    }

    /// Sets the value, or clears it for `None` (Flink's `update(null)`).
    pub fn set(&mut self, value: Option<&V::Value>) -> Result<()> {
        match value {
            Some(v) => self.update(v),
            None => self.clear(),
        }
    }

    /// Removes the value.
    pub fn clear(&mut self) -> Result<()> {
        let s = &mut *self.store;
        s.backend.delete(self.h.core.id, self.kg, &s.key_ns)
    }
}

/// A list state at (current key, namespace).
pub struct ListAccess<'a, K: KeySerializer, E: TypeSerializer, N: TypeSerializer> {
    store: &'a mut KeyedStateStore<K>,
    h: &'a ListState<E, N>,
    kg: KeyGroup,
}

impl<K: KeySerializer, E: TypeSerializer, N: TypeSerializer> ListAccess<'_, K, E, N> {
    /// The elements in insertion order, or `None` when the list is empty (an empty list is absent).
    pub fn get(&mut self) -> Result<Option<Vec<E::Value>>> {
        if let Some(ttl) = self.h.core.ttl {
            return self.ttl_get(ttl);
        }
        let s = &mut *self.store;
        match s.backend.get(self.h.core.id, self.kg, &s.key_ns)? {
            Some(bytes) if !bytes.is_empty() => {
                decode_list(&self.h.core.name, &*self.h.element, bytes).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The TTL list read (Flink's `TtlListState.get`): expired elements are left out (returned once under
    /// `ReturnExpiredIfNotCleanedUp`) and removed from the stored list; `OnReadAndWrite` re-stamps the rest.
    fn ttl_get(&mut self, ttl: TtlParams) -> Result<Option<Vec<E::Value>>> {
        let s = &mut *self.store;
        let (id, name) = (self.h.core.id, &*self.h.core.name);
        let items = match s.backend.get(id, self.kg, &s.key_ns)? {
            Some(bytes) if !bytes.is_empty() => decode_ttl_list(name, &*self.h.element, bytes)?,
            _ => return Ok(None),
        };
        let now = s.ttl_now();
        let live: Vec<&(i64, E::Value)> = items
            .iter()
            .filter(|(ts, _)| !ttl.expired(*ts, now))
            .collect();
        if live.is_empty() {
            s.backend.delete(id, self.kg, &s.key_ns)?;
        } else if ttl.update_on_read {
            encode_ttl_list(
                name,
                &*self.h.element,
                live.iter().map(|(_, v)| (now, v)),
                &mut s.scratch,
            )?;
            s.backend.put(id, self.kg, &s.key_ns, &s.scratch)?;
        } else if live.len() < items.len() {
            encode_ttl_list(
                name,
                &*self.h.element,
                live.iter().map(|(ts, v)| (*ts, v)),
                &mut s.scratch,
            )?;
            s.backend.put(id, self.kg, &s.key_ns, &s.scratch)?;
        }
        let out: Vec<E::Value> = if ttl.return_expired {
            items.into_iter().map(|(_, v)| v).collect()
        } else {
            live.into_iter().map(|(_, v)| v.clone()).collect()
        };
        Ok((!out.is_empty()).then_some(out))
    }

    /// Serializes `values` as the stored list (with `now` as every element's timestamp under TTL).
    fn encode(&mut self, values: &[E::Value]) -> Result<()> {
        let s = &mut *self.store;
        match self.h.core.ttl {
            Some(_) => {
                let now = s.ttl_now();
                encode_ttl_list(
                    &self.h.core.name,
                    &*self.h.element,
                    values.iter().map(|v| (now, v)),
                    &mut s.scratch,
                )
            }
            None => encode_list(&self.h.core.name, &*self.h.element, values, &mut s.scratch),
        }
    }

    /// Appends one element without reading the list.
    pub fn add(&mut self, value: &E::Value) -> Result<()> {
        if self.h.core.ttl.is_some() {
            return self.add_all(std::slice::from_ref(value));
        }
        let s = &mut *self.store;
        s.scratch.clear();
        self.h
            .element
            .serialize(value, &mut s.scratch)
            .map_err(ser_err(&self.h.core.name))?;
        s.backend
            .append(self.h.core.id, self.kg, &s.key_ns, &s.scratch)
    }

    /// Appends elements in order; an empty slice changes nothing.
    pub fn add_all(&mut self, values: &[E::Value]) -> Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        self.encode(values)?;
        let s = &mut *self.store;
        s.backend
            .append(self.h.core.id, self.kg, &s.key_ns, &s.scratch)
    }

    /// Replaces the list; an empty slice clears it.
    pub fn update(&mut self, values: &[E::Value]) -> Result<()> {
        if values.is_empty() {
            let s = &mut *self.store;
            return s.backend.delete(self.h.core.id, self.kg, &s.key_ns);
        }
        self.encode(values)?;
        let s = &mut *self.store;
        s.backend
            .put(self.h.core.id, self.kg, &s.key_ns, &s.scratch)
    }

    /// Removes the list.
    pub fn clear(&mut self) -> Result<()> {
        let s = &mut *self.store;
        s.backend.delete(self.h.core.id, self.kg, &s.key_ns)
    }
}

/// A map value (`nullflag | V`) of `h` decoded.
fn decode_map_value<UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer>(
    h: &MapState<UK, UV, N>,
    bytes: &[u8],
) -> Result<Option<UV::Value>> {
    match bytes.split_first() {
        Some((&MAP_VALUE_PRESENT, rest)) => crate::serializer::from_bytes(&*h.user_value, rest)
            .map(Some)
            .map_err(ser_err(&h.core.name)),
        Some((&MAP_VALUE_NULL, _)) => Ok(None),
        _ => Err(Error::Corruption {
            location: format!("map state '{}'", h.core.name),
            detail: "map value without a valid null flag".into(),
        }),
    }
}

/// A map state at (current key, namespace). Iteration is in ascending order of serialized user keys.
pub struct MapAccess<
    'a,
    K: KeySerializer,
    UK: TypeSerializer,
    UV: TypeSerializer,
    N: TypeSerializer,
> {
    store: &'a mut KeyedStateStore<K>,
    h: &'a MapState<UK, UV, N>,
    kg: KeyGroup,
}

impl<K: KeySerializer, UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer>
    MapAccess<'_, K, UK, UV, N>
{
    fn user_key_bytes(&mut self, key: &UK::Value) -> Result<()> {
        let s = &mut *self.store;
        s.scratch2.clear();
        self.h
            .user_key
            .serialize(key, &mut s.scratch2)
            .map_err(ser_err(&self.h.core.name))
    }

    fn decode_value(&self, bytes: &[u8]) -> Result<Option<UV::Value>> {
        decode_map_value(self.h, bytes)
    }

    /// Decodes a stored TTL map value: `Some((ts, value))`, or `None` for a null value.
    fn decode_ttl(&self, bytes: &[u8]) -> Result<Option<(i64, UV::Value)>> {
        match bytes.split_first() {
            Some((&MAP_VALUE_PRESENT, rest)) => {
                decode_ttl_value(&self.h.core.name, &*self.h.user_value, rest).map(Some)
            }
            Some((&MAP_VALUE_NULL, _)) => Ok(None),
            _ => Err(Error::Corruption {
                location: format!("map state '{}'", self.h.core.name),
                detail: "map value without a valid null flag".into(),
            }),
        }
    }

    /// Applies TTL to one stored entry whose user key is in `scratch2`: an expired entry is removed (its
    /// value returned once under `ReturnExpiredIfNotCleanedUp`), a live one re-stamped under `OnReadAndWrite`.
    fn ttl_check(&mut self, ttl: TtlParams, bytes: &[u8]) -> Result<Option<UV::Value>> {
        let Some((ts, v)) = self.decode_ttl(bytes)? else {
            return Ok(None);
        };
        let now = self.store.ttl_now();
        let s = &mut *self.store;
        if ttl.expired(ts, now) {
            s.backend
                .map_remove(self.h.core.id, self.kg, &s.key_ns, &s.scratch2)?;
            return Ok(ttl.return_expired.then_some(v));
        }
        if ttl.update_on_read {
            self.write_value(now, &v)?;
        }
        Ok(Some(v))
    }

    /// Writes the value for the user key in `scratch2` (stamped with `now` under TTL).
    fn write_value(&mut self, now: i64, value: &UV::Value) -> Result<()> {
        let s = &mut *self.store;
        s.scratch.clear();
        s.scratch.push(MAP_VALUE_PRESENT);
        match self.h.core.ttl {
            Some(_) => write_ttl_value(
                &self.h.core.name,
                &*self.h.user_value,
                now,
                value,
                &mut s.scratch,
            )?,
            None => self
                .h
                .user_value
                .serialize(value, &mut s.scratch)
                .map_err(ser_err(&self.h.core.name))?,
        }
        s.backend
            .map_put(self.h.core.id, self.kg, &s.key_ns, &s.scratch2, &s.scratch)
    }

    /// Every entry with TTL applied (expired ones removed, and kept in the result only under
    /// `ReturnExpiredIfNotCleanedUp`); null values as `None`.
    fn ttl_entries(&mut self, ttl: TtlParams) -> Result<Vec<(UK::Value, Option<UV::Value>)>> {
        let raw = self.raw_entries()?;
        let mut out = Vec::with_capacity(raw.len());
        for (k, v) in raw {
            let key = crate::serializer::from_bytes(&*self.h.user_key, &k)
                .map_err(ser_err(&self.h.core.name))?;
            if v.first() == Some(&MAP_VALUE_NULL) {
                out.push((key, None));
                continue;
            }
            self.store.scratch2.clear();
            self.store.scratch2.extend_from_slice(&k);
            if let Some(value) = self.ttl_check(ttl, &v)? {
                out.push((key, Some(value)));
            }
        }
        Ok(out)
    }

    /// The value for `key`, if present (a null value, as Flink can store, reads as `None`).
    pub fn get(&mut self, key: &UK::Value) -> Result<Option<UV::Value>> {
        self.user_key_bytes(key)?;
        if let Some(ttl) = self.h.core.ttl {
            let s = &mut *self.store;
            let found = s
                .backend
                .map_get(self.h.core.id, self.kg, &s.key_ns, &s.scratch2)?
                .map(|b| b.to_vec());
            return match found {
                Some(b) => self.ttl_check(ttl, &b),
                None => Ok(None),
            };
        }
        let (s, h) = (&mut *self.store, self.h);
        match s
            .backend
            .map_get(h.core.id, self.kg, &s.key_ns, &s.scratch2)?
        {
            Some(b) => decode_map_value(h, b),
            None => Ok(None),
        }
    }

    /// Whether `key` has an entry.
    pub fn contains(&mut self, key: &UK::Value) -> Result<bool> {
        if self.h.core.ttl.is_some() {
            // Flink's `TtlMapState.contains`: a TTL read.
            return Ok(self.get(key)?.is_some());
        }
        self.user_key_bytes(key)?;
        let s = &mut *self.store;
        Ok(s.backend
            .map_get(self.h.core.id, self.kg, &s.key_ns, &s.scratch2)?
            .is_some())
    }

    /// Sets the value for `key`.
    pub fn put(&mut self, key: &UK::Value, value: &UV::Value) -> Result<()> {
        self.user_key_bytes(key)?;
        let now = match self.h.core.ttl {
            Some(_) => self.store.ttl_now(),
            None => 0,
        };
        self.write_value(now, value)
    }

    /// Sets every entry of `entries`.
    pub fn put_all(&mut self, entries: &[(UK::Value, UV::Value)]) -> Result<()> {
        for (k, v) in entries {
            self.put(k, v)?;
        }
        Ok(())
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &UK::Value) -> Result<()> {
        self.user_key_bytes(key)?;
        let s = &mut *self.store;
        s.backend
            .map_remove(self.h.core.id, self.kg, &s.key_ns, &s.scratch2)
    }

    /// Whether the map has no entry.
    pub fn is_empty(&mut self) -> Result<bool> {
        if let Some(ttl) = self.h.core.ttl {
            return Ok(self.ttl_entries(ttl)?.is_empty());
        }
        let s = &mut *self.store;
        let mut empty = true;
        s.backend
            .map_scan(self.h.core.id, self.kg, &s.key_ns, &mut |_, _| {
                empty = false;
                false
            })?;
        Ok(empty)
    }

    fn raw_entries(&mut self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let s = &mut *self.store;
        let mut out = Vec::new();
        s.backend
            .map_scan(self.h.core.id, self.kg, &s.key_ns, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                true
            })?;
        Ok(out)
    }

    /// All entries in user-key order (null values are skipped).
    pub fn entries(&mut self) -> Result<Vec<(UK::Value, UV::Value)>> {
        if let Some(ttl) = self.h.core.ttl {
            let all = self.ttl_entries(ttl)?;
            return Ok(all
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect());
        }
        let raw = self.raw_entries()?;
        let mut out = Vec::with_capacity(raw.len());
        for (k, v) in raw {
            let key = crate::serializer::from_bytes(&*self.h.user_key, &k)
                .map_err(ser_err(&self.h.core.name))?;
            if let Some(value) = self.decode_value(&v)? {
                out.push((key, value));
            }
        }
        Ok(out)
    }

    /// All user keys in order.
    pub fn keys(&mut self) -> Result<Vec<UK::Value>> {
        if let Some(ttl) = self.h.core.ttl {
            return Ok(self.ttl_entries(ttl)?.into_iter().map(|(k, _)| k).collect());
        }
        let raw = self.raw_entries()?;
        raw.iter()
            .map(|(k, _)| {
                crate::serializer::from_bytes(&*self.h.user_key, k)
                    .map_err(ser_err(&self.h.core.name))
            })
            .collect()
    }

    /// All values in user-key order (null values are skipped).
    pub fn values(&mut self) -> Result<Vec<UV::Value>> {
        Ok(self.entries()?.into_iter().map(|(_, v)| v).collect())
    }

    /// Visits every entry in order; `f` may change the value and returns whether to keep the entry (Flink's
    /// iterator `remove` and `Entry.setValue`).
    pub fn retain(&mut self, mut f: impl FnMut(&UK::Value, &mut UV::Value) -> bool) -> Result<()> {
        for (k, mut v) in self.entries()? {
            let before = {
                self.store.scratch.clear();
                self.h
                    .user_value
                    .serialize(&v, &mut self.store.scratch)
                    .map_err(ser_err(&self.h.core.name))?;
                self.store.scratch.clone()
            };
            if f(&k, &mut v) {
                let mut after = Vec::with_capacity(before.len());
                self.h
                    .user_value
                    .serialize(&v, &mut after)
                    .map_err(ser_err(&self.h.core.name))?;
                if after != before {
                    self.put(&k, &v)?;
                }
            } else {
                self.remove(&k)?;
            }
        }
        Ok(())
    }

    /// Removes every entry.
    pub fn clear(&mut self) -> Result<()> {
        let s = &mut *self.store;
        s.backend.map_clear(self.h.core.id, self.kg, &s.key_ns)
    }
}

/// A reducing state at (current key, namespace).
pub struct ReducingAccess<'a, K: KeySerializer, V: TypeSerializer, N: TypeSerializer> {
    store: &'a mut KeyedStateStore<K>,
    h: &'a ReducingState<V, N>,
    kg: KeyGroup,
}

impl<K: KeySerializer, V: TypeSerializer, N: TypeSerializer> ReducingAccess<'_, K, V, N> {
    /// The reduced value, if any was added.
    pub fn get(&mut self) -> Result<Option<V::Value>> {
        let s = &mut *self.store;
        if let Some(ttl) = self.h.core.ttl {
            return s.ttl_read_whole(&self.h.core, ttl, self.kg, &*self.h.serializer);
        }
        match s.backend.get(self.h.core.id, self.kg, &s.key_ns)? {
            Some(bytes) => crate::serializer::from_bytes(&*self.h.serializer, bytes)
                .map(Some)
                .map_err(ser_err(&self.h.core.name)),
            None => Ok(None),
        }
    }

    /// Folds `value` into the state with the reduce function.
    pub fn add(&mut self, value: &V::Value) -> Result<()> {
        if let Some(ttl) = self.h.core.ttl {
            // Flink's `TtlReduceFunction`: an expired accumulator is dropped, not merged.
            let s = &mut *self.store;
            let current = s.ttl_unexpired(&self.h.core, ttl, self.kg, &*self.h.serializer)?;
            let next = match current {
                Some(current) => (self.h.reduce)(&current, value),
                None => value.clone(),
            };
            return s.ttl_write_whole(&self.h.core, self.kg, &*self.h.serializer, &next);
        }
        let next = match self.get()? {
            Some(current) => (self.h.reduce)(&current, value),
            None => value.clone(),
        };
        let s = &mut *self.store;
        s.scratch.clear();
        self.h
            .serializer
            .serialize(&next, &mut s.scratch)
            .map_err(ser_err(&self.h.core.name))?;
        s.backend
            .put(self.h.core.id, self.kg, &s.key_ns, &s.scratch)
    }

    /// Removes the value.
    pub fn clear(&mut self) -> Result<()> {
        let s = &mut *self.store;
        s.backend.delete(self.h.core.id, self.kg, &s.key_ns)
    }
}

/// An aggregating state at (current key, namespace).
pub struct AggregatingAccess<'a, K, F, A, N>
where
    K: KeySerializer,
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
    N: TypeSerializer,
{
    store: &'a mut KeyedStateStore<K>,
    h: &'a AggregatingState<F, A, N>,
    kg: KeyGroup,
}

impl<K, F, A, N> AggregatingAccess<'_, K, F, A, N>
where
    K: KeySerializer,
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
    N: TypeSerializer,
{
    fn accumulator(&mut self) -> Result<Option<F::Acc>> {
        let s = &mut *self.store;
        if let Some(ttl) = self.h.core.ttl {
            return s.ttl_read_whole(&self.h.core, ttl, self.kg, &*self.h.accumulator);
        }
        match s.backend.get(self.h.core.id, self.kg, &s.key_ns)? {
            Some(bytes) => crate::serializer::from_bytes(&*self.h.accumulator, bytes)
                .map(Some)
                .map_err(ser_err(&self.h.core.name)),
            None => Ok(None),
        }
    }

    /// The aggregation result, if anything was added.
    pub fn get(&mut self) -> Result<Option<F::Out>> {
        Ok(self.accumulator()?.map(|a| self.h.function.get_result(&a)))
    }

    /// Adds one input to the accumulator.
    pub fn add(&mut self, value: &F::In) -> Result<()> {
        if let Some(ttl) = self.h.core.ttl {
            // Flink's `TtlAggregateFunction.add`: an expired accumulator is replaced by a fresh one.
            let s = &mut *self.store;
            let acc = s
                .ttl_unexpired(&self.h.core, ttl, self.kg, &*self.h.accumulator)?
                .unwrap_or_else(|| self.h.function.create_accumulator());
            let acc = self.h.function.add(value, acc);
            return s.ttl_write_whole(&self.h.core, self.kg, &*self.h.accumulator, &acc);
        }
        let acc = match self.accumulator()? {
            Some(a) => a,
            None => self.h.function.create_accumulator(),
        };
        let acc = self.h.function.add(value, acc);
        let s = &mut *self.store;
        s.scratch.clear();
        self.h
            .accumulator
            .serialize(&acc, &mut s.scratch)
            .map_err(ser_err(&self.h.core.name))?;
        s.backend
            .put(self.h.core.id, self.kg, &s.key_ns, &s.scratch)
    }

    /// Removes the accumulator.
    pub fn clear(&mut self) -> Result<()> {
        let s = &mut *self.store;
        s.backend.delete(self.h.core.id, self.kg, &s.key_ns)
    }
}

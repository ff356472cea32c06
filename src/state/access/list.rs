//! [`ListAccess`]: a list state at (current key, namespace).

use super::*;

/// A list state at (current key, namespace).
pub struct ListAccess<'a, K: KeySerializer, E: TypeSerializer, N: TypeSerializer> {
    pub(super) store: &'a mut KeyedStateStore<K>,
    pub(super) h: &'a ListState<E, N>,
    pub(super) kg: KeyGroup,
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

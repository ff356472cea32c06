//! [`ValueAccess`]: a value state at (current key, namespace).

use super::*;

/// A value state at (current key, namespace).
pub struct ValueAccess<'a, K: KeySerializer, V: TypeSerializer, N: TypeSerializer> {
    pub(super) store: &'a mut KeyedStateStore<K>,
    pub(super) h: &'a ValueState<V, N>,
    pub(super) kg: KeyGroup,
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

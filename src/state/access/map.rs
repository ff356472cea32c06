//! [`MapAccess`]: a map state at (current key, namespace).

use super::*;

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
        _ => Err(Error::CorruptState {
            state: h.core.name.to_string(),
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
    pub(super) store: &'a mut KeyedStateStore<K>,
    pub(super) h: &'a MapState<UK, UV, N>,
    pub(super) kg: KeyGroup,
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
            _ => Err(Error::CorruptState {
                state: self.h.core.name.to_string(),
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

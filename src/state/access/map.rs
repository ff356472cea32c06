//! [`MapAccess`]: a map state at (current key, namespace), and its iterators [`MapEntries`], [`MapKeys`]
//! and [`MapValues`].
//!
//! The iterators stream: they fetch the map from the backend [`MAP_BATCH`] entries at a time with
//! `StateBackend::map_scan_from`, copying each batch out, and resume after the last user key seen. No
//! backend lock, table borrow or engine iterator is held while the caller's code runs between `next`
//! calls, so the same code works on the heap, LSM and RocksDB backends, and memory is bounded by one batch
//! whatever the map's size. Each batch is a consistent read of its own; the iterator borrows the accessor
//! mutably, so nothing else writes the map while it runs (TTL may remove expired entries as it passes
//! them, behind the cursor).

use super::*;

/// How many map entries an iterator fetches from the backend at a time.
pub const MAP_BATCH: usize = 256;

/// The largest batch buffer a store keeps between map iterations.
const KEPT_BATCH_BYTES: usize = 64 << 10;

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

impl<'a, K: KeySerializer, UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer>
    MapAccess<'a, K, UK, UV, N>
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

    /// Moves `cur` to the next raw entry (read it with [`Cursor::entry`]); a batch is fetched from the backend
    /// when the last one is used up. False when the map has no entry left.
    fn next_raw(&mut self, cur: &mut Cursor) -> Result<bool> {
        if cur.next < cur.spans.len() {
            cur.next += 1;
            return Ok(true);
        }
        if cur.done {
            return Ok(false);
        }
        let after = cur.spans.last().map(|&(k, v, _)| cur.buf[k..v].to_vec());
        cur.buf.clear();
        cur.spans.clear();
        let s = &mut *self.store;
        let from = after.as_deref().unwrap_or_default();
        let (buf, spans) = (&mut cur.buf, &mut cur.spans);
        s.backend
            .map_scan_from(self.h.core.id, self.kg, &s.key_ns, from, &mut |k, v| {
                if after.as_deref() == Some(k) {
                    return true;
                }
                let start = buf.len();
                buf.extend_from_slice(k);
                buf.extend_from_slice(v);
                spans.push((start, start + k.len(), buf.len()));
                spans.len() < MAP_BATCH
            })?;
        cur.done = cur.spans.len() < MAP_BATCH;
        cur.next = usize::from(!cur.spans.is_empty());
        Ok(cur.next == 1)
    }

    /// A cursor before the first entry, on the buffers the last iteration left in the store.
    fn cursor(&mut self) -> Cursor {
        let (mut buf, mut spans) = std::mem::take(&mut self.store.map_batch);
        buf.clear();
        spans.clear();
        Cursor {
            buf,
            spans,
            next: 0,
            done: false,
        }
    }

    /// Gives a finished cursor's buffers back to the store for the next iteration (unless a batch of large
    /// entries grew them beyond [`KEPT_BATCH_BYTES`]).
    fn recycle(&mut self, cur: Cursor) {
        if cur.buf.capacity() <= KEPT_BATCH_BYTES {
            self.store.map_batch = (cur.buf, cur.spans);
        }
    }

    /// The next entry after `cur`'s position, with TTL applied (an expired entry is removed, and returned
    /// only under `ReturnExpiredIfNotCleanedUp`): the user key and the value (`None` for a null value, or
    /// when `value` is false on a state without TTL).
    fn next_entry(
        &mut self,
        cur: &mut Cursor,
        value: bool,
    ) -> Result<Option<(UK::Value, Option<UV::Value>)>> {
        while self.next_raw(cur)? {
            let (k, v) = cur.entry();
            let key = crate::serializer::from_bytes(&*self.h.user_key, k)
                .map_err(ser_err(&self.h.core.name))?;
            let Some(ttl) = self.h.core.ttl else {
                let decoded = if value { self.decode_value(v)? } else { None };
                return Ok(Some((key, decoded)));
            };
            if v.first() == Some(&MAP_VALUE_NULL) {
                return Ok(Some((key, None)));
            }
            self.store.scratch2.clear();
            self.store.scratch2.extend_from_slice(k);
            if let Some(decoded) = self.ttl_check(ttl, v)? {
                return Ok(Some((key, Some(decoded))));
            }
        }
        Ok(None)
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
        let now = match self.h.core.ttl {
            Some(_) => self.store.ttl_now(),
            None => 0,
        };
        // Every entry serialized into one buffer (user key, then `nullflag | V`), handed over at once.
        let mut buf = Vec::with_capacity(entries.len() * 24);
        let mut spans = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let k0 = buf.len();
            self.h
                .user_key
                .serialize(k, &mut buf)
                .map_err(ser_err(&self.h.core.name))?;
            let v0 = buf.len();
            buf.push(MAP_VALUE_PRESENT);
            match self.h.core.ttl {
                Some(_) => {
                    write_ttl_value(&self.h.core.name, &*self.h.user_value, now, v, &mut buf)?
                }
                None => self
                    .h
                    .user_value
                    .serialize(v, &mut buf)
                    .map_err(ser_err(&self.h.core.name))?,
            }
            spans.push((k0, v0, buf.len()));
        }
        let pairs: Vec<(&[u8], &[u8])> = spans
            .iter()
            .map(|&(k, v, end)| (&buf[k..v], &buf[v..end]))
            .collect();
        let s = &mut *self.store;
        s.backend
            .map_put_all(self.h.core.id, self.kg, &s.key_ns, &pairs)
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &UK::Value) -> Result<()> {
        self.user_key_bytes(key)?;
        let s = &mut *self.store;
        s.backend
            .map_remove(self.h.core.id, self.kg, &s.key_ns, &s.scratch2)
    }

    /// Whether the map has no entry (with TTL: no live entry; expired ones are removed on the way).
    pub fn is_empty(&mut self) -> Result<bool> {
        if self.h.core.ttl.is_none() {
            let s = &mut *self.store;
            return s.backend.map_is_empty(self.h.core.id, self.kg, &s.key_ns);
        }
        let mut cur = self.cursor();
        let empty = self.next_entry(&mut cur, false).map(|e| e.is_none());
        self.recycle(cur);
        empty
    }

    /// Every entry, in user-key order (null values are skipped), streamed from the backend: see the module
    /// documentation. Collect with `.collect::<Result<Vec<_>>>()`.
    pub fn entries(&mut self) -> MapEntries<'_, 'a, K, UK, UV, N> {
        MapIter {
            cur: self.cursor(),
            access: self,
            projection: std::marker::PhantomData,
        }
    }

    /// Every user key, in order (keys with a null value too), streamed.
    pub fn keys(&mut self) -> MapKeys<'_, 'a, K, UK, UV, N> {
        MapIter {
            cur: self.cursor(),
            access: self,
            projection: std::marker::PhantomData,
        }
    }

    /// Every value, in user-key order (null values are skipped), streamed.
    pub fn values(&mut self) -> MapValues<'_, 'a, K, UK, UV, N> {
        MapIter {
            cur: self.cursor(),
            access: self,
            projection: std::marker::PhantomData,
        }
    }

    /// Visits every entry in order; `f` may change the value and returns whether to keep the entry (Flink's
    /// iterator `remove` and `Entry.setValue`). The entries are read first, then changed.
    pub fn retain(&mut self, mut f: impl FnMut(&UK::Value, &mut UV::Value) -> bool) -> Result<()> {
        let all: Vec<(UK::Value, UV::Value)> = self.entries().collect::<Result<_>>()?;
        for (k, mut v) in all {
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

/// Where a map iterator is: the batch fetched from the backend (keys and values back to back in one buffer,
/// so a batch costs no allocation per entry), the entry it is at, and whether the backend has nothing after
/// the batch.
#[derive(Default)]
struct Cursor {
    buf: Vec<u8>,
    /// Per entry: where its key starts, where its value starts (the key's end) and where the value ends.
    spans: Vec<(usize, usize, usize)>,
    /// How many entries of the batch were returned (the current one is the last of them).
    next: usize,
    done: bool,
}

impl Cursor {
    /// The raw key and value of the current entry (after [`MapAccess::next_raw`] returned true).
    fn entry(&self) -> (&[u8], &[u8]) {
        let (k, v, end) = self.spans[self.next - 1];
        (&self.buf[k..v], &self.buf[v..end])
    }

    /// Ends the iteration (after an error: an iterator returns its first error, then nothing).
    fn stop(&mut self) {
        self.spans.clear();
        self.next = 0;
        self.done = true;
    }
}

/// What a map iterator yields from each entry: [`MapEntryItems`], [`MapKeyItems`] or [`MapValueItems`]. Sealed.
pub trait MapProjection<UK: TypeSerializer, UV: TypeSerializer>: sealed::Sealed {
    /// The item of the iterator.
    type Item;
    /// Whether the iterator decodes values (keys alone need not).
    const DECODES_VALUES: bool;
    /// The item of an entry (a null value is `None`), or `None` to skip the entry.
    fn project(key: UK::Value, value: Option<UV::Value>) -> Option<Self::Item>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::MapEntryItems {}
    impl Sealed for super::MapKeyItems {}
    impl Sealed for super::MapValueItems {}
}

/// `(user key, value)` per entry, null values skipped.
#[derive(Debug)]
pub struct MapEntryItems;

/// Every user key, keys with a null value too.
#[derive(Debug)]
pub struct MapKeyItems;

/// The values, null values skipped.
#[derive(Debug)]
pub struct MapValueItems;

impl<UK: TypeSerializer, UV: TypeSerializer> MapProjection<UK, UV> for MapEntryItems {
    type Item = (UK::Value, UV::Value);
    const DECODES_VALUES: bool = true;
    fn project(key: UK::Value, value: Option<UV::Value>) -> Option<Self::Item> {
        Some((key, value?))
    }
}

impl<UK: TypeSerializer, UV: TypeSerializer> MapProjection<UK, UV> for MapKeyItems {
    type Item = UK::Value;
    const DECODES_VALUES: bool = false;
    fn project(key: UK::Value, _: Option<UV::Value>) -> Option<Self::Item> {
        Some(key)
    }
}

impl<UK: TypeSerializer, UV: TypeSerializer> MapProjection<UK, UV> for MapValueItems {
    type Item = UV::Value;
    const DECODES_VALUES: bool = true;
    fn project(_: UK::Value, value: Option<UV::Value>) -> Option<Self::Item> {
        value
    }
}

/// A streaming iterator over a map state at (current key, namespace), in user-key order, yielding what
/// `P` projects from each entry. After an error it returns that error once, then nothing.
pub struct MapIter<
    'm,
    'a,
    K: KeySerializer,
    UK: TypeSerializer,
    UV: TypeSerializer,
    N: TypeSerializer,
    P: MapProjection<UK, UV>,
> {
    access: &'m mut MapAccess<'a, K, UK, UV, N>,
    cur: Cursor,
    projection: std::marker::PhantomData<P>,
}

/// The iterator of [`MapAccess::entries`]: `(user key, value)` in user-key order, null values skipped.
pub type MapEntries<'m, 'a, K, UK, UV, N> = MapIter<'m, 'a, K, UK, UV, N, MapEntryItems>;

/// The iterator of [`MapAccess::keys`]: every user key in order.
pub type MapKeys<'m, 'a, K, UK, UV, N> = MapIter<'m, 'a, K, UK, UV, N, MapKeyItems>;

/// The iterator of [`MapAccess::values`]: the values in user-key order, null values skipped.
pub type MapValues<'m, 'a, K, UK, UV, N> = MapIter<'m, 'a, K, UK, UV, N, MapValueItems>;

impl<K, UK, UV, N, P> Iterator for MapIter<'_, '_, K, UK, UV, N, P>
where
    K: KeySerializer,
    UK: TypeSerializer,
    UV: TypeSerializer,
    N: TypeSerializer,
    P: MapProjection<UK, UV>,
{
    type Item = Result<P::Item>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.access.next_entry(&mut self.cur, P::DECODES_VALUES) {
                Ok(Some((k, v))) => {
                    if let Some(item) = P::project(k, v) {
                        return Some(Ok(item));
                    }
                }
                Ok(None) => return None,
                Err(e) => {
                    self.cur.stop();
                    return Some(Err(e));
                }
            }
        }
    }
}

impl<K, UK, UV, N, P> Drop for MapIter<'_, '_, K, UK, UV, N, P>
where
    K: KeySerializer,
    UK: TypeSerializer,
    UV: TypeSerializer,
    N: TypeSerializer,
    P: MapProjection<UK, UV>,
{
    fn drop(&mut self) {
        self.access.recycle(std::mem::take(&mut self.cur));
    }
}

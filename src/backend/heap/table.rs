//! The per-(state, key group) hash tables of the heap backend (value, list, reducing and aggregating
//! states): copy-on-write hash tables. Map states have their own table, [`super::map_table`].
//!
//! A snapshot clones every table of every state: O(states × key groups), whatever the state size. Cloning
//! a table bumps a reference count; the first write to a shared table copies that whole table (one key
//! group of one state), later writes are plain hash-map writes. `design/decisions/0002-heap-tables.md`
//! records why this and not a persistent (path-copying) map.

use std::sync::Arc;

use crate::error::Result;

type FastHasher = foldhash::fast::RandomState;

/// What [`KvTable::retain`] does with one entry.
pub enum Rewrite {
    /// Keep the entry as it is.
    Keep,
    /// Replace the value.
    Replace(Vec<u8>),
    /// Remove the entry.
    Remove,
}

/// A hash table of one (state, key group) from entry-key bytes to value bytes, cheap to clone for snapshots.
///
/// Keys are the entry keys **without their key-group prefix** (the table belongs to one key group; the
/// backend strips the prefix on the way in and puts it back on the way out).
pub trait KvTable: Clone + Default + Send + Sync {
    /// The value for `key`.
    fn get(&self, key: &[u8]) -> Option<&[u8]>;
    /// Inserts or replaces.
    fn put(&mut self, key: &[u8], value: &[u8]);
    /// Appends `delimiter | elements` to the value of `key` (just `elements` when absent or empty).
    fn append(&mut self, key: &[u8], delimiter: u8, elements: &[u8]);
    /// Removes `key`; whether it was there.
    fn remove(&mut self, key: &[u8]) -> bool;
    /// Number of entries.
    fn len(&self) -> usize;
    /// Whether empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Visits every entry in unspecified order until `f` returns false.
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8]) -> bool);
    /// Visits every entry in ascending key-byte order; stops at the first error.
    fn for_each_sorted(&self, f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()>;
    /// Keeps, replaces or removes each entry as `f` says.
    fn retain(&mut self, f: &mut dyn FnMut(&[u8], &[u8]) -> Rewrite);
}

/// Entries whose keys all have one length and share every byte after their first 8 (the *tail*, at most 8
/// bytes), and whose values all have one length of at most 8 bytes, packed into 16-byte hash-table slots:
/// the first 8 key bytes and the value. `i64` keys in the void namespace (`K | 0x00`: the tail is the
/// namespace byte) with `i64`, `i32`, `f64` or `bool` values, Flink's counters, are stored this way. Half
/// the slot size of [`BytesMap`], which is what decides the speed of a point access once the table
/// outgrows the CPU caches (`design/decisions/0002-heap-tables.md`).
#[derive(Clone)]
pub struct FixedMap {
    /// Length of the varying part of the keys (0..=8): the first `head` bytes.
    head: u8,
    /// Length of the shared tail (0..=8); non-zero only when `head == 8`.
    tail_len: u8,
    /// The shared tail, packed like a key head.
    tail: u64,
    /// Value length in bytes (0..=8), the same for every value.
    vlen: u8,
    /// Key heads left-aligned in a big-endian `u64` (zero padded), so `u64` order is key-byte order (all
    /// keys have one length and one tail).
    map: hashbrown::HashMap<u64, [u8; 8], FastHasher>,
}

impl FixedMap {
    /// An empty map for entries shaped like (`key`, `value`), if they can be packed.
    fn for_shape(key: &[u8], vlen: usize) -> Option<FixedMap> {
        let head = key.len().min(8);
        let tail = &key[head..];
        (tail.len() <= 8 && vlen <= 8).then(|| FixedMap {
            head: head as u8,
            tail_len: tail.len() as u8,
            tail: pack(tail),
            vlen: vlen as u8,
            map: hashbrown::HashMap::with_hasher(FastHasher::default()),
        })
    }

    /// Whether entries shaped like (`key`, `value length`) fit this map.
    #[inline]
    fn fits(&self, key: &[u8], vlen: usize) -> bool {
        self.pack_key(key).is_some() && vlen == self.vlen as usize
    }

    /// The packed head of `key`, when `key` has this map's length and tail.
    #[inline]
    fn pack_key(&self, key: &[u8]) -> Option<u64> {
        let head = self.head as usize;
        if key.len() != head + self.tail_len as usize {
            return None;
        }
        let (h, t) = key.split_at(head);
        (self.tail_len == 0 || pack(t) == self.tail).then(|| pack(h))
    }

    /// The whole key of a packed head: `head | tail`.
    #[inline]
    fn key_bytes(&self, k: u64) -> ([u8; 16], usize) {
        join_key(k, self.head, self.tail_len, self.tail)
    }
}

/// `head | tail` of a [`FixedMap`] key: the first `head` bytes of packed head `k`, then the packed tail.
#[inline]
fn join_key(k: u64, head: u8, tail_len: u8, tail: u64) -> ([u8; 16], usize) {
    let (head, tail_len) = (head as usize, tail_len as usize);
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&k.to_be_bytes());
    b[head..head + tail_len].copy_from_slice(&tail.to_be_bytes()[..tail_len]);
    (b, head + tail_len)
}

/// `bytes` (at most 8) left-aligned in a big-endian `u64`, zero padded.
#[inline]
fn pack(bytes: &[u8]) -> u64 {
    if let Ok(a) = <[u8; 8]>::try_from(bytes) {
        return u64::from_be_bytes(a);
    }
    // Short keys and tails: a few shifts beat a `memcpy` call.
    let mut v = 0u64;
    for (i, b) in bytes.iter().take(8).enumerate() {
        v |= (*b as u64) << (56 - 8 * i);
    }
    v
}

/// `bytes` (at most 8) in an 8-byte array, zero padded.
#[inline]
fn pack_value(bytes: &[u8]) -> [u8; 8] {
    match <[u8; 8]>::try_from(bytes) {
        Ok(a) => a,
        Err(_) => pack(bytes).to_be_bytes(),
    }
}

/// Any entries: keys and values as [`SmallBytes`] (inline up to 14 bytes), 32-byte slots.
pub type BytesMap = hashbrown::HashMap<SmallBytes, SmallBytes, FastHasher>;

/// The representation of a [`CowTable`]: packed while every entry fits [`FixedMap`], else bytes. An empty
/// table picks its representation again at its next insert.
#[derive(Clone)]
pub enum KvMap {
    /// Fixed-width entries.
    Fixed(FixedMap),
    /// Any entries.
    Bytes(BytesMap),
}

impl Default for KvMap {
    fn default() -> Self {
        KvMap::Bytes(BytesMap::with_hasher(FastHasher::default()))
    }
}

impl KvMap {
    fn len(&self) -> usize {
        match self {
            KvMap::Fixed(m) => m.map.len(),
            KvMap::Bytes(m) => m.len(),
        }
    }

    /// Makes room for an entry with `klen` key bytes and `vlen` value bytes: an empty table takes the best
    /// representation for it, a fixed table that cannot hold it turns into a bytes table.
    #[inline]
    fn prepare(&mut self, key: &[u8], vlen: usize) {
        match self {
            KvMap::Fixed(m) if m.fits(key, vlen) => {}
            KvMap::Bytes(m) if !m.is_empty() => {}
            _ if self.len() == 0 => {
                *self = match FixedMap::for_shape(key, vlen) {
                    Some(m) => KvMap::Fixed(m),
                    None => KvMap::default(),
                };
            }
            KvMap::Fixed(m) => {
                let mut bytes =
                    BytesMap::with_capacity_and_hasher(m.map.len(), FastHasher::default());
                let vl = m.vlen as usize;
                for (k, v) in m.map.iter() {
                    let (kb, kl) = m.key_bytes(*k);
                    bytes.insert(SmallBytes::new(&kb[..kl]), SmallBytes::new(&v[..vl]));
                }
                *self = KvMap::Bytes(bytes);
            }
            KvMap::Bytes(_) => {}
        }
    }

    #[inline]
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        match self {
            KvMap::Fixed(m) => {
                let k = m.pack_key(key)?;
                m.map.get(&k).map(|v| &v[..m.vlen as usize])
            }
            KvMap::Bytes(m) => m.get(key).map(SmallBytes::as_slice),
        }
    }

    #[inline]
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.prepare(key, value.len());
        match self {
            KvMap::Fixed(m) => {
                if let Some(k) = m.pack_key(key) {
                    m.map.insert(k, pack_value(value));
                }
            }
            KvMap::Bytes(m) => match m.get_mut(key) {
                Some(v) => v.set(value),
                None => {
                    m.insert(SmallBytes::new(key), SmallBytes::new(value));
                }
            },
        }
    }

    fn append(&mut self, key: &[u8], delimiter: u8, elements: &[u8]) {
        let current = self.get(key).map(<[u8]>::len);
        match current {
            None | Some(0) => self.put(key, elements),
            Some(len) => {
                // A fixed map holds values of one length only and this one grows, so `prepare` turns a
                // fixed map into bytes (it is not empty: it holds `key`).
                self.prepare(key, len + 1 + elements.len());
                if let KvMap::Bytes(m) = self {
                    if let Some(v) = m.get_mut(key) {
                        v.extend(&[&[delimiter], elements]);
                    }
                }
            }
        }
    }

    fn remove(&mut self, key: &[u8]) -> bool {
        match self {
            KvMap::Fixed(m) => match m.pack_key(key) {
                Some(k) => m.map.remove(&k).is_some(),
                None => false,
            },
            KvMap::Bytes(m) => m.remove(key).is_some(),
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }
}

/// Copy-on-write hash table: an `Arc`-shared [`KvMap`], copied whole on the first write while shared.
/// Cloning (a snapshot) bumps a reference count; later writes are plain hash-map writes.
#[derive(Clone, Default)]
pub struct CowTable(Arc<KvMap>);

/// Which contents a [`CowTable`] had when [`CowTable::version`] was taken: the table is unchanged exactly
/// while it still holds that allocation (every write goes through `Arc::make_mut`, which moves the table to
/// a new allocation when this weak reference exists, or copies it when a snapshot shares it).
pub struct KvVersion(std::sync::Weak<KvMap>);

impl CowTable {
    /// The table's current contents, for [`is_version`](Self::is_version) later.
    pub fn version(&self) -> KvVersion {
        KvVersion(Arc::downgrade(&self.0))
    }

    /// Whether the table is unchanged since `v` was taken.
    pub fn is_version(&self, v: &KvVersion) -> bool {
        std::ptr::eq(v.0.as_ptr(), Arc::as_ptr(&self.0))
    }
}

impl KvTable for CowTable {
    #[inline]
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.0.get(key)
    }
    #[inline]
    fn put(&mut self, key: &[u8], value: &[u8]) {
        Arc::make_mut(&mut self.0).put(key, value)
    }
    fn append(&mut self, key: &[u8], delimiter: u8, elements: &[u8]) {
        Arc::make_mut(&mut self.0).append(key, delimiter, elements)
    }
    #[inline]
    fn remove(&mut self, key: &[u8]) -> bool {
        if !self.0.contains(key) {
            return false;
        }
        Arc::make_mut(&mut self.0).remove(key)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        match &*self.0 {
            KvMap::Fixed(m) => {
                let vl = m.vlen as usize;
                for (k, v) in m.map.iter() {
                    let (kb, kl) = m.key_bytes(*k);
                    if !f(&kb[..kl], &v[..vl]) {
                        return;
                    }
                }
            }
            KvMap::Bytes(m) => {
                for (k, v) in m.iter() {
                    if !f(k.as_slice(), v.as_slice()) {
                        return;
                    }
                }
            }
        }
    }
    fn for_each_sorted(&self, f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        match &*self.0 {
            KvMap::Fixed(m) => {
                let vl = m.vlen as usize;
                let mut entries: Vec<(u64, [u8; 8])> =
                    m.map.iter().map(|(k, v)| (*k, *v)).collect();
                // One key length and one tail, heads left-aligned big-endian: integer order is key order.
                entries.sort_unstable_by_key(|e| e.0);
                for (k, v) in &entries {
                    let (kb, kl) = m.key_bytes(*k);
                    f(&kb[..kl], &v[..vl])?;
                }
                Ok(())
            }
            KvMap::Bytes(m) => visit_sorted(m.iter(), f),
        }
    }
    fn retain(&mut self, f: &mut dyn FnMut(&[u8], &[u8]) -> Rewrite) {
        // Replacements may change value lengths, so they go through `put` after the pass.
        let mut replaced: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        match Arc::make_mut(&mut self.0) {
            KvMap::Fixed(m) => {
                let (vl, head, tail_len, tail) = (m.vlen as usize, m.head, m.tail_len, m.tail);
                m.map.retain(|k, v| {
                    let (kb, kl) = join_key(*k, head, tail_len, tail);
                    match f(&kb[..kl], &v[..vl]) {
                        Rewrite::Keep => true,
                        Rewrite::Remove => false,
                        Rewrite::Replace(new) => {
                            replaced.push((kb[..kl].to_vec(), new));
                            false
                        }
                    }
                });
            }
            KvMap::Bytes(m) => m.retain(|k, v| match f(k.as_slice(), v.as_slice()) {
                Rewrite::Keep => true,
                Rewrite::Remove => false,
                Rewrite::Replace(new) => {
                    v.set(&new);
                    true
                }
            }),
        }
        for (k, v) in replaced {
            self.put(&k, &v);
        }
    }
}

/// Visits `(key, value)` entries of a hash table in ascending key-byte order.
///
/// Hash tables are unordered: collect references and sort by key bytes. The sort looks only at keys (inline
/// for typical keys) with the first 16 bytes as a big-endian integer compared first; values are dereferenced
/// only when emitted, with prefetching, because long values live in separate allocations and each would
/// otherwise be a cache miss in sequence.
fn visit_sorted<'a>(
    entries: impl Iterator<Item = (&'a SmallBytes, &'a SmallBytes)>,
    f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<()> {
    let mut entries: Vec<(u128, &SmallBytes, &SmallBytes)> = entries
        .map(|(k, v)| (sort_prefix(k.as_slice()), k, v))
        .collect();
    // `sort_prefix` is the big-endian value of the first 16 bytes (zero padded), so prefix order then byte
    // order equals byte order.
    entries.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.as_slice().cmp(b.1.as_slice()))
    });
    // Two dependent loads per long value (table slot, then the buffer): prefetch them in two stages, `AHEAD`
    // entries apart.
    const AHEAD: usize = 8;
    for (j, (_, k, v)) in entries.iter().enumerate() {
        if let Some(e) = entries.get(j + 2 * AHEAD) {
            e.2.prefetch_slot();
        }
        if let Some(e) = entries.get(j + AHEAD) {
            e.2.prefetch_data();
        }
        f(k.as_slice(), v.as_slice())?;
    }
    Ok(())
}

/// The first 16 bytes of `key` as a big-endian integer, zero padded: ordering by it, then by the bytes,
/// is the byte order of keys (a typical key is decided by the integer alone).
#[inline]
fn sort_prefix(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(b)
}

use super::bytes::SmallBytes;

#[cfg(test)]
mod tests {
    use super::*;

    fn collect_sorted<T: KvTable>(t: &T) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        t.for_each_sorted(&mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        out
    }

    /// Writes after a clone (snapshot) never show through it, also once the clone was dropped on another
    /// thread and the table is written in place again.
    #[test]
    fn cow_table_isolation() {
        let mut t = CowTable::default();
        for i in 0..100u32 {
            t.put(&i.to_be_bytes(), &[1u8; 40]);
        }
        let snap = t.clone();
        t.put(&7u32.to_be_bytes(), &[2u8; 40]);
        t.put(b"new", b"v");
        assert!(t.remove(&8u32.to_be_bytes()));
        assert_eq!(snap.get(&7u32.to_be_bytes()), Some(&[1u8; 40][..]));
        assert!(snap.get(&8u32.to_be_bytes()).is_some() && snap.get(b"new").is_none());
        let reader = std::thread::spawn(move || {
            let n = snap.len();
            drop(snap);
            n
        });
        assert_eq!(reader.join().ok(), Some(100));
        t.put(&7u32.to_be_bytes(), &[3u8; 40]);
        assert_eq!(t.get(&7u32.to_be_bytes()), Some(&[3u8; 40][..]));
        assert_eq!(t.len(), 100);
    }

    /// A table of 8-byte keys and values is packed; a snapshot of it is isolated from later writes; an
    /// entry of another shape turns it into a bytes table with every entry kept; emptied, it packs again.
    #[test]
    fn fixed_representation_transitions() {
        let mut t = CowTable::default();
        for i in 0..1000u64 {
            t.put(&i.to_be_bytes(), &(i * 3).to_le_bytes());
        }
        assert!(matches!(&*t.0, KvMap::Fixed(_)));
        let snap = t.clone();
        t.put(&5u64.to_be_bytes(), &[9u8; 8]);
        assert_eq!(
            snap.get(&5u64.to_be_bytes()),
            Some(&15u64.to_le_bytes()[..])
        );
        assert_eq!(t.get(&5u64.to_be_bytes()), Some(&[9u8; 8][..]));
        // Wrong key length: not found, not confused with a padded key.
        assert_eq!(t.get(&[0u8; 7]), None);
        assert!(!t.remove(&[0u8; 7]));
        // A list append makes the value longer: the table turns into bytes, keeping everything.
        t.append(&6u64.to_be_bytes(), b',', &[1u8; 8]);
        assert!(matches!(&*t.0, KvMap::Bytes(_)));
        assert_eq!(t.len(), 1000);
        let mut want: Vec<u8> = 18u64.to_le_bytes().to_vec();
        want.push(b',');
        want.extend_from_slice(&[1u8; 8]);
        assert_eq!(t.get(&6u64.to_be_bytes()), Some(&want[..]));
        assert_eq!(t.get(&7u64.to_be_bytes()), Some(&21u64.to_le_bytes()[..]));
        // The snapshot still has the packed original, in key order.
        let s = collect_sorted(&snap);
        assert_eq!(s.len(), 1000);
        assert!(s.windows(2).all(|w| w[0].0 < w[1].0));
        // Emptied, the next insert chooses again.
        t.retain(&mut |_, _| Rewrite::Remove);
        assert!(t.is_empty());
        t.put(&[1, 2], &[3]);
        assert!(matches!(&*t.0, KvMap::Fixed(_)));
        t.put(&[1, 2, 3], &[3]);
        assert!(matches!(&*t.0, KvMap::Bytes(_)));
        assert_eq!(
            collect_sorted(&t),
            vec![(vec![1, 2], vec![3]), (vec![1, 2, 3], vec![3])]
        );
    }

    /// Keys sharing a tail after their first 8 bytes (`i64 | void namespace byte`) are packed; a key with
    /// another tail or length turns the table into bytes; iteration gives back whole keys in byte order.
    #[test]
    fn shared_tail_keys_are_packed() {
        let key = |i: i64, tail: &[u8]| {
            let mut k = i.to_be_bytes().to_vec();
            k.extend_from_slice(tail);
            k
        };
        let mut t = CowTable::default();
        for i in (-500i64..500).rev() {
            t.put(&key(i, &[0]), &i.to_be_bytes());
        }
        assert!(matches!(&*t.0, KvMap::Fixed(_)));
        assert_eq!(t.get(&key(-3, &[0])), Some(&(-3i64).to_be_bytes()[..]));
        assert_eq!(t.get(&key(-3, &[1])), None);
        assert_eq!(t.get(&key(-3, &[])), None);
        assert_eq!(t.get(&key(-3, &[0, 0])), None);
        let sorted = collect_sorted(&t);
        assert_eq!(sorted.len(), 1000);
        assert!(sorted.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(sorted.iter().all(|(k, _)| k.len() == 9 && k[8] == 0));
        let mut n = 0;
        t.for_each(&mut |k, v| {
            assert_eq!(k[..8], v[..]);
            n += 1;
            true
        });
        assert_eq!(n, 1000);
        // Another namespace byte: bytes from now on, nothing lost.
        t.put(&key(7, &[1]), b"x");
        assert!(matches!(&*t.0, KvMap::Bytes(_)));
        assert_eq!(t.len(), 1001);
        assert_eq!(t.get(&key(7, &[0])), Some(&7i64.to_be_bytes()[..]));
        assert_eq!(t.get(&key(7, &[1])), Some(&b"x"[..]));
    }

    /// `retain` keeps, replaces (also with another length) and removes, in both representations.
    #[test]
    fn retain_rewrites() {
        for packed in [true, false] {
            let mut t = CowTable::default();
            for i in 0..50u32 {
                let v = if packed {
                    vec![i as u8; 4]
                } else {
                    vec![i as u8; 20]
                };
                t.put(&i.to_be_bytes(), &v);
            }
            t.retain(&mut |k, _| match k[3] % 3 {
                0 => Rewrite::Keep,
                1 => Rewrite::Replace(vec![7; 12]),
                _ => Rewrite::Remove,
            });
            let got = collect_sorted(&t);
            assert_eq!(got.len(), 34);
            for (k, v) in got {
                match k[3] % 3 {
                    0 => assert_eq!(v.len(), if packed { 4 } else { 20 }),
                    1 => assert_eq!(v, vec![7; 12]),
                    _ => panic!("removed entry kept"),
                }
            }
        }
    }
}

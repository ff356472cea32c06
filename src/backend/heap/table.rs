//! The per-(state, key group) hash tables of the heap backend (value, list, reducing and aggregating
//! states): copy-on-write hash tables. Map states have their own table, [`super::map_table`].
//!
//! A snapshot clones every table of every state: O(states × key groups), whatever the state size. Cloning
//! a table bumps a reference count; the first write to a shared table copies that whole table (one key
//! group of one state), later writes are plain hash-map writes. `design/decisions/0002-heap-tables.md`
//! records why this and not a persistent (path-copying) map.
//!
//! A table whose entries all have one small shape is packed ([`FixedMap`]); the first entry that does not
//! fit starts its conversion to a bytes table: from then on every write goes to a bytes map beside the
//! packed one (moving only its own entry), and once that holds as many entries as the packed map, each write
//! also drains a bounded number of packed entries ([`CONVERT_BUCKETS_PER_WRITE`]), so no single write pays
//! for the whole table. Reads, iteration, snapshots and the table's length see both parts as one table.

use std::sync::Arc;

use crate::error::Result;

use super::fixed_map::{FastHasher, FixedMap};

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

/// Any entries: keys and values as [`SmallBytes`] (inline up to 14 bytes), 32-byte slots.
pub type BytesMap = hashbrown::HashMap<SmallBytes, SmallBytes, FastHasher>;

/// Buckets of the packed map a write to a converting table drains once the bytes map holds as many entries
/// (so it moves at most this many entries, whatever the table's size;
/// `design/bench-results/2026-12-05-heap-conversion/`).
pub const CONVERT_BUCKETS_PER_WRITE: usize = 1024;

/// The representation of a [`CowTable`]: packed while every entry fits [`FixedMap`], else bytes, and
/// between the two while a packed table that met an entry it cannot hold is converted, a bounded part per
/// write. An empty table picks its representation again at its next insert.
#[derive(Clone)]
pub enum KvMap {
    /// Fixed-width entries.
    Fixed(FixedMap),
    /// Any entries.
    Bytes(BytesMap),
    /// A packed table on its way to bytes.
    Converting(Converting),
}

/// A packed table being converted to bytes: every entry is in exactly one of the two maps. Every write goes
/// to the bytes map (taking its entry out of the packed one), so entries that are not written stay packed
/// and cost nothing to move while most of the table is packed. Once the bytes map holds at least as many
/// entries as the packed one, each write also drains the next [`CONVERT_BUCKETS_PER_WRITE`] buckets of the
/// packed map into the bytes map; when the packed map is empty the table is a bytes table.
#[derive(Clone)]
pub struct Converting {
    /// The entries not moved yet. Never inserted into (writes go to `bytes`), so it never resizes and its
    /// bucket indices, which `cursor` walks, stay put.
    fixed: FixedMap,
    /// The entries moved, and every entry written since the conversion began.
    bytes: BytesMap,
    /// The next bucket of `fixed` to drain.
    cursor: usize,
}

impl Converting {
    /// Starts converting `fixed`: the bytes map gets the packed map's capacity, so it grows (rehashing every
    /// entry in one write, as any hash table does) only where the packed table would have. Its memory is
    /// reserved, not touched: pages are faulted in as entries land in them.
    fn start(fixed: FixedMap) -> Converting {
        let bytes = BytesMap::with_capacity_and_hasher(fixed.capacity(), FastHasher::default());
        Converting {
            fixed,
            bytes,
            cursor: 0,
        }
    }

    /// Moves the entries of the next [`CONVERT_BUCKETS_PER_WRITE`] buckets; the number moved.
    fn step(&mut self) -> usize {
        let to = self.cursor + CONVERT_BUCKETS_PER_WRITE;
        let bytes = &mut self.bytes;
        let moved = self.fixed.drain_buckets(self.cursor, to, &mut |k, v| {
            bytes.insert(SmallBytes::new(k), SmallBytes::new(v));
        });
        // Past the end: start over (only reached with entries left if a clone laid buckets out anew).
        self.cursor = if to >= self.fixed.num_buckets() {
            0
        } else {
            to
        };
        moved
    }
}

impl Default for KvMap {
    fn default() -> Self {
        KvMap::Bytes(BytesMap::with_hasher(FastHasher::default()))
    }
}

/// Inserts or replaces in a bytes map, reusing the value's storage.
#[inline]
fn put_bytes(m: &mut BytesMap, key: &[u8], value: &[u8]) {
    match m.get_mut(key) {
        Some(v) => v.set(value),
        None => {
            m.insert(SmallBytes::new(key), SmallBytes::new(value));
        }
    }
}

impl KvMap {
    fn len(&self) -> usize {
        match self {
            KvMap::Fixed(m) => m.len(),
            KvMap::Bytes(m) => m.len(),
            KvMap::Converting(c) => c.fixed.len() + c.bytes.len(),
        }
    }

    /// Entries held packed (all of a packed table, those not moved yet of a converting one).
    #[cfg(test)]
    fn packed_len(&self) -> usize {
        match self {
            KvMap::Fixed(m) => m.len(),
            KvMap::Bytes(_) => 0,
            KvMap::Converting(c) => c.fixed.len(),
        }
    }

    /// Makes room for an entry with `klen` key bytes and `vlen` value bytes: an empty table takes the best
    /// representation for it, a fixed table that cannot hold it starts converting to bytes (moving nothing
    /// yet).
    #[inline]
    fn prepare(&mut self, key: &[u8], vlen: usize) {
        match self {
            KvMap::Fixed(m) if m.fits(key, vlen) => {}
            KvMap::Bytes(m) if !m.is_empty() => {}
            KvMap::Converting(_) => {}
            _ if self.len() == 0 => {
                *self = match FixedMap::for_shape(key, vlen) {
                    Some(m) => KvMap::Fixed(m),
                    None => KvMap::default(),
                };
            }
            KvMap::Fixed(_) => {
                if let KvMap::Fixed(fixed) = std::mem::take(self) {
                    *self = KvMap::Converting(Converting::start(fixed));
                }
            }
            KvMap::Bytes(_) => {}
        }
    }

    /// After a write to a converting table: once the bytes part is at least as large as the packed part,
    /// moves the next part of the packed one, and ends the conversion when the packed part is empty. The
    /// number of entries moved.
    #[inline]
    fn convert_step(&mut self) -> usize {
        let KvMap::Converting(c) = self else {
            return 0;
        };
        if c.bytes.len() < c.fixed.len() {
            return 0;
        }
        let moved = c.step();
        self.finish_if_drained();
        moved
    }

    /// A converting table whose packed part is empty becomes a bytes table.
    fn finish_if_drained(&mut self) {
        if let KvMap::Converting(c) = self {
            if c.fixed.is_empty() {
                let bytes = std::mem::take(&mut c.bytes);
                *self = KvMap::Bytes(bytes);
            }
        }
    }

    #[inline]
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        match self {
            KvMap::Fixed(m) => m.get(key),
            KvMap::Bytes(m) => m.get(key).map(SmallBytes::as_slice),
            KvMap::Converting(c) => c
                .fixed
                .get(key)
                .or_else(|| c.bytes.get(key).map(SmallBytes::as_slice)),
        }
    }

    #[inline]
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.prepare(key, value.len());
        match self {
            KvMap::Fixed(m) => {
                if let Some(k) = m.pack_key(key) {
                    m.insert(k, value);
                }
            }
            KvMap::Bytes(m) => put_bytes(m, key, value),
            KvMap::Converting(c) => {
                c.fixed.remove(key);
                put_bytes(&mut c.bytes, key, value);
                self.convert_step();
            }
        }
    }

    fn append(&mut self, key: &[u8], delimiter: u8, elements: &[u8]) {
        let current = self.get(key).map(<[u8]>::len);
        match current {
            None | Some(0) => self.put(key, elements),
            Some(len) => {
                // A fixed map holds values of one length only and this one grows, so `prepare` starts
                // converting a fixed map (it is not empty: it holds `key`).
                self.prepare(key, len + 1 + elements.len());
                match self {
                    KvMap::Bytes(m) => {
                        if let Some(v) = m.get_mut(key) {
                            v.extend(&[&[delimiter], elements]);
                        }
                    }
                    KvMap::Converting(c) => {
                        if let Some(old) = c.fixed.remove(key) {
                            let mut v = SmallBytes::new(&old[..c.fixed.vlen()]);
                            v.extend(&[&[delimiter], elements]);
                            c.bytes.insert(SmallBytes::new(key), v);
                        } else if let Some(v) = c.bytes.get_mut(key) {
                            v.extend(&[&[delimiter], elements]);
                        }
                        self.convert_step();
                    }
                    // `prepare` never leaves a fixed map here (see above).
                    KvMap::Fixed(_) => {}
                }
            }
        }
    }

    fn remove(&mut self, key: &[u8]) -> bool {
        match self {
            KvMap::Fixed(m) => m.remove(key).is_some(),
            KvMap::Bytes(m) => m.remove(key).is_some(),
            KvMap::Converting(c) => {
                let found = c.fixed.remove(key).is_some() || c.bytes.remove(key).is_some();
                self.convert_step();
                found
            }
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

    /// Entries held packed: all of a packed table's, those not moved yet of a converting one, none of a
    /// bytes table's.
    #[cfg(test)]
    pub fn packed_len(&self) -> usize {
        self.0.packed_len()
    }

    /// Whether the table is between packed and bytes.
    #[cfg(test)]
    pub fn is_converting(&self) -> bool {
        matches!(&*self.0, KvMap::Converting(_))
    }
}

/// `m`'s entries as (packed head, padded value), in key order (one key length and one tail, heads
/// left-aligned big-endian: integer order is key order).
fn sorted_packed(m: &FixedMap) -> Vec<(u64, [u8; 8])> {
    let mut entries: Vec<(u64, [u8; 8])> = m.iter().map(|(k, v)| (k, *v)).collect();
    entries.sort_unstable_by_key(|e| e.0);
    entries
}

/// Visits the entries of a packed map in key order.
fn visit_packed(m: &FixedMap, f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
    let vl = m.vlen();
    for (k, v) in sorted_packed(m) {
        let (kb, kl) = m.key_bytes(k);
        f(&kb[..kl], &v[..vl])?;
    }
    Ok(())
}

/// Keeps, replaces or removes each entry of a packed map as `f` says; replaced entries are removed and
/// pushed to `replaced` (their new value may not fit).
fn retain_packed(
    m: &mut FixedMap,
    f: &mut dyn FnMut(&[u8], &[u8]) -> Rewrite,
    replaced: &mut Vec<(Vec<u8>, Vec<u8>)>,
) {
    m.retain(|k, v| match f(k, v) {
        Rewrite::Keep => true,
        Rewrite::Remove => false,
        Rewrite::Replace(new) => {
            replaced.push((k.to_vec(), new));
            false
        }
    });
}

/// Keeps, replaces or removes each entry of a bytes map as `f` says.
fn retain_bytes(m: &mut BytesMap, f: &mut dyn FnMut(&[u8], &[u8]) -> Rewrite) {
    m.retain(|k, v| match f(k.as_slice(), v.as_slice()) {
        Rewrite::Keep => true,
        Rewrite::Remove => false,
        Rewrite::Replace(new) => {
            v.set(&new);
            true
        }
    })
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
        let packed = match &*self.0 {
            KvMap::Fixed(m) => Some(m),
            KvMap::Converting(c) => Some(&c.fixed),
            KvMap::Bytes(_) => None,
        };
        if let Some(m) = packed {
            let vl = m.vlen();
            for (k, v) in m.iter() {
                let (kb, kl) = m.key_bytes(k);
                if !f(&kb[..kl], &v[..vl]) {
                    return;
                }
            }
        }
        let bytes = match &*self.0 {
            KvMap::Bytes(m) => m,
            KvMap::Converting(c) => &c.bytes,
            KvMap::Fixed(_) => return,
        };
        for (k, v) in bytes.iter() {
            if !f(k.as_slice(), v.as_slice()) {
                return;
            }
        }
    }
    fn for_each_sorted(&self, f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        match &*self.0 {
            KvMap::Fixed(m) => visit_packed(m, f),
            KvMap::Bytes(m) => visit_sorted(m.iter(), f),
            KvMap::Converting(c) => {
                // The two parts hold disjoint keys: merge their sorted sequences.
                let vl = c.fixed.vlen();
                let mut packed = sorted_packed(&c.fixed)
                    .into_iter()
                    .map(|(k, v)| (c.fixed.key_bytes(k), v))
                    .peekable();
                visit_sorted(c.bytes.iter(), &mut |k, v| {
                    while let Some(((kb, kl), pv)) = packed.next_if(|((kb, kl), _)| &kb[..*kl] < k)
                    {
                        f(&kb[..kl], &pv[..vl])?;
                    }
                    f(k, v)
                })?;
                for ((kb, kl), pv) in packed {
                    f(&kb[..kl], &pv[..vl])?;
                }
                Ok(())
            }
        }
    }
    fn retain(&mut self, f: &mut dyn FnMut(&[u8], &[u8]) -> Rewrite) {
        // Replacements of packed entries may change value lengths, so they go through `put` after the pass.
        let mut replaced: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let map = Arc::make_mut(&mut self.0);
        match map {
            KvMap::Fixed(m) => retain_packed(m, f, &mut replaced),
            KvMap::Bytes(m) => retain_bytes(m, f),
            KvMap::Converting(c) => {
                retain_packed(&mut c.fixed, f, &mut replaced);
                retain_bytes(&mut c.bytes, f);
            }
        }
        map.finish_if_drained();
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
        // A list append makes the value longer: the table starts converting to bytes, keeping everything.
        t.append(&6u64.to_be_bytes(), b',', &[1u8; 8]);
        assert!(t.is_converting());
        assert_eq!(t.len(), 1000);
        let mut want: Vec<u8> = 18u64.to_le_bytes().to_vec();
        want.push(b',');
        want.extend_from_slice(&[1u8; 8]);
        assert_eq!(t.get(&6u64.to_be_bytes()), Some(&want[..]));
        assert_eq!(t.get(&7u64.to_be_bytes()), Some(&21u64.to_le_bytes()[..]));
        // Later writes finish the conversion once half the entries are in the bytes part.
        let mut added = 0u64;
        while t.is_converting() {
            t.put(&(10_000 + added).to_be_bytes(), &[4u8; 8]);
            added += 1;
        }
        assert!(matches!(&*t.0, KvMap::Bytes(_)));
        assert_eq!(t.len(), 1000 + added as usize);
        assert_eq!(t.get(&6u64.to_be_bytes()), Some(&want[..]));
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
        assert!(t.is_converting());
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
    fn model_of<T: KvTable>(t: &T) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
        collect_sorted(t).into_iter().collect()
    }

    /// While a packed table converts, each write moves its own entry only until half the entries are in
    /// the bytes part, then at most `CONVERT_BUCKETS_PER_WRITE` more; gets, both iterations, the length,
    /// `retain` and clones (snapshots, written on their own afterwards) see one table with every entry,
    /// until the conversion ends in a bytes table.
    #[test]
    fn converting_table_is_one_table_to_every_reader() {
        let key = |i: u64| {
            let mut k = i.to_be_bytes().to_vec();
            k.push(0);
            k
        };
        let mut t = CowTable::default();
        let mut model = std::collections::BTreeMap::new();
        for i in 0..20_000u64 {
            t.put(&key(i), &i.to_le_bytes());
            model.insert(key(i), i.to_le_bytes().to_vec());
        }
        assert_eq!(t.packed_len(), 20_000);
        let mut snaps = Vec::new();
        let mut writes = 0;
        let mut drained_in = 0;
        let mut i = 0u64;
        while writes == 0 || t.is_converting() {
            let before = t.packed_len();
            // Whether this write may cross into draining (its own entry moves first).
            let draining = t.len() - before + 1 >= before.saturating_sub(1);
            let k = key(i * 7919 % 20_000);
            match i % 3 {
                0 => {
                    t.append(&k, b',', b"grown");
                    let v = model.get_mut(&k).unwrap();
                    v.extend_from_slice(b",grown");
                }
                1 => {
                    t.put(&k, &[5u8; 8]);
                    model.insert(k, vec![5u8; 8]);
                }
                _ => {
                    assert!(t.remove(&k));
                    model.remove(&k);
                }
            }
            i += 1;
            writes += 1;
            drained_in += usize::from(draining);
            let moved = before - t.packed_len();
            assert!(
                moved
                    <= if draining {
                        CONVERT_BUCKETS_PER_WRITE + 1
                    } else {
                        1
                    }
            );
            assert_eq!(t.len(), model.len());
            if writes % 1024 == 1 || (draining && writes % 4 == 1) {
                assert!(model.iter().all(|(k, v)| t.get(k) == Some(&v[..])));
                assert_eq!(model_of(&t), model);
                let mut n = 0;
                t.for_each(&mut |k, v| {
                    assert_eq!(model.get(k).map(Vec::as_slice), Some(v));
                    n += 1;
                    true
                });
                assert_eq!(n, model.len());
                snaps.push((t.clone(), model.clone()));
            }
        }
        assert!(matches!(&*t.0, KvMap::Bytes(_)));
        assert_eq!(t.packed_len(), 0);
        assert_eq!(model_of(&t), model);
        // 20,000 entries in 32,768 buckets: 32 draining writes.
        assert!(
            drained_in <= (20_000usize * 8 / 7).next_power_of_two() / CONVERT_BUCKETS_PER_WRITE + 2
        );
        assert!(snaps.len() > 4);
        for (s, m) in &snaps {
            assert_eq!(&model_of(s), m);
        }
        // A snapshot written itself converts on its own; `retain` on a converting table keeps it whole.
        let (mut s, mut m) = snaps.swap_remove(2);
        assert!(s.is_converting());
        s.retain(&mut |k, v| match k[7] % 3 {
            0 => Rewrite::Keep,
            1 => Rewrite::Replace(v.repeat(2)),
            _ => Rewrite::Remove,
        });
        m.retain(|k, _| k[7] % 3 != 2);
        for (k, v) in m.iter_mut() {
            if k[7] % 3 == 1 {
                *v = v.repeat(2);
            }
        }
        assert_eq!(model_of(&s), m);
        let mut n = 1_000_000;
        loop {
            s.put(&key(n), b"y");
            m.insert(key(n), b"y".to_vec());
            n += 1;
            if !s.is_converting() {
                break;
            }
        }
        assert_eq!(model_of(&s), m);
    }
}

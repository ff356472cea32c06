//! The per-(state, key group) tables of the heap backend, in two interchangeable implementations.
//!
//! A snapshot clones every table of every state: O(states × key groups), whatever the state size. What a
//! clone costs afterwards depends on the implementation:
//!
//! * [`CowTable`]: a `hashbrown` map behind an `Arc`. Cloning bumps a reference count; the first write to a
//!   shared table copies that whole table (one key group of one state), later writes are plain hash-map
//!   writes. Fastest reads and writes when no snapshot is open.
//! * [`PersistentTable`]: an `imbl` hash array mapped trie. Cloning is O(1) and each write after a clone
//!   copies only the path to the entry. Slower point operations, no copy spike after a snapshot.
//!
//! `benches/heap_tables.rs` measures both; `design/heap-backend.md` records the numbers and the choice.

use std::hash::Hash;
use std::sync::Arc;

type FastHasher = foldhash::fast::RandomState;

/// A map from entry-key bytes to values, cheap to clone for snapshots.
pub trait KgTable<K, V>: Clone + Default + Send + Sync
where
    K: Hash + Eq + Clone + std::borrow::Borrow<[u8]>,
    V: Clone,
{
    /// The value for `key`.
    fn get(&self, key: &[u8]) -> Option<&V>;
    /// The value for `key`, for writing (copies shared structure first).
    fn get_mut(&mut self, key: &[u8]) -> Option<&mut V>;
    /// Inserts or replaces.
    fn insert(&mut self, key: K, value: V);
    /// Removes `key`, returning its value.
    fn remove(&mut self, key: &[u8]) -> Option<V>;
    /// Number of entries.
    fn len(&self) -> usize;
    /// Whether empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Visits every entry in unspecified order.
    fn for_each(&self, f: &mut dyn FnMut(&K, &V));
    /// Iterates every entry in unspecified order.
    fn iter<'a>(&'a self) -> Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a>;
    /// Keeps only the entries for which `f` returns true (and lets `f` change them).
    fn retain(&mut self, f: &mut dyn FnMut(&K, &mut V) -> bool);
}

/// Copy-on-write hash table: an `Arc`-shared `hashbrown` map, copied whole on the first write while shared.
pub struct CowTable<K, V>(Arc<hashbrown::HashMap<K, V, FastHasher>>);

impl<K, V> Clone for CowTable<K, V> {
    fn clone(&self) -> Self {
        CowTable(Arc::clone(&self.0))
    }
}

impl<K, V> Default for CowTable<K, V> {
    fn default() -> Self {
        CowTable(Arc::new(hashbrown::HashMap::with_hasher(
            FastHasher::default(),
        )))
    }
}

impl<K, V> KgTable<K, V> for CowTable<K, V>
where
    K: Hash + Eq + Clone + std::borrow::Borrow<[u8]> + Send + Sync,
    V: Clone + Send + Sync,
{
    #[inline]
    fn get(&self, key: &[u8]) -> Option<&V> {
        self.0.get(key)
    }
    #[inline]
    fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        Arc::make_mut(&mut self.0).get_mut(key)
    }
    #[inline]
    fn insert(&mut self, key: K, value: V) {
        Arc::make_mut(&mut self.0).insert(key, value);
    }
    #[inline]
    fn remove(&mut self, key: &[u8]) -> Option<V> {
        if !self.0.contains_key(key) {
            return None;
        }
        Arc::make_mut(&mut self.0).remove(key)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn for_each(&self, f: &mut dyn FnMut(&K, &V)) {
        for (k, v) in self.0.iter() {
            f(k, v);
        }
    }
    fn iter<'a>(&'a self) -> Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a> {
        Box::new(self.0.iter())
    }
    fn retain(&mut self, f: &mut dyn FnMut(&K, &mut V) -> bool) {
        Arc::make_mut(&mut self.0).retain(|k, v| f(k, v));
    }
}

/// Persistent hash table (`imbl` HAMT): O(1) clones, path copying on writes.
pub struct PersistentTable<K, V>(
    imbl::GenericHashMap<K, V, FastHasher, imbl::shared_ptr::DefaultSharedPtr>,
);

impl<K: Clone, V: Clone> Clone for PersistentTable<K, V> {
    fn clone(&self) -> Self {
        PersistentTable(self.0.clone())
    }
}

impl<K, V> Default for PersistentTable<K, V> {
    fn default() -> Self {
        PersistentTable(imbl::GenericHashMap::with_hasher(FastHasher::default()))
    }
}

impl<K, V> KgTable<K, V> for PersistentTable<K, V>
where
    K: Hash + Eq + Clone + std::borrow::Borrow<[u8]> + Send + Sync,
    V: Clone + Send + Sync,
{
    #[inline]
    fn get(&self, key: &[u8]) -> Option<&V> {
        self.0.get(key)
    }
    #[inline]
    fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        self.0.get_mut(key)
    }
    #[inline]
    fn insert(&mut self, key: K, value: V) {
        self.0.insert(key, value);
    }
    #[inline]
    fn remove(&mut self, key: &[u8]) -> Option<V> {
        self.0.remove(key)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn for_each(&self, f: &mut dyn FnMut(&K, &V)) {
        for (k, v) in self.0.iter() {
            f(k, v);
        }
    }
    fn iter<'a>(&'a self) -> Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a> {
        Box::new(self.0.iter())
    }
    fn retain(&mut self, f: &mut dyn FnMut(&K, &mut V) -> bool) {
        let mut out = imbl::GenericHashMap::with_hasher(FastHasher::default());
        for (k, v) in self.0.iter() {
            let mut v = v.clone();
            if f(k, &mut v) {
                out.insert(k.clone(), v);
            }
        }
        self.0 = out;
    }
}

/// An ordered map from entry-key bytes to values (map states: one entry per user key), cheap to clone.
pub trait OrderedTable: Clone + Default + Send + Sync {
    /// The value for `key`.
    fn get(&self, key: &[u8]) -> Option<&SmallBytes>;
    /// Inserts or replaces.
    fn insert(&mut self, key: &[u8], value: &[u8]);
    /// Removes `key`; whether it was there.
    fn remove(&mut self, key: &[u8]) -> bool;
    /// Number of entries.
    fn len(&self) -> usize;
    /// Whether empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Visits entries with keys `>= from` in ascending order until `f` returns false.
    fn scan_from(&self, from: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool);
    /// Removes every key starting with `prefix`.
    fn remove_prefix(&mut self, prefix: &[u8]);
    /// Keeps only the entries for which `f` returns true (and lets `f` change them).
    fn retain(&mut self, f: &mut dyn FnMut(&[u8], &mut SmallBytes) -> bool);
}

use super::bytes::SmallBytes;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Copy-on-write ordered table: an `Arc`-shared `BTreeMap`, copied whole on the first write while shared.
#[derive(Clone, Default)]
pub struct CowOrdered(Arc<BTreeMap<SmallBytes, SmallBytes>>);

impl OrderedTable for CowOrdered {
    fn get(&self, key: &[u8]) -> Option<&SmallBytes> {
        self.0.get(key)
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) {
        let map = Arc::make_mut(&mut self.0);
        match map.get_mut(key) {
            Some(v) => v.set(value),
            None => {
                map.insert(SmallBytes::new(key), SmallBytes::new(value));
            }
        }
    }
    fn remove(&mut self, key: &[u8]) -> bool {
        if !self.0.contains_key(key) {
            return false;
        }
        Arc::make_mut(&mut self.0).remove(key).is_some()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn scan_from(&self, from: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for (k, v) in self
            .0
            .range::<[u8], _>((Bound::Included(from), Bound::Unbounded))
        {
            if !f(k.as_slice(), v.as_slice()) {
                break;
            }
        }
    }
    fn remove_prefix(&mut self, prefix: &[u8]) {
        let keys: Vec<SmallBytes> = self
            .0
            .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.as_slice().starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return;
        }
        let map = Arc::make_mut(&mut self.0);
        for k in keys {
            map.remove(&k);
        }
    }
    fn retain(&mut self, f: &mut dyn FnMut(&[u8], &mut SmallBytes) -> bool) {
        Arc::make_mut(&mut self.0).retain(|k, v| f(k.as_slice(), v));
    }
}

/// Persistent ordered table (`imbl::OrdMap`, a B-tree with structural sharing).
#[derive(Clone, Default)]
pub struct PersistentOrdered(imbl::OrdMap<SmallBytes, SmallBytes>);

impl OrderedTable for PersistentOrdered {
    fn get(&self, key: &[u8]) -> Option<&SmallBytes> {
        self.0.get(key)
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) {
        match self.0.get_mut(key) {
            Some(v) => v.set(value),
            None => {
                self.0.insert(SmallBytes::new(key), SmallBytes::new(value));
            }
        }
    }
    fn remove(&mut self, key: &[u8]) -> bool {
        self.0.remove(key).is_some()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn scan_from(&self, from: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for (k, v) in self
            .0
            .range::<_, [u8]>((Bound::Included(from), Bound::Unbounded))
        {
            if !f(k.as_slice(), v.as_slice()) {
                break;
            }
        }
    }
    fn remove_prefix(&mut self, prefix: &[u8]) {
        let keys: Vec<SmallBytes> = self
            .0
            .range::<_, [u8]>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.as_slice().starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.0.remove(&k);
        }
    }
    fn retain(&mut self, f: &mut dyn FnMut(&[u8], &mut SmallBytes) -> bool) {
        let mut out = imbl::OrdMap::new();
        for (k, v) in self.0.iter() {
            let mut v = v.clone();
            if f(k.as_slice(), &mut v) {
                out.insert(k.clone(), v);
            }
        }
        self.0 = out;
    }
}

/// A pair of table implementations the heap backend is built from.
pub trait TableFamily: Send + Sync + 'static {
    /// Hash table for value, list, reducing, aggregating and timer states.
    type Kv: KgTable<SmallBytes, SmallBytes>;
    /// Ordered table for map states.
    type Ordered: OrderedTable;
    /// A name for reports.
    const NAME: &'static str;
}

/// Copy-on-write tables ([`CowTable`], [`CowOrdered`]).
pub struct CowTables;
impl TableFamily for CowTables {
    type Kv = CowTable<SmallBytes, SmallBytes>;
    type Ordered = CowOrdered;
    const NAME: &'static str = "copy-on-write";
}

/// Persistent tables ([`PersistentTable`], [`PersistentOrdered`]).
pub struct PersistentTables;
impl TableFamily for PersistentTables {
    type Kv = PersistentTable<SmallBytes, SmallBytes>;
    type Ordered = PersistentOrdered;
    const NAME: &'static str = "persistent";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes after a clone (snapshot) never show through it, also once the clone was dropped on another
    /// thread and the table is written in place again.
    #[test]
    fn cow_table_isolation() {
        let mut t: CowTable<SmallBytes, SmallBytes> = CowTable::default();
        for i in 0..100u32 {
            t.insert(
                SmallBytes::new(&i.to_be_bytes()),
                SmallBytes::new(&[1u8; 40]),
            );
        }
        let snap = t.clone();
        if let Some(v) = t.get_mut(&7u32.to_be_bytes()) {
            v.set(&[2u8; 40]);
        }
        t.insert(SmallBytes::new(b"new"), SmallBytes::new(b"v"));
        assert!(t.remove(&8u32.to_be_bytes()).is_some());
        assert_eq!(
            snap.get(&7u32.to_be_bytes()).map(|v| v.as_slice()),
            Some(&[1u8; 40][..])
        );
        assert!(snap.get(&8u32.to_be_bytes()).is_some() && snap.get(b"new").is_none());
        let reader = std::thread::spawn(move || {
            let n = snap.len();
            drop(snap);
            n
        });
        assert_eq!(reader.join().ok(), Some(100));
        if let Some(v) = t.get_mut(&7u32.to_be_bytes()) {
            v.set(&[3u8; 40]);
        }
        assert_eq!(
            t.get(&7u32.to_be_bytes()).map(|v| v.as_slice()),
            Some(&[3u8; 40][..])
        );
        assert_eq!(t.len(), 100);
    }
}

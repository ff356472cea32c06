//! The timer table of the heap backend: the entries of one (timer state, key group) in key order.
//!
//! Timer queues (`crate::state::timers`) reach their entries through the `map_*` operations with the
//! key-group prefix as the map's key-and-namespace bytes and `TS | K | NS` as the user key, and they need
//! ordered access: the smallest timer of a key group, and the next one from a removed timer on. A
//! [`TimerTable`] is therefore an ordered tree of entry keys (without the key-group prefix, as in the other
//! heap tables) shared behind an `Arc`: a snapshot clones the `Arc`, and the first write while a snapshot
//! holds the tree copies it (one key group of one timer state).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::bytes::SmallBytes;

/// Copy-on-write ordered table of one (timer state, key group): entry keys without their key-group prefix
/// (`key_ns | user key`) to values.
#[derive(Clone, Default)]
pub struct TimerTable(Arc<BTreeMap<SmallBytes, SmallBytes>>);

/// `key_ns | user_key`, borrowed when `key_ns` is empty (timer queues: the key group is the whole map name).
fn whole<'a>(key_ns: &[u8], user_key: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
    if key_ns.is_empty() {
        std::borrow::Cow::Borrowed(user_key)
    } else {
        std::borrow::Cow::Owned([key_ns, user_key].concat())
    }
}

/// Which contents a [`TimerTable`] had when [`TimerTable::version`] was taken (as `table::KvVersion`).
pub struct TimerVersion(std::sync::Weak<BTreeMap<SmallBytes, SmallBytes>>);

impl TimerTable {
    /// The table's current contents, for [`is_version`](Self::is_version) later.
    pub fn version(&self) -> TimerVersion {
        TimerVersion(Arc::downgrade(&self.0))
    }

    /// Whether the table is unchanged since `v` was taken.
    pub fn is_version(&self, v: &TimerVersion) -> bool {
        std::ptr::eq(v.0.as_ptr(), Arc::as_ptr(&self.0))
    }

    /// The value of `user_key` in the map of `key_ns`.
    pub fn get(&self, key_ns: &[u8], user_key: &[u8]) -> Option<&SmallBytes> {
        self.0.get(&*whole(key_ns, user_key))
    }

    /// Inserts or replaces one entry by its whole key (without the key-group prefix).
    pub fn insert(&mut self, key: &[u8], value: &[u8]) {
        let map = Arc::make_mut(&mut self.0);
        match map.get_mut(key) {
            Some(v) => v.set(value),
            None => {
                map.insert(SmallBytes::new(key), SmallBytes::new(value));
            }
        }
    }

    /// Inserts or replaces `user_key` in the map of `key_ns`.
    pub fn put(&mut self, key_ns: &[u8], user_key: &[u8], value: &[u8]) {
        self.insert(&whole(key_ns, user_key), value);
    }

    /// Removes one entry by its whole key; whether it was there. Copies nothing if it was not.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        if !self.0.contains_key(key) {
            return false;
        }
        Arc::make_mut(&mut self.0).remove(key).is_some()
    }

    /// Removes `user_key` from the map of `key_ns`; whether it was there.
    pub fn remove_entry(&mut self, key_ns: &[u8], user_key: &[u8]) -> bool {
        self.remove(&whole(key_ns, user_key))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Visits the entries with whole keys `>= from` in ascending order until `f` returns false.
    pub fn scan_from(&self, from: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for (k, v) in self
            .0
            .range::<[u8], _>((Bound::Included(from), Bound::Unbounded))
        {
            if !f(k.as_slice(), v.as_slice()) {
                break;
            }
        }
    }

    /// Visits the map of `key_ns` from user key `from` on, in ascending order, until `f` returns false; `f`
    /// sees user keys.
    pub fn scan_map_from(
        &self,
        key_ns: &[u8],
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) {
        self.scan_from(
            &whole(key_ns, from),
            &mut |k, v| match k.strip_prefix(key_ns) {
                Some(user_key) => f(user_key, v),
                None => false,
            },
        );
    }

    /// Removes every entry whose whole key starts with `prefix`.
    pub fn remove_prefix(&mut self, prefix: &[u8]) {
        if prefix.is_empty() {
            if !self.0.is_empty() {
                *self = TimerTable::default();
            }
            return;
        }
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

    /// Keeps only the entries for which `f` returns true (`f` may change the value).
    pub fn retain(&mut self, f: &mut dyn FnMut(&[u8], &mut SmallBytes) -> bool) {
        if self.0.is_empty() {
            return;
        }
        Arc::make_mut(&mut self.0).retain(|k, v| f(k.as_slice(), v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(t: &TimerTable, from: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        t.scan_from(from, &mut |k, _| {
            out.push(k.to_vec());
            true
        });
        out
    }

    /// A clone (a snapshot) keeps its entries while the original is written, cleared and filtered.
    #[test]
    fn clone_is_untouched_by_later_writes() {
        let mut t = TimerTable::default();
        for i in 0..10u8 {
            t.put(&[], &[i, 1], &[]);
        }
        let snap = t.clone();
        t.remove(&[3, 1]);
        t.put(&[], &[20], &[]);
        t.retain(&mut |k, _| k[0] % 2 == 0);
        assert_eq!(snap.len(), 10);
        assert_eq!(keys(&snap, &[]).len(), 10);
        assert_eq!(
            keys(&t, &[]),
            vec![
                vec![0, 1],
                vec![2, 1],
                vec![4, 1],
                vec![6, 1],
                vec![8, 1],
                vec![20]
            ]
        );
        t.remove_prefix(&[]);
        assert!(t.is_empty());
        assert_eq!(snap.len(), 10);
    }

    /// `scan_map_from` starts at the first user key `>= from` and stays inside the map of `key_ns`.
    #[test]
    fn scan_map_from_stays_in_its_map() {
        let mut t = TimerTable::default();
        for (ns, uk) in [
            (&b"a"[..], &b"1"[..]),
            (b"a", b"3"),
            (b"a", b"5"),
            (b"b", b"0"),
        ] {
            t.put(ns, uk, uk);
        }
        let mut seen = Vec::new();
        t.scan_map_from(b"a", b"2", &mut |uk, v| {
            assert_eq!(uk, v);
            seen.push(uk.to_vec());
            true
        });
        assert_eq!(seen, vec![b"3".to_vec(), b"5".to_vec()]);
        assert_eq!(t.get(b"a", b"5").map(SmallBytes::as_slice), Some(&b"5"[..]));
        assert!(t.get(b"a", b"0").is_none());
        t.remove_prefix(b"a");
        assert_eq!(keys(&t, &[]), vec![b"b0".to_vec()]);
    }
}

//! One map of the heap backend's map-state table: a sorted vector of `(user key, value)` entries while it is
//! small, an ordered tree once it is large ([`UserMap`]).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::bytes::{head_of, SmallBytes};
use keyed_state_lsm::util::prefetch_read as prefetch;

/// A map with more entries than this is stored as an ordered tree, not a sorted vector.
pub const SMALL_MAX: usize = 32;

/// A large map that shrinks below this many entries turns back into a sorted vector.
const SMALL_AGAIN: usize = SMALL_MAX / 4;

/// One `(key, value)` entry.
pub(super) type Entry = (SmallBytes, SmallBytes);

/// The entries of one map (one key and namespace), ordered by user-key bytes; never empty in a table.
#[derive(Clone)]
pub enum UserMap {
    /// At most `SMALL_MAX` entries sorted by user key.
    Small(Vec<Entry>),
    /// More entries: an ordered tree, shared between copies of the table until written.
    Large(Arc<BTreeMap<SmallBytes, SmallBytes>>),
}

impl UserMap {
    /// A map of `entries`, sorted by key without duplicates.
    pub(super) fn from_sorted(entries: Vec<Entry>) -> UserMap {
        if entries.len() <= SMALL_MAX {
            UserMap::Small(entries)
        } else {
            UserMap::Large(Arc::new(entries.into_iter().collect()))
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            UserMap::Small(v) => v.len(),
            UserMap::Large(m) => m.len(),
        }
    }

    /// Whether the map has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of `user_key`.
    #[inline]
    pub fn get(&self, user_key: &[u8]) -> Option<&SmallBytes> {
        match self {
            UserMap::Small(v) => match search(v, user_key) {
                Ok(i) => Some(&v[i].1),
                Err(_) => None,
            },
            UserMap::Large(m) => m.get(user_key),
        }
    }

    /// Inserts or replaces; whether the key is new.
    #[inline]
    pub fn put(&mut self, user_key: &[u8], value: &[u8]) -> bool {
        match self {
            UserMap::Small(v) => match search(v, user_key) {
                Ok(i) => {
                    v[i].1.set(value);
                    false
                }
                Err(i) => {
                    if v.len() < SMALL_MAX {
                        v.insert(i, (SmallBytes::new(user_key), SmallBytes::new(value)));
                    } else {
                        let mut m: BTreeMap<SmallBytes, SmallBytes> = v.drain(..).collect();
                        m.insert(SmallBytes::new(user_key), SmallBytes::new(value));
                        *self = UserMap::Large(Arc::new(m));
                    }
                    true
                }
            },
            UserMap::Large(m) => {
                if let Some(old) = Arc::make_mut(m).get_mut(user_key) {
                    old.set(value);
                    return false;
                }
                Arc::make_mut(m).insert(SmallBytes::new(user_key), SmallBytes::new(value));
                true
            }
        }
    }

    /// Removes `user_key`; whether it was there.
    pub fn remove(&mut self, user_key: &[u8]) -> bool {
        match self {
            UserMap::Small(v) => match search(v, user_key) {
                Ok(i) => {
                    v.remove(i);
                    true
                }
                Err(_) => false,
            },
            UserMap::Large(m) => {
                if !m.contains_key(user_key) {
                    return false;
                }
                Arc::make_mut(m).remove(user_key);
                if m.len() < SMALL_AGAIN {
                    let entries = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    *self = UserMap::Small(entries);
                }
                true
            }
        }
    }

    /// Visits the entries in ascending user-key order until `f` returns false; whether it ran to the end.
    pub fn for_each(&self, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> bool {
        match self {
            UserMap::Small(v) => v.iter().all(|(k, x)| f(k.as_slice(), x.as_slice())),
            UserMap::Large(m) => m.iter().all(|(k, x)| f(k.as_slice(), x.as_slice())),
        }
    }

    /// Visits the entries with user keys above `lower` in ascending order until `f` returns false; whether
    /// it ran to the end.
    pub fn for_each_from(
        &self,
        lower: Bound<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> bool {
        match self {
            UserMap::Small(v) => {
                let start = match lower {
                    Bound::Unbounded => 0,
                    Bound::Included(from) => v.partition_point(|e| e.0.as_slice() < from),
                    Bound::Excluded(after) => v.partition_point(|e| e.0.as_slice() <= after),
                };
                v[start..]
                    .iter()
                    .all(|(k, x)| f(k.as_slice(), x.as_slice()))
            }
            UserMap::Large(m) => m
                .range::<[u8], _>((lower, Bound::Unbounded))
                .all(|(k, x)| f(k.as_slice(), x.as_slice())),
        }
    }

    /// Keeps the entries for which `f` returns true (`f` may change the value); how many it removed.
    pub(super) fn retain(&mut self, f: &mut dyn FnMut(&[u8], &mut SmallBytes) -> bool) -> usize {
        let before = self.len();
        match self {
            UserMap::Small(v) => v.retain_mut(|(k, x)| f(k.as_slice(), x)),
            UserMap::Large(m) => Arc::make_mut(m).retain(|k, x| f(k.as_slice(), x)),
        }
        before - self.len()
    }
}

/// Binary search of a sorted entry vector by key bytes: by the keys' first 8 bytes as integers, then (rarely)
/// by length or the bytes.
#[inline]
fn search(v: &[Entry], key: &[u8]) -> std::result::Result<usize, usize> {
    // The probes of a binary search depend on each other: ask for every cache line of the entries at once
    // (10 entries are 5 lines), so their misses overlap.
    let bytes = std::mem::size_of_val(v);
    let base = v.as_ptr().cast::<u8>();
    let mut off = 0;
    while off < bytes {
        prefetch(base.wrapping_add(off));
        off += 64;
    }
    let head = head_of(key);
    v.binary_search_by(|e| {
        e.0.head().cmp(&head).then_with(|| {
            let len = e.0.len();
            if len <= 8 && key.len() <= 8 {
                // Equal zero-padded heads of keys of at most 8 bytes: the shorter key is a prefix.
                len.cmp(&key.len())
            } else {
                e.0.as_slice().cmp(key)
            }
        })
    })
}

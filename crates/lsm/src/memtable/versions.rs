//! A user key's versions in one memtable: its skiplist node ([`Chain`]) holds the oldest version inline and
//! points to the newer ones ([`KeyVersion`]s in the table's arena), newest first; [`Versions`] walks them
//! for a read at a snapshot.

use std::cmp::Ordering;
use std::sync::atomic::Ordering as AtomicOrdering;

use crate::sync::AtomicPtr;

use super::entry::MemEntry;
use crate::arena::Arena;
use crate::ikey::{self, ValueKind};

/// One user key's node in the skiplist: the key's versions in this table, newest first.
///
/// The version that created the node (the oldest one in this table) lives in the node itself (`first`), so
/// a new key costs one allocation; each later version is one [`KeyVersion`] in the arena, pushed at `head`.
/// The chain is `head -> ... -> (the oldest pushed version, whose next is null) -> first`, in internal-key
/// order (seqno descending) because versions are only ever pushed newer than every version already there
/// ([`MemTable::add`](super::MemTable::add) checks it). Published versions are never changed, and none is
/// freed before the node.
pub(super) struct Chain {
    /// The newest pushed version; null while `first` is the only one.
    head: AtomicPtr<KeyVersion>,
    /// The oldest version, whose user key orders the node.
    first: MemEntry,
}

/// A version pushed onto a [`Chain`]: allocated in the table's arena (never dropped: its entry's bytes are
/// inline or in the same arena), immutable once published.
pub(super) struct KeyVersion {
    /// The next older pushed version; null: the chain's `first`. Written before publication, never after.
    next: AtomicPtr<KeyVersion>,
    /// The version's entry.
    entry: MemEntry,
}

/// A position in a [`Chain`]: its node's own version or a pushed one.
#[derive(Clone, Copy)]
pub(super) enum Pos<'a> {
    /// The chain's `first`, the oldest version.
    First,
    /// A pushed version.
    Pushed(&'a KeyVersion),
}

impl<'a> Pos<'a> {
    /// The next older version of the same chain.
    #[inline]
    pub(super) fn older(self) -> Option<Pos<'a>> {
        match self {
            Pos::First => None,
            Pos::Pushed(v) => Some(v.older().map_or(Pos::First, Pos::Pushed)),
        }
    }
}

impl KeyVersion {
    /// The next older pushed version (None: the chain's `first` comes next).
    #[inline]
    fn older(&self) -> Option<&KeyVersion> {
        let p = self.next.load(AtomicOrdering::Acquire);
        // SAFETY: a non-null `next` was set by `Chain::push` to a version of the same chain (placed in the
        // table's arena, fully written before the Release store that published it, which
        // happens-before the Acquire load that led here). Versions are never changed, and their memory is
        // freed only with the arena, which the skiplist holding the chain owns, so the older version lives at
        // least as long as `self`, which bounds the borrow.
        unsafe { p.as_ref() }
    }
}

impl Chain {
    /// A node for a new key, holding its first version.
    #[inline]
    pub(super) fn new(first: MemEntry) -> Self {
        Chain {
            head: AtomicPtr::new(std::ptr::null_mut()),
            first,
        }
    }

    /// Orders this node against `user_key` (whose [`key_word`](super::entry::key_word) is `word`).
    #[inline(always)]
    pub(super) fn cmp_to(&self, user_key: &[u8], word: u64) -> Ordering {
        self.first.cmp_user_key_to(user_key, word)
    }

    /// The user key.
    #[inline]
    pub(super) fn user_key(&self) -> &[u8] {
        ikey::user_key(self.first.ikey())
    }

    /// The newest version.
    #[inline]
    pub(super) fn newest(&self) -> Pos<'_> {
        let p = self.head.load(AtomicOrdering::Acquire);
        // SAFETY: a non-null `head` was stored by `Chain::push` (an arena allocation) after the version was
        // fully written (Release; this load is Acquire). Pushed versions are never changed and are
        // freed only with the arena of the skiplist that holds `self`, so the version lives at least as long
        // as this borrow of `self`.
        match unsafe { p.as_ref() } {
            Some(v) => Pos::Pushed(v),
            None => Pos::First,
        }
    }

    /// The entry at `pos` (a position in this chain).
    #[inline]
    pub(super) fn entry<'a>(&'a self, pos: Pos<'a>) -> &'a MemEntry {
        match pos {
            Pos::First => &self.first,
            Pos::Pushed(v) => &v.entry,
        }
    }

    /// The first position whose internal key is `>= (this user key, trailer)`: skips the versions with a
    /// larger trailer (newer). None: every version is newer.
    #[inline]
    pub(super) fn seek(&self, trailer: u64) -> Option<Pos<'_>> {
        let mut pos = Some(self.newest());
        while let Some(p) = pos {
            if self.entry(p).trailer() <= trailer {
                break;
            }
            pos = p.older();
        }
        pos
    }

    /// Pushes `entry` as the newest version, allocated in `arena` (that of the skiplist holding this node).
    /// Writer only; the caller has made sure `entry` is newer than every version already here.
    #[inline]
    pub(super) fn push(&self, entry: MemEntry, arena: &Arena) {
        let v = arena.alloc(KeyVersion {
            next: AtomicPtr::new(self.head.load(AtomicOrdering::Relaxed)),
            entry,
        });
        self.head.store(v.as_ptr(), AtomicOrdering::Release);
    }
}

/// Iterator returned by [`MemTable::versions_hashed`](super::MemTable::versions_hashed): `(seqno, kind,
/// value)`, newest first.
pub(crate) struct Versions<'g> {
    /// The key's node (None: the key is not in the table).
    chain: Option<&'g Chain>,
    /// The next version to look at.
    pos: Option<Pos<'g>>,
    /// The read's snapshot: newer versions are skipped.
    snapshot: u64,
}

impl<'g> Versions<'g> {
    /// The versions of `chain` with seqno `<= snapshot`, from its newest one.
    #[inline]
    pub(super) fn new(chain: Option<&'g Chain>, snapshot: u64) -> Self {
        Versions {
            chain,
            pos: chain.map(Chain::newest),
            snapshot,
        }
    }
}

impl<'g> Iterator for Versions<'g> {
    type Item = (u64, ValueKind, &'g [u8]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let chain = self.chain?;
        loop {
            let pos = self.pos?;
            self.pos = pos.older();
            let entry: &'g MemEntry = chain.entry(pos);
            let Some(p) = ikey::parse(entry.ikey()) else {
                continue;
            };
            // Newer than the read: skipped (the chain is newest first).
            if p.seqno > self.snapshot {
                continue;
            }
            return Some((p.seqno, p.kind, entry.value()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::MemTable;
    use super::*;

    #[test]
    fn versions_newest_first_and_snapshot_bounded() {
        let m = MemTable::new(0);
        m.add(1, ValueKind::Put, b"k", b"v1");
        m.add(2, ValueKind::Merge, b"k", b"m2");
        m.add(3, ValueKind::Delete, b"k", b"");
        m.add(4, ValueKind::Put, b"ka", b"x");
        let mut seen = Vec::new();
        m.for_each_version(b"k", 2, |s, k, v| {
            seen.push((s, k, v.to_vec()));
            true
        });
        assert_eq!(
            seen,
            vec![
                (2, ValueKind::Merge, b"m2".to_vec()),
                (1, ValueKind::Put, b"v1".to_vec())
            ]
        );
        assert!(m.approximate_bytes() > 0);
    }

    #[test]
    #[should_panic(expected = "must be newer")]
    fn an_out_of_order_version_of_a_key_is_refused() {
        let m = MemTable::with_capacity(0, 1 << 20, 1 << 14);
        m.add(5, ValueKind::Put, b"k", b"new");
        m.add(7, ValueKind::Put, b"j", b"x");
        m.add(
            6,
            ValueKind::Put,
            b"k",
            b"older than the table's newest, newer than k's",
        );
        m.add(4, ValueKind::Put, b"k", b"old");
    }
}

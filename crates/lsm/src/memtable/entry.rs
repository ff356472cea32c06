//! A memtable entry, `internal key | value`, stored inside its skiplist node or pushed version whenever it
//! fits, and the word-at-a-time user-key comparison a search makes against it.

use std::cmp::Ordering;

use crate::arena::{Arena, ArenaBytes};
use crate::ikey;

/// Bytes of `internal key | value` stored inline in a skiplist node (keeps [`MemEntry`] at 40 bytes).
pub(super) const INLINE_CAP: usize = 37;

/// Internal-key bytes kept inline by [`MemEntry::KeyInline`] (user keys up to 14 bytes).
pub(super) const KEY_INLINE_CAP: usize = 22;

/// One memtable entry, `internal key | value`.
///
/// The internal key stays inside the skiplist node whenever it is short, so comparisons during a search never
/// leave the node; only the value of a large entry, or the whole of an entry with a long key, is elsewhere in
/// the arena.
#[derive(Debug)]
pub(crate) enum MemEntry {
    /// Key and value inline (no allocation besides the skiplist node).
    Inline {
        /// Internal-key length.
        klen: u8,
        /// Value length.
        vlen: u8,
        /// `internal key | value | unused`.
        buf: [u8; INLINE_CAP],
    },
    /// A short key inline, the value in the memtable's arena.
    KeyInline {
        /// Internal-key length.
        klen: u8,
        /// `internal key | unused`.
        key: [u8; KEY_INLINE_CAP],
        /// The value.
        value: ArenaBytes,
    },
    /// A long key: `internal key | value` in the memtable's arena, and the first 8 user-key bytes inline.
    Heap {
        /// Internal-key length.
        klen: u32,
        /// [`key_word`] of the user key: orders most pairs of entries without reading `buf`.
        word: u64,
        /// `internal key | value`.
        buf: ArenaBytes,
    },
}

impl MemEntry {
    /// An entry `user_key | trailer | value` whose bytes that do not fit in the node go to `arena`.
    pub(super) fn new_in(user_key: &[u8], trailer: u64, value: &[u8], arena: &Arena) -> Self {
        if let Some(e) = Self::inline(user_key, trailer, value) {
            return e;
        }
        let klen = user_key.len() + ikey::TRAILER_LEN;
        if klen <= KEY_INLINE_CAP {
            let mut key = [0u8; KEY_INLINE_CAP];
            let (k, rest) = key.split_at_mut(user_key.len());
            k.copy_from_slice(user_key);
            if let Some(t) = rest.get_mut(..ikey::TRAILER_LEN) {
                t.copy_from_slice(&trailer.to_be_bytes());
            }
            return MemEntry::KeyInline {
                klen: klen as u8,
                key,
                value: arena.copy(&[value]),
            };
        }
        MemEntry::Heap {
            klen: klen as u32,
            word: key_word(user_key),
            buf: arena.copy(&[user_key, &trailer.to_be_bytes(), value]),
        }
    }

    /// The entry with key and value inside the node, if they fit.
    #[inline]
    fn inline(user_key: &[u8], trailer: u64, value: &[u8]) -> Option<Self> {
        let klen = user_key.len() + ikey::TRAILER_LEN;
        if klen + value.len() > INLINE_CAP {
            return None;
        }
        let mut buf = [0u8; INLINE_CAP];
        let (k, rest) = buf.split_at_mut(user_key.len());
        k.copy_from_slice(user_key);
        let (t, rest) = rest.split_at_mut(ikey::TRAILER_LEN);
        t.copy_from_slice(&trailer.to_be_bytes());
        if let Some(v) = rest.get_mut(..value.len()) {
            v.copy_from_slice(value);
        }
        // Both fit in a u8: klen + vlen <= INLINE_CAP < 256.
        Some(MemEntry::Inline {
            klen: klen as u8,
            vlen: value.len() as u8,
            buf,
        })
    }

    /// The internal key.
    #[inline]
    pub fn ikey(&self) -> &[u8] {
        match self {
            MemEntry::Inline { klen, buf, .. } => buf.get(..usize::from(*klen)).unwrap_or(&[]),
            MemEntry::KeyInline { klen, key, .. } => key.get(..usize::from(*klen)).unwrap_or(&[]),
            // SAFETY: an arena-backed entry only exists inside the memtable that owns the arena, and is only
            // reached through a borrow of (or an `Arc` on) that memtable.
            MemEntry::Heap { klen, buf, .. } => unsafe { buf.as_slice() }
                .get(..*klen as usize)
                .unwrap_or(&[]),
        }
    }

    /// The value.
    #[inline]
    pub fn value(&self) -> &[u8] {
        match self {
            MemEntry::Inline { klen, vlen, buf } => {
                let k = usize::from(*klen);
                buf.get(k..k + usize::from(*vlen)).unwrap_or(&[])
            }
            // SAFETY: as in `ikey`.
            MemEntry::KeyInline { value, .. } => unsafe { value.as_slice() },
            // SAFETY: as in `ikey`.
            MemEntry::Heap { klen, buf, .. } => unsafe { buf.as_slice() }
                .get(*klen as usize..)
                .unwrap_or(&[]),
        }
    }

    /// The inline first word of a long key's user key, if this is one.
    #[inline]
    fn heap_word(&self) -> Option<u64> {
        match self {
            MemEntry::Heap { word, .. } => Some(*word),
            _ => None,
        }
    }

    /// Orders by user key against `user_key`, whose [`key_word`] is `word` (a long key's first word is
    /// compared before its heap buffer is read).
    #[inline(always)]
    pub(super) fn cmp_user_key_to(&self, user_key: &[u8], word: u64) -> Ordering {
        if let Some(w) = self.heap_word() {
            if w != word {
                return w.cmp(&word);
            }
        }
        compare_user_keys(ikey::user_key(self.ikey()), user_key)
    }

    /// The trailer `(seqno << 8) | kind` (0 for a malformed key, never stored).
    #[inline]
    pub(super) fn trailer(&self) -> u64 {
        let k = self.ikey();
        k.get(k.len().saturating_sub(ikey::TRAILER_LEN)..)
            .and_then(|t| <[u8; 8]>::try_from(t).ok())
            .map_or(0, u64::from_be_bytes)
    }
}

/// Bytewise comparison, equal to `a.cmp(b)`, one big-endian word at a time.
#[inline]
fn compare_user_keys(mut a: &[u8], mut b: &[u8]) -> Ordering {
    while let (Some((x, ra)), Some((y, rb))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if x != y {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        (a, b) = (ra, rb);
    }
    // At least one side has fewer than 8 bytes left: zero-padded words decide unless one is a prefix of
    // the other (a pad byte only ever stands for "ended here"), then the shorter sorts first.
    match key_word(a).cmp(&key_word(b)) {
        Ordering::Equal => a.len().cmp(&b.len()),
        o => o,
    }
}

/// The first 8 bytes of `bytes`, zero-padded, as a big-endian word.
#[inline]
pub(super) fn key_word(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = bytes.len().min(8);
    if let (Some(dst), Some(src)) = (w.get_mut(..n), bytes.get(..n)) {
        dst.copy_from_slice(src);
    }
    u64::from_be_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ikey::ValueKind;

    #[test]
    fn word_comparison_agrees_with_bytewise() {
        let keys: [&[u8]; 14] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefghabcdefgh",
            b"abcdefghabcdefgh\0",
            b"abcdefghabcdefgi",
            b"abcdefghabcdefg",
            b"b",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        for x in keys {
            for y in keys {
                assert_eq!(compare_user_keys(x, y), x.cmp(y), "{x:?} {y:?}");
            }
        }
    }

    #[test]
    fn entry_order_against_a_user_key_is_bytewise() {
        let long = |p: &[u8]| {
            let mut k = p.to_vec();
            k.resize(40, b'~');
            k
        };
        let mut keys: Vec<Vec<u8>> = [
            &b""[..],
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"b",
            b"\xff",
        ]
        .iter()
        .map(|k| k.to_vec())
        .collect();
        for p in [&b""[..], b"a", b"abcdefgh", b"abcdefgi", b"b"] {
            keys.push(long(p));
        }
        // Inline, key-inline (large value) and heap entries against every user key.
        let arena = Arena::new(4096);
        for x in &keys {
            for y in &keys {
                for vx in [0, 100] {
                    let a =
                        MemEntry::new_in(x, ikey::trailer(1, ValueKind::Put), &vec![1; vx], &arena);
                    assert_eq!(a.cmp_user_key_to(y, key_word(y)), x.cmp(y), "{x:?} {y:?}");
                }
            }
        }
    }

    #[test]
    fn entry_stays_small_and_long_entries_go_to_the_arena() {
        assert_eq!(std::mem::size_of::<MemEntry>(), 40);
        let arena = Arena::new(4096);
        let short = MemEntry::new_in(b"key", ikey::trailer(7, ValueKind::Put), b"value", &arena);
        assert!(matches!(short, MemEntry::Inline { .. }));
        let long_key = vec![b'k'; 60];
        let long = MemEntry::new_in(&long_key, ikey::trailer(7, ValueKind::Put), b"v", &arena);
        assert!(matches!(long, MemEntry::Heap { .. }));
        assert_eq!(ikey::user_key(long.ikey()), &long_key[..]);
        for e in [&short, &long] {
            assert_eq!(ikey::parse(e.ikey()).map(|p| p.seqno), Some(7));
        }
        assert_eq!(short.value(), b"value");
        assert_eq!(long.value(), b"v");
        // Exactly at the inline capacity, and one byte over.
        let k = vec![1u8; INLINE_CAP - ikey::TRAILER_LEN - 4];
        let at = MemEntry::new_in(&k, 1, b"abcd", &arena);
        let over = MemEntry::new_in(&k, 1, b"abcde", &arena);
        assert!(matches!(at, MemEntry::Inline { .. }));
        assert!(matches!(over, MemEntry::Heap { .. }));
        assert_eq!((at.value(), over.value()), (&b"abcd"[..], &b"abcde"[..]));
        // A short key with a large value keeps the key inline, at the key capacity and one byte over.
        let k = vec![2u8; KEY_INLINE_CAP - ikey::TRAILER_LEN];
        let big = vec![9u8; 100];
        let key_inline = MemEntry::new_in(&k, ikey::trailer(3, ValueKind::Merge), &big, &arena);
        assert!(matches!(key_inline, MemEntry::KeyInline { .. }));
        assert_eq!(ikey::user_key(key_inline.ikey()), &k[..]);
        assert_eq!(key_inline.value(), &big[..]);
        let k2 = vec![2u8; KEY_INLINE_CAP - ikey::TRAILER_LEN + 1];
        let heap = MemEntry::new_in(&k2, 3, &big, &arena);
        assert!(matches!(heap, MemEntry::Heap { .. }));
        assert_eq!(
            (ikey::user_key(heap.ikey()), heap.value()),
            (&k2[..], &big[..])
        );
    }
}

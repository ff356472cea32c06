//! Internal keys: a user key plus an 8-byte trailer `(seqno << 8) | kind`, big-endian.
//!
//! Internal keys order by user key ascending (bytewise), then by trailer *descending*, so the newest version
//! of a user key comes first. Because user keys are not prefix-free, internal keys must be compared with
//! [`compare`], never bytewise.

use std::cmp::Ordering;

/// Length of the trailer appended to every user key.
pub const TRAILER_LEN: usize = 8;
/// The largest sequence number (56 bits).
pub const MAX_SEQNO: u64 = (1 << 56) - 1;

/// What an internal key records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ValueKind {
    /// A point tombstone.
    Delete = 0,
    /// A full value.
    Put = 1,
    /// A merge operand.
    Merge = 2,
    /// A range tombstone: the user key is the range start, the value the exclusive end.
    RangeDelete = 3,
}

impl ValueKind {
    /// The kind for a trailer byte, if valid.
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => ValueKind::Delete,
            1 => ValueKind::Put,
            2 => ValueKind::Merge,
            3 => ValueKind::RangeDelete,
            _ => return None,
        })
    }
}

/// Appends `user_key | trailer(seqno, kind)` to `out`.
#[inline]
pub fn encode(out: &mut Vec<u8>, user_key: &[u8], seqno: u64, kind: ValueKind) {
    out.extend_from_slice(user_key);
    out.extend_from_slice(&trailer(seqno, kind).to_be_bytes());
}

/// The internal key sorting before every version of `user_key` (the largest trailer), for seeks.
pub fn lookup_key(user_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    k.extend_from_slice(user_key);
    k.extend_from_slice(&u64::MAX.to_be_bytes());
    k
}

/// The trailer value `(seqno << 8) | kind`.
#[inline]
pub fn trailer(seqno: u64, kind: ValueKind) -> u64 {
    (seqno.min(MAX_SEQNO) << 8) | kind as u64
}

/// A decoded internal key borrowing its user key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user key.
    pub user_key: &'a [u8],
    /// The sequence number.
    pub seqno: u64,
    /// The kind.
    pub kind: ValueKind,
}

impl<'a> ParsedKey<'a> {
    /// Splits an internal key (what a [`PropertiesCollector`](crate::PropertiesCollector) is shown); `None`
    /// if it is shorter than the 8-byte trailer or has an unknown kind.
    #[inline]
    pub fn parse(ikey: &'a [u8]) -> Option<ParsedKey<'a>> {
        parse(ikey)
    }
}

/// Splits an internal key; `None` if it is shorter than the trailer or has an unknown kind.
#[inline]
pub fn parse(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    let split = ikey.len().checked_sub(TRAILER_LEN)?;
    let (user_key, t) = ikey.split_at(split);
    let t = u64::from_be_bytes(t.try_into().ok()?);
    Some(ParsedKey {
        user_key,
        seqno: t >> 8,
        kind: ValueKind::from_u8(t as u8)?,
    })
}

/// The user key part of an internal key (the whole slice if it is too short to have a trailer).
#[inline]
pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(TRAILER_LEN)]
}

/// Whether an internal key is a range tombstone's (its trailer's kind byte is [`ValueKind::RangeDelete`]).
#[inline]
pub fn is_range_delete(ikey: &[u8]) -> bool {
    ikey.last() == Some(&(ValueKind::RangeDelete as u8))
}

/// Orders internal keys: user key ascending, then trailer descending (newest first).
#[inline]
pub fn compare(a: &[u8], b: &[u8]) -> Ordering {
    let (ua, ta) = a.split_at(a.len().saturating_sub(TRAILER_LEN));
    let (ub, tb) = b.split_at(b.len().saturating_sub(TRAILER_LEN));
    match compare_bytes(ua, ub) {
        Ordering::Equal => match (ta.try_into(), tb.try_into()) {
            // Both trailers are whole: compare them as big-endian integers (no `memcmp` call).
            (Ok(x), Ok(y)) => u64::from_be_bytes(y).cmp(&u64::from_be_bytes(x)),
            _ => tb.cmp(ta),
        },
        o => o,
    }
}

/// Bytewise (lexicographic) comparison, equal to `a.cmp(b)`, with the first 8 bytes compared as one
/// big-endian word: short keys (key-group prefix + key) are mostly decided there without a `memcmp` call.
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    if let (Some((x, ra)), Some((y, rb))) = (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
        return ra.cmp(rb);
    }
    a.cmp(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_first_and_prefix_safe() {
        let mut a = Vec::new();
        encode(&mut a, b"k", 5, ValueKind::Put);
        let mut b = Vec::new();
        encode(&mut b, b"k", 9, ValueKind::Merge);
        assert_eq!(compare(&b, &a), Ordering::Less);
        let mut c = Vec::new();
        encode(&mut c, b"ka", 1, ValueKind::Put);
        assert_eq!(compare(&a, &c), Ordering::Less);
        for (x, y) in [
            (&b"abcdefgh"[..], &b"abcdefgh"[..]),
            (b"abcdefghi", b"abcdefgh"),
            (b"abcdefgh", b"abcdefgi"),
            (b"abcdefgh\x00\x01", b"abcdefgh\x00\x02"),
            (b"ab", b"abcdefghij"),
            (b"", b"a"),
            (b"\xffbcdefgh", b"abcdefgh"),
        ] {
            assert_eq!(compare_bytes(x, y), x.cmp(y));
            assert_eq!(compare_bytes(y, x), y.cmp(x));
        }
        let p = parse(&b).unwrap();
        assert_eq!(
            (p.user_key, p.seqno, p.kind),
            (&b"k"[..], 9, ValueKind::Merge)
        );
    }
}

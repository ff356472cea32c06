//! Prefix extractors: which leading bytes of a user key the SST filters record, so that a lookup or a
//! bounded scan can skip every file that holds no key with its prefix.
//!
//! The contract an extractor must keep (a broken one makes files look empty that are not):
//! * `prefix_len(k) = Some(n)` has `n <= k.len()` and depends only on `k[..n]`: every key sharing those
//!   bytes that the extractor maps at all maps to the same `n`;
//! * once it returns `Some(n)` for a key, it returns `Some(n)` for that key for as long as files written
//!   under the same [`name`](PrefixExtractor::name) are read. It may return `None` (out of domain) and
//!   later start mapping a key: a file is only ever filtered by prefix if *every* entry it holds was in
//!   domain when it was written (see `design/sst-format.md`, format version 3).

use std::fmt;

/// Maps a user key to the length of its prefix (see the module documentation for the contract).
pub trait PrefixExtractor: Send + Sync {
    /// Names the extractor and its configuration; stored in every filter built with it. A file whose
    /// filter names another extractor is never filtered by prefix.
    fn name(&self) -> &str;

    /// The length of `user_key`'s prefix, or `None` when the key is out of the extractor's domain.
    fn prefix_len(&self, user_key: &[u8]) -> Option<usize>;
}

impl fmt::Debug for dyn PrefixExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrefixExtractor({})", self.name())
    }
}

/// The first `n` bytes of every key at least `n` bytes long.
#[derive(Debug, Clone)]
pub struct FixedPrefix {
    len: usize,
    name: String,
}

impl FixedPrefix {
    /// An extractor of `len`-byte prefixes.
    pub fn new(len: usize) -> Self {
        FixedPrefix {
            len,
            name: format!("keyed-state.fixed-prefix/{len}"),
        }
    }
}

impl PrefixExtractor for FixedPrefix {
    fn name(&self) -> &str {
        &self.name
    }

    fn prefix_len(&self, user_key: &[u8]) -> Option<usize> {
        (user_key.len() >= self.len).then_some(self.len)
    }
}

/// The smallest byte string greater than every string starting with `prefix` (`None`: no such bound, the
/// prefix is empty or all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last != 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// The prefix every key of a scan shares, if the extractor maps it: the scan's `prefix` option, else its
/// lower bound's prefix when the upper bound ends the scan within that prefix.
pub(crate) fn scan_prefix<'a>(
    extractor: &dyn PrefixExtractor,
    lower: Option<&'a [u8]>,
    upper: Option<&[u8]>,
    prefix: Option<&'a [u8]>,
) -> Option<&'a [u8]> {
    if let Some(p) = prefix {
        if let Some(n) = extractor.prefix_len(p) {
            return p.get(..n);
        }
    }
    let lower = lower?;
    let n = extractor.prefix_len(lower)?;
    let p = lower.get(..n)?;
    let end = prefix_successor(p)?;
    (upper? <= end.as_slice()).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successor_skips_trailing_ff() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_successor(&[0xFF]), None);
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_successor(b""), None);
    }

    #[test]
    fn a_scan_has_a_prefix_only_when_its_bounds_stay_inside_it() {
        let x = FixedPrefix::new(3);
        assert_eq!(
            scan_prefix(&x, None, None, Some(b"abcd")),
            Some(&b"abc"[..])
        );
        assert_eq!(scan_prefix(&x, None, None, Some(b"ab")), None);
        assert_eq!(
            scan_prefix(&x, Some(b"abc"), Some(b"abd"), None),
            Some(&b"abc"[..])
        );
        assert_eq!(
            scan_prefix(&x, Some(b"abcx"), Some(b"abcz"), None),
            Some(&b"abc"[..])
        );
        // The upper bound reaches past the prefix, or is missing: every file may hold keys of the scan.
        assert_eq!(scan_prefix(&x, Some(b"abc"), Some(b"abda"), None), None);
        assert_eq!(scan_prefix(&x, Some(b"abc"), None, None), None);
        assert_eq!(scan_prefix(&x, Some(b"ab"), Some(b"ac"), None), None);
    }
}

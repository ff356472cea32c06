//! Range tombstones: `[start, end)` deletions at a sequence number.
//!
//! A tombstone at seqno `t` hides every entry of a key in `[start, end)` whose seqno is `< t`. Tombstones
//! are stored inline in memtables and SSTs (kind `RangeDelete`, user key = start, value = end) and also
//! aggregated per SST into the `ks.range_dels` table property, so readers get them without scanning.

use super::coding::{put_len_prefixed_u32, put_u32, put_u64, ByteReader, DecodeError};
use super::ikey::{self, ValueKind};
use super::sst::PropertiesCollector;

/// The SST property holding a file's range tombstones.
pub(crate) const PROP_RANGE_DELS: &str = "ks.range_dels";

/// One range tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeTombstone {
    /// First user key deleted.
    pub start: Vec<u8>,
    /// First user key after the deleted range.
    pub end: Vec<u8>,
    /// The tombstone's sequence number: it hides older entries only.
    pub seqno: u64,
}

impl RangeTombstone {
    /// Whether the tombstone covers `key` (ignoring seqnos).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.start.as_slice() <= key && key < self.end.as_slice()
    }
    /// Whether `[start, end)` overlaps the closed user-key range `[lo, hi]`.
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.start.as_slice() <= hi && lo < self.end.as_slice()
    }
}

/// The largest seqno `<= snapshot` of a tombstone covering `key`, 0 if none.
pub fn max_covering<'a>(
    tombs: impl IntoIterator<Item = &'a RangeTombstone>,
    key: &[u8],
    snapshot: u64,
) -> u64 {
    tombs
        .into_iter()
        .filter(|t| t.seqno <= snapshot && t.contains(key))
        .map(|t| t.seqno)
        .max()
        .unwrap_or(0)
}

/// Encodes tombstones as `count u32 | (slen u32, start, elen u32, end, seqno u64)*`, little-endian.
pub fn encode(tombs: &[RangeTombstone]) -> Vec<u8> {
    let mut out = Vec::new();
    put_u32(&mut out, tombs.len() as u32);
    for t in tombs {
        put_len_prefixed_u32(&mut out, &t.start);
        put_len_prefixed_u32(&mut out, &t.end);
        put_u64(&mut out, t.seqno);
    }
    out
}

/// Decodes [`encode`]'s output.
pub fn decode(bytes: &[u8]) -> Result<Vec<RangeTombstone>, DecodeError> {
    let mut r = ByteReader::new(bytes);
    let n = r.u32()? as usize;
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let start = r.len_prefixed_u32()?.to_vec();
        let end = r.len_prefixed_u32()?.to_vec();
        let seqno = r.u64()?;
        out.push(RangeTombstone { start, end, seqno });
    }
    r.finish("range tombstones")?;
    Ok(out)
}

/// A non-overlapping fragmentation of tombstones visible at one snapshot, for iterators.
#[derive(Debug, Default)]
pub struct Fragments {
    /// Sorted, disjoint `[start, end)` pieces with the max covering seqno.
    frags: Vec<(Vec<u8>, Vec<u8>, u64)>,
}

impl Fragments {
    /// Fragments the tombstones with seqno `<= snapshot`.
    pub fn build<'a>(tombs: impl IntoIterator<Item = &'a RangeTombstone>, snapshot: u64) -> Self {
        let vis: Vec<&RangeTombstone> = tombs
            .into_iter()
            .filter(|t| t.seqno <= snapshot && t.start < t.end)
            .collect();
        if vis.is_empty() {
            return Self::default();
        }
        let mut bounds: Vec<&[u8]> = vis
            .iter()
            .flat_map(|t| [t.start.as_slice(), t.end.as_slice()])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut frags = Vec::new();
        for w in bounds.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            let s = vis
                .iter()
                .filter(|t| t.start.as_slice() <= lo && hi <= t.end.as_slice())
                .map(|t| t.seqno)
                .max();
            if let Some(s) = s {
                frags.push((lo.to_vec(), hi.to_vec(), s));
            }
        }
        Self { frags }
    }

    /// The max covering seqno for `key`, 0 if none.
    pub fn covering(&self, key: &[u8]) -> u64 {
        let idx = self.frags.partition_point(|f| f.0.as_slice() <= key);
        if idx == 0 {
            return 0;
        }
        let f = &self.frags[idx - 1];
        if key < f.1.as_slice() {
            f.2
        } else {
            0
        }
    }
}

/// Collects a file's range tombstones into the [`PROP_RANGE_DELS`] property.
#[derive(Default)]
pub(crate) struct RangeDelCollector {
    tombs: Vec<RangeTombstone>,
}

impl PropertiesCollector for RangeDelCollector {
    fn add(&mut self, ikey: &[u8], value: &[u8]) {
        if let Some(p) = ikey::parse(ikey) {
            if p.kind == ValueKind::RangeDelete {
                self.tombs.push(RangeTombstone {
                    start: p.user_key.to_vec(),
                    end: value.to_vec(),
                    seqno: p.seqno,
                });
            }
        }
    }
    fn finish(&mut self) -> Vec<(String, Vec<u8>)> {
        if self.tombs.is_empty() {
            Vec::new()
        } else {
            vec![(PROP_RANGE_DELS.to_string(), encode(&self.tombs))]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &[u8], e: &[u8], q: u64) -> RangeTombstone {
        RangeTombstone {
            start: s.to_vec(),
            end: e.to_vec(),
            seqno: q,
        }
    }

    #[test]
    fn fragments_agree_with_linear_scan() {
        let ts = vec![
            t(b"a", b"m", 5),
            t(b"c", b"e", 9),
            t(b"k", b"z", 3),
            t(b"x", b"y", 20),
        ];
        for snap in [0, 4, 5, 9, 100] {
            let f = Fragments::build(&ts, snap);
            for k in [
                &b"a"[..],
                b"b",
                b"c",
                b"d",
                b"e",
                b"l",
                b"m",
                b"n",
                b"x",
                b"y",
                b"z",
                b"0",
            ] {
                assert_eq!(f.covering(k), max_covering(&ts, k, snap), "{k:?} {snap}");
            }
        }
        assert_eq!(decode(&encode(&ts)).unwrap(), ts);
    }

    #[test]
    fn range_tombstones_with_trailing_bytes_are_rejected() {
        // Found by the fuzz target `range_tombstones_decode` (its re-encoding check): bytes after the last
        // tombstone were ignored, so a damaged property could decode as a shorter list without an error.
        let mut bytes = encode(&[t(b"a", b"c", 7)]);
        bytes.push(0);
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::TrailingBytes { count: 1, .. })
        ));
        assert!(matches!(
            decode(&[0, 0, 0, 0, 9]),
            Err(DecodeError::TrailingBytes { count: 1, .. })
        ));
    }
}

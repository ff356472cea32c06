//! The versions of a column family's keys, gathered from all its SST files, folded into what a RocksDB
//! read returns: per user key the versions in descending sequence number order; a put is the base, a
//! point tombstone (delete or single delete) or a range tombstone with a higher sequence number ends the
//! key's history, and the merge operands newer than the base are applied oldest first by Flink's merge
//! operator, `StringAppendTESTOperator(',')` (`utilities/merge_operators/string_append/stringappend2.cc`):
//! base and operands joined with one `0x2C` byte, no leading delimiter without a base.

use super::record::{RangeTombstone, Record, ValueKind};
use crate::FlinkError;

/// The delimiter of Flink's list state merge operator.
pub const LIST_DELIMITER: u8 = b',';

#[derive(Debug, Clone, Copy)]
struct Version {
    at: usize,
    key_len: u32,
    value_len: u32,
    seqno: u64,
    kind: ValueKind,
}

/// Every version of one column family's keys (from any number of files), stored in one buffer.
#[derive(Debug, Default)]
pub struct Versions {
    data: Vec<u8>,
    versions: Vec<Version>,
    tombstones: Vec<RangeTombstone>,
}

/// What a fold found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoldStats {
    /// Versions read.
    pub versions: u64,
    /// Live keys produced.
    pub live: u64,
    /// Keys whose newest visible version is a tombstone (or which a range tombstone covers).
    pub deleted: u64,
    /// Merge operands applied.
    pub merge_operands: u64,
}

impl Versions {
    /// Adds one record.
    pub fn push(&mut self, r: &Record<'_>) -> Result<(), FlinkError> {
        let (Ok(key_len), Ok(value_len)) = (
            u32::try_from(r.user_key.len()),
            u32::try_from(r.value.len()),
        ) else {
            return Err(FlinkError::Inconsistent(format!(
                "a record of {} + {} bytes is too large",
                r.user_key.len(),
                r.value.len()
            )));
        };
        self.versions.push(Version {
            at: self.data.len(),
            key_len,
            value_len,
            seqno: r.seqno,
            kind: r.kind,
        });
        self.data.extend_from_slice(r.user_key);
        self.data.extend_from_slice(r.value);
        Ok(())
    }

    /// Adds range tombstones.
    pub fn add_tombstones(&mut self, t: impl IntoIterator<Item = RangeTombstone>) {
        self.tombstones.extend(t);
    }

    /// The number of versions held.
    pub fn len(&self) -> usize {
        self.versions.len()
    }

    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    fn key(&self, v: &Version) -> &[u8] {
        &self.data[v.at..v.at + v.key_len as usize]
    }

    fn value(&self, v: &Version) -> &[u8] {
        let s = v.at + v.key_len as usize;
        &self.data[s..s + v.value_len as usize]
    }
}

/// Folds `versions` (named `label` in messages) and calls `f(user key, value)` for every live key in
/// ascending key order. `merge_allowed`: whether merge operands may be folded (the files name Flink's
/// merge operator); a merge operand otherwise is an error. Two versions of a key with the same sequence
/// number are an error.
pub fn fold_versions(
    mut versions: Versions,
    label: &str,
    merge_allowed: bool,
    f: &mut dyn FnMut(&[u8], &[u8]) -> Result<(), FlinkError>,
) -> Result<FoldStats, FlinkError> {
    let mut order = std::mem::take(&mut versions.versions);
    // Each file's records arrive in RocksDB's order: a stable sort finds those runs and merges them.
    order.sort_by(|a, b| {
        versions
            .key(a)
            .cmp(versions.key(b))
            .then(b.seqno.cmp(&a.seqno))
    });
    let mut tombstones = std::mem::take(&mut versions.tombstones);
    tombstones.retain(|t| t.start < t.end);
    tombstones.sort_unstable_by(|a, b| a.start.cmp(&b.start));
    let mut next_tombstone = 0;
    let mut active: Vec<&RangeTombstone> = Vec::new();
    let mut stats = FoldStats {
        versions: order.len() as u64,
        ..FoldStats::default()
    };
    let mut value = Vec::new();
    let mut operands: Vec<&[u8]> = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let key = versions.key(&order[i]);
        let mut j = i + 1;
        while j < order.len() && versions.key(&order[j]) == key {
            if order[j].seqno == order[j - 1].seqno {
                return Err(FlinkError::Inconsistent(format!(
                    "{label}: key {key:02x?} has two versions with sequence number {}",
                    order[j].seqno
                )));
            }
            j += 1;
        }
        while next_tombstone < tombstones.len()
            && tombstones[next_tombstone].start.as_slice() <= key
        {
            active.push(&tombstones[next_tombstone]);
            next_tombstone += 1;
        }
        active.retain(|t| t.end.as_slice() > key);
        let hidden_below = active.iter().map(|t| t.seqno).max().unwrap_or(0);
        operands.clear();
        let mut base: Option<&[u8]> = None;
        for v in &order[i..j] {
            if v.seqno < hidden_below {
                break;
            }
            match v.kind {
                ValueKind::Put => {
                    base = Some(versions.value(v));
                    break;
                }
                ValueKind::Delete | ValueKind::SingleDelete => break,
                ValueKind::Merge => operands.push(versions.value(v)),
            }
        }
        if !operands.is_empty() && !merge_allowed {
            return Err(FlinkError::Inconsistent(format!(
                "{label}: key {key:02x?} has merge operands, but the files name no merge operator Flink uses"
            )));
        }
        stats.merge_operands += operands.len() as u64;
        match (base, operands.is_empty()) {
            (Some(b), true) => {
                stats.live += 1;
                f(key, b)?;
            }
            (None, true) => stats.deleted += 1,
            (base, false) => {
                value.clear();
                let mut first = true;
                if let Some(b) = base {
                    value.extend_from_slice(b);
                    first = false;
                }
                for op in operands.iter().rev() {
                    if !first {
                        value.push(LIST_DELIMITER);
                    }
                    value.extend_from_slice(op);
                    first = false;
                }
                stats.live += 1;
                f(key, &value)?;
            }
        }
        i = j;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn rec(
        key: &'static [u8],
        seqno: u64,
        kind: ValueKind,
        value: &'static [u8],
    ) -> Record<'static> {
        Record {
            user_key: key,
            seqno,
            kind,
            value,
        }
    }

    fn fold(
        records: &[Record<'static>],
        tombstones: Vec<RangeTombstone>,
    ) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut v = Versions::default();
        for r in records {
            v.push(r).unwrap();
        }
        v.add_tombstones(tombstones);
        let mut out = BTreeMap::new();
        fold_versions(v, "cf", true, &mut |k, val| {
            out.insert(k.to_vec(), val.to_vec());
            Ok(())
        })
        .unwrap();
        out
    }

    use ValueKind::*;

    #[test]
    fn newest_put_wins_and_tombstones_hide_older_versions() {
        let got = fold(
            &[
                rec(b"a", 1, Put, b"old"),
                rec(b"a", 5, Put, b"new"),
                rec(b"b", 2, Put, b"x"),
                rec(b"b", 3, Delete, b""),
                rec(b"c", 4, SingleDelete, b""),
                rec(b"c", 6, Put, b"back"),
            ],
            vec![],
        );
        let want: BTreeMap<Vec<u8>, Vec<u8>> = [
            (b"a".to_vec(), b"new".to_vec()),
            (b"c".to_vec(), b"back".to_vec()),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn merge_operands_join_oldest_first_with_a_comma() {
        let got = fold(
            &[
                rec(b"l", 3, Merge, b"2"),
                rec(b"l", 1, Merge, b"0"),
                rec(b"l", 2, Merge, b"1"),
                rec(b"p", 1, Put, b"base"),
                rec(b"p", 2, Merge, b"x"),
                rec(b"d", 1, Merge, b"gone"),
                rec(b"d", 2, Delete, b""),
                rec(b"d", 3, Merge, b"fresh"),
                rec(b"e", 1, Put, b""),
                rec(b"e", 2, Merge, b"y"),
            ],
            vec![],
        );
        assert_eq!(got[&b"l".to_vec()], b"0,1,2");
        assert_eq!(got[&b"p".to_vec()], b"base,x");
        assert_eq!(got[&b"d".to_vec()], b"fresh");
        // An empty base still takes a delimiter, as StringAppendTESTOperator does.
        assert_eq!(got[&b"e".to_vec()], b",y");
    }

    #[test]
    fn range_tombstones_hide_only_older_versions_in_their_range() {
        let got = fold(
            &[
                rec(b"a", 1, Put, b"1"),
                rec(b"b", 2, Put, b"2"),
                rec(b"c", 9, Put, b"3"),
                rec(b"d", 3, Put, b"4"),
                rec(b"e", 1, Merge, b"5"),
                rec(b"e", 8, Merge, b"6"),
            ],
            vec![
                RangeTombstone {
                    start: b"b".to_vec(),
                    end: b"d".to_vec(),
                    seqno: 5,
                },
                RangeTombstone {
                    start: b"e".to_vec(),
                    end: b"f".to_vec(),
                    seqno: 4,
                },
            ],
        );
        let keys: Vec<&[u8]> = got.keys().map(Vec::as_slice).collect();
        assert_eq!(keys, [&b"a"[..], b"c", b"d", b"e"]);
        assert_eq!(got[&b"e".to_vec()], b"6");
    }

    #[test]
    fn the_same_sequence_number_twice_is_an_error() {
        let mut v = Versions::default();
        v.push(&rec(b"a", 1, Put, b"1")).unwrap();
        v.push(&rec(b"a", 1, Put, b"2")).unwrap();
        assert!(fold_versions(v, "cf", true, &mut |_, _| Ok(())).is_err());
        let mut v = Versions::default();
        v.push(&rec(b"a", 1, Merge, b"1")).unwrap();
        assert!(fold_versions(v, "cf", false, &mut |_, _| Ok(())).is_err());
    }
}

//! Write batches: a group of updates applied atomically under one contiguous sequence-number range.
//!
//! Encoding (used as the WAL record payload), all integers little-endian:
//!
//! ```text
//! +-----------+-----------+--------------------------------------------------+
//! | seqno u64 | count u32 | count x [kind u8 | klen u32 | key | vlen u32 | val] |
//! +-----------+-----------+--------------------------------------------------+
//! ```
//!
//! Operation `i` gets sequence number `seqno + i`.

use super::coding::{put_len_prefixed_u32, put_u32, put_u64, ByteReader, DecodeError};
use super::ikey::ValueKind;

/// One update inside a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchOp {
    /// What the update does.
    pub kind: ValueKind,
    /// The user key (range start for range deletes).
    pub key: Vec<u8>,
    /// The value, merge operand, or exclusive range end; empty for point deletes.
    pub value: Vec<u8>,
}

/// A group of updates that become visible all at once.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    /// The updates, in the order they get sequence numbers.
    pub(crate) ops: Vec<BatchOp>,
    bytes: usize,
    /// The index of the first merge operand in `ops`, if any.
    first_merge: Option<usize>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, kind: ValueKind, key: &[u8], value: &[u8]) {
        self.bytes += key.len() + value.len() + 9;
        if kind == ValueKind::Merge && self.first_merge.is_none() {
            self.first_merge = Some(self.ops.len());
        }
        self.ops.push(BatchOp {
            kind,
            key: key.to_vec(),
            value: value.to_vec(),
        });
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.push(ValueKind::Put, key, value);
        self
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.push(ValueKind::Delete, key, &[]);
        self
    }

    /// Adds a merge operand for `key`. A database without a merge operator refuses the whole batch
    /// ([`LsmError::NoMergeOperator`](crate::LsmError::NoMergeOperator)).
    pub fn merge(&mut self, key: &[u8], operand: &[u8]) -> &mut Self {
        self.push(ValueKind::Merge, key, operand);
        self
    }

    /// Deletes every key in `[start, end)`.
    pub fn delete_range(&mut self, start: &[u8], end: &[u8]) -> &mut Self {
        self.push(ValueKind::RangeDelete, start, end);
        self
    }

    /// Number of updates.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch holds no update.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Removes all updates.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.bytes = 0;
        self.first_merge = None;
    }

    /// The key of the first merge operand, if the batch holds one.
    pub(crate) fn first_merge_key(&self) -> Option<&[u8]> {
        self.first_merge
            .and_then(|i| self.ops.get(i))
            .map(|op| op.key.as_slice())
    }

    /// Approximate payload size in bytes.
    pub fn approximate_size(&self) -> usize {
        self.bytes
    }

    /// Encodes the batch with its first sequence number (the WAL record payload).
    pub(crate) fn encode(&self, seqno: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.bytes);
        put_u64(&mut out, seqno);
        put_u32(&mut out, self.ops.len() as u32);
        for op in &self.ops {
            out.push(op.kind as u8);
            put_len_prefixed_u32(&mut out, &op.key);
            put_len_prefixed_u32(&mut out, &op.value);
        }
        out
    }

    /// Decodes an encoded batch into its first sequence number and the batch.
    pub(crate) fn decode(bytes: &[u8]) -> Result<(u64, WriteBatch), DecodeError> {
        let mut r = ByteReader::new(bytes);
        let seqno = r.u64()?;
        let count = r.u32()?;
        let mut batch = WriteBatch::new();
        for _ in 0..count {
            let offset = r.position() as u64;
            let tag = r.u8()?;
            let kind = ValueKind::from_u8(tag).ok_or(DecodeError::BadTag {
                what: "kind",
                tag,
                offset,
            })?;
            let key = r.len_prefixed_u32()?;
            let value = r.len_prefixed_u32()?;
            batch.push(kind, key, value);
        }
        r.finish("batch")?;
        Ok((seqno, batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut b = WriteBatch::new();
        b.put(b"a", b"1")
            .delete(b"b")
            .merge(b"c", b"x")
            .delete_range(b"d", b"f");
        let enc = b.encode(42);
        let (s, d) = WriteBatch::decode(&enc).unwrap();
        assert_eq!(s, 42);
        assert_eq!(d.ops, b.ops);
        assert!(WriteBatch::decode(&enc[..enc.len() - 1]).is_err());
    }
}

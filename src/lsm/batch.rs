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
    pub(crate) ops: Vec<BatchOp>,
    bytes: usize,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, kind: ValueKind, key: &[u8], value: &[u8]) {
        self.bytes += key.len() + value.len() + 9;
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

    /// Adds a merge operand for `key`.
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
    }

    /// Approximate payload size in bytes.
    pub fn approximate_size(&self) -> usize {
        self.bytes
    }

    /// Encodes the batch with its first sequence number.
    pub(crate) fn encode(&self, seqno: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.bytes);
        out.extend_from_slice(&seqno.to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        for op in &self.ops {
            out.push(op.kind as u8);
            out.extend_from_slice(&(op.key.len() as u32).to_le_bytes());
            out.extend_from_slice(&op.key);
            out.extend_from_slice(&(op.value.len() as u32).to_le_bytes());
            out.extend_from_slice(&op.value);
        }
        out
    }

    /// Decodes an encoded batch into its first sequence number and the batch.
    pub(crate) fn decode(bytes: &[u8]) -> Result<(u64, WriteBatch), String> {
        let mut r = Reader { buf: bytes, pos: 0 };
        let seqno = r.u64()?;
        let count = r.u32()?;
        let mut batch = WriteBatch::new();
        for _ in 0..count {
            let kind = r.u8()?;
            let kind = ValueKind::from_u8(kind).ok_or_else(|| format!("unknown kind {kind}"))?;
            let klen = r.u32()? as usize;
            let key = r.bytes(klen)?;
            let vlen = r.u32()? as usize;
            let value = r.bytes(vlen)?;
            batch.push(kind, key, value);
        }
        if r.pos != bytes.len() {
            return Err("trailing bytes after batch".into());
        }
        Ok((seqno, batch))
    }
}

/// A bounds-checked little-endian reader.
pub(crate) struct Reader<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| format!("truncated at offset {} (need {n} bytes)", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
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

//! RocksDB's integer encodings (`util/coding.h`): LEB128 varints, zig-zag signed varints, little-endian
//! fixed-width integers and block handles.

/// A block's place in the file: offset and size, without the 5-byte trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHandle {
    /// Byte offset of the block in the file.
    pub offset: u64,
    /// Size of the block's contents (the trailer follows).
    pub size: u64,
}

/// A cursor over bytes with RocksDB's decoders; `None` when the bytes end or a varint is too long.
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub fn varint64(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.data.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                // The tenth byte may only carry the top bit.
                if shift == 63 && b > 1 {
                    return None;
                }
                return Some(v);
            }
        }
        None
    }

    pub fn varint32(&mut self) -> Option<u32> {
        u32::try_from(self.varint64()?).ok()
    }

    pub fn varsigned64(&mut self) -> Option<i64> {
        let u = self.varint64()?;
        Some(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    pub fn handle(&mut self) -> Option<BlockHandle> {
        Some(BlockHandle {
            offset: self.varint64()?,
            size: self.varint64()?,
        })
    }
}

pub fn fixed32(b: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(..4)?.try_into().ok()?))
}

pub fn fixed64(b: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_decode_as_rocksdb_encodes_them() {
        let mut c = Cursor::new(&[0x00, 0x7f, 0x80, 0x01, 0xb1, 0x0e, 0x03]);
        assert_eq!(c.varint64(), Some(0));
        assert_eq!(c.varint64(), Some(127));
        assert_eq!(c.varint64(), Some(128));
        assert_eq!(c.varint64(), Some(1841));
        assert_eq!(c.varsigned64(), Some(-2));
        assert_eq!(c.varint64(), None);
        let mut c = Cursor::new(&[0xff; 11]);
        assert_eq!(c.varint64(), None);
        let mut c = Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0x1f]);
        assert_eq!(c.varint32(), None);
    }
}

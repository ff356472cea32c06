//! Byte coding shared by every LSM file format: LEB128 varints, fixed-width little-endian integers, a
//! bounds-checked [`ByteReader`] cursor, and [`DecodeError`], the typed failure of every decoder.
//!
//! The free `get_*` functions return `Option` and are the hot-path primitives (SST block parsing); the
//! [`ByteReader`] wraps them for record decoders (write batches, version edits, range tombstones, SST
//! properties) and reports where the bytes went wrong.

/// Why bytes failed to decode. Cheap to build and copy (no allocation), so decoders on the read path can
/// return it directly; the caller that knows the file wraps it into [`LsmError::Corruption`](super::LsmError).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end before a field of `need` bytes starting at `offset`.
    #[error("truncated at offset {offset} (need {need} bytes)")]
    Truncated {
        /// Where the field starts.
        offset: u64,
        /// The field's length.
        need: u64,
    },
    /// A varint at `offset` is cut short, or longer than the integer it encodes.
    #[error("malformed varint at offset {offset}")]
    BadVarint {
        /// Where the varint starts.
        offset: u64,
    },
    /// A tag, kind or codec byte has no meaning.
    #[error("{what} at offset {offset}: unknown value {tag}")]
    BadTag {
        /// What the byte selects.
        what: &'static str,
        /// The byte.
        tag: u8,
        /// Where it is.
        offset: u64,
    },
    /// A version or other selector this code does not read.
    #[error("unsupported {what} {value}")]
    Unsupported {
        /// What the value selects.
        what: &'static str,
        /// The value.
        value: u64,
    },
    /// Bytes remain after a complete structure that must fill its buffer.
    #[error("{count} trailing bytes after the {what}")]
    TrailingBytes {
        /// The structure.
        what: &'static str,
        /// How many bytes remain.
        count: u64,
    },
    /// A stored checksum does not match the bytes it covers.
    #[error("{what} at offset {offset}: checksum mismatch")]
    Checksum {
        /// What the checksum covers.
        what: &'static str,
        /// Where it starts.
        offset: u64,
    },
    /// A region named by a handle does not lie inside the bytes available.
    #[error("{what} at offset {offset} size {size} exceeds the {limit} bytes available")]
    OutOfBounds {
        /// The region.
        what: &'static str,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// The bytes available.
        limit: u64,
    },
    /// A length, count or index is larger than what holds it allows.
    #[error("{what} {value} exceeds {limit}")]
    TooLarge {
        /// The quantity.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The largest value allowed, or the size it must fit.
        limit: u64,
    },
    /// A structural rule is broken by the item at `offset`.
    #[error("{what} at offset {offset}")]
    Malformed {
        /// The rule broken.
        what: &'static str,
        /// Where.
        offset: u64,
    },
    /// A structural rule is broken by the `index`-th entry of a sequence.
    #[error("entry {index}: {what}")]
    Entry {
        /// The rule broken.
        what: &'static str,
        /// The entry's position in its sequence.
        index: u64,
    },
    /// The LZ4 payload of the block at `offset` does not decompress to the length it records.
    #[error("block at offset {offset}: LZ4 {reason}")]
    Lz4 {
        /// The block's offset in its file.
        offset: u64,
        /// What went wrong.
        reason: &'static str,
    },
    /// Two files of a level at or below 1 overlap in user keys.
    #[error("files {first} and {second} overlap in level {level}")]
    FilesOverlap {
        /// The level.
        level: usize,
        /// The file with the smaller smallest key.
        first: u64,
        /// The file after it.
        second: u64,
    },
    /// A structural rule without a position is broken.
    #[error("{0}")]
    Invalid(&'static str),
}

/// Appends `v` as a LEB128 varint (at most 10 bytes).
#[inline]
pub fn put_varint64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes a LEB128 varint at `pos`; returns the value and the position after it, `None` if the varint is
/// cut short or does not fit 64 bits.
#[inline]
pub fn get_varint64(data: &[u8], mut pos: usize) -> Option<(u64, usize)> {
    // Fast path: one-byte varints (key lengths and short values in blocks).
    let first = *data.get(pos)?;
    if first < 0x80 {
        return Some((u64::from(first), pos + 1));
    }
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let b = *data.get(pos)?;
        pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some((v, pos));
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Decodes a varint whose value must fit a `usize` (a length or an offset).
#[inline]
pub fn get_varint_usize(data: &[u8], pos: usize) -> Option<(usize, usize)> {
    let (v, p) = get_varint64(data, pos)?;
    Some((usize::try_from(v).ok()?, p))
}

/// Appends `v` as 4 little-endian bytes.
#[inline]
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` as 8 little-endian bytes.
#[inline]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Reads a little-endian u32 at `pos`.
#[inline]
pub fn get_u32(data: &[u8], pos: usize) -> Option<u32> {
    let b = data.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// Reads a little-endian u64 at `pos`.
#[inline]
pub fn get_u64(data: &[u8], pos: usize) -> Option<u64> {
    let b = data.get(pos..pos.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// Appends `bytes` after its length as a little-endian u32 (the caller keeps lengths below 4 GiB).
#[inline]
pub fn put_len_prefixed_u32(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, bytes.len() as u32);
    out.extend_from_slice(bytes);
}

/// Appends `bytes` after its length as a varint.
#[inline]
pub fn put_len_prefixed_varint(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A bounds-checked cursor over a byte slice; every read past the end is a [`DecodeError`], never a panic.
#[derive(Debug, Clone)]
pub struct ByteReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    /// A cursor at the start of `buf`.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        ByteReader { buf, pos: 0 }
    }

    /// The offset of the next byte to read.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left to read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Whether every byte was read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The next `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let s = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
            .ok_or(DecodeError::Truncated {
                offset: self.pos as u64,
                need: n as u64,
            })?;
        self.pos += n;
        Ok(s)
    }

    /// The next byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = self.bytes(1)?;
        Ok(b[0])
    }

    /// The next 4 bytes as a little-endian u32.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next 8 bytes as a little-endian u64.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// The next varint (64 bits).
    #[inline]
    pub fn varint64(&mut self) -> Result<u64, DecodeError> {
        let (v, p) = get_varint64(self.buf, self.pos).ok_or(DecodeError::BadVarint {
            offset: self.pos as u64,
        })?;
        self.pos = p;
        Ok(v)
    }

    /// The next varint as a length (must fit a `usize`).
    #[inline]
    pub fn varint_usize(&mut self) -> Result<usize, DecodeError> {
        let (v, p) = get_varint_usize(self.buf, self.pos).ok_or(DecodeError::BadVarint {
            offset: self.pos as u64,
        })?;
        self.pos = p;
        Ok(v)
    }

    /// The bytes written by [`put_len_prefixed_u32`]: a little-endian u32 length, then that many bytes.
    #[inline]
    pub fn len_prefixed_u32(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.bytes(n)
    }

    /// The bytes written by [`put_len_prefixed_varint`]: a varint length, then that many bytes.
    #[inline]
    pub fn len_prefixed_varint(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.varint_usize()?;
        self.bytes(n)
    }

    /// Succeeds if every byte was read, else reports the rest as trailing bytes after `what`.
    pub fn finish(&self, what: &'static str) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes {
                what,
                count: count as u64,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint64(&mut b, v);
            assert_eq!(get_varint64(&b, 0), Some((v, b.len())));
            assert_eq!(get_varint64(&b[..b.len() - 1], 0), None);
            assert_eq!(
                get_varint_usize(&b, 0),
                usize::try_from(v).ok().map(|v| (v, b.len()))
            );
        }
        assert_eq!(get_varint64(&[0xff; 11], 0), None);
        assert_eq!(
            get_varint64(
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
                0
            ),
            None
        );
        let mut b = Vec::new();
        put_varint64(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
    }

    #[test]
    fn reader_reads_what_the_writers_wrote_and_reports_where_it_ends() {
        let mut b = vec![7u8];
        put_u32(&mut b, 0xdead_beef);
        put_u64(&mut b, u64::MAX - 1);
        put_varint64(&mut b, 1 << 40);
        put_len_prefixed_u32(&mut b, b"abc");
        put_len_prefixed_varint(&mut b, b"de");
        let mut r = ByteReader::new(&b);
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u32(), Ok(0xdead_beef));
        assert_eq!(r.u64(), Ok(u64::MAX - 1));
        assert_eq!(r.varint64(), Ok(1 << 40));
        assert_eq!(r.len_prefixed_u32(), Ok(&b"abc"[..]));
        assert_eq!(r.len_prefixed_varint(), Ok(&b"de"[..]));
        assert!(r.is_empty());
        assert_eq!(r.finish("test"), Ok(()));
        assert_eq!(
            r.u32(),
            Err(DecodeError::Truncated {
                offset: b.len() as u64,
                need: 4
            })
        );
        let mut r = ByteReader::new(&b[..3]);
        r.u8().unwrap();
        assert_eq!(
            r.finish("test"),
            Err(DecodeError::TrailingBytes {
                what: "test",
                count: 2
            })
        );
        assert_eq!(get_u32(&b, 1), Some(0xdead_beef));
        assert_eq!(get_u64(&b, b.len() - 7), None);
        assert_eq!(
            ByteReader::new(&[0x80]).varint64(),
            Err(DecodeError::BadVarint { offset: 0 })
        );
    }
}

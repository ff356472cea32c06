//! [`DataInput`]: Java `DataInputStream` reads (big-endian integers, modified-UTF-8 strings) over a byte
//! slice, every read bounds-checked and every error naming the file and the offset.

use super::FlinkError;
use keyed_state::Location;

/// A cursor over bytes written by Java's `DataOutputStream`.
#[derive(Debug, Clone)]
pub struct DataInput<'a> {
    data: &'a [u8],
    pos: usize,
    file: &'a str,
}

impl<'a> DataInput<'a> {
    /// A cursor at the start of `data`; `file` names the bytes in errors.
    pub fn new(data: &'a [u8], file: &'a str) -> Self {
        DataInput { data, pos: 0, file }
    }

    /// The file name used in errors.
    pub fn file(&self) -> &'a str {
        self.file
    }

    /// The current offset.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Moves to `pos` (clamped to the end).
    pub fn seek(&mut self, pos: usize) {
        self.pos = pos.min(self.data.len());
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// All the bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// A truncation error at the current offset.
    pub fn truncated(&self, what: &'static str) -> FlinkError {
        FlinkError::Truncated {
            at: Location::at(self.file, self.pos as u64),
            what,
        }
    }

    /// A malformed-field error at `offset`.
    pub fn malformed(
        &self,
        offset: usize,
        what: &'static str,
        detail: impl Into<String>,
    ) -> FlinkError {
        FlinkError::Malformed {
            at: Location::at(self.file, offset as u64),
            what,
            detail: detail.into(),
        }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FlinkError> {
        if self.remaining() < n {
            return Err(self.truncated(what));
        }
        let b = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], FlinkError> {
        let b = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, FlinkError> {
        Ok(self.array::<1>(what)?[0])
    }

    /// A Java `boolean` (any non-zero byte is true, as `readBoolean`).
    pub fn bool(&mut self, what: &'static str) -> Result<bool, FlinkError> {
        Ok(self.u8(what)? != 0)
    }

    /// A Java `short`, unsigned.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, FlinkError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    /// A Java `int`.
    pub fn i32(&mut self, what: &'static str) -> Result<i32, FlinkError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    /// A Java `long`.
    pub fn i64(&mut self, what: &'static str) -> Result<i64, FlinkError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// A Java `int` that counts something: non-negative, and at most `remaining / min_item_len` (so that
    /// nothing is allocated from a length that the bytes cannot hold).
    pub fn count(&mut self, what: &'static str, min_item_len: usize) -> Result<usize, FlinkError> {
        let at = self.pos;
        let n = self.i32(what)?;
        if n < 0 {
            return Err(self.malformed(at, what, format!("negative count {n}")));
        }
        let n = n as usize;
        if n.saturating_mul(min_item_len.max(1)) > self.remaining() && min_item_len > 0 {
            return Err(self.malformed(
                at,
                what,
                format!("count {n} exceeds the {} bytes left", self.remaining()),
            ));
        }
        Ok(n)
    }

    /// A Java `int` length followed by that many bytes.
    pub fn len_bytes(&mut self, what: &'static str) -> Result<&'a [u8], FlinkError> {
        let at = self.pos;
        let n = self.i32(what)?;
        if n < 0 {
            return Err(self.malformed(at, what, format!("negative length {n}")));
        }
        self.bytes(n as usize, what)
    }

    /// A Java `writeUTF` string: u16 byte length, then modified UTF-8.
    pub fn utf(&mut self, what: &'static str) -> Result<String, FlinkError> {
        let at = self.pos;
        let n = self.u16(what)? as usize;
        let b = self.bytes(n, what)?;
        decode_modified_utf8(b).map_err(|d| self.malformed(at, what, d))
    }
}

/// Decodes Java's modified UTF-8 (`C0 80` for U+0000, surrogates as separate 3-byte sequences).
pub fn decode_modified_utf8(b: &[u8]) -> Result<String, String> {
    if b.is_ascii() {
        return Ok(String::from_utf8_lossy(b).into_owned());
    }
    let mut units: Vec<u16> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let cont = |j: usize| -> Result<u16, String> {
            match b.get(j) {
                Some(&x) if x & 0xC0 == 0x80 => Ok((x & 0x3F) as u16),
                _ => Err(format!("bad continuation byte at {j}")),
            }
        };
        if c & 0x80 == 0 {
            units.push(c as u16);
            i += 1;
        } else if c & 0xE0 == 0xC0 {
            units.push(((c & 0x1F) as u16) << 6 | cont(i + 1)?);
            i += 2;
        } else if c & 0xF0 == 0xE0 {
            units.push(((c & 0x0F) as u16) << 12 | cont(i + 1)? << 6 | cont(i + 2)?);
            i += 3;
        } else {
            return Err(format!(
                "byte {c:#04x} at {i} starts no modified UTF-8 sequence"
            ));
        }
    }
    String::from_utf16(&units).map_err(|e| e.to_string())
}

/// Encodes `s` as Java's modified UTF-8 (without the length prefix).
pub fn encode_modified_utf8(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for u in s.encode_utf16() {
        match u {
            1..=0x7F => out.push(u as u8),
            0 | 0x80..=0x7FF => {
                out.push(0xC0 | (u >> 6) as u8);
                out.push(0x80 | (u & 0x3F) as u8);
            }
            _ => {
                out.push(0xE0 | (u >> 12) as u8);
                out.push(0x80 | ((u >> 6) & 0x3F) as u8);
                out.push(0x80 | (u & 0x3F) as u8);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modified_utf8_round_trips_nul_and_surrogates() {
        for s in ["", "abc", "\0", "ключ-é-€-😀"] {
            let b = encode_modified_utf8(s);
            assert_eq!(decode_modified_utf8(&b).unwrap(), s);
        }
        assert_eq!(encode_modified_utf8("\0"), vec![0xC0, 0x80]);
        assert_eq!(encode_modified_utf8("😀").len(), 6);
    }

    #[test]
    fn counts_are_bounded_by_the_bytes_present() {
        let data = [0u8, 0, 0, 100, 1, 2];
        let mut d = DataInput::new(&data, "t");
        assert!(d.count("n", 1).is_err());
        let data = [0xFFu8, 0xFF, 0xFF, 0xFF];
        assert!(DataInput::new(&data, "t").count("n", 0).is_err());
    }
}

//! The record log format shared by the write-ahead log and the manifest (`design/durability.md`).
//!
//! A file in format 2 starts with a 16-byte file header and continues with records (all integers
//! little-endian):
//!
//! ```text
//! file header:  magic: [u8; 8] | format version: u32 (= 2) | xxh3_64(magic | version) as u32
//! record:       len: u32 | header check: u32 | xxh3_64(payload): u64 | payload (len B)
//!               header check = xxh3_64(len | payload checksum) as u32
//! ```
//!
//! The header check makes a damaged length (or payload checksum) detectable, so only a record that a crash
//! cut off counts as a torn tail ([`Frame::Torn`]): a partial header, a valid header whose payload runs past
//! the end of the file, or (a file system that extended the file before writing it) nothing but zero bytes
//! from the record's start to the end. Anything else that is not a whole record is [`Frame::Damaged`].
//!
//! Files in format 1 have no file header and records `len: u32 | xxh3_64(payload): u64 | payload`. They are
//! still read, with format 1's weaker rule: a record whose length runs past the end of the file is taken as
//! a torn tail, so a damaged length in format 1 cannot be told from a crash.

use xxhash_rust::xxh3::xxh3_64;

use super::coding::{get_u32, get_u64, put_u32, put_u64};

/// Length of a format-2 record header (`len` + header check + payload checksum).
pub const HEADER_LEN: usize = 16;
/// Length of a format-1 record header (`len` + payload checksum).
pub const HEADER_LEN_V1: usize = 12;
/// Length of the file header of a format-2 file.
pub const FILE_HEADER_LEN: usize = 16;
/// The record log format version this code writes.
pub const FORMAT_VERSION: u32 = 2;
/// A file whose first eight bytes differ from a magic in at most this many bits is a damaged format-2
/// header, not a format-1 file (whose first eight bytes are a record's length and checksum).
const MAGIC_DISTANCE: u32 = 8;

/// Which log a file is; selects the magic of its file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    /// A write-ahead log (`NNNNNN.log`).
    Wal,
    /// A manifest (`MANIFEST-NNNNNN`).
    Manifest,
}

impl LogKind {
    /// The first eight bytes of a format-2 file of this kind.
    pub fn magic(self) -> [u8; 8] {
        match self {
            LogKind::Wal => *b"KSTWAL\0\0",
            LogKind::Manifest => *b"KSTMAN\0\0",
        }
    }
}

/// The record framing a file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Format 1: no file header, records without a header check.
    V1,
    /// Format 2: a file header, records with a header check.
    V2,
}

/// The file header of a format-2 file of `kind`.
pub fn file_header(kind: LogKind) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&kind.magic());
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    let check = xxh3_64(&h[..12]) as u32;
    h[12..].copy_from_slice(&check.to_le_bytes());
    h
}

/// Reads the file header of `buf`, a whole file of `kind`: the format and the offset of the first record,
/// or what is wrong with the header. A partial header that matches the start of a valid one, or a file of
/// zero bytes only, is a format-2 file cut off before its header was complete: reading its first record at
/// offset 0 then finds a torn tail (an empty file: the end). A file whose first bytes are far from the
/// magic is format 1.
pub fn read_file_header(buf: &[u8], kind: LogKind) -> Result<(Format, usize), String> {
    let expect = file_header(kind);
    let zeros = buf.iter().all(|&b| b == 0);
    if (buf.len() < FILE_HEADER_LEN && expect.starts_with(buf)) || zeros {
        // Read from offset 0, the rest of the file is a torn record (or the file is empty).
        return Ok((Format::V2, 0));
    }
    let magic = kind.magic();
    let distance: u32 = buf
        .iter()
        .zip(magic.iter())
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    if buf.len() >= magic.len() && distance == 0 {
        let version = get_u32(buf, 8).unwrap_or(0);
        let check = get_u32(buf, 12);
        if buf.len() < FILE_HEADER_LEN || check != Some(xxh3_64(&buf[..12]) as u32) {
            return Err("file header check mismatch".into());
        }
        if version != FORMAT_VERSION {
            return Err(format!("unsupported record log format version {version}"));
        }
        return Ok((Format::V2, FILE_HEADER_LEN));
    }
    if buf.len() >= magic.len() && distance <= MAGIC_DISTANCE {
        return Err(format!(
            "damaged file header (magic differs in {distance} bits)"
        ));
    }
    if buf.len() < magic.len() {
        return Err(format!(
            "file of {} bytes is neither a format-2 header nor a format-1 record",
            buf.len()
        ));
    }
    Ok((Format::V1, 0))
}

/// The record checksum: xxh3-64 of the payload.
#[inline]
pub fn checksum(payload: &[u8]) -> u64 {
    xxh3_64(payload)
}

/// The header check of a format-2 record: the low 32 bits of xxh3-64 over `len | payload checksum`.
#[inline]
fn header_check(len: u32, sum: u64) -> u32 {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&len.to_le_bytes());
    b[4..].copy_from_slice(&sum.to_le_bytes());
    xxh3_64(&b) as u32
}

/// Frames `payload` as one format-2 record (the caller keeps payloads below 4 GiB).
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    let len = payload.len() as u32;
    let sum = checksum(payload);
    put_u32(&mut out, len);
    put_u32(&mut out, header_check(len, sum));
    put_u64(&mut out, sum);
    out.extend_from_slice(payload);
    out
}

/// The outcome of reading one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A record's payload and the offset after the record.
    Record(&'a [u8], usize),
    /// The end of the file, exactly at a record boundary.
    End,
    /// A record cut off by a crash at the end of the file (see the module doc).
    Torn,
    /// Bytes that are neither a record nor a torn tail: what is wrong.
    Damaged(&'static str),
}

/// Reads the record starting at offset `pos` of `buf` (a whole file) in `format`.
pub fn read_frame(buf: &[u8], pos: usize, format: Format) -> Frame<'_> {
    let Some(rest) = buf.get(pos..) else {
        return Frame::Damaged("record offset beyond the end of the file");
    };
    if rest.is_empty() {
        return Frame::End;
    }
    let header_len = match format {
        Format::V1 => HEADER_LEN_V1,
        Format::V2 => HEADER_LEN,
    };
    if rest.len() < header_len {
        return Frame::Torn;
    }
    let len = get_u32(rest, 0).unwrap_or(0);
    let sum = match format {
        Format::V1 => get_u64(rest, 4).unwrap_or(0),
        Format::V2 => {
            let sum = get_u64(rest, 8).unwrap_or(0);
            if get_u32(rest, 4) != Some(header_check(len, sum)) {
                return if rest.iter().all(|&b| b == 0) {
                    Frame::Torn
                } else {
                    Frame::Damaged("record header check mismatch (damaged length or checksum)")
                };
            }
            sum
        }
    };
    let Some(payload) = rest.get(header_len..).and_then(|p| p.get(..len as usize)) else {
        return Frame::Torn;
    };
    if checksum(payload) != sum {
        return Frame::Damaged("record payload checksum mismatch");
    }
    Frame::Record(payload, pos + header_len + payload.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = file_header(LogKind::Wal).to_vec();
        for p in payloads {
            out.extend_from_slice(&frame(p));
        }
        out
    }

    fn read_all(buf: &[u8]) -> (Vec<Vec<u8>>, Frame<'_>) {
        let (format, mut pos) = read_file_header(buf, LogKind::Wal).unwrap();
        let mut got = Vec::new();
        loop {
            match read_frame(buf, pos, format) {
                Frame::Record(p, next) => {
                    got.push(p.to_vec());
                    pos = next;
                }
                other => return (got, other),
            }
        }
    }

    #[test]
    fn records_read_back_to_a_clean_end() {
        let buf = log(&[b"first", b"", b"third"]);
        assert_eq!(&buf[16..20], &5u32.to_le_bytes());
        assert_eq!(&buf[24..32], &xxh3_64(b"first").to_le_bytes());
        let (got, end) = read_all(&buf);
        assert_eq!(got, [&b"first"[..], b"", b"third"]);
        assert_eq!(end, Frame::End);
        assert_eq!(
            read_frame(&buf, usize::MAX - 3, Format::V2),
            Frame::Damaged("record offset beyond the end of the file")
        );
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail() {
        let buf = log(&[b"first", b"second record"]);
        let last = FILE_HEADER_LEN + HEADER_LEN + 5;
        for cut in last + 1..buf.len() {
            let (got, end) = read_all(&buf[..cut]);
            assert_eq!(got.len(), 1, "cut at {cut}");
            assert_eq!(end, Frame::Torn, "cut at {cut}");
        }
        let mut zeros = buf[..last].to_vec();
        zeros.extend_from_slice(&[0u8; 40]);
        assert_eq!(read_all(&zeros).1, Frame::Torn);
    }

    #[test]
    fn every_bit_flip_of_a_record_is_damage_never_a_torn_tail() {
        let buf = log(&[b"first", b"second record", b"third"]);
        for byte in FILE_HEADER_LEN..buf.len() {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[byte] ^= 1 << bit;
                let (_, end) = read_all(&b);
                assert!(
                    matches!(end, Frame::Damaged(_)),
                    "byte {byte} bit {bit}: {end:?}"
                );
            }
        }
    }

    #[test]
    fn every_bit_flip_of_the_file_header_is_reported() {
        let buf = log(&[b"first"]);
        for byte in 0..FILE_HEADER_LEN {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[byte] ^= 1 << bit;
                assert!(
                    read_file_header(&b, LogKind::Wal).is_err(),
                    "byte {byte} bit {bit}"
                );
            }
        }
        assert!(read_file_header(&buf, LogKind::Manifest).is_err());
    }

    #[test]
    fn a_partial_or_zeroed_file_header_is_a_torn_tail_and_format_1_files_are_recognised() {
        let h = file_header(LogKind::Wal);
        for cut in 0..FILE_HEADER_LEN {
            assert_eq!(
                read_file_header(&h[..cut], LogKind::Wal),
                Ok((Format::V2, 0))
            );
            let end = if cut == 0 { Frame::End } else { Frame::Torn };
            assert_eq!(read_frame(&h[..cut], 0, Format::V2), end);
        }
        for len in [1, 16, 100] {
            let zeros = vec![0u8; len];
            assert_eq!(read_file_header(&zeros, LogKind::Wal), Ok((Format::V2, 0)));
            assert_eq!(read_frame(&zeros, 0, Format::V2), Frame::Torn);
        }
        let mut v1 = Vec::new();
        put_u32(&mut v1, 5);
        put_u64(&mut v1, checksum(b"first"));
        v1.extend_from_slice(b"first");
        assert_eq!(read_file_header(&v1, LogKind::Wal), Ok((Format::V1, 0)));
        assert_eq!(read_frame(&v1, 0, Format::V1), Frame::Record(b"first", 17));
        assert_eq!(read_frame(&v1[..16], 0, Format::V1), Frame::Torn);
        let mut bad = v1.clone();
        bad[16] ^= 1;
        assert_eq!(
            read_frame(&bad, 0, Format::V1),
            Frame::Damaged("record payload checksum mismatch")
        );
    }
}

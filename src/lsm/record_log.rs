//! The record log format shared by the write-ahead log and the manifest: a file is a sequence of checksummed
//! records, each framed as (all integers little-endian)
//!
//! ```text
//! +------------+------------------------+-------------------+
//! | len: u32   | xxh3_64(payload): u64  | payload (len B)   |
//! +------------+------------------------+-------------------+
//! ```
//!
//! Records are appended whole; a crash can leave the last one cut short, which readers see as the end of the
//! log ([`Frame::End`]). What a complete record with a bad checksum means is the reader's decision: the WAL
//! stops replay there, the manifest reports corruption.

use xxhash_rust::xxh3::xxh3_64;

use super::coding::{get_u32, get_u64, put_u32, put_u64};

/// Length of a record's header (`len` + checksum).
pub const HEADER_LEN: usize = 12;

/// The record checksum: xxh3-64 of the payload.
#[inline]
pub fn checksum(payload: &[u8]) -> u64 {
    xxh3_64(payload)
}

/// Frames `payload` as one record (the caller keeps payloads below 4 GiB).
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    put_u32(&mut out, payload.len() as u32);
    put_u64(&mut out, checksum(payload));
    out.extend_from_slice(payload);
    out
}

/// The outcome of reading one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A record's payload and the offset after the record.
    Record(&'a [u8], usize),
    /// End of data, or a record cut short at the end.
    End,
    /// A complete record with a bad checksum.
    BadChecksum,
}

/// Reads the record starting at offset `pos` of `buf`.
pub fn read_frame(buf: &[u8], pos: usize) -> Frame<'_> {
    let (Some(len), Some(sum)) = (
        get_u32(buf, pos),
        pos.checked_add(4).and_then(|p| get_u64(buf, p)),
    ) else {
        return Frame::End;
    };
    let start = pos + HEADER_LEN;
    let Some(payload) = start
        .checked_add(len as usize)
        .and_then(|end| buf.get(start..end))
    else {
        return Frame::End;
    };
    if checksum(payload) != sum {
        return Frame::BadChecksum;
    }
    Frame::Record(payload, start + payload.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_a_cut_or_damaged_tail_is_told_apart() {
        let mut log = frame(b"first");
        log.extend_from_slice(&frame(b""));
        log.extend_from_slice(&frame(b"third"));
        assert_eq!(&log[..4], &5u32.to_le_bytes());
        assert_eq!(&log[4..12], &xxh3_64(b"first").to_le_bytes());
        let mut pos = 0;
        let mut got = Vec::new();
        while let Frame::Record(p, next) = read_frame(&log, pos) {
            got.push(p.to_vec());
            pos = next;
        }
        assert_eq!(got, [&b"first"[..], b"", b"third"]);
        assert_eq!(pos, log.len());
        assert_eq!(read_frame(&log[..log.len() - 1], 29), Frame::End);
        let mut bad = log.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(read_frame(&bad, 29), Frame::BadChecksum);
        assert_eq!(read_frame(&log, usize::MAX - 3), Frame::End);
    }
}

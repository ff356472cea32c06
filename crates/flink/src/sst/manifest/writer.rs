//! Writing a `MANIFEST` as RocksDB does, for tests, benchmarks and fuzz seeds that build a RocksDB
//! directory without RocksDB: records fragmented over the log's blocks, and version edits in the tags that
//! the parent module reads.

use super::{
    LiveFile, COLUMN_FAMILY, COLUMN_FAMILY_ADD, COLUMN_FAMILY_DROP, COMPARATOR,
    CUSTOM_EPOCH_NUMBER, CUSTOM_TERMINATE, DELETED_FILE, FIRST, FULL, HEADER, IN_ATOMIC_GROUP,
    LAST, LAST_SEQUENCE, LOG_BLOCK_SIZE, MASK_DELTA, MIDDLE, NEW_FILE4, NEXT_FILE_NUMBER,
};
use crate::snappy::crc32c;

/// Writes a `MANIFEST` as RocksDB's `log::Writer` and `VersionEdit::EncodeTo` do, for tests and benchmarks
/// that build a RocksDB directory without RocksDB.
#[derive(Debug, Default)]
pub struct ManifestWriter {
    out: Vec<u8>,
}

fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_slice(s: &[u8], out: &mut Vec<u8>) {
    put_varint(s.len() as u64, out);
    out.extend_from_slice(s);
}

/// An internal key: `user key | u64 LE (seqno << 8 | value type)`.
pub fn internal_key(user_key: &[u8], seqno: u64, value_type: u8) -> Vec<u8> {
    let mut k = user_key.to_vec();
    k.extend_from_slice(&((seqno << 8) | u64::from(value_type)).to_le_bytes());
    k
}

/// A version edit for [`ManifestWriter::edit`].
#[derive(Debug, Default, Clone)]
pub struct EditSpec {
    /// The column family (0 = default).
    pub column_family: u32,
    /// Add the column family with this name.
    pub add_column_family: Option<String>,
    /// Drop the column family.
    pub drop_column_family: bool,
    /// Files deleted: (level, number).
    pub deleted: Vec<(u32, u64)>,
    /// Files added.
    pub added: Vec<LiveFile>,
    /// Next file number and last sequence, if set.
    pub next_file_and_last_sequence: Option<(u64, u64)>,
    /// Part of an atomic group with this many edits after it.
    pub atomic_group_remaining: Option<u32>,
}

impl ManifestWriter {
    /// An empty log.
    pub fn new() -> Self {
        ManifestWriter::default()
    }

    /// Appends one logical record, fragmented over 32 KiB blocks as `log::Writer::AddRecord` does.
    pub fn record(&mut self, mut payload: &[u8]) {
        let mut begin = true;
        loop {
            let left = LOG_BLOCK_SIZE - self.out.len() % LOG_BLOCK_SIZE;
            if left < HEADER {
                self.out.resize(self.out.len() + left, 0);
                continue;
            }
            let avail = left - HEADER;
            let n = payload.len().min(avail);
            let end = n == payload.len();
            let ty = match (begin, end) {
                (true, true) => FULL,
                (true, false) => FIRST,
                (false, true) => LAST,
                (false, false) => MIDDLE,
            };
            let mut body = vec![ty];
            body.extend_from_slice(&payload[..n]);
            let crc = crc32c(&body).rotate_right(15).wrapping_add(MASK_DELTA);
            self.out.extend_from_slice(&crc.to_le_bytes());
            self.out.extend_from_slice(&(n as u16).to_le_bytes());
            self.out.extend_from_slice(&body);
            payload = &payload[n..];
            begin = false;
            if end {
                break;
            }
        }
    }

    /// Appends one version edit.
    pub fn edit(&mut self, e: &EditSpec) {
        let mut b = Vec::new();
        if e.column_family != 0 {
            put_varint(u64::from(COLUMN_FAMILY), &mut b);
            put_varint(u64::from(e.column_family), &mut b);
        }
        if let Some(name) = &e.add_column_family {
            put_varint(u64::from(COLUMN_FAMILY_ADD), &mut b);
            put_slice(name.as_bytes(), &mut b);
        }
        if e.drop_column_family {
            put_varint(u64::from(COLUMN_FAMILY_DROP), &mut b);
        }
        if let Some((next, last)) = e.next_file_and_last_sequence {
            put_varint(u64::from(NEXT_FILE_NUMBER), &mut b);
            put_varint(next, &mut b);
            put_varint(u64::from(LAST_SEQUENCE), &mut b);
            put_varint(last, &mut b);
        }
        for (level, number) in &e.deleted {
            put_varint(u64::from(DELETED_FILE), &mut b);
            put_varint(u64::from(*level), &mut b);
            put_varint(*number, &mut b);
        }
        for f in &e.added {
            put_varint(u64::from(NEW_FILE4), &mut b);
            put_varint(u64::from(f.level), &mut b);
            put_varint(f.number, &mut b);
            put_varint(f.size, &mut b);
            put_slice(&f.smallest, &mut b);
            put_slice(&f.largest, &mut b);
            put_varint(f.smallest_seqno, &mut b);
            put_varint(f.largest_seqno, &mut b);
            let mut epoch = Vec::new();
            put_varint(f.epoch, &mut epoch);
            put_varint(u64::from(CUSTOM_EPOCH_NUMBER), &mut b);
            put_slice(&epoch, &mut b);
            put_varint(u64::from(CUSTOM_TERMINATE), &mut b);
        }
        if let Some(r) = e.atomic_group_remaining {
            put_varint(u64::from(IN_ATOMIC_GROUP), &mut b);
            put_varint(u64::from(r), &mut b);
        }
        self.record(&b);
    }

    /// Appends the first edit of a new database: the comparator.
    pub fn comparator(&mut self, name: &str) {
        let mut b = Vec::new();
        put_varint(u64::from(COMPARATOR), &mut b);
        put_slice(name.as_bytes(), &mut b);
        self.record(&b);
    }

    /// The bytes written.
    pub fn finish(self) -> Vec<u8> {
        self.out
    }
}

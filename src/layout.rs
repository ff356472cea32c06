//! The byte layout of entries: Flink's RocksDB working-state layout, exactly (`design/entry-layout.md`).
//!
//! ```text
//! entry key   = KG | K | [lenK] | NS | [lenNS] | [UK]
//! value       = V                         (Value, Reducing, Aggregating)
//!             = e1 0x2C e2 0x2C ... en    (List)
//!             = nullflag | V              (Map: 00 = present, 01 = null)
//! timer key   = KG | (TS ^ i64::MIN) BE | K | NS      (value empty)
//! ```
//!
//! `lenK` and `lenNS` are written only when both the key and the namespace serializer are variable-length
//! ("ambiguous keys"), as little-endian base-256 without continuation bits.

use crate::keygroup::{write_key_group_prefix, KeyGroup};

/// The list element delimiter of Flink's `ListDelimitedSerializer` / RocksDB's `stringappendtest`.
pub const LIST_DELIMITER: u8 = 0x2C;
/// Map value flag: the value is present.
pub const MAP_VALUE_PRESENT: u8 = 0x00;
/// Map value flag: the value is null.
pub const MAP_VALUE_NULL: u8 = 0x01;

/// Whether composite keys carry length bytes: true only when both serializers are variable-length.
pub fn is_ambiguous_key_possible(
    key_fixed_len: Option<usize>,
    ns_fixed_len: Option<usize>,
) -> bool {
    key_fixed_len.is_none() && ns_fixed_len.is_none()
}

/// Flink's `writeVariableIntBytes`: little-endian base-256, at least one byte.
pub fn write_variable_int_bytes(out: &mut Vec<u8>, mut v: u32) {
    loop {
        out.push(v as u8);
        v >>= 8;
        if v == 0 {
            break;
        }
    }
}

/// How many bytes [`write_variable_int_bytes`] writes for `v`.
pub fn variable_int_len(mut v: u32) -> usize {
    let mut n = 1;
    while v >= 0x100 {
        v >>= 8;
        n += 1;
    }
    n
}

/// Builds entry keys into a reusable buffer: `KG | K | [lenK]`, then namespace and user key on top.
#[derive(Debug, Clone)]
pub struct CompositeKeyBuilder {
    buf: Vec<u8>,
    prefix_len: usize,
    ambiguous: bool,
    after_key: usize,
    after_ns: usize,
}

impl CompositeKeyBuilder {
    /// A builder for a job with key-group prefix length `prefix_len` (1 or 2).
    pub fn new(prefix_len: usize, ambiguous: bool) -> Self {
        CompositeKeyBuilder {
            buf: Vec::with_capacity(64),
            prefix_len,
            ambiguous,
            after_key: 0,
            after_ns: 0,
        }
    }

    /// Whether length bytes are written.
    pub fn is_ambiguous(&self) -> bool {
        self.ambiguous
    }

    /// Sets the key part: `KG | K | [lenK]` where `key` is the serialized key.
    pub fn set_key(&mut self, kg: KeyGroup, key: &[u8]) {
        self.buf.clear();
        write_key_group_prefix(&mut self.buf, kg, self.prefix_len);
        self.buf.extend_from_slice(key);
        if self.ambiguous {
            write_variable_int_bytes(&mut self.buf, key.len() as u32);
        }
        self.after_key = self.buf.len();
        self.after_ns = self.after_key;
    }

    /// Sets the namespace part after the key, returning `KG | K | [lenK] | NS | [lenNS]`.
    pub fn set_namespace(&mut self, ns: &[u8]) -> &[u8] {
        self.buf.truncate(self.after_key);
        self.buf.extend_from_slice(ns);
        if self.ambiguous {
            write_variable_int_bytes(&mut self.buf, ns.len() as u32);
        }
        self.after_ns = self.buf.len();
        &self.buf
    }

    /// `KG | K | [lenK] | NS | [lenNS] | UK` for a map user key (after [`set_namespace`](Self::set_namespace)).
    pub fn with_user_key(&mut self, user_key: &[u8]) -> &[u8] {
        self.buf.truncate(self.after_ns);
        self.buf.extend_from_slice(user_key);
        &self.buf
    }

    /// The key-and-namespace bytes built last.
    pub fn key_and_namespace(&self) -> &[u8] {
        &self.buf[..self.after_ns]
    }

    /// The key part built last (`KG | K | [lenK]`).
    pub fn key_part(&self) -> &[u8] {
        &self.buf[..self.after_key]
    }
}

/// Appends a list element (already serialized) to a joined list value, with the delimiter if needed.
pub fn list_append(list: &mut Vec<u8>, element: &[u8]) {
    if !list.is_empty() {
        list.push(LIST_DELIMITER);
    }
    list.extend_from_slice(element);
}

/// Builds a timer entry key: `KG | (ts ^ i64::MIN) BE | K | NS`.
pub fn timer_key(
    out: &mut Vec<u8>,
    kg: KeyGroup,
    prefix_len: usize,
    timestamp: i64,
    key: &[u8],
    ns: &[u8],
) {
    write_key_group_prefix(out, kg, prefix_len);
    out.extend_from_slice(&((timestamp ^ i64::MIN) as u64).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_int_bytes_match_flink() {
        let mut v = Vec::new();
        write_variable_int_bytes(&mut v, 0);
        assert_eq!(v, [0]);
        v.clear();
        write_variable_int_bytes(&mut v, 300);
        assert_eq!(v, [0x2c, 0x01]);
        assert_eq!(variable_int_len(300), 2);
    }

    #[test]
    fn composite_key_and_split_round_trip() {
        // From the Flink fixture DUMP.txt: key 39 (Long) in key group 1, void namespace.
        let mut b = CompositeKeyBuilder::new(1, false);
        b.set_key(1, &39i64.to_be_bytes());
        assert_eq!(b.set_namespace(&[0]), &hex("01000000000000002700")[..]);
        assert_eq!(
            b.with_user_key(&hex("036530")),
            &hex("01000000000000002700036530")[..]
        );
        let mut a = CompositeKeyBuilder::new(2, true);
        a.set_key(300, b"abc");
        let k = a.set_namespace(b"xy").to_vec();
        assert_eq!(k, [&[1u8, 44][..], b"abc", &[3], b"xy", &[2]].concat());
    }

    #[test]
    fn timer_key_matches_flink_fixture() {
        let mut out = Vec::new();
        timer_key(&mut out, 1, 1, 1_000_013, &13i64.to_be_bytes(), &[0]);
        assert_eq!(out, hex("0180000000000f424d000000000000000d00"));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}

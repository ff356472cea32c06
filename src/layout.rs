//! The byte layout of entries: Flink's RocksDB working-state layout, exactly (`flink-formats.md` §2).
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

/// A parsed entry key: borrowed slices of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryKeyParts<'a> {
    /// The key group from the prefix.
    pub key_group: KeyGroup,
    /// The serialized key.
    pub key: &'a [u8],
    /// The serialized namespace.
    pub namespace: &'a [u8],
    /// The user key of a map entry (empty for other kinds).
    pub user_key: &'a [u8],
}

/// Splits `entry_key` given how long the key and namespace are: each is either fixed (`Some(len)`) or found
/// from the length bytes (ambiguous layout) or, for the last part, by what remains. For map entries the
/// namespace length must be known (fixed or ambiguous) so the user key can be found.
///
/// `key_len` / `ns_len` are the *written* lengths (the void namespace writes 1 byte although it reports 0).
pub fn split_entry_key(
    entry_key: &[u8],
    prefix_len: usize,
    key_len: Option<usize>,
    ns_len: Option<usize>,
    is_map: bool,
) -> Option<EntryKeyParts<'_>> {
    let kg = crate::keygroup::read_key_group_prefix(entry_key, prefix_len)?;
    let rest = &entry_key[prefix_len..];
    let ambiguous = key_len.is_none() && ns_len.is_none();
    if ambiguous {
        return split_ambiguous(kg, rest, is_map);
    }
    let (key, rest) = match key_len {
        Some(n) => (rest.get(..n)?, &rest[n..]),
        None => {
            // Key variable, namespace fixed: the namespace (and user key) follow the key; without a user key
            // the namespace is the last `ns_len` bytes.
            let n = ns_len?;
            if is_map {
                return None;
            }
            let split = rest.len().checked_sub(n)?;
            (&rest[..split], &rest[split..])
        }
    };
    let (namespace, user_key) = match ns_len {
        Some(n) => (rest.get(..n)?, &rest[n..]),
        None if !is_map => (rest, &rest[rest.len()..]),
        None => return None,
    };
    Some(EntryKeyParts {
        key_group: kg,
        key,
        namespace,
        user_key,
    })
}

/// Ambiguous layout: `K lenK NS lenNS [UK]`. The reader does not know where K ends without the length, and
/// the length follows K. Flink's reader uses its own knowledge of K's length; we search for the unique split
/// at which the length bytes agree, preferring the shortest key.
fn split_ambiguous(kg: KeyGroup, rest: &[u8], is_map: bool) -> Option<EntryKeyParts<'_>> {
    for klen in 0..=rest.len() {
        let lk = variable_int_len(klen as u32);
        if klen + lk > rest.len() || !var_int_matches(&rest[klen..klen + lk], klen) {
            continue;
        }
        let after_k = &rest[klen + lk..];
        for nlen in 0..=after_k.len() {
            let ln = variable_int_len(nlen as u32);
            if nlen + ln > after_k.len() || !var_int_matches(&after_k[nlen..nlen + ln], nlen) {
                continue;
            }
            let user_key = &after_k[nlen + ln..];
            if !is_map && !user_key.is_empty() {
                continue;
            }
            return Some(EntryKeyParts {
                key_group: kg,
                key: &rest[..klen],
                namespace: &after_k[..nlen],
                user_key,
            });
        }
    }
    None
}

fn var_int_matches(bytes: &[u8], v: usize) -> bool {
    let mut x = v as u64;
    for b in bytes {
        if *b != x as u8 {
            return false;
        }
        x >>= 8;
    }
    x == 0
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
        let map_key = hex("01000000000000002700036530");
        let parts = split_entry_key(&map_key, 1, Some(8), Some(1), true).unwrap();
        assert_eq!(parts.key_group, 1);
        assert_eq!(parts.key, &39i64.to_be_bytes());
        assert_eq!(parts.namespace, &[0]);
        assert_eq!(parts.user_key, &hex("036530")[..]);

        let mut a = CompositeKeyBuilder::new(2, true);
        a.set_key(300, b"abc");
        let k = a.set_namespace(b"xy").to_vec();
        assert_eq!(k, [&[1u8, 44][..], b"abc", &[3], b"xy", &[2]].concat());
        let parts = split_entry_key(&k, 2, None, None, false).unwrap();
        assert_eq!((parts.key, parts.namespace), (&b"abc"[..], &b"xy"[..]));
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

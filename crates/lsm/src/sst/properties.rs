//! Encoding of the properties block.
//!
//! ```text
//! properties := smallest_len: varint | smallest | largest_len: varint | largest
//!             | entries | merge_operands | tombstones | range_tombstones
//!             | raw_key_bytes | raw_value_bytes | min_seqno | max_seqno      (varints)
//!             | user_count: varint | (name_len: varint | name (UTF-8) | value_len: varint | value)*
//! ```

use super::SstProperties;
use crate::coding::{put_len_prefixed_varint, put_varint64, ByteReader, DecodeError};

/// Encodes properties.
pub fn encode(p: &SstProperties) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + p.smallest.len() + p.largest.len());
    put_len_prefixed_varint(&mut out, &p.smallest);
    put_len_prefixed_varint(&mut out, &p.largest);
    for v in [
        p.entries,
        p.merge_operands,
        p.tombstones,
        p.range_tombstones,
        p.raw_key_bytes,
        p.raw_value_bytes,
        p.min_seqno,
        p.max_seqno,
    ] {
        put_varint64(&mut out, v);
    }
    put_varint64(&mut out, p.user.len() as u64);
    for (name, value) in &p.user {
        put_len_prefixed_varint(&mut out, name.as_bytes());
        put_len_prefixed_varint(&mut out, value);
    }
    out
}

/// Decodes properties; every length is checked against the remaining bytes before anything is allocated.
pub fn decode(data: &[u8]) -> Result<SstProperties, DecodeError> {
    let mut r = ByteReader::new(data);
    let smallest = r.len_prefixed_varint()?.to_vec();
    let largest = r.len_prefixed_varint()?.to_vec();
    let mut nums = [0u64; 8];
    for n in nums.iter_mut() {
        *n = r.varint64()?;
    }
    let count = r.varint64()?;
    let mut user = Vec::new();
    for i in 0..count {
        let name = std::str::from_utf8(r.len_prefixed_varint()?)
            .map_err(|_| DecodeError::Entry {
                what: "user property name is not UTF-8",
                index: i,
            })?
            .to_string();
        let value = r.len_prefixed_varint()?.to_vec();
        user.push((name, value));
    }
    r.finish("properties")?;
    let [entries, merge_operands, tombstones, range_tombstones, raw_key_bytes, raw_value_bytes, min_seqno, max_seqno] =
        nums;
    Ok(SstProperties {
        smallest,
        largest,
        entries,
        merge_operands,
        tombstones,
        range_tombstones,
        raw_key_bytes,
        raw_value_bytes,
        min_seqno,
        max_seqno,
        user,
    })
}

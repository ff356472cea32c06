//! Encoding of the properties block.
//!
//! ```text
//! properties := smallest_len: varint | smallest | largest_len: varint | largest
//!             | entries | merge_operands | tombstones | range_tombstones
//!             | raw_key_bytes | raw_value_bytes | min_seqno | max_seqno      (varints)
//!             | user_count: varint | (name_len: varint | name (UTF-8) | value_len: varint | value)*
//! ```

use super::format::{get_varint, get_varint_usize, put_varint};
use super::SstProperties;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Encodes properties.
pub fn encode(p: &SstProperties) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + p.smallest.len() + p.largest.len());
    put_bytes(&mut out, &p.smallest);
    put_bytes(&mut out, &p.largest);
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
        put_varint(&mut out, v);
    }
    put_varint(&mut out, p.user.len() as u64);
    for (name, value) in &p.user {
        put_bytes(&mut out, name.as_bytes());
        put_bytes(&mut out, value);
    }
    out
}

/// Decodes properties; every length is checked against the remaining bytes before anything is allocated.
pub fn decode(data: &[u8]) -> Result<SstProperties, String> {
    let mut pos = 0usize;
    let mut bytes = |what: &str| -> Result<&[u8], String> {
        let (len, p) = get_varint_usize(data, pos)
            .ok_or_else(|| format!("properties: bad length of {what}"))?;
        let b = p
            .checked_add(len)
            .and_then(|end| data.get(p..end))
            .ok_or_else(|| format!("properties: {what} ({len} bytes) overruns the block"))?;
        pos = p + len;
        Ok(b)
    };
    let smallest = bytes("smallest key")?.to_vec();
    let largest = bytes("largest key")?.to_vec();
    let mut nums = [0u64; 8];
    for n in nums.iter_mut() {
        let (v, p) = get_varint(data, pos).ok_or("properties: bad counter")?;
        *n = v;
        pos = p;
    }
    let (count, p) = get_varint(data, pos).ok_or("properties: bad user property count")?;
    pos = p;
    let mut user = Vec::new();
    for i in 0..count {
        let mut bytes = |what: &str| -> Result<&[u8], String> {
            let (len, p) = get_varint_usize(data, pos)
                .ok_or_else(|| format!("properties: bad length of {what} {i}"))?;
            let b = p
                .checked_add(len)
                .and_then(|end| data.get(p..end))
                .ok_or_else(|| format!("properties: {what} {i} overruns the block"))?;
            pos = p + len;
            Ok(b)
        };
        let name = std::str::from_utf8(bytes("user property name")?)
            .map_err(|_| format!("properties: user property name {i} is not UTF-8"))?
            .to_string();
        let value = bytes("user property value")?.to_vec();
        user.push((name, value));
    }
    if pos != data.len() {
        return Err(format!("properties: {} trailing bytes", data.len() - pos));
    }
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

//! The whole-file bloom filter over user keys and/or key prefixes.
//!
//! ```text
//! filter    := bits: [u8; n] | num_probes: u8        (n >= 8; bit i is bits[i / 8] >> (i % 8) & 1)
//! filter_v3 := flags: u8 | name_len: varint | name | filter      (format version 3)
//! ```
//! Format versions 1 and 2 hold whole user keys only. Version 3 says what the bits hold: `flags` bit 0
//! ([`FILTER_WHOLE_KEYS`]) every distinct user key, bit 1 ([`FILTER_PREFIXES`]) the prefix of every entry
//! under the extractor `name` (present, non-empty, iff bit 1 is set).
//! A key's 64-bit xxh3 hash `h` yields probe `j` (0-based) at `fastrange(h + j * delta, n * 8)` with
//! `delta = h.rotate_left(21) | 1` (double hashing; `fastrange(x, m) = (x * m) >> 64` on 128 bits).

use xxhash_rust::xxh3::xxh3_64;

use crate::coding::{get_varint_usize, put_varint64, DecodeError};

/// Format-3 filter flag: the filter holds every distinct user key of the file.
pub const FILTER_WHOLE_KEYS: u8 = 1;
/// Format-3 filter flag: the filter holds the prefix of every entry of the file under the named extractor.
pub const FILTER_PREFIXES: u8 = 2;
/// Longest extractor name a filter records.
pub const MAX_NAME_LEN: usize = 1024;

/// The header of a format-3 filter block.
pub fn encode_v3_header(out: &mut Vec<u8>, flags: u8, name: &[u8]) {
    out.push(flags);
    put_varint64(out, name.len() as u64);
    out.extend_from_slice(name);
}

/// Splits a format-3 filter block into `(flags, extractor name, bloom bytes)`, validating all three.
pub fn parse_v3(payload: &[u8]) -> Result<(u8, &[u8], &[u8]), DecodeError> {
    let (&flags, _) = payload
        .split_first()
        .ok_or(DecodeError::Truncated { offset: 0, need: 1 })?;
    if flags == 0 || flags & !(FILTER_WHOLE_KEYS | FILTER_PREFIXES) != 0 {
        return Err(DecodeError::BadTag {
            what: "filter flags",
            tag: flags,
            offset: 0,
        });
    }
    let (len, p) = get_varint_usize(payload, 1).ok_or(DecodeError::BadVarint { offset: 1 })?;
    if len > MAX_NAME_LEN {
        return Err(DecodeError::TooLarge {
            what: "filter extractor name length",
            value: len as u64,
            limit: MAX_NAME_LEN as u64,
        });
    }
    let name = p
        .checked_add(len)
        .and_then(|end| payload.get(p..end))
        .ok_or(DecodeError::Truncated {
            offset: p as u64,
            need: len as u64,
        })?;
    let has_prefixes = flags & FILTER_PREFIXES != 0;
    if has_prefixes == name.is_empty() {
        return Err(DecodeError::Invalid(
            "filter flags disagree with the presence of an extractor name",
        ));
    }
    let bits = payload.get(p + len..).unwrap_or_default();
    validate(bits)?;
    Ok((flags, name, bits))
}

/// Hash of a user key as stored in the filter.
#[inline]
pub fn key_hash(user_key: &[u8]) -> u64 {
    xxh3_64(user_key)
}

#[inline]
fn probe(h: u64, j: u64, nbits: u64) -> u64 {
    let delta = h.rotate_left(21) | 1;
    let x = h.wrapping_add(j.wrapping_mul(delta));
    ((u128::from(x) * u128::from(nbits)) >> 64) as u64
}

/// Number of probes for `bits_per_key` (≈ bits · ln 2, clamped to 1..=30).
pub fn num_probes(bits_per_key: u32) -> u8 {
    ((bits_per_key as f64 * 0.69).round() as u32).clamp(1, 30) as u8
}

/// Builds the filter bytes for key hashes.
pub fn build(hashes: &[u64], bits_per_key: u32) -> Vec<u8> {
    let nbits = (hashes.len() as u64)
        .saturating_mul(u64::from(bits_per_key))
        .max(64)
        .div_ceil(8)
        * 8;
    let k = num_probes(bits_per_key);
    let mut out = vec![0u8; (nbits / 8) as usize + 1];
    for &h in hashes {
        for j in 0..u64::from(k) {
            let bit = probe(h, j, nbits);
            if let Some(b) = out.get_mut((bit / 8) as usize) {
                *b |= 1 << (bit % 8);
            }
        }
    }
    if let Some(last) = out.last_mut() {
        *last = k;
    }
    out
}

/// Validates filter bytes: at least 8 bit bytes and a probe count in 1..=30.
pub fn validate(filter: &[u8]) -> Result<(), DecodeError> {
    match filter.split_last() {
        Some((&k, bits)) if bits.len() >= 8 && (1..=30).contains(&k) => Ok(()),
        Some((_, bits)) if bits.len() < 8 => {
            Err(DecodeError::Invalid("filter has fewer than 8 bit bytes"))
        }
        Some((&k, _)) => Err(DecodeError::Unsupported {
            what: "filter probe count",
            value: u64::from(k),
        }),
        None => Err(DecodeError::Invalid("filter block is empty")),
    }
}

/// Whether the (validated) filter may contain the key with hash `h`.
#[inline]
pub fn may_contain(filter: &[u8], h: u64) -> bool {
    let Some((&k, bits)) = filter.split_last() else {
        return true;
    };
    let nbits = bits.len() as u64 * 8;
    if nbits == 0 {
        return true;
    }
    (0..u64::from(k)).all(|j| {
        let bit = probe(h, j, nbits);
        bits.get((bit / 8) as usize)
            .is_none_or(|b| b & (1 << (bit % 8)) != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_header_round_trips_and_rejects_inconsistent_flags() {
        let bits = build(&[1, 2, 3], 10);
        let mut f = Vec::new();
        encode_v3_header(&mut f, FILTER_WHOLE_KEYS | FILTER_PREFIXES, b"x/1");
        f.extend_from_slice(&bits);
        assert_eq!(parse_v3(&f).unwrap(), (3, &b"x/1"[..], &bits[..]));
        for (flags, name) in [
            (0u8, &b""[..]),
            (4, b""),
            (FILTER_PREFIXES, b""),
            (FILTER_WHOLE_KEYS, b"x"),
        ] {
            let mut f = Vec::new();
            encode_v3_header(&mut f, flags, name);
            f.extend_from_slice(&bits);
            assert!(parse_v3(&f).is_err(), "flags {flags} name {name:?}");
        }
        assert!(parse_v3(&f[..3]).is_err());
        assert!(parse_v3(&[]).is_err());
    }

    #[test]
    fn no_false_negatives_and_low_fp() {
        let keys: Vec<Vec<u8>> = (0..10_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
        let f = build(&hashes, 10);
        validate(&f).unwrap();
        assert!(keys.iter().all(|k| may_contain(&f, key_hash(k))));
        let fp = (10_000u32..110_000)
            .filter(|i| may_contain(&f, key_hash(&i.to_be_bytes())))
            .count();
        assert!(fp < 2_000, "false positive rate {}%", fp as f64 / 1000.0);
    }
}

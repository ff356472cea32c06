//! The operator id Flink derives from an operator uid (`StreamGraphHasherV2.generateUserSpecifiedHash`):
//! Guava's `murmur3_128(0)` over the uid's UTF-8 bytes, the 16 hash bytes in order.

use super::metadata::OperatorId;

fn fmix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// MurmurHash3 x64 128-bit with seed 0, as Guava's `asBytes()` (h1 then h2, little-endian each).
pub fn murmur3_x64_128(data: &[u8]) -> [u8; 16] {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let (mut h1, mut h2) = (0u64, 0u64);
    let mut blocks = data.chunks_exact(16);
    for b in &mut blocks {
        let mut k1 = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let mut k2 = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = blocks.remainder();
    let (mut k1, mut k2) = (0u64, 0u64);
    for (i, &b) in tail.iter().enumerate() {
        if i < 8 {
            k1 |= (b as u64) << (8 * i);
        } else {
            k2 |= (b as u64) << (8 * (i - 8));
        }
    }
    if tail.len() > 8 {
        h2 ^= k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
    }
    if !tail.is_empty() {
        h1 ^= k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    }
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix(h1);
    h2 = fmix(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&h1.to_le_bytes());
    out[8..].copy_from_slice(&h2.to_le_bytes());
    out
}

/// The operator id Flink assigns to an operator with this uid.
pub fn operator_id_for_uid(uid: &str) -> OperatorId {
    OperatorId(murmur3_x64_128(uid.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_the_fixture_job() {
        // The ids Flink 2.3.0 gave the fixture job's uids (tests/fixtures/flink/expected.json).
        assert_eq!(
            operator_id_for_uid("state-op").to_hex(),
            "14725b7741e1a536207c2c73a13e02c9"
        );
        assert_eq!(
            operator_id_for_uid("sink").to_hex(),
            "2e588ce1c86a9d46e2e85186773ce4fd"
        );
        assert_eq!(
            operator_id_for_uid("source").to_hex(),
            "e5a72f353fc1e6bbf3bd96a41384998c"
        );
    }
}

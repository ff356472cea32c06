//! Key groups, computed exactly as Apache Flink computes them.
//!
//! A key is hashed (for the built-in key types, with Java's `hashCode`), the hash goes through Flink's murmur
//! finaliser, and the result modulo the *max parallelism* is the key group. Key groups are the unit of
//! rescaling: every parallel instance owns one contiguous [`KeyGroupRange`].
//!
//! Sources: `KeyGroupRangeAssignment.java`, `MathUtils.murmurHash`, `KeyGroupRange.java` in `apache/flink`.
//! Every function here is checked against vectors that Flink 2.3.0 computed (`tests/flink_vectors.rs`).

use std::fmt;

/// A key group number, `0 <= kg < max_parallelism <= 32768`.
pub type KeyGroup = u16;

/// The lowest default max parallelism (`1 << 7`).
pub const DEFAULT_LOWER_BOUND_MAX_PARALLELISM: u32 = 1 << 7;
/// The highest allowed max parallelism (`1 << 15`), inclusive.
pub const UPPER_BOUND_MAX_PARALLELISM: u32 = 1 << 15;

/// Errors from key-group arithmetic on invalid arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyGroupError {
    /// The max parallelism is outside `1..=32768`.
    #[error("max parallelism {0} is out of range (1..=32768)")]
    InvalidMaxParallelism(u32),
    /// The parallelism is outside `1..=max_parallelism`.
    #[error("parallelism {parallelism} is out of range (1..={max_parallelism})")]
    InvalidParallelism {
        /// The parallelism given.
        parallelism: u32,
        /// The max parallelism it was checked against.
        max_parallelism: u32,
    },
    /// The operator index is not below the parallelism.
    #[error("operator index {index} is out of range for parallelism {parallelism}")]
    InvalidOperatorIndex {
        /// The index given.
        index: u32,
        /// The parallelism.
        parallelism: u32,
    },
    /// A key group is not below the max parallelism.
    #[error("key group {key_group} is out of range for max parallelism {max_parallelism}")]
    InvalidKeyGroup {
        /// The key group given.
        key_group: u32,
        /// The max parallelism.
        max_parallelism: u32,
    },
}

impl KeyGroupError {
    /// What kind of failure this is: always [`InvalidInput`](keyed_state_lsm::ErrorKind::InvalidInput).
    pub fn kind(&self) -> keyed_state_lsm::ErrorKind {
        keyed_state_lsm::ErrorKind::InvalidInput
    }
}

/// Checks `1 <= max_parallelism <= 32768`.
pub fn check_max_parallelism(max_parallelism: u32) -> Result<(), KeyGroupError> {
    if max_parallelism == 0 || max_parallelism > UPPER_BOUND_MAX_PARALLELISM {
        return Err(KeyGroupError::InvalidMaxParallelism(max_parallelism));
    }
    Ok(())
}

/// Flink's `MathUtils.murmurHash(int)`: murmur3 mixing of one 4-byte block, finalised, made non-negative.
#[inline]
pub fn murmur_hash(code: i32) -> i32 {
    let mut h = code.wrapping_mul(0xcc9e_2d51_u32 as i32);
    h = h.rotate_left(15);
    h = h.wrapping_mul(0x1b87_3593);
    h = h.rotate_left(13);
    h = h.wrapping_mul(5).wrapping_add(0xe654_6b64_u32 as i32);
    h ^= 4;
    h = bit_mix(h);
    if h >= 0 {
        h
    } else if h != i32::MIN {
        -h
    } else {
        0
    }
}

/// Flink's `MathUtils.bitMix` (murmur3's `fmix32`).
fn bit_mix(mut h: i32) -> i32 {
    h ^= ((h as u32) >> 16) as i32;
    h = h.wrapping_mul(0x85eb_ca6b_u32 as i32);
    h ^= ((h as u32) >> 13) as i32;
    h = h.wrapping_mul(0xc2b2_ae35_u32 as i32);
    h ^= ((h as u32) >> 16) as i32;
    h
}

/// `computeKeyGroupForKeyHash`: the key group of a key whose (Java) hash code is `hash`.
///
/// `max_parallelism` must be in `1..=32768` (checked by [`check_max_parallelism`]); the result is below it.
#[inline]
pub fn key_group_for_hash(hash: i32, max_parallelism: u32) -> KeyGroup {
    debug_assert!((1..=UPPER_BOUND_MAX_PARALLELISM).contains(&max_parallelism));
    (murmur_hash(hash) as u32 % max_parallelism.max(1)) as KeyGroup
}

/// `computeOperatorIndexForKeyGroup`: which of `parallelism` instances owns `key_group`.
pub fn operator_index_for_key_group(
    max_parallelism: u32,
    parallelism: u32,
    key_group: KeyGroup,
) -> u32 {
    // Flink computes this in i32; with max_parallelism <= 32768 the product fits.
    (key_group as u32 * parallelism) / max_parallelism.max(1)
}

/// `computeKeyGroupRangeForOperatorIndex`: the inclusive key-group range of operator `index`.
pub fn key_group_range_for_operator(
    max_parallelism: u32,
    parallelism: u32,
    index: u32,
) -> Result<KeyGroupRange, KeyGroupError> {
    check_max_parallelism(max_parallelism)?;
    if parallelism == 0 || parallelism > max_parallelism {
        return Err(KeyGroupError::InvalidParallelism {
            parallelism,
            max_parallelism,
        });
    }
    if index >= parallelism {
        return Err(KeyGroupError::InvalidOperatorIndex { index, parallelism });
    }
    // Flink: (i*maxP + p - 1) / p, i.e. a ceiling division.
    let start = (index * max_parallelism).div_ceil(parallelism);
    let end = ((index + 1) * max_parallelism - 1) / parallelism;
    Ok(KeyGroupRange::new(start as KeyGroup, end as KeyGroup))
}

/// `computeDefaultMaxParallelism`: `min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768)`.
pub fn default_max_parallelism(parallelism: u32) -> u32 {
    let x = parallelism.saturating_add(parallelism / 2);
    let rounded = x.max(1).checked_next_power_of_two().unwrap_or(u32::MAX);
    rounded.clamp(
        DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
        UPPER_BOUND_MAX_PARALLELISM,
    )
}

/// `computeRequiredBytesInKeyGroupPrefix`: 2 bytes when `max_parallelism > 128`, else 1.
pub fn key_group_prefix_len(max_parallelism: u32) -> usize {
    if max_parallelism > 128 {
        2
    } else {
        1
    }
}

/// Appends the big-endian key-group prefix of `prefix_len` (1 or 2) bytes.
pub fn write_key_group_prefix(out: &mut Vec<u8>, key_group: KeyGroup, prefix_len: usize) {
    if prefix_len == 2 {
        out.extend_from_slice(&key_group.to_be_bytes());
    } else {
        out.push(key_group as u8);
    }
}

/// Reads the key group back from the first `prefix_len` bytes of an entry key; `None` if too short.
pub fn read_key_group_prefix(key: &[u8], prefix_len: usize) -> Option<KeyGroup> {
    match prefix_len {
        1 => key.first().map(|b| *b as KeyGroup),
        2 => key.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]])),
        _ => None,
    }
}

/// An inclusive range of key groups, `start..=end`; empty when `end < start`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyGroupRange {
    start: i32,
    end: i32,
}

impl KeyGroupRange {
    /// The empty range (Flink's `KeyGroupRange.EMPTY` = (0, -1)).
    pub const EMPTY: KeyGroupRange = KeyGroupRange { start: 0, end: -1 };

    /// The range `start..=end`; empty if `end < start`.
    pub fn new(start: KeyGroup, end: KeyGroup) -> Self {
        if end < start {
            Self::EMPTY
        } else {
            KeyGroupRange {
                start: start as i32,
                end: end as i32,
            }
        }
    }

    /// All key groups of a job with this max parallelism: `0..=max_parallelism-1`.
    pub fn all(max_parallelism: u32) -> Self {
        if max_parallelism == 0 {
            return Self::EMPTY;
        }
        Self::new(0, (max_parallelism - 1).min(u16::MAX as u32) as KeyGroup)
    }

    /// The first key group (meaningless when empty).
    pub fn start(&self) -> KeyGroup {
        self.start.max(0) as KeyGroup
    }

    /// The last key group, inclusive (meaningless when empty).
    pub fn end(&self) -> KeyGroup {
        self.end.max(0) as KeyGroup
    }

    /// Whether the range holds no key group.
    pub fn is_empty(&self) -> bool {
        self.end < self.start
    }

    /// `1 + end - start`, or 0 when empty.
    pub fn len(&self) -> usize {
        (self.end - self.start + 1).max(0) as usize
    }

    /// Whether `kg` lies in the range.
    pub fn contains(&self, kg: KeyGroup) -> bool {
        (kg as i32) >= self.start && (kg as i32) <= self.end
    }

    /// The intersection, or [`KeyGroupRange::EMPTY`].
    pub fn intersect(&self, other: &KeyGroupRange) -> KeyGroupRange {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        if end < start {
            Self::EMPTY
        } else {
            KeyGroupRange { start, end }
        }
    }

    /// The index of `kg` inside the range (`kg - start`), if it is inside.
    pub fn index_of(&self, kg: KeyGroup) -> Option<usize> {
        self.contains(kg).then(|| (kg as i32 - self.start) as usize)
    }

    /// Iterates the key groups in ascending order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = KeyGroup> + Clone {
        let (s, e) = (self.start, self.end);
        (s..=e).map(|k| k as KeyGroup)
    }
}

impl fmt::Debug for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "KeyGroupRange{{startKeyGroup={}, endKeyGroup={}}}",
            self.start, self.end
        )
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            write!(f, "[]")
        } else {
            write!(f, "[{}..={}]", self.start, self.end)
        }
    }
}

/// Java's `Long.hashCode`: `(int)(v ^ (v >>> 32))`.
#[inline]
pub fn java_long_hash(v: i64) -> i32 {
    (v ^ ((v as u64) >> 32) as i64) as i32
}

/// Java's `Integer.hashCode`: the value itself.
#[inline]
pub fn java_int_hash(v: i32) -> i32 {
    v
}

/// Java's `String.hashCode`: `Σ s[i]·31^(n-1-i)` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// Java's `Boolean.hashCode`: 1231 for true, 1237 for false.
pub fn java_bool_hash(v: bool) -> i32 {
    if v {
        1231
    } else {
        1237
    }
}

/// Java's `Double.hashCode`: the long hash of `doubleToLongBits` (NaN canonicalised).
pub fn java_double_hash(v: f64) -> i32 {
    let bits = if v.is_nan() {
        0x7ff8_0000_0000_0000_i64
    } else {
        v.to_bits() as i64
    };
    java_long_hash(bits)
}

/// The documented, stable hash for key types without a Java counterpart: the low 32 bits of xxh3-64 of
/// the key's serialized bytes (seed 0). Stable across versions of this crate; part of the savepoint contract.
pub fn bytes_hash(serialized_key: &[u8]) -> i32 {
    xxhash_rust::xxh3::xxh3_64(serialized_key) as u32 as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur_matches_documented_vectors() {
        assert_eq!(murmur_hash(0), 593689054);
        assert_eq!(murmur_hash(1), 68075478);
        assert_eq!(murmur_hash(42), 1134849565);
        assert_eq!(key_group_for_hash(java_string_hash("hello"), 128), 35);
        assert_eq!(key_group_for_hash(java_string_hash("hello"), 32768), 31395);
    }

    #[test]
    fn ranges_and_intersection() {
        let r = key_group_range_for_operator(128, 3, 1).unwrap();
        assert_eq!((r.start(), r.end()), (43, 85));
        assert!(r.intersect(&KeyGroupRange::new(90, 100)).is_empty());
        assert_eq!(r.intersect(&KeyGroupRange::new(80, 100)).len(), 6);
        assert_eq!(KeyGroupRange::EMPTY.iter().count(), 0);
        assert_eq!(default_max_parallelism(100), 256);
        assert!(key_group_range_for_operator(128, 0, 0).is_err());
        assert!(key_group_range_for_operator(0, 1, 0).is_err());
    }
}

//! The value-state workload of `lsm_many_states` and `many_operators`: `i64` keys at max parallelism 128,
//! 100-byte values drawn from a 16-symbol alphabet, sizes from environment variables.

#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::Rng;

/// Max parallelism of the key groups.
pub const MAX_P: u32 = 128;
/// Bytes of each value.
pub const VALUE_LEN: usize = 100;
/// Raw bytes of one entry: its `i64` key and its value.
pub const ENTRY_BYTES: u64 = 8 + VALUE_LEN as u64;
/// Bytes in a MiB, for printing.
pub const MIB: f64 = (1 << 20) as f64;

/// The number in environment variable `name`, or `default`.
pub fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A value of [`VALUE_LEN`] bytes.
pub fn value(rng: &mut StdRng) -> Vec<u8> {
    (0..VALUE_LEN)
        .map(|_| b'a' + rng.random_range(0..16u8))
        .collect()
}

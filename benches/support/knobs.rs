//! What several benchmarks share: reading a numeric knob from the environment, and the splitmix64
//! finaliser that turns an index into a key or value.

/// The environment variable `name` as a number (`_` separators allowed), or `default` when it is unset or
/// not a number.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// splitmix64 finaliser: a bijection on u64, so distinct indices give distinct keys.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

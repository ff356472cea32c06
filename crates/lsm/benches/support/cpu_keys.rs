//! What the engine's benchmarks share: numeric knobs from the environment, the thread's CPU time, and
//! keys spread by the splitmix64 finaliser.

/// The environment variable `name` as a number (`_` separators allowed), or `default` when it is unset or
/// not a number.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// The calling thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// splitmix64 finaliser: a bijection on u64.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A 10-byte key: two zero bytes, then `i` big-endian.
pub fn key(i: u64) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[2..].copy_from_slice(&i.to_be_bytes());
    k
}

/// The environment variable `name` as a comma-separated list of numbers (entries that are not numbers
/// skipped), or `default` parsed the same way when it is unset.
pub fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// A 10-byte key of `i` spread by a multiplication with the golden ratio: two zero bytes, then the product
/// big-endian.
pub fn spread_key(i: u64) -> [u8; 10] {
    key(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

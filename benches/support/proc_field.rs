//! Figures of this process from `/proc` (Linux), for benches that report memory and I/O.

/// The number after `name` on its line of `file` (`/proc/self/status`: KiB, `/proc/self/io`: bytes);
/// 0 where the file or the line is missing.
pub fn proc_field(file: &str, name: &str) -> u64 {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

//! Where this process's anonymous memory is, from `/proc/self/smaps` (Linux): the resident anonymous bytes of
//! the heap allocator's arenas (mappings of at least [`ARENA_MIN`]: mimalloc reserves its arenas 1 GiB at a
//! time, glibc's `malloc` its thread arenas 64 MiB at a time) and of every other mapping (the memtable arenas'
//! chunk maps, thread stacks, the main `brk` heap, libraries' data).
//!
//! With `KS_MO_MI_STATS=1`, [`mimalloc_stats`] prints mimalloc's statistics on stderr (its per-size-class
//! figures need mimalloc built with `-DMI_STAT=2`, e.g. `CFLAGS=-DMI_STAT=2` when building the bench).

/// The smallest mapping counted as a heap allocator's arena.
pub const ARENA_MIN: u64 = 64 << 20;

/// Resident anonymous KiB in mappings of at least [`ARENA_MIN`] bytes, and in all others.
pub fn anon_kib() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let (mut arenas, mut other) = (0u64, 0u64);
    let mut large = false;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some(anon) = line.strip_prefix("Anonymous:") {
            let kib: u64 = anon
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if large {
                arenas += kib;
            } else {
                other += kib;
            }
        } else if let Some((start, end)) = first.split_once('-') {
            // A mapping's header line: `start-end perms offset dev inode [path]`.
            if let (Ok(s), Ok(e)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16)) {
                large = e.saturating_sub(s) >= ARENA_MIN;
            }
        }
    }
    (arenas, other)
}

/// The figures of [`anon_kib`] as text, MiB.
pub fn describe() -> String {
    let (arenas, other) = anon_kib();
    format!(
        "anon in allocator arenas {:.1} MiB, in other maps {:.1} MiB",
        arenas as f64 / 1024.0,
        other as f64 / 1024.0
    )
}

extern "C" {
    fn mi_stats_print_out(out: *const std::ffi::c_void, arg: *mut std::ffi::c_void);
}

/// Prints mimalloc's statistics on stderr under `title` when `KS_MO_MI_STATS=1` (and mimalloc is the
/// allocator).
pub fn mimalloc_stats(title: &str) {
    if std::env::var("KS_MO_MI_STATS").as_deref() != Ok("1") {
        return;
    }
    eprintln!("mimalloc stats {title}:");
    // SAFETY: a null output function makes mimalloc print on stderr; it reads its own statistics only.
    unsafe { mi_stats_print_out(std::ptr::null(), std::ptr::null_mut()) };
}

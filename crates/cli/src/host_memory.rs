//! The demo's allocator settings, as a host of many operators should set them
//! (`design/shared-env.md`, "What the budget charges and what it does not").
//!
//! mimalloc's defaults ask the kernel for transparent huge pages (a 2 MiB page is resident once any byte of
//! it is touched) and give freed memory back to the system only 1 s after it is freed. Under a memory budget both show as `RssAnon` that no allocation holds. Before the demo opens its
//! engines, [`tune`] turns transparent huge pages off for the process (`PR_SET_THP_DISABLE`, as mimalloc's
//! own `MIMALLOC_ALLOW_THP=0` does) and sets the purge delay to [`PURGE_DELAY_MS`]. A variable the user set
//! (`MIMALLOC_ALLOW_THP`, `MIMALLOC_PURGE_DELAY`, read by mimalloc when the process started) is kept.

/// The purge delay the demo sets, in milliseconds
/// (design/bench-results/2026-12-05-memory-fill: the CPU cost of each delay against its peak memory).
pub const PURGE_DELAY_MS: i64 = 0;

/// `mi_option_purge_delay` in `mimalloc.h` (mimalloc 2 and 3 number it the same); `libmimalloc-sys`
/// exposes no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// What [`tune`] left in force, for printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Transparent huge pages are off for this process.
    pub thp_disabled: bool,
    /// mimalloc's purge delay in milliseconds, as it reads it now.
    pub purge_delay_ms: i64,
}

impl std::fmt::Display for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "mimalloc, transparent huge pages {}, purge delay {} ms",
            if self.thp_disabled { "off" } else { "allowed" },
            self.purge_delay_ms
        )
    }
}

/// Sets the allocator for a host of many operators unless `keep_defaults` (or the user's own variables):
/// call before any thread starts and before the engines allocate.
pub fn tune(keep_defaults: bool) -> Settings {
    if !keep_defaults {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
            disable_transparent_huge_pages();
        }
        // `MIMALLOC_RESET_DELAY` is the older name of the same option.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none()
            && std::env::var_os("MIMALLOC_RESET_DELAY").is_none()
        {
            // SAFETY: mi_option_set stores one word of mimalloc's option table, public API that mimalloc
            // allows at any time (it reads its options without synchronisation, a stale read only delays the
            // new value); no memory of ours is touched. The demo calls it before it starts other threads.
            unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _) };
        }
    }
    Settings {
        thp_disabled: thp_disabled(),
        // SAFETY: mi_option_get reads one option of mimalloc's option table.
        purge_delay_ms: unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) } as i64,
    }
}

#[cfg(target_os = "linux")]
fn disable_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments (passed as `unsigned long`, as the variadic
    // prototype reads them) and changes the memory policy of this process and of the children it forks
    // afterwards; it touches no memory of ours. A failure (an old kernel) leaves the default.
    let (on, zero): (libc::c_ulong, libc::c_ulong) = (1, 0);
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, zero, zero, zero) };
}

#[cfg(not(target_os = "linux"))]
fn disable_transparent_huge_pages() {}

#[cfg(target_os = "linux")]
fn thp_disabled() -> bool {
    // SAFETY: PR_GET_THP_DISABLE takes integer arguments (as `unsigned long`) and only reads the process's
    // flag.
    let zero: libc::c_ulong = 0;
    unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, zero, zero, zero, zero) == 1 }
}

#[cfg(not(target_os = "linux"))]
fn thp_disabled() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tune_turns_huge_pages_off_and_sets_the_purge_delay() {
        let s = tune(false);
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none()
            && std::env::var_os("MIMALLOC_RESET_DELAY").is_none()
        {
            assert_eq!(s.purge_delay_ms, PURGE_DELAY_MS);
        }
        if cfg!(target_os = "linux") && std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
            assert!(s.thp_disabled, "{s}");
        }
    }
}

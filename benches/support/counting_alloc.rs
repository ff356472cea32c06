//! A counting wrapper around mimalloc for memory profiles of the benches: live heap bytes by the kind of
//! thread that allocated them (the engines' background pool, the checkpoint I/O runtime, the main thread,
//! others), and live bytes of large allocations (>= 256 KiB: buffers rather than entries).
//!
//! Counting is decided once, at the process's first allocation, by the environment variable
//! `KS_PROFILE_ALLOC=1` (read with `getenv`, which does not allocate); off, a bench pays one relaxed load per
//! allocation. On, every allocation carries a header of 16 bytes (or its alignment) holding its thread kind,
//! which the figures do not count: they are the bytes the program asked for.
//!
//! `KS_ALLOC=system` makes the wrapper use the system allocator (glibc's malloc) instead of mimalloc, to
//! compare what each allocator keeps (it then never counts). `KS_ALLOC=map-large` keeps mimalloc but gives
//! every allocation of [`MAP_LARGE`] bytes or more an anonymous map of its own (unmapped when freed), to
//! measure what mimalloc keeps of large objects (it then never counts either).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicU8, Ordering};

/// Thread kinds, by the thread's name.
pub const KINDS: [&str; 4] = ["main", "lsm-bg", "ckpt-io", "other"];
const LARGE: usize = 256 << 10;
/// Upper bounds (exclusive) of the size classes live bytes are also counted by: mimalloc 3's page kinds
/// (small pages of 64 KiB hold objects up to 10 KiB, medium pages of 512 KiB up to 84 KiB, large pages of
/// 4 MiB up to 512 KiB; larger objects get a page of their own).
pub const SIZES: [(&str, usize); 4] = [
    ("<= 10 KiB", 10 << 10),
    ("<= 84 KiB", 84 << 10),
    ("<= 512 KiB", 512 << 10),
    ("larger", usize::MAX),
];

/// The smallest allocation `KS_ALLOC=map-large` maps on its own.
pub const MAP_LARGE: usize = 64 << 10;

/// 0: not decided yet, 1: off, 2: on, 3: the system allocator, not counting, 4: large allocations mapped.
static MODE: AtomicU8 = AtomicU8::new(0);
static LIVE: [AtomicIsize; 4] = [const { AtomicIsize::new(0) }; 4];
static LIVE_LARGE: AtomicIsize = AtomicIsize::new(0);
static LIVE_BY_SIZE: [AtomicIsize; 4] = [const { AtomicIsize::new(0) }; 4];

thread_local! {
    /// The kind of this thread, once known (255: not yet).
    static KIND: Cell<u8> = const { Cell::new(255) };
}

fn mode() -> u8 {
    match MODE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: the names are NUL-terminated; getenv reads the environment and allocates nothing.
            let (profile, alloc) = unsafe {
                (
                    libc::getenv(c"KS_PROFILE_ALLOC".as_ptr()),
                    libc::getenv(c"KS_ALLOC".as_ptr()),
                )
            };
            // SAFETY: a non-null result is a NUL-terminated string of the environment.
            let system = !alloc.is_null() && unsafe { *alloc } == b's' as libc::c_char;
            // SAFETY: as above.
            let map_large = !alloc.is_null() && unsafe { *alloc } == b'm' as libc::c_char;
            // SAFETY: as above.
            let on = !profile.is_null() && unsafe { *profile } == b'1' as libc::c_char;
            let m = if system {
                3
            } else if map_large {
                4
            } else if on {
                2
            } else {
                1
            };
            MODE.store(m, Ordering::Relaxed);
            m
        }
        m => m,
    }
}

fn on() -> bool {
    mode() == 2
}

/// Whether counting is on.
pub fn enabled() -> bool {
    on()
}

/// Live bytes per thread kind (as [`KINDS`]) and of large allocations.
pub fn live() -> ([isize; 4], isize) {
    (
        std::array::from_fn(|i| LIVE[i].load(Ordering::Relaxed)),
        LIVE_LARGE.load(Ordering::Relaxed),
    )
}

/// Live bytes per size class (as [`SIZES`]).
pub fn live_by_size() -> [isize; 4] {
    std::array::from_fn(|i| LIVE_BY_SIZE[i].load(Ordering::Relaxed))
}

fn thread_kind() -> u8 {
    let known = KIND.try_with(|k| k.get()).unwrap_or(3);
    if known != 255 {
        return known;
    }
    let mut name = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes and a NUL into the 17-byte buffer.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    let kind = if name.starts_with(b"lsm-bg") {
        1
    } else if name.starts_with(b"ckpt-io") {
        2
    } else if name.starts_with(b"many_operators") || name.starts_with(b"main") {
        0
    } else {
        3
    };
    // A thread may allocate before its name is set: only a named kind is kept.
    if kind != 3 {
        let _ = KIND.try_with(|k| k.set(kind));
    }
    kind
}

/// mimalloc, counting when `KS_PROFILE_ALLOC=1`.
pub struct Counting;

fn header_of(layout: Layout) -> usize {
    layout.align().max(16)
}

fn count(kind: u8, size: usize, sign: isize) {
    LIVE[kind as usize & 3].fetch_add(sign * size as isize, Ordering::Relaxed);
    if size >= LARGE {
        LIVE_LARGE.fetch_add(sign * size as isize, Ordering::Relaxed);
    }
    let class = SIZES.iter().position(|&(_, max)| size <= max).unwrap_or(3);
    LIVE_BY_SIZE[class].fetch_add(sign * size as isize, Ordering::Relaxed);
}

fn with_header(layout: Layout, size: usize) -> Layout {
    // SAFETY: the alignment is the caller's (a power of two) and size + header does not overflow isize
    // for any size an allocation can have.
    unsafe { Layout::from_size_align_unchecked(size + header_of(layout), layout.align()) }
}

/// A map of its own for a large allocation (`KS_ALLOC=map-large`); null on failure.
fn map_alloc(layout: Layout) -> *mut u8 {
    if layout.align() > 4096 {
        return std::ptr::null_mut();
    }
    // SAFETY: an anonymous private map; no file, no fixed address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            layout.size(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

fn is_mapped(layout: Layout) -> bool {
    layout.size() >= MAP_LARGE && layout.align() <= 4096
}

// SAFETY: every call is forwarded to mimalloc; when counting, with a layout that has room for the header
// before the pointer handed out, and the mode never changes after the first allocation, so frees match.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match mode() {
            // SAFETY: the caller's layout.
            3 => return unsafe { std::alloc::System.alloc(layout) },
            4 if is_mapped(layout) => return map_alloc(layout),
            2 => {}
            // SAFETY: the caller's layout.
            _ => return unsafe { mimalloc::MiMalloc.alloc(layout) },
        }
        let h = header_of(layout);
        // SAFETY: a valid non-zero layout.
        let base = unsafe { mimalloc::MiMalloc.alloc(with_header(layout, layout.size())) };
        if base.is_null() {
            return base;
        }
        let kind = thread_kind();
        count(kind, layout.size(), 1);
        // SAFETY: base has h >= 16 bytes before the returned pointer; the kind goes in the byte before it.
        unsafe {
            let p = base.add(h);
            p.sub(1).write(kind);
            p
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match mode() {
            // SAFETY: allocated by the system allocator with this layout.
            3 => return unsafe { std::alloc::System.dealloc(ptr, layout) },
            4 if is_mapped(layout) => {
                // SAFETY: mapped by `map_alloc` with this size.
                unsafe { libc::munmap(ptr.cast(), layout.size()) };
                return;
            }
            2 => {}
            // SAFETY: allocated by mimalloc with this layout.
            _ => return unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) },
        }
        let h = header_of(layout);
        // SAFETY: allocated by `alloc` above: h bytes of header, the kind in the last one.
        unsafe {
            count(ptr.sub(1).read(), layout.size(), -1);
            mimalloc::MiMalloc.dealloc(ptr.sub(h), with_header(layout, layout.size()))
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match mode() {
            // SAFETY: allocated by the system allocator with this layout.
            3 => return unsafe { std::alloc::System.realloc(ptr, layout, new_size) },
            4 => {
                // SAFETY: a valid size for the caller's alignment (GlobalAlloc's contract for realloc).
                let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                if !is_mapped(layout) && !is_mapped(new) {
                    // SAFETY: allocated by mimalloc with this layout.
                    return unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
                }
                // SAFETY: `alloc` and `dealloc` above, with the layouts the block had and gets.
                unsafe {
                    let p = self.alloc(new);
                    if !p.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    return p;
                }
            }
            2 => {}
            // SAFETY: allocated by mimalloc with this layout.
            _ => return unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) },
        }
        let h = header_of(layout);
        // SAFETY: allocated by `alloc` above; the header moves with the block.
        unsafe {
            let kind = ptr.sub(1).read();
            let nb = mimalloc::MiMalloc.realloc(
                ptr.sub(h),
                with_header(layout, layout.size()),
                new_size + h,
            );
            if nb.is_null() {
                return nb;
            }
            count(kind, layout.size(), -1);
            count(kind, new_size, 1);
            nb.add(h)
        }
    }
}

//! The bytes of an open SST file: a memory map of a real file or an image in memory, zero-copy views of
//! them, and read-ahead hints to the kernel. Why a map is sound: module `reader`.

use std::sync::Arc;

use memmap2::{Advice, Mmap};

use crate::slice::ValueSlice;
use crate::storage::FileBytes;

/// The bytes of an open file.
pub(super) enum Backing {
    Map(Arc<Mmap>),
    Mem(Arc<[u8]>),
}

impl From<FileBytes> for Backing {
    fn from(b: FileBytes) -> Self {
        match b {
            FileBytes::Map(m) => Backing::Map(m),
            FileBytes::Mem(m) => Backing::Mem(m),
        }
    }
}

impl Backing {
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Mem(b) => b,
        }
    }

    pub(super) fn view(&self, start: usize, end: usize) -> Option<ValueSlice> {
        match self {
            Backing::Map(m) => ValueSlice::from_map(Arc::clone(m), start..end),
            Backing::Mem(b) => ValueSlice::from_shared(Arc::clone(b), start..end),
        }
    }

    /// Whether every page of `[start, end)` of a mapped file is in memory (`mincore`); `None` for bytes
    /// in memory, an empty or out-of-bounds range, or an error (none is expected for a range of a live
    /// map).
    pub(super) fn resident(&self, start: usize, end: usize) -> Option<bool> {
        let Backing::Map(m) = self else {
            return None;
        };
        if start >= end || end > m.len() {
            return None;
        }
        let page = page_size();
        let first = start / page;
        let pages = (end - 1) / page - first + 1;
        let mut small = [0u8; 8];
        let mut big = Vec::new();
        let vec: &mut [u8] = if pages <= small.len() {
            &mut small[..pages]
        } else {
            big.resize(pages, 0);
            &mut big
        };
        let addr = m.as_ptr().wrapping_add(first * page);
        debug_assert_eq!(
            addr as usize % page,
            0,
            "mincore needs a page-aligned address"
        );
        // SAFETY: `addr` is page-aligned (the map is of the whole file from offset 0, so it starts on a
        // page boundary; `first * page` is a multiple of the page size) and `[addr, addr + pages * page)`
        // lies within the mapping: its last page holds byte `end - 1 < m.len()`, and the kernel maps whole
        // pages. `vec` has one writable byte per page, the only memory `mincore` writes. The map is
        // borrowed for the call.
        let rc =
            unsafe { libc::mincore(addr as *mut libc::c_void, pages * page, vec.as_mut_ptr()) };
        (rc == 0).then(|| vec.iter().all(|v| v & 1 != 0))
    }

    /// Asks the kernel to read `[start, end)` of a mapped file into memory without waiting for it
    /// (`MADV_WILLNEED`, which starts the reads and returns). Only a hint: a failure changes no result, so
    /// it is ignored; bytes in memory do nothing.
    pub(super) fn will_need(&self, start: usize, end: usize) {
        if let Backing::Map(m) = self {
            let end = end.min(m.len());
            if start < end {
                let _ = m.advise_range(Advice::WillNeed, start, end - start);
            }
        }
    }
}

fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: `sysconf` reads a constant of the system; no memory is passed.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    #[cfg_attr(miri, ignore)] // `mincore`, `posix_fadvise` and `statfs` are foreign calls Miri cannot run
    fn resident_tells_pages_in_memory_from_pages_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: the test's file is not modified while mapped.
        let map = unsafe { Mmap::map(&f) }.unwrap();
        // Faults read their own page only, as on an SST map.
        map.advise(Advice::Random).unwrap();
        let b = Backing::Map(Arc::new(map));
        // SAFETY: advice on a descriptor the test owns; no memory is passed.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        // A file system that keeps every page in memory (tmpfs) cannot show the difference; on a disk file
        // system the dropped pages must show as not resident.
        let on_disk = disk_file_system(dir.path());
        let dropped = b.resident(4000, 8105) == Some(false);
        if on_disk {
            assert!(
                dropped,
                "pages dropped from the page cache of a disk file system"
            );
        } else if !dropped {
            eprintln!(
                "resident_tells_pages_in_memory_from_pages_on_disk: {} is not on a disk file system and \
                 kept its pages in memory; the in-memory/on-disk checks are skipped",
                dir.path().display()
            );
        }
        if dropped {
            // Read two pages (a block spanning them) and forty (past `mincore`'s small vector).
            std::hint::black_box(
                b.bytes()
                    .get(4000..8105)
                    .map(|s| s.iter().map(|&x| x as u64).sum::<u64>()),
            );
            assert_eq!(b.resident(4000, 8105), Some(true));
            assert_eq!(b.resident(1 << 19, (1 << 19) + 40 * 4096), Some(false));
            std::hint::black_box(
                b.bytes()
                    .get(1 << 19..(1 << 19) + 40 * 4096)
                    .map(|s| s.iter().map(|&x| x as u64).sum::<u64>()),
            );
            assert_eq!(b.resident(1 << 19, (1 << 19) + 40 * 4096), Some(true));
        }
        assert_eq!(b.resident(10, 10), None, "an empty range");
        assert_eq!(b.resident(0, (1 << 20) + 1), None, "past the end");
        assert_eq!(Backing::Mem(Arc::from(&[1u8, 2][..])).resident(0, 1), None);
    }

    /// Whether `path` is on ext2/3/4, XFS or Btrfs (`statfs`), whose pages can be dropped from memory.
    #[allow(clippy::useless_conversion)] // `f_type` is `i64` here, another integer type on other targets
    fn disk_file_system(path: &std::path::Path) -> bool {
        const DISK: [i64; 3] = [0xEF53, 0x5846_5342, 0x9123_683E];
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
        // SAFETY: `c` is a NUL-terminated path and `st` a writable `statfs` the call fills.
        let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
        // SAFETY: zero-initialised and, when `rc == 0`, filled by `statfs`.
        let st = unsafe { st.assume_init() };
        rc == 0 && DISK.contains(&i64::from(st.f_type))
    }
}

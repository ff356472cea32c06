//! Batched cold reads: how to read 32 random SST-block-sized ranges of a file that is not in memory, and a
//! reproduction of the io_uring write hang of `design/bench-results/2026-12-02-io-uring/README.md`.
//!
//! `cargo bench --bench cold_batch_io` (release; as root, to drop the page cache between rounds).
//!
//! **Reads** (default): a file of `KS_CBI_FILE_MB` MiB (default 4096) of random bytes under `KS_CBI_DIR`
//! (default `/tmp`), deleted at the end. Each round drops the page cache, then every way reads
//! `KS_CBI_BATCHES` batches (default 300) of `KS_CBI_BATCH` ranges (default 32) of 4,105 bytes (a 4 KiB
//! block and its trailer, as the engine's) at random offsets, the ways alternating within the round:
//! - `fault`: a `MADV_RANDOM` map, each range touched in turn (first and last byte): what single-key reads
//!   of cold blocks do without a pre-read (one fault per page);
//! - `pread`: `pread(2)` of each range in turn (`POSIX_FADV_RANDOM`): single-key reads over `pread`;
//! - `willneed`: a `MADV_RANDOM` map, `MADV_WILLNEED` for every range of the batch, then every range
//!   touched: what `Db::multi_get` does;
//! - `pool`: `pread(2)` of the batch on a pool of `KS_CBI_THREADS` threads (default 4);
//! - `uring`: one io_uring read per range, all submitted with one `io_uring_enter` and waited for with a
//!   timeout (`IORING_ENTER_EXT_ARG`).
//!
//! Prints per way: µs per batch, ranges per second, and `read_bytes` per range (`/proc/self/io`).
//! `KS_CBI_CGROUP_MB=N` runs it in a new child cgroup limited to N MiB (every page read then reclaims one,
//! as under `benches/larger_than_memory.rs`).
//!
//! **Hang** (`--hang`): the write pattern that hung, reduced: `KS_CBI_THREADS` threads each create a file
//! on tmpfs (`/dev/shm`) `KS_CBI_FILES` times (default 2000), write it with one io_uring per file, one
//! 64 KiB `IORING_OP_WRITE` at a time (submit one, wait for one), then fsync through the ring, as the
//! engine's old `FileWriter` did. Each wait has a 10 s timeout instead of blocking for ever; a timed-out
//! write is reported with the `iou-wrk` threads of the process at that moment, and its buffer and ring are
//! leaked (the kernel may still write into them).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};
use memmap2::{Advice, Mmap};

const RANGE: usize = 4105;

#[path = "support/knobs.rs"]
mod knobs;
use knobs::{env_u64, mix};

fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("read_bytes:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn drop_caches() {
    // SAFETY: `sync` has no preconditions.
    unsafe { libc::sync() };
    if let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "3") {
        eprintln!("cannot drop the page cache ({e}): rounds after the first read warm pages");
    }
}

/// A pool of threads that `pread` ranges of one file.
struct Pool {
    jobs: Vec<mpsc::Sender<(Vec<u64>, mpsc::Sender<usize>)>>,
}

impl Pool {
    fn new(file: Arc<File>, threads: usize) -> Pool {
        let jobs = (0..threads)
            .map(|_| {
                let (tx, rx) = mpsc::channel::<(Vec<u64>, mpsc::Sender<usize>)>();
                let file = Arc::clone(&file);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; RANGE];
                    while let Ok((offs, done)) = rx.recv() {
                        let mut n = 0;
                        for off in offs {
                            n += file.read_at(&mut buf, off).unwrap_or(0);
                        }
                        let _ = done.send(n);
                    }
                });
                tx
            })
            .collect();
        Pool { jobs }
    }

    fn read(&self, offs: &[u64]) -> usize {
        let (done_tx, done_rx) = mpsc::channel();
        let per = offs.len().div_ceil(self.jobs.len());
        let mut sent = 0;
        for (chunk, job) in offs.chunks(per).zip(&self.jobs) {
            job.send((chunk.to_vec(), done_tx.clone()))
                .expect("pool thread");
            sent += 1;
        }
        (0..sent)
            .map(|_| done_rx.recv().expect("pool result"))
            .sum()
    }
}

/// Reads every range of `offs` through `ring`; `None` if the completions did not all come within `timeout`
/// (the buffers are then leaked: the kernel may still write into them).
fn uring_read(ring: &mut IoUring, fd: i32, offs: &[u64], timeout: Duration) -> Option<usize> {
    let mut bufs: Vec<Vec<u8>> = offs.iter().map(|_| vec![0u8; RANGE]).collect();
    for (i, (off, buf)) in offs.iter().zip(bufs.iter_mut()).enumerate() {
        let sqe = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), RANGE as u32)
            .offset(*off)
            .build()
            .user_data(i as u64);
        // SAFETY: `buf` stays allocated and untouched until its completion is reaped below, or is leaked
        // if the completions do not come in time.
        unsafe { ring.submission().push(&sqe) }.expect("submission queue has room");
    }
    let ts = types::Timespec::from(timeout);
    let args = types::SubmitArgs::new().timespec(&ts);
    let mut done = 0;
    let mut bytes = 0usize;
    let deadline = Instant::now() + timeout;
    while done < offs.len() {
        match ring.submitter().submit_with_args(offs.len() - done, &args) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("io_uring_enter: {e}"),
        }
        for cqe in ring.completion() {
            done += 1;
            bytes += cqe.result().max(0) as usize;
        }
        if done < offs.len() && Instant::now() >= deadline {
            std::mem::forget(bufs);
            return None;
        }
    }
    Some(bytes)
}

fn reads() {
    let dir = PathBuf::from(std::env::var("KS_CBI_DIR").unwrap_or_else(|_| "/tmp".into()));
    let mb = env_u64("KS_CBI_FILE_MB", 4096);
    let batches = env_u64("KS_CBI_BATCHES", 300) as usize;
    let batch = env_u64("KS_CBI_BATCH", 32) as usize;
    let threads = env_u64("KS_CBI_THREADS", 4) as usize;
    let rounds = env_u64("KS_CBI_ROUNDS", 3);
    let path = dir.join(format!("ks-cold-batch-io-{}", std::process::id()));
    {
        let mut f = File::create(&path).expect("create the test file");
        let mut chunk = vec![0u8; 1 << 20];
        for i in 0..mb {
            for (j, w) in chunk.chunks_mut(8).enumerate() {
                w.copy_from_slice(&mix(i << 20 | j as u64).to_le_bytes());
            }
            f.write_all(&chunk).expect("write the test file");
        }
        f.sync_all().expect("sync");
    }
    let file = Arc::new(File::open(&path).expect("open"));
    // SAFETY: the test file is written once above and never modified or truncated while mapped.
    let map = unsafe { Mmap::map(&*file) }.expect("map");
    map.advise(Advice::Random).expect("MADV_RANDOM");
    // SAFETY: `posix_fadvise` only reads the descriptor, which `file` keeps open.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let pool = Pool::new(Arc::clone(&file), threads);
    let mut ring = IoUring::new(64).ok();
    if ring.is_none() {
        println!("io_uring refused by this kernel: the uring way is skipped");
    }
    let size = mb << 20;
    let ways = ["fault", "pread", "willneed", "pool", "uring"];
    let mut totals: Vec<(f64, u64, u64)> = vec![(0.0, 0, 0); ways.len()];
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "cold_batch_io: {mb} MiB file in {}, {rounds} rounds x {batches} batches of {batch} ranges of {RANGE} bytes, pool of {threads} threads; load average {}",
        dir.display(),
        l.trim()
    );
    let mut seed = 1u64;
    for round in 0..rounds {
        drop_caches();
        for (w, way) in ways.iter().enumerate() {
            let t = Instant::now();
            let rb = read_bytes();
            let mut offs = vec![0u64; batch];
            for _ in 0..batches {
                for o in offs.iter_mut() {
                    seed = mix(seed);
                    *o = seed % (size - RANGE as u64);
                }
                match *way {
                    "fault" => {
                        for &o in &offs {
                            std::hint::black_box(map[o as usize]);
                            std::hint::black_box(map[o as usize + RANGE - 1]);
                        }
                    }
                    "pread" => {
                        let mut buf = vec![0u8; RANGE];
                        for &o in &offs {
                            std::hint::black_box(file.read_at(&mut buf, o).unwrap_or(0));
                        }
                    }
                    "willneed" => {
                        for &o in &offs {
                            let _ = map.advise_range(Advice::WillNeed, o as usize, RANGE);
                        }
                        for &o in &offs {
                            std::hint::black_box(map[o as usize]);
                            std::hint::black_box(map[o as usize + RANGE - 1]);
                        }
                    }
                    "pool" => {
                        std::hint::black_box(pool.read(&offs));
                    }
                    _ => {
                        if let Some(r) = ring.as_mut() {
                            if uring_read(r, file.as_raw_fd(), &offs, Duration::from_secs(10))
                                .is_none()
                            {
                                println!("uring batch timed out: ring retired");
                                std::mem::forget(ring.take());
                            }
                        }
                    }
                }
            }
            let el = t.elapsed().as_secs_f64();
            let bytes = read_bytes() - rb;
            println!(
                "round {round} {way:>8}: {:>7.0} us/batch {:>8.0} ranges/s {:>5.1} KiB read/range",
                el / batches as f64 * 1e6,
                (batches * batch) as f64 / el,
                bytes as f64 / 1024.0 / (batches * batch) as f64
            );
            totals[w].0 += el;
            totals[w].1 += (batches * batch) as u64;
            totals[w].2 += bytes;
        }
    }
    println!();
    println!("| way | us per batch of {batch} | ranges/s | read KiB per range | vs fault |");
    println!("|---|---:|---:|---:|---:|");
    let base = totals[0].1 as f64 / totals[0].0;
    for (way, (el, n, bytes)) in ways.iter().zip(&totals) {
        let rate = *n as f64 / el;
        println!(
            "| {way} | {:.0} | {:.0} | {:.1} | {:.2} |",
            el / (*n as f64 / batch as f64) * 1e6,
            rate,
            *bytes as f64 / 1024.0 / *n as f64,
            rate / base
        );
    }
    drop(map);
    let _ = std::fs::remove_file(&path);
}

/// Waits for one completion of `ring` up to `timeout`; `Err(true)` on a timeout.
fn wait_one(ring: &mut IoUring, timeout: Duration) -> Result<i32, bool> {
    let ts = types::Timespec::from(timeout);
    let args = types::SubmitArgs::new().timespec(&ts);
    let deadline = Instant::now() + timeout;
    loop {
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(false),
        }
        if let Some(cqe) = ring.completion().next() {
            return Ok(cqe.result());
        }
        if Instant::now() >= deadline {
            return Err(true);
        }
    }
}

fn io_workers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|rd| {
            rd.flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("iou-wrk"))
                })
                .count()
        })
        .unwrap_or(0)
}

fn hang() {
    let threads = env_u64("KS_CBI_THREADS", 4);
    let files = env_u64("KS_CBI_FILES", 2000);
    let dir = PathBuf::from(format!("/dev/shm/ks-uring-hang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmpfs dir");
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "io_uring write hang reproduction: {threads} threads x {files} files of 3 x 64 KiB on {} (tmpfs), one ring per file, one write in flight, 10 s timeout per wait; load average {}",
        dir.display(),
        l.trim()
    );
    let t = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|th| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let (mut timeouts, mut writes) = (0u64, 0u64);
                let data = vec![0xA5u8; 64 << 10];
                for i in 0..files {
                    let p: PathBuf = dir.join(format!("{th}-{i}"));
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&p)
                        .expect("create");
                    let mut ring = IoUring::new(8).expect("io_uring");
                    let mut ok = true;
                    for c in 0..3u64 {
                        let sqe = opcode::Write::new(
                            types::Fd(f.as_raw_fd()),
                            data.as_ptr(),
                            data.len() as u32,
                        )
                        .offset(c * data.len() as u64)
                        .build();
                        // SAFETY: `data` outlives the thread's rings: a timed-out ring is leaked below, and
                        // `data` is leaked with it.
                        unsafe { ring.submission().push(&sqe) }.expect("room");
                        writes += 1;
                        match wait_one(&mut ring, Duration::from_secs(10)) {
                            Ok(_) => {}
                            Err(timed_out) => {
                                timeouts += u64::from(timed_out);
                                println!(
                                    "thread {th} file {i} write {c}: no completion after 10 s (iou-wrk threads now: {})",
                                    io_workers()
                                );
                                ok = false;
                                break;
                            }
                        }
                    }
                    if ok {
                        let sqe = opcode::Fsync::new(types::Fd(f.as_raw_fd())).build();
                        // SAFETY: an fsync entry points at no buffer.
                        unsafe { ring.submission().push(&sqe) }.expect("room");
                        let _ = wait_one(&mut ring, Duration::from_secs(10));
                        drop(ring);
                    } else {
                        std::mem::forget(ring);
                        std::mem::forget(data.clone());
                    }
                    drop(f);
                    let _ = std::fs::remove_file(&p);
                }
                (writes, timeouts)
            })
        })
        .collect();
    let (mut writes, mut timeouts) = (0, 0);
    for h in handles {
        let (w, t) = h.join().expect("thread");
        writes += w;
        timeouts += t;
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{writes} writes, {timeouts} without a completion within 10 s, in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// Moves this process into a new child cgroup limited to `mb` MiB (cgroup v1 memory controller, or v2), so
/// that every page read must first reclaim one, as in `benches/larger_than_memory.rs`. Returns its path.
fn enter_cgroup(mb: u64) -> Option<PathBuf> {
    let name = format!("ks-cold-batch-io-{}", std::process::id());
    let v1 = PathBuf::from("/sys/fs/cgroup/memory");
    let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
        (v1.join(name), "memory.limit_in_bytes")
    } else {
        (PathBuf::from("/sys/fs/cgroup").join(name), "memory.max")
    };
    let r = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(dir.join(limit_file), (mb << 20).to_string()))
        .and_then(|_| std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()));
    match r {
        Ok(()) => {
            println!("in cgroup {} limited to {mb} MiB", dir.display());
            Some(dir)
        }
        Err(e) => {
            println!("no cgroup ({e}): running without a memory limit");
            None
        }
    }
}

fn main() {
    let cg = match env_u64("KS_CBI_CGROUP_MB", 0) {
        0 => None,
        mb => enter_cgroup(mb),
    };
    run();
    if let Some(dir) = cg {
        // Back to the root cgroup, so that the child cgroup can be removed.
        let root = dir.parent().map(|p| p.join("cgroup.procs"));
        if let Some(root) = root {
            let _ = std::fs::write(root, std::process::id().to_string());
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

fn run() {
    if std::env::args().any(|a| a == "--hang") {
        hang();
    } else {
        reads();
    }
}

//! Upload buffers: a pool of fixed-size buffers that every upload of the storages sharing it reads files
//! into, bounded by the memory budget (`design/checkpoints.md`, "Upload buffers").
//!
//! * Every buffer is [`BUFFER_SIZE`] bytes. An upload asks for the buffers of one whole object (an object
//!   of at most one part) or of one part of a multipart upload, all at once ([`UploadBuffers::acquire`]),
//!   so that two uploads never each hold half of what they need.
//! * The pool charges the budget once for every buffer it holds, leased or free, with one reservation. A
//!   buffer is made only while the budget has room for it outside the block cache (memtables, SST
//!   metadata and other reservations leave [`BUFFER_SIZE`] or more of the capacity; the cache is evicted
//!   to make it), or while the pool holds fewer than [`GUARANTEED_BUFFERS`]: one part of the largest part
//!   size (an S3 part) always goes, so a checkpoint makes progress even when the budget is full of memtables
//!   that wait for it. Past that an upload waits (asynchronously: it parks no thread) for a buffer to come
//!   back or for room to appear in the budget (the budget tells the pool when memory outside the cache is
//!   given back: [`RoomListener`]).
//! * A buffer sent to the store comes back when the store drops the payload ([`bytes::Bytes::from_owner`]),
//!   and is reused by the next part or object. When an `upload_all` ends and no buffer is leased and
//!   nobody waits, the pool frees its buffers and its charge drops to zero ([`UploadBuffers::trim`]).
//!
//! Storages opened through one [`StateEnv`](crate::env::StateEnv) share one pool, so that several
//! checkpointers on one environment share the bound.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use keyed_state_lsm::{MemoryBudget, MemoryReservation, RoomListener};

/// Bytes of one buffer.
pub const BUFFER_SIZE: usize = 1 << 20;
/// Buffers the pool makes whatever the budget says: one part of 5 MiB, the smallest part S3 takes.
pub const GUARANTEED_BUFFERS: usize = 5;
/// Bytes of upload buffers a pool holds at most unless told otherwise (the budget may allow fewer).
pub const DEFAULT_UPLOAD_BUFFER_BYTES: usize = 32 << 20;

/// A pool of upload buffers bounded by a memory budget (see the module documentation). Shared through an
/// `Arc`.
pub struct UploadBuffers {
    memory: Option<Arc<MemoryBudget>>,
    max: usize,
    state: Mutex<PoolState>,
    returned: tokio::sync::Notify,
}

struct PoolState {
    /// Buffers not leased (capacity [`BUFFER_SIZE`], length 0).
    free: Vec<Vec<u8>>,
    /// Buffers that exist: free and leased.
    made: usize,
    /// The budget's charge for `made` buffers.
    charge: Option<MemoryReservation>,
    /// Tickets of the uploads waiting, first come first served.
    queue: VecDeque<u64>,
    next_ticket: u64,
    /// Figures: the most buffers that existed at once, and the acquisitions that had to wait.
    peak: usize,
    waits: u64,
}

impl std::fmt::Debug for UploadBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("UploadBuffers")
            .field("max", &self.max)
            .field("made", &s.made)
            .field("free", &s.free.len())
            .finish_non_exhaustive()
    }
}

/// What a pool did so far ([`UploadBuffers::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UploadBufferStats {
    /// Buffers that exist now (leased and free).
    pub buffers: usize,
    /// Bytes the pool charges its budget now.
    pub charged: usize,
    /// The most buffers that existed at once.
    pub peak_buffers: usize,
    /// Acquisitions that had to wait for a buffer or for room.
    pub waits: u64,
}

impl UploadBuffers {
    /// A pool charging `memory` (none: only bounded by `max_bytes`) that holds at most `max_bytes` of
    /// buffers (at least [`GUARANTEED_BUFFERS`] of them).
    pub fn new(memory: Option<Arc<MemoryBudget>>, max_bytes: usize) -> Arc<UploadBuffers> {
        let charge = memory.as_ref().map(|m| m.reserve(0));
        let pool = Arc::new(UploadBuffers {
            memory,
            max: (max_bytes / BUFFER_SIZE).max(GUARANTEED_BUFFERS),
            state: Mutex::new(PoolState {
                free: Vec::new(),
                made: 0,
                charge,
                queue: VecDeque::new(),
                next_ticket: 0,
                peak: 0,
                waits: 0,
            }),
            returned: tokio::sync::Notify::new(),
        });
        if let Some(m) = &pool.memory {
            let listener: Weak<dyn RoomListener> = Arc::downgrade(&pool) as Weak<dyn RoomListener>;
            m.listen_for_room(listener);
        }
        pool
    }

    /// The budget the pool charges, if any.
    pub fn memory(&self) -> Option<&Arc<MemoryBudget>> {
        self.memory.as_ref()
    }

    /// The most buffers the pool holds.
    pub fn max_buffers(&self) -> usize {
        self.max
    }

    /// What the pool holds and did ([`UploadBufferStats`]).
    pub fn stats(&self) -> UploadBufferStats {
        let s = self.lock();
        UploadBufferStats {
            buffers: s.made,
            charged: s.charge.as_ref().map_or(0, MemoryReservation::bytes),
            peak_buffers: s.peak,
            waits: s.waits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A panic while holding the lock leaves the counts consistent (no step of them can panic).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `n` buffers (at least 1, at most [`max_buffers`](Self::max_buffers)), all at once, when the pool
    /// and the budget allow (see the module documentation). Waits asynchronously; cancel-safe.
    pub async fn acquire(self: &Arc<Self>, n: usize) -> Lease {
        let n = n.clamp(1, self.max);
        let ticket = {
            let mut s = self.lock();
            if s.queue.is_empty() {
                if let Some(bufs) = self.take(&mut s, n) {
                    return Lease::new(self, bufs);
                }
            }
            s.waits += 1;
            let t = s.next_ticket;
            s.next_ticket += 1;
            s.queue.push_back(t);
            t
        };
        let _leave = LeaveQueue { pool: self, ticket };
        loop {
            let notified = self.returned.notified();
            futures::pin_mut!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                if s.queue.front() == Some(&ticket) {
                    if let Some(bufs) = self.take(&mut s, n) {
                        s.queue.pop_front();
                        drop(s);
                        // The next in line may be served too.
                        self.returned.notify_waiters();
                        return Lease::new(self, bufs);
                    }
                }
            }
            // Woken by a returned buffer or by room given back to the budget.
            notified.await;
        }
    }

    /// Takes `n` buffers from the free ones and new ones, if the pool and the budget allow all of them.
    fn take(&self, s: &mut PoolState, n: usize) -> Option<Vec<Vec<u8>>> {
        let new = n.saturating_sub(s.free.len());
        if new > 0 {
            let made = s.made + new;
            if made > self.max {
                return None;
            }
            let room = made <= GUARANTEED_BUFFERS
                || self
                    .memory
                    .as_ref()
                    .is_none_or(|m| m.cache_capacity() >= new * BUFFER_SIZE);
            if !room {
                return None;
            }
            s.made = made;
            s.peak = s.peak.max(made);
            if let Some(c) = s.charge.as_mut() {
                c.resize(made * BUFFER_SIZE);
            }
            for _ in 0..new {
                s.free.push(Vec::with_capacity(BUFFER_SIZE));
            }
        }
        let at = s.free.len() - n;
        Some(s.free.split_off(at))
    }

    /// Takes back a buffer for the next lease.
    fn give_back(&self, mut buf: Vec<u8>) {
        buf.clear();
        self.lock().free.push(buf);
        self.returned.notify_waiters();
    }

    /// Frees every buffer and drops the charge to zero if no buffer is leased and no upload waits;
    /// otherwise does nothing (the buffers are still in use). Called at the end of every
    /// [`upload_all`](super::CheckpointStorage::upload_all).
    pub fn trim(&self) {
        let freed = {
            let mut s = self.lock();
            if s.free.len() != s.made || !s.queue.is_empty() {
                return;
            }
            s.made = 0;
            if let Some(c) = s.charge.as_mut() {
                c.resize(0);
            }
            std::mem::take(&mut s.free)
        };
        drop(freed);
    }

    /// The pool's charge from its budget now, for tests and figures.
    pub fn charged(&self) -> usize {
        self.lock()
            .charge
            .as_ref()
            .map_or(0, MemoryReservation::bytes)
    }
}

impl RoomListener for UploadBuffers {
    fn room_freed(&self) {
        // Wakes the uploads waiting now (none: nothing happens); each looks again for room.
        self.returned.notify_waiters();
    }
}

/// Removes a waiting upload's ticket when its wait ends or is cancelled.
struct LeaveQueue<'a> {
    pool: &'a Arc<UploadBuffers>,
    ticket: u64,
}

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        let mut s = self.pool.lock();
        let before = s.queue.len();
        s.queue.retain(|t| *t != self.ticket);
        let left_early = s.queue.len() != before;
        drop(s);
        if left_early {
            // A cancelled head of the queue lets the next one try.
            self.pool.returned.notify_waiters();
        }
    }
}

/// Buffers leased from an [`UploadBuffers`] pool; each goes back when the [`PooledBuffer`] holding it is
/// dropped (buffers not taken out go back with the lease).
pub struct Lease {
    pool: Arc<UploadBuffers>,
    bufs: Vec<Vec<u8>>,
}

impl Lease {
    fn new(pool: &Arc<UploadBuffers>, bufs: Vec<Vec<u8>>) -> Lease {
        Lease {
            pool: Arc::clone(pool),
            bufs,
        }
    }

    /// Buffers left in the lease.
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    /// Whether every buffer was taken out.
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// Takes one buffer out (empty, capacity [`BUFFER_SIZE`]).
    pub fn take(&mut self) -> Option<PooledBuffer> {
        self.bufs.pop().map(|buf| PooledBuffer {
            pool: Arc::clone(&self.pool),
            buf,
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        for b in std::mem::take(&mut self.bufs) {
            self.pool.give_back(b);
        }
    }
}

/// One leased buffer; goes back to its pool when dropped.
pub struct PooledBuffer {
    pool: Arc<UploadBuffers>,
    buf: Vec<u8>,
}

impl PooledBuffer {
    /// The buffer (fill it up to its capacity, never past it).
    pub fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Bytes in it.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Room left before its capacity.
    pub fn room(&self) -> usize {
        BUFFER_SIZE.saturating_sub(self.buf.len())
    }

    /// The buffer as [`bytes::Bytes`] that gives it back to the pool when the last of them is dropped.
    pub fn into_bytes(self) -> bytes::Bytes {
        bytes::Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for PooledBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

//! One shard of the row cache ([`crate::row_cache`]): entries packed into fixed-size segments, found through
//! an open-addressing index of 8-byte slots, evicted by CLOCK one segment at a time.
//!
//! A row of a 10-byte key and a 100-byte value is about 120 bytes; a map slot, a ring key and an allocation
//! per entry added 56 to it. Here an entry is its bytes behind a 2-byte head (its length and the CLOCK
//! reference bit) inside a segment of [`SlabShard::segment_bytes`] bytes, and the index slot is 8 bytes (a
//! 32-bit tag of the entry's hash, the segment's id and the entry's offset), grown by half at a load of 3/4
//! and shrunk to a load of 1/2 below 3/16: in a cache filled by inserts loaded 1/2 to 3/4, about 11–16
//! bytes of bookkeeping per entry instead of 56 (up to 43 after erasures that leave it at 3/16). The resize
//! briefly holds the old and the new index, of which only the new one is charged.
//!
//! **Charge**: a shard is charged what it allocated: its segments (each a boxed slice of exactly
//! [`SlabShard::segment_bytes`]) and its index (a boxed slice of slots), nothing per entry. The bytes of
//! evicted or replaced entries stay in their segment until the segment is recycled, and the unused tail of
//! each segment is charged as part of it. The shard's small vectors of segment handles are not charged.
//!
//! **Eviction**: segments are kept in CLOCK order (oldest first; the last one is filled). When an entry
//! needs room and the shard may not allocate another segment, the oldest segment is recycled: its referenced
//! entries lose their bit and are slid to its front, the others are evicted, and it becomes the segment being
//! filled (second chance, one segment at a time). Lowering the bound ([`SlabShard::fit`]) frees segments by
//! second chance too, compacting the two oldest (or, when their entries were all read, moving them to the
//! newest end); room in a full index that may not grow is made by recycling. An erase
//! ([`SlabShard::erase_steps`], [`SlabShard::erase_step`]) drops chosen entries and compacts the segments left
//! at most half live, freeing the emptied ones, so that their charge is given back at once; it runs in steps
//! of a few segments, so that the caller can let lookups in between.
//!
//! **Index**: linear probing over a table of any size (a slot's home is its tag scaled to the table), with
//! deletion by backward shift, so that a slot's home is known from the slot alone. A tag is 32 bits of the
//! hash, so several slots may share one: a lookup compares each candidate's bytes ([`SlabShard::get`] takes
//! the comparison). To move an entry, the shard finds its slot by the entry's hash, which the function given
//! to [`SlabShard::new`] computes again from the entry's bytes.

use std::collections::VecDeque;

/// The largest segment: offsets in a slot are 16 bits, and an entry's length in its head 15.
pub(crate) const MAX_SEGMENT: usize = 1 << 15;
/// The smallest segment.
pub(crate) const MIN_SEGMENT: usize = 512;
/// Bytes of an entry's head: its length (15 bits) and the reference bit.
pub(crate) const HEAD: usize = 2;
const REFERENCED: u16 = 1 << 15;
/// Bytes of one index slot.
const SLOT: usize = 8;
/// The most segments of a shard (a slot's segment id is 16 bits): 2 GiB of 32 KiB segments, so a row cache
/// of 16 shards holds at most 32 GiB whatever its capacity.
const MAX_SEGMENTS: usize = 1 << 16;

/// A segment: `filled` bytes of entries, each `u16 head (length | reference bit) | bytes`.
struct Segment {
    data: Box<[u8]>,
    filled: usize,
    /// Bytes of its live entries (heads included).
    live: usize,
    /// The groups of the entries written into it ([`SlabShard::grouped`]; evicted ones too, until it is
    /// compacted).
    groups: Groups,
}

/// A 512-bit filter of entry groups (a group's bit: the top 9 bits of its 64-bit hash): a segment whose
/// filter lacks every bit of the groups erased holds none of their entries and is not read.
pub(crate) type Groups = [u64; 8];

/// Every bit set: a segment of entries without a group is read by every erase.
pub(crate) const ALL_GROUPS: Groups = [u64::MAX; 8];

/// Adds group hash `g` (`None`: an entry without a group) to `groups`.
fn add_group(groups: &mut Groups, g: Option<u64>) {
    match g {
        Some(g) => {
            let bit = (g >> 55) as usize;
            if let Some(w) = groups.get_mut(bit >> 6) {
                *w |= 1 << (bit & 63);
            }
        }
        None => *groups = ALL_GROUPS,
    }
}

/// The filter of the groups of hashes `gs`, for [`SlabShard::erase_steps`].
pub(crate) fn groups_of(gs: impl IntoIterator<Item = u64>) -> Groups {
    let mut groups = [0; 8];
    for g in gs {
        add_group(&mut groups, Some(g));
    }
    groups
}

fn no_group(_: &[u8]) -> Option<u64> {
    None
}

/// Where an entry lives: its segment's id and offset.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Loc {
    seg: u16,
    off: u16,
}

fn tag_of(h: u64) -> u32 {
    (h as u32).max(1)
}

fn slot(tag: u32, loc: Loc) -> u64 {
    (u64::from(tag) << 32) | (u64::from(loc.seg) << 16) | u64::from(loc.off)
}

fn slot_tag(s: u64) -> u32 {
    (s >> 32) as u32
}

fn slot_loc(s: u64) -> Loc {
    Loc {
        seg: (s >> 16) as u16,
        off: s as u16,
    }
}

/// A slot's home in a table of `n` slots (`n` > 0).
fn home(tag: u32, n: usize) -> usize {
    ((u64::from(tag) * n as u64) >> 32) as usize
}

/// What compaction does with a live entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Kept with its reference bit.
    Yes,
    /// Kept, its reference bit cleared.
    Cleared,
    /// Evicted.
    No,
}

/// A byte-bounded shard of entries packed into segments (see the module's documentation).
pub(crate) struct SlabShard {
    /// Segments by id (`None`: a free id).
    segs: Vec<Option<Segment>>,
    /// Free ids below `segs.len()`.
    free: Vec<u16>,
    /// Ids of the allocated segments, oldest first; the last is being filled.
    order: VecDeque<u16>,
    /// Index slots (0: empty).
    index: Box<[u64]>,
    /// Live entries.
    len: usize,
    segment_bytes: usize,
    /// The hash of an entry from its bytes (the one its insertion was given).
    rehash: fn(&[u8]) -> Option<u64>,
    /// The hash of an entry's group from its bytes ([`SlabShard::grouped`]).
    group: fn(&[u8]) -> Option<u64>,
}

impl SlabShard {
    /// An empty shard of segments of `segment_bytes` (clamped to [`MIN_SEGMENT`]..=[`MAX_SEGMENT`] and
    /// rounded down to a power of two), whose
    /// entries' hashes `rehash` computes from their bytes.
    pub(crate) fn new(segment_bytes: usize, rehash: fn(&[u8]) -> Option<u64>) -> Self {
        SlabShard {
            segs: Vec::new(),
            free: Vec::new(),
            order: VecDeque::new(),
            index: Box::default(),
            len: 0,
            // A power of two, an allocator's size class.
            segment_bytes: 1 << segment_bytes.clamp(MIN_SEGMENT, MAX_SEGMENT).ilog2(),
            rehash,
            group: no_group,
        }
    }

    /// The shard, its entries grouped by `group` (the hash of an entry's group from its bytes; the row
    /// cache's groups are files): each segment keeps a filter of its entries' groups, so that
    /// an erase ([`erase_steps`](Self::erase_steps)) reads only the segments that may hold the groups it
    /// erases.
    pub(crate) fn grouped(mut self, group: fn(&[u8]) -> Option<u64>) -> Self {
        self.group = group;
        self
    }

    /// Bytes of one segment.
    #[cfg(test)]
    pub(crate) fn segment_bytes(&self) -> usize {
        self.segment_bytes
    }

    /// The largest entry (its bytes, without the head) a segment holds.
    pub(crate) fn max_entry(&self) -> usize {
        self.segment_bytes - HEAD
    }

    /// Bytes the shard holds: its segments and its index.
    pub(crate) fn usage(&self) -> usize {
        self.order.len() * self.segment_bytes + self.index.len() * SLOT
    }

    /// The number of cached entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn seg(&self, id: u16) -> Option<&Segment> {
        self.segs.get(usize::from(id)).and_then(Option::as_ref)
    }

    fn seg_mut(&mut self, id: u16) -> Option<&mut Segment> {
        self.segs.get_mut(usize::from(id)).and_then(Option::as_mut)
    }

    /// The head and the byte range of the entry at `loc` in its segment's data.
    fn entry_at(&self, loc: Loc) -> Option<(u16, std::ops::Range<usize>)> {
        let seg = self.seg(loc.seg)?;
        let off = usize::from(loc.off);
        let head = u16::from_le_bytes([*seg.data.get(off)?, *seg.data.get(off + 1)?]);
        let start = off + HEAD;
        let end = start + usize::from(head & !REFERENCED);
        (end <= seg.filled).then_some((head, start..end))
    }

    fn bytes_at(&self, loc: Loc) -> Option<&[u8]> {
        let (_, range) = self.entry_at(loc)?;
        self.seg(loc.seg)?.data.get(range)
    }

    /// The index position of the slot of tag `tag` whose entry `pred` accepts.
    fn find(&self, tag: u32, mut pred: impl FnMut(Loc) -> bool) -> Option<usize> {
        let n = self.index.len();
        if n == 0 {
            return None;
        }
        let mut i = home(tag, n);
        for _ in 0..n {
            let s = *self.index.get(i)?;
            if s == 0 {
                return None;
            }
            if slot_tag(s) == tag && pred(slot_loc(s)) {
                return Some(i);
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        None
    }

    /// The index position of the entry of hash `h` whose bytes `matches` accepts.
    fn find_entry(&self, h: u64, matches: &dyn Fn(&[u8]) -> bool) -> Option<usize> {
        self.find(tag_of(h), |loc| self.bytes_at(loc).is_some_and(matches))
    }

    /// The index position of the slot pointing at `loc` (the entry there is live), found by the entry's hash.
    fn slot_of(&self, loc: Loc) -> Option<usize> {
        let h = (self.rehash)(self.bytes_at(loc)?)?;
        self.find(tag_of(h), |l| l == loc)
    }

    /// Puts `s` in the first empty slot from its home (the table has one).
    fn place(index: &mut [u64], s: u64) {
        let n = index.len();
        if n == 0 {
            return;
        }
        let mut i = home(slot_tag(s), n);
        for _ in 0..n {
            if let Some(x) = index.get_mut(i) {
                if *x == 0 {
                    *x = s;
                    return;
                }
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
    }

    /// Empties the slot at `i`, shifting back the slots after it that may move closer to their home.
    fn remove_slot(&mut self, mut hole: usize) {
        if let Some(&s) = self.index.get(hole) {
            let loc = slot_loc(s);
            if let Some((_, range)) = self.entry_at(loc) {
                let size = range.end - usize::from(loc.off);
                if let Some(seg) = self.seg_mut(loc.seg) {
                    seg.live = seg.live.saturating_sub(size);
                }
            }
        }
        let n = self.index.len();
        let mut j = hole;
        for _ in 0..n {
            j = if j + 1 == n { 0 } else { j + 1 };
            let Some(&s) = self.index.get(j) else { break };
            if s == 0 {
                break;
            }
            let h = home(slot_tag(s), n);
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                if let Some(x) = self.index.get_mut(hole) {
                    *x = s;
                }
                hole = j;
            }
        }
        if let Some(x) = self.index.get_mut(hole) {
            *x = 0;
            self.len -= 1;
        }
    }

    /// Rebuilds the index with `n` slots (`n` > `len`).
    fn resize_index(&mut self, n: usize) {
        let mut index = vec![0u64; n].into_boxed_slice();
        for &s in self.index.iter().filter(|&&s| s != 0) {
            Self::place(&mut index, s);
        }
        self.index = index;
    }

    /// The index's size after a growth of one of `n` slots: half as large again (a load of 3/4 becomes 1/2).
    fn grown(n: usize) -> usize {
        (n + n / 2).max(32)
    }

    /// The entry of hash `h` whose bytes `matches` accepts, marked recently used.
    pub(crate) fn get(&mut self, h: u64, matches: &dyn Fn(&[u8]) -> bool) -> Option<&[u8]> {
        let i = self.find_entry(h, matches)?;
        let loc = slot_loc(*self.index.get(i)?);
        let (head, range) = self.entry_at(loc)?;
        let seg = self.seg_mut(loc.seg)?;
        let off = usize::from(loc.off);
        let head = (head | REFERENCED).to_le_bytes();
        seg.data.get_mut(off..off + HEAD)?.copy_from_slice(&head);
        seg.data.get(range)
    }

    /// The entry of hash `h` whose bytes `matches` accepts, its reference bit left alone.
    pub(crate) fn peek(&self, h: u64, matches: &dyn Fn(&[u8]) -> bool) -> Option<&[u8]> {
        let i = self.find_entry(h, matches)?;
        self.bytes_at(slot_loc(*self.index.get(i)?))
    }

    /// Evicts the entry of hash `h` whose bytes `matches` accepts, if any (its bytes stay in their segment
    /// until it is recycled).
    pub(crate) fn remove(&mut self, h: u64, matches: &dyn Fn(&[u8]) -> bool) {
        if let Some(i) = self.find_entry(h, matches) {
            self.remove_slot(i);
        }
    }

    /// Caches `bytes` (an entry whose hash `rehash` computes as `h`) in place of the entry `matches`
    /// accepts, if any, evicting others to stay within `capacity`. An entry longer than
    /// [`max_entry`](Self::max_entry), or that cannot fit, is dropped (and the one it replaces with it).
    pub(crate) fn insert(
        &mut self,
        h: u64,
        bytes: &[u8],
        matches: &dyn Fn(&[u8]) -> bool,
        capacity: usize,
    ) {
        self.remove(h, matches);
        if bytes.len() > self.max_entry() || (self.rehash)(bytes) != Some(h) {
            self.fit(capacity);
            return;
        }
        // Room in the index: grow it, or make room by second chance (recycling the oldest segments, which
        // evicts their unreferenced entries), or at last drop the oldest segment whole.
        let mut chances = 2 * self.order.len() + 2;
        while (self.len + 1) * 4 > self.index.len() * 3 {
            let n = Self::grown(self.index.len());
            if self.usage() + (n - self.index.len()) * SLOT <= capacity {
                self.resize_index(n);
            } else if let (Some(&oldest), true) = (self.order.front(), chances > 0) {
                chances -= 1;
                self.recycle(oldest);
            } else if !self.drop_oldest() {
                self.fit(capacity);
                return;
            }
        }
        let size = HEAD + bytes.len();
        let mut attempts = 2 * self.order.len() + 2;
        let id = loop {
            if let Some(&id) = self.order.back() {
                if self
                    .seg(id)
                    .is_some_and(|s| s.filled + size <= self.segment_bytes)
                {
                    break id;
                }
            }
            if attempts == 0 {
                self.fit(capacity);
                return;
            }
            attempts -= 1;
            if self.usage() + self.segment_bytes <= capacity && self.order.len() < MAX_SEGMENTS {
                self.allocate();
            } else if let Some(&oldest) = self.order.front() {
                self.recycle(oldest);
            } else {
                self.fit(capacity);
                return;
            }
        };
        let g = (self.group)(bytes);
        let Some(seg) = self.seg_mut(id) else { return };
        let off = seg.filled;
        let Some(dst) = seg.data.get_mut(off..off + size) else {
            return;
        };
        let (head, body) = dst.split_at_mut(HEAD);
        head.copy_from_slice(&(bytes.len() as u16).to_le_bytes());
        body.copy_from_slice(bytes);
        seg.filled += size;
        seg.live += size;
        add_group(&mut seg.groups, g);
        let loc = Loc {
            seg: id,
            off: off as u16,
        };
        Self::place(&mut self.index, slot(tag_of(h), loc));
        self.len += 1;
        self.fit(capacity);
    }

    /// A new, empty segment becomes the one being filled.
    fn allocate(&mut self) {
        let seg = Segment {
            data: vec![0u8; self.segment_bytes].into_boxed_slice(),
            filled: 0,
            live: 0,
            groups: [0; 8],
        };
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(s) = self.segs.get_mut(usize::from(id)) {
                    *s = Some(seg);
                }
                id
            }
            None => {
                self.segs.push(Some(seg));
                (self.segs.len() - 1) as u16
            }
        };
        self.order.push_back(id);
    }

    /// Recycles segment `id` (the oldest): its referenced entries lose their bit and move to its front, the
    /// others are evicted, and it becomes the segment being filled.
    fn recycle(&mut self, id: u16) {
        self.compact(&[id], &mut |referenced, _| {
            if referenced {
                Keep::Cleared
            } else {
                Keep::No
            }
        });
        self.unlink(id);
        self.order.push_back(id);
    }

    /// Takes `id` out of the CLOCK order (the oldest in one step).
    fn unlink(&mut self, id: u16) {
        if self.order.front() == Some(&id) {
            self.order.pop_front();
        } else {
            self.order.retain(|&x| x != id);
        }
    }

    /// Compacts the two oldest segments by second chance (referenced entries kept, losing their bit; the
    /// others evicted) and frees those left empty; false if none was freed (then both go to the newest
    /// end) or there are fewer than two.
    fn merge_oldest(&mut self) -> bool {
        let ids: Vec<u16> = self.order.iter().take(2).copied().collect();
        if ids.len() < 2 {
            return false;
        }
        let empty = self.compact(&ids, &mut |referenced, _| {
            if referenced {
                Keep::Cleared
            } else {
                Keep::No
            }
        });
        if empty.is_empty() {
            for id in ids {
                self.unlink(id);
                self.order.push_back(id);
            }
            return false;
        }
        for id in empty {
            self.free_segment(id);
        }
        true
    }

    /// Evicts every entry of the oldest segment and frees it; false if there is none.
    fn drop_oldest(&mut self) -> bool {
        let Some(&id) = self.order.front() else {
            return false;
        };
        self.compact(&[id], &mut |_, _| Keep::No);
        self.free_segment(id);
        true
    }

    fn free_segment(&mut self, id: u16) {
        if let Some(s) = self.segs.get_mut(usize::from(id)) {
            *s = None;
            self.free.push(id);
        }
        self.unlink(id);
        if self.order.is_empty() {
            self.segs.clear();
            self.free.clear();
        }
    }

    /// Slides the live entries of segments `ids` (in CLOCK order) towards the first, keeping or evicting each
    /// as `keep` (its reference bit, its bytes) says, and returns the segments left empty at the end (their
    /// `filled` is 0). An entry never moves past where it was, so the slide is done in place.
    fn compact(&mut self, ids: &[u16], keep: &mut dyn FnMut(bool, &[u8]) -> Keep) -> Vec<u16> {
        let mut d = 0usize;
        let mut w = 0usize;
        let mut moved = Vec::new();
        let mut groups = vec![[0u64; 8]; ids.len()];
        let mut lives = vec![0usize; ids.len()];
        for &sid in ids {
            let filled = self.seg(sid).map_or(0, |s| s.filled);
            let mut off = 0;
            while off < filled {
                let loc = Loc {
                    seg: sid,
                    off: off as u16,
                };
                let Some((head, range)) = self.entry_at(loc) else {
                    break;
                };
                let size = range.end - off;
                off = range.end;
                let Some(i) = self.slot_of(loc) else {
                    continue; // replaced or evicted earlier
                };
                let referenced = head & REFERENCED != 0;
                let verdict = self.bytes_at(loc).map_or(Keep::No, |b| keep(referenced, b));
                if verdict == Keep::No {
                    self.remove_slot(i);
                    continue;
                }
                let head = if verdict == Keep::Cleared {
                    head & !REFERENCED
                } else {
                    head
                };
                if w + size > self.segment_bytes {
                    if let Some(s) = ids.get(d).and_then(|&id| self.seg_mut(id)) {
                        s.filled = w;
                    }
                    d += 1;
                    w = 0;
                }
                let Some(&did) = ids.get(d) else { break };
                moved.clear();
                moved.extend_from_slice(&head.to_le_bytes());
                if let Some(b) = self.bytes_at(loc) {
                    moved.extend_from_slice(b);
                }
                if let Some(dst) = self.seg_mut(did).and_then(|s| s.data.get_mut(w..w + size)) {
                    dst.copy_from_slice(&moved);
                }
                if let Some(gs) = groups.get_mut(d) {
                    add_group(gs, (self.group)(moved.get(HEAD..).unwrap_or_default()));
                }
                if let Some(l) = lives.get_mut(d) {
                    *l += size;
                }
                if let Some(s) = self.index.get_mut(i) {
                    *s = slot(
                        slot_tag(*s),
                        Loc {
                            seg: did,
                            off: w as u16,
                        },
                    );
                }
                w += size;
            }
        }
        let mut empty = Vec::new();
        for (k, &id) in ids.iter().enumerate() {
            if let Some(s) = self.seg_mut(id) {
                s.groups = groups.get(k).copied().unwrap_or(ALL_GROUPS);
                s.live = lives.get(k).copied().unwrap_or(0);
                if k == d {
                    s.filled = w;
                } else if k > d {
                    s.filled = 0;
                }
                if s.filled == 0 && k >= d {
                    empty.push(id);
                }
            }
        }
        empty
    }

    /// Frees segments until the shard holds at most `capacity` bytes (or is empty), and shrinks an index
    /// left less than 3/16 full. A segment is freed by second chance: the two oldest are compacted,
    /// their referenced entries losing their bit and the others evicted; when that frees neither, both go
    /// to the newest end (as a recycled segment does) and the next two are tried. Only after a whole turn
    /// that freed nothing is the oldest dropped whole.
    pub(crate) fn fit(&mut self, capacity: usize) {
        let mut misses = 0;
        while self.usage() > capacity {
            if self.merge_oldest() {
                misses = 0;
            } else if misses <= self.order.len() {
                misses += 1;
            } else if !self.drop_oldest() {
                break;
            }
        }
        self.shrink_index();
        if self.usage() > capacity && self.len == 0 {
            self.index = Box::default();
        }
    }

    fn shrink_index(&mut self) {
        let n = self.index.len();
        if self.len == 0 {
            self.index = Box::default();
        } else if self.len * 16 < n * 3 {
            // To a load of 1/2 (the next growth is at 3/4).
            self.resize_index((self.len * 2).max(32));
        }
    }

    /// Drops every live entry whose bytes `erase` accepts (entries of the groups in `groups` only;
    /// [`ALL_GROUPS`]: any), in one call: [`erase_steps`](Self::erase_steps) and every step, of two
    /// segments each (so that the tests run the steps' carry). Returns whether any entry was dropped.
    #[cfg(test)]
    pub(crate) fn erase(&mut self, groups: &Groups, mut erase: impl FnMut(&[u8]) -> bool) -> bool {
        let mut steps = self.erase_steps(groups);
        while !self.erase_step(&mut steps, 2, usize::MAX, &mut erase) {}
        steps.dropped
    }

    /// An erase of the entries of the groups in `groups` ([`ALL_GROUPS`]: any), to run in steps
    /// ([`erase_step`](Self::erase_step)): the segments whose group filter shares a bit with `groups`, as
    /// they are now (a segment allocated later holds entries cached after the erase began).
    pub(crate) fn erase_steps(&self, groups: &Groups) -> EraseSteps {
        let ids = self
            .order
            .iter()
            .copied()
            .filter(|&id| {
                self.seg(id)
                    .is_some_and(|s| s.groups.iter().zip(groups).any(|(a, b)| a & b != 0))
            })
            .collect();
        EraseSteps {
            ids,
            next: 0,
            carry: None,
            dropped: false,
        }
    }

    /// One step of an erase: reads the next segments of `steps`, entry head by entry head, and drops the
    /// live entries whose bytes `erase` accepts (`erase` is shown evicted entries' bytes too), stopping
    /// after the segment that makes `segments` segments read or `entries` entries dropped (so that a step
    /// holding the shard is short whether the segments hold few entries of the erased groups or only them).
    /// The segments left at most half live are compacted, together with the last segment the step before
    /// compacted into (so that steps pack as one pass would), into the fewest segments, and those emptied
    /// freed, so that their charge is given back at once; in the rest the erased entries' bytes stay until
    /// the segment is recycled, as an evicted entry's do. The last step shrinks the index if the erase
    /// left it sparse. Returns whether the erase is done.
    ///
    /// Between steps the shard is open to lookups and insertions: a segment of `steps` freed meanwhile is
    /// skipped (one allocated again under its id is read, which drops only entries `erase` accepts), and
    /// an entry that a recycle moved from a segment not yet read into one already read stays until its
    /// segment is recycled (memory only: nothing looks an erased group up again).
    pub(crate) fn erase_step(
        &mut self,
        steps: &mut EraseSteps,
        segments: usize,
        entries: usize,
        mut erase: impl FnMut(&[u8]) -> bool,
    ) -> bool {
        let mut dense: Vec<u16> = steps
            .carry
            .take()
            .filter(|&id| self.seg(id).is_some())
            .into_iter()
            .collect();
        let (mut read, mut dropped) = (0, 0);
        while read < segments && dropped < entries {
            let Some(&id) = steps.ids.get(steps.next) else {
                break;
            };
            steps.next += 1;
            read += 1;
            let filled = self.seg(id).map_or(0, |s| s.filled);
            let (mut off, mut erased) = (0, false);
            while off < filled {
                let loc = Loc {
                    seg: id,
                    off: off as u16,
                };
                let Some((_, range)) = self.entry_at(loc) else {
                    break;
                };
                off = range.end;
                if !self.bytes_at(loc).is_some_and(&mut erase) {
                    continue;
                }
                if let Some(i) = self.slot_of(loc) {
                    self.remove_slot(i);
                    erased = true;
                    dropped += 1;
                    steps.dropped = true;
                }
            }
            if erased && self.seg(id).is_some_and(|s| s.live * 2 <= s.filled) {
                dense.push(id);
            }
        }
        // Segments left empty are freed as they are; the others are compacted, the last one they fill
        // carried to the next step.
        let (empty, dense): (Vec<u16>, Vec<u16>) = dense
            .into_iter()
            .partition(|&id| self.seg(id).is_some_and(|s| s.live == 0));
        let emptied = self.compact(&dense, &mut |_, _| Keep::Yes);
        steps.carry = dense
            .iter()
            .rev()
            .copied()
            .find(|&id| self.seg(id).is_some_and(|s| s.filled > 0) && !emptied.contains(&id));
        for id in empty.into_iter().chain(emptied) {
            self.free_segment(id);
        }
        if steps.done() && steps.dropped {
            self.shrink_index();
        }
        steps.done()
    }
}

/// An erase in steps ([`SlabShard::erase_steps`]).
pub(crate) struct EraseSteps {
    /// The segments to read, in CLOCK order when the erase began.
    ids: Vec<u16>,
    /// How many of `ids` were read.
    next: usize,
    /// The last segment the step before compacted into, if it has room for more.
    carry: Option<u16>,
    /// Whether an entry was dropped.
    dropped: bool,
}

impl EraseSteps {
    /// Whether every segment was read.
    pub(crate) fn done(&self) -> bool {
        self.next >= self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries here are `u64 key (LE) | filler`; the hash is the key times an odd constant.
    fn rehash(b: &[u8]) -> Option<u64> {
        let k = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
        Some(k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    fn entry(k: u64, len: usize) -> Vec<u8> {
        let mut e = k.to_le_bytes().to_vec();
        e.resize(len.max(8), k as u8);
        e
    }

    fn is(k: u64) -> impl Fn(&[u8]) -> bool {
        move |b: &[u8]| b.get(..8) == Some(&k.to_le_bytes()[..])
    }

    fn put(s: &mut SlabShard, k: u64, len: usize, capacity: usize) {
        s.insert(
            rehash(&k.to_le_bytes()).unwrap_or(0),
            &entry(k, len),
            &is(k),
            capacity,
        );
    }

    fn has(s: &SlabShard, k: u64) -> bool {
        s.peek(rehash(&k.to_le_bytes()).unwrap_or(0), &is(k))
            .is_some_and(|b| b == entry(k, b.len()))
    }

    fn hit(s: &mut SlabShard, k: u64) -> bool {
        s.get(rehash(&k.to_le_bytes()).unwrap_or(0), &is(k))
            .is_some()
    }

    #[test]
    fn entries_are_found_replaced_and_the_usage_is_segments_and_index() {
        let mut s = SlabShard::new(1024, rehash);
        assert_eq!(s.usage(), 0);
        for k in 0..20 {
            put(&mut s, k, 100, 1 << 20);
        }
        assert!((0..20).all(|k| has(&s, k)) && !has(&s, 20));
        assert_eq!(s.len(), 20);
        // 102 bytes per entry: 10 per segment.
        assert_eq!(s.usage(), 2 * 1024 + s.index.len() * SLOT);
        put(&mut s, 3, 200, 1 << 20);
        assert_eq!(
            (
                s.len(),
                s.peek(rehash(&3u64.to_le_bytes()).unwrap_or(0), &is(3))
                    .map(<[u8]>::len)
            ),
            (20, Some(200))
        );
        // Too large for a segment: dropped, with the entry it replaced.
        put(&mut s, 4, 2000, 1 << 20);
        assert!(!has(&s, 4) && s.len() == 19);
    }

    #[test]
    fn a_referenced_entry_survives_its_segment_s_recycling_and_the_others_go() {
        let mut s = SlabShard::new(1024, rehash);
        // Room for two segments and the index.
        let capacity = 2 * 1024 + 32 * SLOT;
        for k in 0..20 {
            put(&mut s, k, 100, capacity);
        }
        assert!(hit(&mut s, 0) && hit(&mut s, 5));
        put(&mut s, 20, 100, capacity);
        // The first segment (0..10) was recycled: 0 and 5 kept, the rest evicted.
        assert!(has(&s, 0) && has(&s, 5) && has(&s, 20));
        assert!((1..10).filter(|&k| k != 5).all(|k| !has(&s, k)));
        assert!((10..20).all(|k| has(&s, k)));
        assert!(s.usage() <= capacity);
        // Everything keeps being found as the shard churns.
        for k in 21..2_000 {
            put(&mut s, k, 100, capacity);
            assert!(has(&s, k) && s.usage() <= capacity, "{k}");
        }
    }

    #[test]
    fn an_entry_read_once_survives_one_recycling_and_goes_at_the_next_unless_read_again() {
        let mut s = SlabShard::new(1024, rehash);
        // Room for two segments of 10 entries and the index.
        let capacity = 2 * 1024 + 32 * SLOT;
        for k in 0..20 {
            put(&mut s, k, 100, capacity);
        }
        assert!(hit(&mut s, 0) && hit(&mut s, 5));
        // The first segment is recycled: 0 and 5 kept, their bits cleared; it is now the newest.
        put(&mut s, 20, 100, capacity);
        assert!(has(&s, 0) && has(&s, 5));
        // 5 is read again, 0 is not.
        assert!(hit(&mut s, 5));
        // Filling the rest of that segment (21..28) and the other one (28..38, after recycling it) keeps both.
        for k in 21..38 {
            put(&mut s, k, 100, capacity);
            assert!(has(&s, 0) && has(&s, 5), "{k}");
        }
        // The next recycling of their segment evicts 0 and keeps 5.
        put(&mut s, 38, 100, capacity);
        assert!(!has(&s, 0) && has(&s, 5) && has(&s, 38));
        assert!(s.usage() <= capacity);
    }

    #[test]
    fn an_entry_whose_hash_is_not_its_rehash_is_not_cached_and_the_shard_stays_consistent() {
        let mut s = SlabShard::new(1024, rehash);
        let capacity = 2 * 1024 + 32 * SLOT;
        for k in 0..10 {
            put(&mut s, k, 100, capacity);
        }
        let wrong = rehash(&99u64.to_le_bytes()).unwrap_or(0) ^ 1;
        s.insert(wrong, &entry(99, 100), &is(99), capacity);
        assert!(s.peek(wrong, &is(99)).is_none() && !has(&s, 99));
        assert_eq!(s.len(), 10);
        // Churn through many recyclings: every entry put is found, and the bound holds.
        for k in 10..500 {
            put(&mut s, k, 100, capacity);
            assert!(has(&s, k) && s.usage() <= capacity, "{k}");
        }
        assert!(s.peek(wrong, &is(99)).is_none() && !has(&s, 99));
    }

    #[test]
    fn fit_drops_the_oldest_segments_and_erase_compacts_and_frees() {
        let mut s = SlabShard::new(1024, rehash);
        for k in 0..100 {
            put(&mut s, k, 100, 1 << 20);
        }
        s.fit(5 * 1024 + s.index.len() * SLOT);
        // Whole segments of 10 entries went, oldest first.
        let left = s.len() as u64;
        assert!(left <= 50 && left % 10 == 0, "{left}");
        assert!((0..100).all(|k| has(&s, k) == (k >= 100 - left)));
        s.erase(&ALL_GROUPS, |b| b.first().is_some_and(|k| k % 2 != 0));
        assert!((0..100).all(|k| has(&s, k) == (k % 2 == 0 && k >= 100 - left)));
        // The survivors, packed: 10 per segment, the others freed.
        assert_eq!(s.order.len(), s.len().div_ceil(10));
        assert_eq!(s.usage(), s.order.len() * 1024 + s.index.len() * SLOT);
        s.erase(&ALL_GROUPS, |_| true);
        assert_eq!((s.usage(), s.len()), (0, 0));
    }

    #[test]
    fn a_lower_bound_keeps_the_entries_read_since_their_segment_was_last_recycled() {
        let mut s = SlabShard::new(1024, rehash);
        for k in 0..100 {
            put(&mut s, k, 100, 1 << 20);
        }
        // Keys 0..20 are in the two oldest segments; they are read, the others are not.
        for k in 0..20 {
            hit(&mut s, k);
        }
        s.fit(5 * 1024 + s.index.len() * SLOT);
        assert!(s.usage() <= 5 * 1024 + 32 * SLOT * 8);
        assert!((0..20).all(|k| has(&s, k)));
    }

    #[test]
    fn a_shard_too_small_for_a_segment_holds_and_is_charged_nothing() {
        for capacity in [256, 600, 1024 + 255] {
            let mut s = SlabShard::new(1024, rehash);
            put(&mut s, 1, 100, capacity);
            assert_eq!((s.len(), s.usage()), (0, 0), "{capacity}");
        }
    }

    #[test]
    fn hot_entries_survive_a_stream_of_cold_ones_whatever_the_capacity() {
        // Some capacities leave the index at 3/4 load with no room to grow once the segments fill them;
        // the room for more slots must then be made with second chance too, not by dropping the oldest
        // segment whole.
        for capacity in (4 * 1024..24 * 1024).step_by(64) {
            let mut s = SlabShard::new(512, rehash);
            let hot = (capacity / 100 / 4) as u64;
            for k in 0..hot {
                put(&mut s, k, 40, capacity);
            }
            for cold in 0..2_000u64 {
                for k in 0..hot {
                    hit(&mut s, k);
                }
                put(&mut s, 1_000_000 + cold, 40, capacity);
            }
            let kept = (0..hot).filter(|&k| has(&s, k)).count() as u64;
            assert_eq!(kept, hot, "capacity {capacity}");
        }
    }

    #[test]
    fn erase_reads_only_the_segments_whose_filter_has_a_group_erased() {
        let mut s = SlabShard::new(1024, rehash).grouped(group);
        // Ten entries of 100 bytes per segment; the 50 keys of group 0 only in the first five segments.
        let others: Vec<u64> = (1..256u64).filter(|k| k % 5 != 0).take(50).collect();
        for k in (0..50u64).map(|k| k * 5).chain(others.iter().copied()) {
            put(&mut s, k, 100, 1 << 20);
        }
        let mut read = 0;
        s.erase(&groups_of([group_hash(0)]), |b| {
            read += 1;
            b.first().is_some_and(|k| k % 5 == 0)
        });
        // The entries of the five segments with group 0 (the others' filters lack its bit).
        assert_eq!(read, 50, "{read}");
        assert!((0..50u64).all(|k| !has(&s, k * 5)) && others.iter().all(|&k| has(&s, k)));
        assert_eq!(s.order.len(), 5);
        // A group no segment holds reads nothing.
        let mut read = 0;
        assert!(!s.erase(&groups_of([group_hash(0)]), |_| {
            read += 1;
            false
        }));
        assert_eq!(read, 0);
    }

    #[test]
    fn the_index_finds_every_entry_through_growth_shifts_and_tag_collisions() {
        // Keys whose hashes share their low 32 bits (one tag) and others.
        fn rehash_low(b: &[u8]) -> Option<u64> {
            let k = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
            Some(if k % 3 == 0 {
                7
            } else {
                k.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            })
        }
        let mut s = SlabShard::new(4096, rehash_low);
        let h = |k: u64| rehash_low(&k.to_le_bytes()).unwrap_or(0);
        for k in 0..3_000u64 {
            s.insert(h(k), &entry(k, 20), &is(k), 1 << 22);
        }
        for k in (0..3_000u64).step_by(2) {
            s.erase(&ALL_GROUPS, |b| b.get(..8) == Some(&k.to_le_bytes()[..]));
            if k > 300 {
                break;
            }
        }
        for k in 0..3_000u64 {
            let gone = k % 2 == 0 && k <= 302;
            assert_eq!(s.peek(h(k), &is(k)).is_some(), !gone, "{k}");
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u16),
        Hit(u8),
        Remove(u8),
        Fit(u16),
        Retain(u8),
        EraseGroup(u8),
    }

    /// Hashes whose low 32 bits (the index's tag) are one of eight.
    fn rehash_few_tags(b: &[u8]) -> Option<u64> {
        let k = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
        Some((k.wrapping_mul(0x9E37_79B9_7F4A_7C15) & !0xFFFF_FFFF) | (k % 8 + 1))
    }

    /// The group of an entry of key `k`: `k % 5`, spread over 64 bits.
    fn group_hash(g: u64) -> u64 {
        g.wrapping_mul(0xC4CE_B9FE_1A85_EC53).rotate_left(29) ^ g
    }

    fn group(b: &[u8]) -> Option<u64> {
        Some(group_hash(u64::from(*b.first()?) % 5))
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (any::<u8>(), 0u16..600).prop_map(|(k, l)| Op::Put(k, l)),
            2 => any::<u8>().prop_map(Op::Hit),
            1 => any::<u8>().prop_map(Op::Remove),
            1 => (0u16..8_000).prop_map(Op::Fit),
            1 => (2u8..9).prop_map(Op::Retain),
            1 => (0u8..5).prop_map(Op::EraseGroup),
        ]
    }

    proptest::proptest! {
        /// Whatever the shard answers is the last value put under the key, it never holds a key removed
        /// or dropped since, it counts what it can find, and it stays within its bound.
        #[test]
        fn the_shard_answers_only_the_last_value_put_and_stays_within_its_bound(
            ops in proptest::collection::vec(op(), 1..400),
            capacity in 1_000usize..12_000,
            few_tags in proptest::bool::ANY,
        ) {
            // With `few_tags`, the keys' hashes share eight 32-bit tags: moves and backward shifts among
            // slots of one tag.
            let rh: fn(&[u8]) -> Option<u64> = if few_tags { rehash_few_tags } else { rehash };
            let h = |k: u64| rh(&k.to_le_bytes()).unwrap_or(0);
            let mut s = SlabShard::new(512, rh).grouped(group);
            let mut last: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
            let mut cap = capacity;
            for op in ops {
                match op {
                    Op::Put(k, l) => {
                        let k = u64::from(k);
                        s.insert(h(k), &entry(k, usize::from(l)), &is(k), cap);
                        last.insert(k, usize::from(l).max(8));
                    }
                    Op::Hit(k) => {
                        s.get(h(u64::from(k)), &is(u64::from(k)));
                    }
                    Op::Remove(k) => {
                        s.remove(h(u64::from(k)), &is(u64::from(k)));
                        last.remove(&u64::from(k));
                    }
                    Op::Fit(c) => {
                        cap = usize::from(c);
                        s.fit(cap);
                    }
                    Op::Retain(m) => {
                        s.erase(&ALL_GROUPS, |b| b.first().is_some_and(|k| k % m == 0));
                        last.retain(|k, _| k % u64::from(m) != 0);
                    }
                    Op::EraseGroup(g) => {
                        let groups = groups_of([group_hash(u64::from(g))]);
                        s.erase(&groups, |b| b.first().is_some_and(|k| k % 5 == g));
                        last.retain(|k, _| k % 5 != u64::from(g));
                    }
                }
                let mut found = 0;
                for k in 0..=255u64 {
                    let got = s.peek(h(k), &is(k));
                    if let Some(b) = got {
                        found += 1;
                        proptest::prop_assert_eq!(Some(&b.len()), last.get(&k), "key {}", k);
                        proptest::prop_assert_eq!(b, &entry(k, b.len())[..]);
                    }
                }
                proptest::prop_assert_eq!(found, s.len());
                proptest::prop_assert!(s.usage() <= cap, "{} > {}", s.usage(), cap);
                // Each segment counts the bytes of its live entries.
                for &id in &s.order {
                    let (filled, live) = s.seg(id).map_or((0, 0), |g| (g.filled, g.live));
                    let (mut off, mut counted) = (0, 0);
                    while let Some((_, range)) = s.entry_at(Loc { seg: id, off: off as u16 }) {
                        if s.slot_of(Loc { seg: id, off: off as u16 }).is_some() {
                            counted += range.end - off;
                        }
                        off = range.end;
                        if off >= filled {
                            break;
                        }
                    }
                    proptest::prop_assert_eq!(live, counted, "segment {}", id);
                }
            }
        }
    }
}

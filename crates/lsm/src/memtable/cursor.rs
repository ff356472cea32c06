//! [`MemCursor`]: a forward cursor over a memtable that holds an `Arc` of its table, for iterators that
//! outlive a borrow.

use std::sync::Arc;

use super::entry::{key_word, MemEntry};
use super::versions::{Chain, Pos};
use super::MemTable;
use crate::ikey;
use crate::skiplist::NodeRef;

/// A forward cursor over a memtable that owns a share of it and can outlive any borrow: it holds its current
/// node and a position in that node's chain (nothing is removed or changed in place, so a step is one
/// pointer hop), and copies nothing out.
pub(crate) struct MemCursor {
    /// The current node and version, in `mem`'s list: valid while `mem` is held (see `detach`).
    cur: Option<(NodeRef<'static, Chain>, Pos<'static>)>,
    /// The table, kept alive by the cursor.
    mem: Arc<MemTable>,
}

// SAFETY: the cursor only reads the node and versions it points to (through shared references, like the
// `Arc<MemTable>` it holds, which is `Send + Sync`), and they live as long as that `Arc`.
unsafe impl Send for MemCursor {}
// SAFETY: as above.
unsafe impl Sync for MemCursor {}

impl MemCursor {
    /// An unpositioned cursor over `mem`.
    pub fn new(mem: Arc<MemTable>) -> Self {
        Self { cur: None, mem }
    }

    /// Positions at the first version at or after node `e` (of `self.mem.list`) whose internal key is
    /// `>= (user_key, trailer)` of `target` (None: the newest version of `e`): within `e` if it is the node of
    /// `user_key`, else (or if every version there is newer) the newest version of the next node.
    fn settle(&mut self, mut e: Option<NodeRef<'static, Chain>>, target: Option<(&[u8], u64)>) {
        while let Some(node) = e {
            let chain = node.get();
            let pos = match target {
                Some((uk, t)) if chain.user_key() == uk => chain.seek(t),
                _ => Some(chain.newest()),
            };
            if let Some(pos) = pos {
                self.cur = Some((node, pos));
                return;
            }
            e = node.next();
        }
        self.cur = None;
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) {
        let first = detach(self.mem.list.first());
        self.settle(first, None);
    }

    /// Positions at the first entry whose internal key is `>= target`.
    pub fn seek(&mut self, target: &[u8]) {
        let split = target.len().saturating_sub(ikey::TRAILER_LEN);
        let (uk, t) = target.split_at(split);
        // Not a whole internal key (never produced by the engine): the newest version of `target` on.
        let (uk, t) = match <[u8; 8]>::try_from(t) {
            Ok(t) => (uk, u64::from_be_bytes(t)),
            Err(_) => (target, u64::MAX),
        };
        let word = key_word(uk);
        let start = detach(self.mem.list.lower_bound(|c| c.cmp_to(uk, word)));
        self.settle(start, Some((uk, t)));
    }

    /// Advances to the next entry.
    pub fn next(&mut self) {
        let Some((node, pos)) = &mut self.cur else {
            return;
        };
        if let Some(older) = pos.older() {
            *pos = older;
            return;
        }
        let next = node.next();
        self.settle(next, None);
    }

    /// The current entry.
    #[inline]
    pub fn entry(&self) -> Option<&MemEntry> {
        self.cur.as_ref().map(|(node, pos)| node.get().entry(*pos))
    }
}

/// Extends the lifetime of a node of a [`MemCursor`]'s own table to `'static`, so the cursor can hold it
/// next to the `Arc` that keeps the table alive.
#[inline]
fn detach(e: Option<NodeRef<'_, Chain>>) -> Option<NodeRef<'static, Chain>> {
    // SAFETY: only called on nodes of `MemCursor::mem.list`, which lives inside the `Arc` allocation the
    // cursor holds (never replaced) for as long as the cursor exists; nodes are never removed, and their
    // memory (the table's arena) is freed only with the table. The `'static` lifetime never escapes:
    // `MemCursor::entry` hands out borrows of the cursor.
    e.map(|n| unsafe { n.extend() })
}

#[cfg(test)]
mod tests {
    use super::super::lookup_key;
    use super::*;
    use crate::ikey::ValueKind;

    #[test]
    fn cursor_keeps_its_table_alive_and_sees_later_inserts_ahead() {
        let m = Arc::new(MemTable::new(0));
        for i in (0..100u64).step_by(2) {
            m.add(i + 1, ValueKind::Put, format!("k{i:03}").as_bytes(), b"v");
        }
        let mut c = MemCursor::new(Arc::clone(&m));
        c.seek(&lookup_key(b"k050", u64::MAX));
        // Inserts after the cursor's position become visible as it advances (the table is append-only).
        m.add(1000, ValueKind::Put, b"k051", b"new");
        drop(m);
        let mut seen = Vec::new();
        while let Some(e) = c.entry() {
            seen.push(ikey::user_key(e.ikey()).to_vec());
            c.next();
        }
        assert_eq!(seen.first().map(Vec::as_slice), Some(&b"k050"[..]));
        assert_eq!(seen.get(1).map(Vec::as_slice), Some(&b"k051"[..]));
        assert_eq!(seen.len(), 26);
        // Stepping past the end stays at the end; dropping the cursor frees the table.
        c.next();
        assert!(c.entry().is_none());
    }
}

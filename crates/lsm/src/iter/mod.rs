//! Iterators: the engine's cursors over internal keys (memtables, SST files, bounded files, levels), the
//! merging cursor over every source of a read, and the user-facing [`DbIter`] that resolves versions,
//! tombstones (point and range) and merge operands at a snapshot.
//!
//! Layers, each using only those before it: `internal` (the cursor trait, memtable and file cursors),
//! `clamped` (bounded files), `level` (one level's files), `merging` (every source of a read), `db_iter`.

mod clamped;
mod db_iter;
mod internal;
mod level;
mod merging;

pub(crate) use clamped::TombIter;
pub(crate) use db_iter::IterParts;
pub use db_iter::{DbEntries, DbIter};
pub(crate) use internal::InternalIterator;
pub(crate) use level::compaction_file_iter;
pub(crate) use merging::MergingIter;

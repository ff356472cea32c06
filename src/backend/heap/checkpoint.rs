//! Heap checkpoints, incremental per (state, key group) (`design/checkpoints.md`, "Heap checkpoints").
//!
//! Each non-empty table is one checkpoint file named by a number. A table keeps its number while it is
//! unchanged since the checkpoint that numbered it: the backend holds a weak reference to the table's
//! copy-on-write allocation ([`TableVersion`]), and every write moves or copies the table to a new one. The
//! synchronous part compares and clones the tables (reference counts only: O(states × key groups)); the
//! asynchronous part serializes the tables the incremental base lacks (`checkpoint::heap_table`).

use std::sync::Arc;

use super::map_table::{MapTable, MapVersion};
use super::table::{CowTable, KvVersion};
use super::timer_table::{TimerTable, TimerVersion};
use super::{HeapSnapshot, StateTables};
use crate::backend::BackendKind;
use crate::backend::{
    BackendSnapshot, CapturedFile, CapturedFiles, CheckpointCapture, FileSource, TableSource,
};
use crate::error::Result;
use crate::keygroup::KeyGroup;

/// The contents one table had when it was numbered.
pub(super) enum TableVersion {
    Kv(KvVersion),
    Map(MapVersion),
    Timer(TimerVersion),
}

/// A table reached through [`StateTables`].
enum TableRef<'a> {
    Kv(&'a CowTable),
    Map(&'a MapTable),
    Timer(&'a TimerTable),
}

impl TableRef<'_> {
    fn is_empty(&self) -> bool {
        match self {
            TableRef::Kv(t) => crate::backend::heap::table::KvTable::is_empty(*t),
            TableRef::Map(t) => t.is_empty(),
            TableRef::Timer(t) => t.is_empty(),
        }
    }
    fn version(&self) -> TableVersion {
        match self {
            TableRef::Kv(t) => TableVersion::Kv(t.version()),
            TableRef::Map(t) => TableVersion::Map(t.version()),
            TableRef::Timer(t) => TableVersion::Timer(t.version()),
        }
    }
    fn is_version(&self, v: &TableVersion) -> bool {
        match (self, v) {
            (TableRef::Kv(t), TableVersion::Kv(v)) => t.is_version(v),
            (TableRef::Map(t), TableVersion::Map(v)) => t.is_version(v),
            (TableRef::Timer(t), TableVersion::Timer(v)) => t.is_version(v),
            _ => false,
        }
    }
}

fn table_at(t: &StateTables, g: usize) -> Option<TableRef<'_>> {
    match t {
        StateTables::Kv(v) => v.get(g).map(TableRef::Kv),
        StateTables::Map(v) => v.get(g).map(TableRef::Map),
        StateTables::Timer(v) => v.get(g).map(TableRef::Timer),
    }
}

/// The numbers of the tables, per state and key-group index.
#[derive(Default)]
pub(super) struct Numbering {
    tables: Vec<Vec<Option<(TableVersion, u64)>>>,
    next: u64,
}

impl Numbering {
    /// The number of (state, group index) now, a new one when the table changed since it was numbered.
    fn number(&mut self, state: usize, g: usize, groups: usize, t: &TableRef<'_>) -> u64 {
        if self.tables.len() <= state {
            self.tables.resize_with(state + 1, Vec::new);
        }
        let row = &mut self.tables[state];
        if row.len() < groups {
            row.resize_with(groups, || None);
        }
        if let Some((v, n)) = &row[g] {
            if t.is_version(v) {
                return *n;
            }
        }
        self.next += 1;
        row[g] = Some((t.version(), self.next));
        self.next
    }

    #[cfg(feature = "checkpoints")]
    /// Records that (state, group index) holds the contents of file `number` (after a restore).
    fn set(&mut self, state: usize, g: usize, groups: usize, t: &TableRef<'_>, number: u64) {
        if self.tables.len() <= state {
            self.tables.resize_with(state + 1, Vec::new);
        }
        let row = &mut self.tables[state];
        if row.len() < groups {
            row.resize_with(groups, || None);
        }
        row[g] = Some((t.version(), number));
        self.next = self.next.max(number);
    }
}

impl super::HeapBackend {
    /// The synchronous part of a checkpoint: numbers every non-empty table (keeping the number of an
    /// unchanged one) and clones the tables.
    pub(super) fn capture(&mut self) -> Result<Box<dyn CheckpointCapture>> {
        let range = self.config.key_group_range;
        let groups = range.len();
        let mut files = Vec::new();
        for (s, st) in self.tables.iter().enumerate() {
            for (g, kg) in range.iter().enumerate() {
                let Some(t) = table_at(st, g) else { continue };
                if t.is_empty() {
                    continue;
                }
                let number = self.numbering.number(s, g, groups, &t);
                files.push(CapturedFile {
                    number,
                    level: 0,
                    size: 0,
                    source: FileSource::Table {
                        state: s as u32,
                        key_group: kg,
                    },
                });
            }
        }
        let snap = HeapSnapshot {
            prefix_len: self.prefix_len,
            config: self.config.clone(),
            states: self.states.clone(),
            tables: Arc::new(self.tables.clone()),
        };
        Ok(Box::new(HeapCapture { files, snap }))
    }

    #[cfg(feature = "checkpoints")]
    /// After a restore of one instance's part: table (`state`, `kg`) holds the contents of file `number`,
    /// so a checkpoint that claims the restored one references it while it stays unchanged.
    pub(crate) fn set_table_number(&mut self, state: usize, kg: KeyGroup, number: u64) {
        let range = self.config.key_group_range;
        let (Some(g), Some(st)) = (range.index_of(kg), self.tables.get(state)) else {
            return;
        };
        if let Some(t) = table_at(st, g) {
            self.numbering.set(state, g, range.len(), &t, number);
        }
    }
}

/// The heap backend's capture: the numbered files and the cloned tables.
struct HeapCapture {
    files: Vec<CapturedFile>,
    snap: HeapSnapshot,
}

impl CheckpointCapture for HeapCapture {
    fn wait(self: Box<Self>, _cancelled: &std::sync::atomic::AtomicBool) -> Result<CapturedFiles> {
        let HeapCapture { files, snap } = *self;
        Ok(CapturedFiles {
            backend: BackendKind::Heap,
            files,
            storage: keyed_state_lsm::storage::StorageHandle::os(),
            seqno: 0,
            view: keyed_state_lsm::CaptureView::Off,
            tables: Some(Box::new(HeapTables(snap))),
            keep_alive: Box::new(()),
        })
    }
}

/// Serializes the cloned tables.
struct HeapTables(HeapSnapshot);

impl TableSource for HeapTables {
    fn render(&self, state: u32, key_group: KeyGroup, out: &mut Vec<u8>) -> Result<()> {
        let prefix_len = self.0.prefix_len;
        super::table_file::begin(out);
        self.0.visit(state as usize, key_group, &mut |k, v| {
            super::table_file::push_entry(out, k.get(prefix_len..).unwrap_or_default(), v);
            Ok(())
        })
    }
}

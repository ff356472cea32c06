//! Pluggable compaction filters.
//!
//! Unlike RocksDB (which never shows merge operands to a filter), the filter here sees **every** entry
//! a compaction would keep: full values ([`FilterEntryKind::Value`]) and each merge operand on its own
//! ([`FilterEntryKind::MergeOperand`]), *before* operands are merged. So a TTL filter can drop or rewrite
//! expired list elements whether they still sit in separate operands or were already merged into a value.
//! Removing a value turns it into a deletion (dropped entirely in the bottommost level); removing an operand
//! just drops that operand. Filters ignore snapshots: a filtered entry disappears for old snapshots too.

/// What a filter wants done with an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterDecision {
    /// Keep the entry unchanged.
    Keep,
    /// Drop the entry.
    Remove,
    /// Replace the value (or operand) with new bytes.
    Replace(Vec<u8>),
}

/// The kind of entry shown to a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterEntryKind {
    /// A full value (a put, or the result of an earlier merge).
    Value,
    /// A single merge operand.
    MergeOperand,
}

/// Decides per entry during one compaction.
pub trait CompactionFilter: Send {
    /// Judges one entry of `key`.
    fn filter(&mut self, key: &[u8], kind: FilterEntryKind, value: &[u8]) -> FilterDecision;
}

/// Facts about the compaction a filter is created for.
#[derive(Debug, Clone, Copy)]
pub struct CompactionFilterContext {
    /// The level the output is written to.
    pub output_level: usize,
    /// Whether nothing older than the inputs exists below the output.
    pub bottommost: bool,
    /// Whether the compaction was requested by the user.
    pub manual: bool,
}

/// Creates one filter per compaction (so a filter can refresh its clock).
pub trait CompactionFilterFactory: Send + Sync {
    /// A name for diagnostics.
    fn name(&self) -> &str;
    /// A filter for one compaction.
    fn create(&self, ctx: &CompactionFilterContext) -> Box<dyn CompactionFilter>;
    /// Whether filters would do anything now. While not, flushes and compactions run as without a factory
    /// (operands partially merged at flush, untouched values copied as they are). Default: always.
    fn is_active(&self) -> bool {
        true
    }
    /// A collector of user properties for each file that flushes and compactions write while the factory is
    /// active (e.g. the range of TTL timestamps in the file). Default: none.
    fn properties_collector(&self) -> Option<Box<dyn crate::sst::PropertiesCollector>> {
        None
    }
    /// Whether the filter would remove every entry of a file with these properties now. When no other
    /// compaction is due, such a file (in L1 or deeper) is compacted on its own, found from its properties
    /// alone. Default: never.
    fn file_expired(&self, properties: &crate::sst::SstProperties) -> bool {
        let _ = properties;
        false
    }
    /// Whether a file with these properties is due for a periodic rewrite (RocksDB's
    /// `periodic_compaction_seconds`, Flink's periodic compaction for TTL): it was written longer ago than
    /// the factory's bound, so rewriting it lets the filter judge keys nobody has touched since. When no
    /// other compaction is due, such a file (in L1 or deeper) is rewritten on its own. Default: never.
    fn file_due_for_rewrite(&self, properties: &crate::sst::SstProperties) -> bool {
        let _ = properties;
        false
    }
}

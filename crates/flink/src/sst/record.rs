//! What an SST file holds, as the table reader gives it and the fold takes it: records (puts, tombstones,
//! merge operands) and range tombstones.

/// The kind of a record in a data block (`ValueType` of `db/dbformat.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// `kTypeValue` (1): a put.
    Put,
    /// `kTypeDeletion` (0): a point tombstone.
    Delete,
    /// `kTypeSingleDeletion` (7): a tombstone for a key put once.
    SingleDelete,
    /// `kTypeMerge` (2): a merge operand.
    Merge,
}

/// One record of a data block.
#[derive(Debug, Clone, Copy)]
pub struct Record<'b> {
    /// The user key (the internal key without its 8-byte trailer).
    pub user_key: &'b [u8],
    /// The sequence number.
    pub seqno: u64,
    /// Put, tombstone or merge operand.
    pub kind: ValueKind,
    /// The value or merge operand (empty for tombstones).
    pub value: &'b [u8],
}

/// A range tombstone: hides every version of the keys in `[start, end)` with a sequence number below
/// `seqno`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeTombstone {
    /// The first key covered.
    pub start: Vec<u8>,
    /// The first key after the range.
    pub end: Vec<u8>,
    /// The tombstone's sequence number.
    pub seqno: u64,
}

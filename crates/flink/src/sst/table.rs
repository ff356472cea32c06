//! One RocksDB block-based table file (`table/block_based/`, `table/format.cc`):
//!
//! ```text
//! data block* | meta blocks (properties, range deletions, filters) | metaindex block | index block | footer
//! every block: contents | u8 compression type | u32 LE checksum (of contents and type byte)
//! footer (format_version 2..5, 53 bytes): u8 checksum type | metaindex handle | index handle
//!                                         (varints, zero-padded to 40 bytes) | u32 format_version | u64 magic
//! ```
//!
//! Data blocks hold internal keys, `user key | u64 LE (seqno << 8 | value type)`, in ascending user key
//! and descending sequence number order. The reader verifies every block checksum (CRC-32C, xxHash32,
//! xxHash64, XXH3), decompresses Snappy and LZ4 blocks, reads the properties (column family, comparator,
//! merge operator, index type) and the range tombstones, and walks every data block through the index.
//! Anything else (ZSTD or zlib blocks, partitioned or hash indexes, format_version 6+, BlobDB, wide
//! columns, user-defined timestamps, ingested files) is [`FlinkError::SstUnsupported`] naming it.

use std::borrow::Cow;

use super::block::{index_handles, BlockContext, BlockIter, BLOCK_TRAILER};
use super::coding::{fixed32, fixed64, BlockHandle, Cursor};
use super::record::{RangeTombstone, Record, ValueKind};
use crate::snappy::crc32c;
use crate::FlinkError;

/// `kBlockBasedTableMagicNumber`.
const MAGIC: u64 = 0x88e2_41b7_85f4_cff7;
/// `kLegacyBlockBasedTableMagicNumber` (format_version 0).
const LEGACY_MAGIC: u64 = 0xdb47_7524_8b80_fb57;
const PLAIN_TABLE_MAGIC: u64 = 0x8242_2296_63bf_9564;
const CUCKOO_TABLE_MAGIC: u64 = 0x9267_89d0_c5f1_7873;
/// Footer size for format_version ≥ 1.
const FOOTER_LEN: usize = 53;
/// `kRandomPrime` of `ModifyChecksumForLastByte` (XXH3 block checksums).
const XXH3_LAST_BYTE_PRIME: u32 = 0x6b90_83d9;
/// No block is allowed to decompress to more than this many times its stored size (Snappy and LZ4
/// expand by at most ~21× and ~255×), which bounds what a damaged length field can allocate.
const MAX_EXPANSION: u64 = 256;

/// The table properties this reader uses (`rocksdb.properties` meta block).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SstProperties {
    /// `rocksdb.column.family.name`: for Flink, the state name.
    pub column_family_name: Option<String>,
    /// `rocksdb.column.family.id`.
    pub column_family_id: Option<u64>,
    /// `rocksdb.comparator`.
    pub comparator: Option<String>,
    /// `rocksdb.merge.operator` (`StringAppendTESTOperator` for Flink; `nullptr` when none).
    pub merge_operator: Option<String>,
    /// `rocksdb.compression`.
    pub compression: Option<String>,
    /// `rocksdb.num.entries`.
    pub num_entries: Option<u64>,
    /// `rocksdb.num.range-deletions`.
    pub num_range_deletions: Option<u64>,
    /// `rocksdb.block.based.table.index.type` (0 binary search, 3 binary search with first key).
    pub index_type: u32,
    /// `rocksdb.index.value.is.delta.encoded`.
    pub index_value_is_delta_encoded: bool,
}

/// An opened SST file: footer, properties and the handles of its data blocks, checked.
pub struct SstFile<'a> {
    data: &'a [u8],
    name: &'a str,
    /// The footer's format_version (2 to 5).
    pub format_version: u32,
    /// The footer's checksum type (0 none, 1 CRC-32C, 2 xxHash32, 3 xxHash64, 4 XXH3).
    pub checksum_type: u8,
    /// The table properties.
    pub properties: SstProperties,
    data_blocks: Vec<BlockHandle>,
    range_del: Option<BlockHandle>,
    /// Where the footer starts: every block ends before it.
    blocks_end: u64,
}

impl std::fmt::Debug for SstFile<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SstFile")
            .field("name", &self.name)
            .field("bytes", &self.data.len())
            .field("format_version", &self.format_version)
            .field("checksum_type", &self.checksum_type)
            .field("properties", &self.properties)
            .field("data_blocks", &self.data_blocks.len())
            .finish()
    }
}

fn unsupported(file: &str, feature: impl Into<String>) -> FlinkError {
    FlinkError::SstUnsupported {
        file: file.to_string(),
        feature: feature.into(),
    }
}

impl<'a> SstFile<'a> {
    /// Opens the SST file `data` (named `name` in messages): footer, metaindex, properties and index.
    pub fn open(data: &'a [u8], name: &'a str) -> Result<Self, FlinkError> {
        let corrupt = |offset: u64, what: &'static str, detail: String| FlinkError::SstCorrupt {
            at: keyed_state::Location::at(name, offset),
            what,
            detail,
        };
        let len = data.len();
        if len < 8 {
            return Err(corrupt(
                0,
                "footer",
                format!("{len} bytes, too short for an SST file"),
            ));
        }
        let magic = fixed64(&data[len - 8..]).unwrap_or(0);
        match magic {
            MAGIC => {}
            LEGACY_MAGIC => {
                return Err(unsupported(
                    name,
                    "the legacy block-based table format (format_version 0)",
                ))
            }
            PLAIN_TABLE_MAGIC => return Err(unsupported(name, "the plain table format")),
            CUCKOO_TABLE_MAGIC => return Err(unsupported(name, "the cuckoo table format")),
            m => {
                return Err(corrupt(
                    (len - 8) as u64,
                    "footer",
                    format!("magic {m:#018x} is not a block-based table's ({MAGIC:#018x})"),
                ))
            }
        }
        if len < FOOTER_LEN {
            return Err(corrupt(
                0,
                "footer",
                format!("{len} bytes, too short for a footer of {FOOTER_LEN}"),
            ));
        }
        let footer_at = len - FOOTER_LEN;
        let format_version = fixed32(&data[len - 12..]).unwrap_or(0);
        match format_version {
            2..=5 => {}
            0 | 1 => {
                return Err(unsupported(
                    name,
                    format!("format_version {format_version} (compression format 1)"),
                ))
            }
            6 | 7 => {
                return Err(unsupported(
                    name,
                    format!(
                        "format_version {format_version} (footer and block checksums with context)"
                    ),
                ))
            }
            v => {
                return Err(corrupt(
                    (len - 12) as u64,
                    "footer",
                    format!("format_version {v} is not a RocksDB format version"),
                ))
            }
        }
        let checksum_type = data[footer_at];
        if checksum_type > 4 {
            return Err(corrupt(
                footer_at as u64,
                "footer",
                format!("checksum type {checksum_type} is not one of RocksDB's (0 to 4)"),
            ));
        }
        let mut c = Cursor::new(&data[footer_at + 1..len - 12]);
        let (metaindex, index) = match (c.handle(), c.handle()) {
            (Some(m), Some(i)) => (m, i),
            _ => {
                return Err(corrupt(
                    footer_at as u64,
                    "footer",
                    "bad metaindex or index block handle".into(),
                ))
            }
        };
        let mut t = SstFile {
            data,
            name,
            format_version,
            checksum_type,
            properties: SstProperties::default(),
            data_blocks: Vec::new(),
            range_del: None,
            blocks_end: footer_at as u64,
        };
        let meta_bytes = t.read_block(metaindex, "metaindex block")?;
        let mut properties = None;
        let mut it = BlockIter::new(
            &meta_bytes,
            BlockContext {
                file: name,
                offset: metaindex.offset,
                what: "metaindex block",
            },
        )?;
        while let Some((k, v)) = it.next_entry()? {
            let handle = || {
                Cursor::new(v).handle().ok_or_else(|| {
                    corrupt(
                        metaindex.offset,
                        "metaindex block",
                        format!("bad handle of meta block {}", String::from_utf8_lossy(k)),
                    )
                })
            };
            match k {
                b"rocksdb.properties" => properties = Some(handle()?),
                b"rocksdb.range_del" => t.range_del = Some(handle()?),
                b"rocksdb.compression_dict" => {
                    return Err(unsupported(name, "a compression dictionary"))
                }
                _ => {}
            }
        }
        let Some(props) = properties else {
            return Err(corrupt(
                metaindex.offset,
                "metaindex block",
                "no rocksdb.properties block".into(),
            ));
        };
        t.properties = t.read_properties(props)?;
        if let Some(c) = &t.properties.comparator {
            if c != "leveldb.BytewiseComparator" {
                return Err(unsupported(name, format!("the comparator {c}")));
            }
        }
        let first_key = match t.properties.index_type {
            0 => false,
            3 => true,
            1 => return Err(unsupported(name, "a hash index (kHashSearch)")),
            2 => {
                return Err(unsupported(
                    name,
                    "a partitioned index (kTwoLevelIndexSearch)",
                ))
            }
            v => {
                return Err(corrupt(
                    props.offset,
                    "properties block",
                    format!("index type {v} is not one of RocksDB's"),
                ))
            }
        };
        let index_bytes = t.read_block(index, "index block")?;
        let handles = index_handles(
            &index_bytes,
            BlockContext {
                file: name,
                offset: index.offset,
                what: "index block",
            },
            t.properties.index_value_is_delta_encoded,
            first_key,
        )?;
        // Data blocks come first: the filter, index and meta blocks follow them.
        let mut next = 0u64;
        for h in &handles {
            let end = h
                .offset
                .saturating_add(h.size)
                .saturating_add(BLOCK_TRAILER);
            if h.offset < next || end > index.offset {
                return Err(corrupt(
                    index.offset,
                    "index block",
                    format!(
                        "data block {}+{} overlaps the previous one or the file's tail",
                        h.offset, h.size
                    ),
                ));
            }
            next = end;
        }
        t.data_blocks = handles;
        Ok(t)
    }

    /// The contents of the block at `h`: checksum verified, decompressed.
    fn read_block(&self, h: BlockHandle, what: &'static str) -> Result<Cow<'a, [u8]>, FlinkError> {
        let ctx = BlockContext {
            file: self.name,
            offset: h.offset,
            what,
        };
        let end = h
            .offset
            .checked_add(h.size)
            .and_then(|e| e.checked_add(BLOCK_TRAILER))
            .filter(|e| *e <= self.blocks_end)
            .ok_or_else(|| {
                ctx.corrupt(format!(
                    "{} bytes at byte {} run past the end of the blocks ({})",
                    h.size, h.offset, self.blocks_end
                ))
            })? as usize;
        let start = h.offset as usize;
        let contents = &self.data[start..end - BLOCK_TRAILER as usize];
        let ty = self.data[end - 5];
        let stored = fixed32(&self.data[end - 4..]).unwrap_or(0);
        let computed = block_checksum(self.checksum_type, contents, ty);
        if !(cfg!(fuzzing) || self.checksum_type == 0 || stored == computed) {
            return Err(ctx.corrupt(format!(
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        decompress(contents, ty, &ctx)
    }

    fn read_properties(&self, h: BlockHandle) -> Result<SstProperties, FlinkError> {
        let bytes = self.read_block(h, "properties block")?;
        let ctx = BlockContext {
            file: self.name,
            offset: h.offset,
            what: "properties block",
        };
        let mut it = BlockIter::new(&bytes, ctx)?;
        let mut p = SstProperties::default();
        let varint = |name: &[u8], v: &[u8]| {
            let mut c = Cursor::new(v);
            match c.varint64() {
                Some(n) if c.is_empty() => Ok(n),
                _ => Err(ctx.corrupt(format!(
                    "property {} is not a varint",
                    String::from_utf8_lossy(name)
                ))),
            }
        };
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        while let Some((k, v)) = it.next_entry()? {
            match k {
                b"rocksdb.column.family.name" => p.column_family_name = Some(text(v)),
                b"rocksdb.column.family.id" => p.column_family_id = Some(varint(k, v)?),
                b"rocksdb.comparator" => p.comparator = Some(text(v)),
                b"rocksdb.merge.operator" => p.merge_operator = Some(text(v)),
                b"rocksdb.compression" => p.compression = Some(text(v)),
                b"rocksdb.num.entries" => p.num_entries = Some(varint(k, v)?),
                b"rocksdb.num.range-deletions" => p.num_range_deletions = Some(varint(k, v)?),
                b"rocksdb.index.value.is.delta.encoded" => {
                    p.index_value_is_delta_encoded = varint(k, v)? != 0
                }
                b"rocksdb.block.based.table.index.type" => {
                    p.index_type = match v.len() {
                        4 => fixed32(v).unwrap_or(u32::MAX),
                        _ => return Err(ctx.corrupt("index type is not a fixed32")),
                    }
                }
                b"rocksdb.external_sst_file.version"
                | b"rocksdb.external_sst_file.global_seqno" => {
                    return Err(unsupported(
                        self.name,
                        "an ingested external SST file (its sequence number is in the MANIFEST)",
                    ))
                }
                b"rocksdb.user.defined.timestamps.persisted" | b"rocksdb.timestamp_min" => {
                    return Err(unsupported(self.name, "user-defined timestamps"))
                }
                _ => {}
            }
        }
        Ok(p)
    }

    /// The file name used in messages.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The number of data blocks.
    pub fn data_block_count(&self) -> usize {
        self.data_blocks.len()
    }

    /// Calls `f` with every record of every data block, in the file's order; checks that the order is
    /// RocksDB's (user keys ascending, sequence numbers descending) and that the record count matches
    /// `rocksdb.num.entries`. Returns the number of records.
    pub fn for_each_record(
        &self,
        f: &mut dyn FnMut(Record<'_>) -> Result<(), FlinkError>,
    ) -> Result<u64, FlinkError> {
        let mut prev: Vec<u8> = Vec::new();
        let mut prev_seq = 0u64;
        let mut count = 0u64;
        for h in &self.data_blocks {
            let bytes = self.read_block(*h, "data block")?;
            let ctx = BlockContext {
                file: self.name,
                offset: h.offset,
                what: "data block",
            };
            let mut it = BlockIter::new(&bytes, ctx)?;
            while let Some((ikey, value)) = it.next_entry()? {
                let (user_key, seqno, ty) = split_internal_key(ikey, &ctx)?;
                let kind = match ty {
                    1 => ValueKind::Put,
                    0 => ValueKind::Delete,
                    7 => ValueKind::SingleDelete,
                    2 => ValueKind::Merge,
                    0x11 => {
                        return Err(unsupported(
                            self.name,
                            "BlobDB blob references (kTypeBlobIndex)",
                        ))
                    }
                    0x14 => {
                        return Err(unsupported(
                            self.name,
                            "user-defined timestamps (kTypeDeletionWithTimestamp)",
                        ))
                    }
                    0x16 => {
                        return Err(unsupported(
                            self.name,
                            "wide-column entities (kTypeWideColumnEntity)",
                        ))
                    }
                    0x18 => {
                        return Err(unsupported(
                            self.name,
                            "values with a preferred sequence number (kTypeValuePreferredSeqno)",
                        ))
                    }
                    t => {
                        return Err(ctx
                            .corrupt(format!("value type {t:#04x} is not one a data block holds")))
                    }
                };
                if count > 0 {
                    let ordered = match prev.as_slice().cmp(user_key) {
                        std::cmp::Ordering::Less => true,
                        std::cmp::Ordering::Equal => seqno < prev_seq,
                        std::cmp::Ordering::Greater => false,
                    };
                    if !ordered {
                        return Err(ctx.corrupt(format!(
                            "key {user_key:02x?} seq {seqno} is out of order after {prev:02x?} seq {prev_seq}"
                        )));
                    }
                }
                prev.clear();
                prev.extend_from_slice(user_key);
                prev_seq = seqno;
                count += 1;
                f(Record {
                    user_key,
                    seqno,
                    kind,
                    value,
                })?;
            }
        }
        if let Some(n) = self.properties.num_entries {
            let ranges = self.properties.num_range_deletions.unwrap_or(0);
            if count != n && count.checked_add(ranges) != Some(n) {
                return Err(FlinkError::SstCorrupt {
                    at: keyed_state::Location::file(self.name),
                    what: "data blocks",
                    detail: format!(
                        "{count} records, the properties say {n} entries ({ranges} range deletions)"
                    ),
                });
            }
        }
        Ok(count)
    }

    /// The range tombstones of the `rocksdb.range_del` meta block (none if absent).
    pub fn range_tombstones(&self) -> Result<Vec<RangeTombstone>, FlinkError> {
        let Some(h) = self.range_del else {
            return Ok(Vec::new());
        };
        let bytes = self.read_block(h, "range deletion block")?;
        let ctx = BlockContext {
            file: self.name,
            offset: h.offset,
            what: "range deletion block",
        };
        let mut it = BlockIter::new(&bytes, ctx)?;
        let mut out = Vec::new();
        while let Some((ikey, end)) = it.next_entry()? {
            let (start, seqno, ty) = split_internal_key(ikey, &ctx)?;
            if ty != 0x0f {
                return Err(
                    ctx.corrupt(format!("value type {ty:#04x} in the range deletion block"))
                );
            }
            out.push(RangeTombstone {
                start: start.to_vec(),
                end: end.to_vec(),
                seqno,
            });
        }
        Ok(out)
    }
}

/// Splits an internal key into user key, sequence number and value type.
fn split_internal_key<'k>(
    ikey: &'k [u8],
    ctx: &BlockContext<'_>,
) -> Result<(&'k [u8], u64, u8), FlinkError> {
    if ikey.len() < 8 {
        return Err(ctx.corrupt(format!(
            "internal key of {} bytes, shorter than its 8-byte trailer",
            ikey.len()
        )));
    }
    let (user_key, trailer) = ikey.split_at(ikey.len() - 8);
    let t = fixed64(trailer).unwrap_or(0);
    Ok((user_key, t >> 8, (t & 0xff) as u8))
}

/// RocksDB's block checksum of `contents` followed by the compression type byte
/// (`ComputeBuiltinChecksumWithLastByte`, format_version < 6).
pub fn block_checksum(checksum_type: u8, contents: &[u8], last: u8) -> u32 {
    match checksum_type {
        1 => {
            let mut buf = Vec::with_capacity(contents.len() + 1);
            buf.extend_from_slice(contents);
            buf.push(last);
            let c = crc32c(&buf);
            c.rotate_right(15).wrapping_add(0xa282_ead8)
        }
        2 => {
            let mut h = xxhash_rust::xxh32::Xxh32::new(0);
            h.update(contents);
            h.update(&[last]);
            h.digest()
        }
        3 => {
            let mut h = xxhash_rust::xxh64::Xxh64::new(0);
            h.update(contents);
            h.update(&[last]);
            h.digest() as u32
        }
        4 => {
            let v = xxhash_rust::xxh3::xxh3_64(contents) as u32;
            v ^ u32::from(last).wrapping_mul(XXH3_LAST_BYTE_PRIME)
        }
        _ => 0,
    }
}

/// Decompresses a block's contents by its compression type byte (format_version ≥ 2 framing).
fn decompress<'a>(
    contents: &'a [u8],
    ty: u8,
    ctx: &BlockContext<'_>,
) -> Result<Cow<'a, [u8]>, FlinkError> {
    let limit = (contents.len() as u64).saturating_mul(MAX_EXPANSION) + 1024;
    let too_big = |n: u64| {
        ctx.corrupt(format!(
            "claims {n} bytes uncompressed from {} stored",
            contents.len()
        ))
    };
    match ty {
        0 => Ok(Cow::Borrowed(contents)),
        1 => {
            let n = snap::raw::decompress_len(contents)
                .map_err(|e| ctx.corrupt(format!("Snappy: {e}")))?;
            if n as u64 > limit {
                return Err(too_big(n as u64));
            }
            snap::raw::Decoder::new()
                .decompress_vec(contents)
                .map(Cow::Owned)
                .map_err(|e| ctx.corrupt(format!("Snappy: {e}")))
        }
        4 | 5 => {
            let mut c = Cursor::new(contents);
            let n = c
                .varint32()
                .ok_or_else(|| ctx.corrupt("LZ4: bad uncompressed length"))?;
            if u64::from(n) > limit {
                return Err(too_big(u64::from(n)));
            }
            let out = lz4_flex::block::decompress(&contents[c.pos()..], n as usize)
                .map_err(|e| ctx.corrupt(format!("LZ4: {e}")))?;
            if out.len() != n as usize {
                return Err(ctx.corrupt(format!(
                    "LZ4: {} bytes decompressed, the header says {n}",
                    out.len()
                )));
            }
            Ok(Cow::Owned(out))
        }
        2 => Err(unsupported(ctx.file, "zlib-compressed blocks")),
        3 => Err(unsupported(ctx.file, "bzip2-compressed blocks")),
        6 => Err(unsupported(ctx.file, "XPRESS-compressed blocks")),
        7 => Err(unsupported(ctx.file, "ZSTD-compressed blocks")),
        t => Err(ctx.corrupt(format!("compression type {t:#04x} is not one of RocksDB's"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> BlockContext<'static> {
        BlockContext {
            file: "t",
            offset: 0,
            what: "data block",
        }
    }

    #[test]
    fn lz4_blocks_carry_their_uncompressed_length() {
        let raw: Vec<u8> = (0..5000u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
        let mut block = vec![0x80 | (raw.len() & 0x7f) as u8];
        let mut n = raw.len() >> 7;
        while n >= 0x80 {
            block.push(0x80 | (n & 0x7f) as u8);
            n >>= 7;
        }
        block.push(n as u8);
        block.extend_from_slice(&lz4_flex::block::compress(&raw));
        assert_eq!(&*decompress(&block, 4, &ctx()).unwrap(), &raw[..]);
        assert!(matches!(
            decompress(&block[..block.len() - 3], 4, &ctx()),
            Err(FlinkError::SstCorrupt { .. })
        ));
        assert!(matches!(
            decompress(&block, 7, &ctx()),
            Err(FlinkError::SstUnsupported { .. })
        ));
    }

    #[test]
    fn snappy_blocks_decompress_and_damage_is_an_error() {
        let raw = b"flink flink flink flink flink flink rocksdb rocksdb".repeat(20);
        let block = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
        assert_eq!(&*decompress(&block, 1, &ctx()).unwrap(), &raw[..]);
        assert!(decompress(&block[..block.len() / 2], 1, &ctx()).is_err());
    }

    #[test]
    fn crc32c_checksums_are_masked_over_contents_and_type() {
        // RocksDB masks CRC-32C as LevelDB does: rotate right 15, add 0xa282ead8.
        let c = block_checksum(1, b"", 0);
        assert_eq!(c, crc32c(&[0]).rotate_right(15).wrapping_add(0xa282_ead8));
        assert_ne!(block_checksum(4, b"abc", 0), block_checksum(4, b"abc", 1));
        assert_eq!(block_checksum(0, b"abc", 1), 0);
    }
}

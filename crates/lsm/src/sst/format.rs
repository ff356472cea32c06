//! Low-level encoding shared by the SST writer and reader: block handles, block trailers (codec byte + xxh3
//! checksum) and the footer. See `design/sst-format.md`; varints and fixed-width integers are
//! `crate::coding`'s.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::coding::{get_u32, get_u64, get_varint64, put_varint64, DecodeError};

/// Magic number closing every SST file (`"KSTSST\0\x01"` as little-endian bytes).
pub const MAGIC: u64 = u64::from_le_bytes(*b"KSTSST\0\x01");
/// Format version written by this code without a prefix extractor (2: data blocks may carry a hash index).
pub const FORMAT_VERSION: u32 = 2;
/// Format version written with a prefix extractor (3: as 2, and the filter block starts with a header
/// saying whether it holds whole keys, prefixes, or both).
pub const FORMAT_VERSION_PREFIX: u32 = 3;
/// The oldest format version the reader accepts (1: no hash indexes).
pub const MIN_FORMAT_VERSION: u32 = 1;
/// Bytes after each block payload: codec (1) + xxh3-64 checksum (8).
pub const BLOCK_TRAILER_LEN: usize = 9;
/// Size of the fixed footer at the end of the file.
pub const FOOTER_LEN: usize = 72;
/// Codec byte of a raw block.
pub const CODEC_NONE: u8 = 0;
/// Codec byte of an LZ4 block (payload = uncompressed length u32 LE + LZ4 block).
pub const CODEC_LZ4: u8 = 1;
/// LZ4 cannot expand data by more than this factor; bounds the allocation for a decompressed block.
const LZ4_MAX_RATIO: usize = 255;

/// Where a block's payload lies in the file (its trailer follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockHandle {
    /// Offset of the payload.
    pub offset: u64,
    /// Length of the payload (without the trailer).
    pub size: u64,
}

impl BlockHandle {
    /// Offset just after the block's trailer, if it does not overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset
            .checked_add(self.size)?
            .checked_add(BLOCK_TRAILER_LEN as u64)
    }

    /// Appends the handle as two varints.
    pub fn encode_varint(&self, out: &mut Vec<u8>) {
        put_varint64(out, self.offset);
        put_varint64(out, self.size);
    }

    /// Decodes a handle written by [`BlockHandle::encode_varint`]; must consume all of `data`.
    pub fn decode_varint(data: &[u8]) -> Option<Self> {
        let (offset, p) = get_varint64(data, 0)?;
        let (size, p) = get_varint64(data, p)?;
        (p == data.len()).then_some(BlockHandle { offset, size })
    }
}

/// The checksum of a block: xxh3-64 of the payload, seeded with the codec byte.
#[inline]
pub fn block_checksum(payload: &[u8], codec: u8) -> u64 {
    xxh3_64_with_seed(payload, u64::from(codec))
}

/// Whether a stored checksum matches. Under `cfg(fuzzing)` (set by cargo-fuzz) every checksum passes, so that
/// the fuzzer reaches the structure behind them; the structural checks must hold on their own.
#[inline]
fn checksum_ok(stored: u64, computed: u64) -> bool {
    cfg!(fuzzing) || stored == computed
}

/// The trailer bytes of a block.
pub fn block_trailer(payload: &[u8], codec: u8) -> [u8; BLOCK_TRAILER_LEN] {
    let mut t = [0u8; BLOCK_TRAILER_LEN];
    t[0] = codec;
    t[1..].copy_from_slice(&block_checksum(payload, codec).to_le_bytes());
    t
}

/// Returns `(codec, payload range)` of the block at `handle` in `file`, checking bounds only.
pub fn locate_block(file: &[u8], handle: BlockHandle) -> Result<(u8, usize, usize), DecodeError> {
    let end = handle
        .end()
        .and_then(|e| usize::try_from(e).ok())
        .filter(|&e| e <= file.len())
        .ok_or(DecodeError::OutOfBounds {
            what: "block",
            offset: handle.offset,
            size: handle.size,
            limit: file.len() as u64,
        })?;
    let start = end - BLOCK_TRAILER_LEN - handle.size as usize;
    let codec = file
        .get(start + handle.size as usize)
        .copied()
        .unwrap_or(u8::MAX);
    Ok((codec, start, start + handle.size as usize))
}

/// Verifies the checksum of the block at `handle` (before any decompression) and returns its codec and payload.
pub fn checked_block(file: &[u8], handle: BlockHandle) -> Result<(u8, &[u8]), DecodeError> {
    let (codec, start, end) = locate_block(file, handle)?;
    let payload = file.get(start..end).unwrap_or(&[]);
    let stored = get_u64(file, end + 1).ok_or(DecodeError::Malformed {
        what: "block trailer cut short",
        offset: end as u64,
    })?;
    if !checksum_ok(stored, block_checksum(payload, codec)) {
        return Err(DecodeError::Checksum {
            what: "block",
            offset: handle.offset,
        });
    }
    if codec != CODEC_NONE && codec != CODEC_LZ4 {
        return Err(DecodeError::BadTag {
            what: "block codec",
            tag: codec,
            offset: end as u64,
        });
    }
    Ok((codec, payload))
}

/// Decompresses a verified LZ4 payload of the block at `offset` into `buf` (a recycled buffer of enough
/// length is overwritten without being zeroed first, one of enough capacity is not reallocated, otherwise
/// capacity is reserved only after the length passed the plausibility check) and returns it holding exactly
/// the block.
pub fn decompress_lz4(
    payload: &[u8],
    offset: u64,
    mut buf: Vec<u8>,
) -> Result<Vec<u8>, DecodeError> {
    let lz4_err = |reason| DecodeError::Lz4 { offset, reason };
    let ulen =
        get_u32(payload, 0).ok_or(lz4_err("payload shorter than its length prefix"))? as usize;
    let input = payload.get(4..).unwrap_or(&[]);
    if ulen > input.len().saturating_mul(LZ4_MAX_RATIO).saturating_add(16) {
        return Err(lz4_err("implausible uncompressed length"));
    }
    if buf.len() >= ulen {
        // A recycled buffer: its old bytes are overwritten below (no zeroing pass); a block is returned only
        // if exactly `ulen` bytes were written.
        buf.truncate(ulen);
    } else {
        if buf.capacity() < ulen {
            // Rounded up so that the buffer, once recycled by the block cache, fits most other blocks.
            buf.reserve_exact(ulen.next_multiple_of(512) - buf.len());
        }
        buf.resize(ulen, 0);
    }
    match lz4_flex::block::decompress_into(input, &mut buf) {
        Ok(n) if n == ulen => Ok(buf),
        Ok(_) => Err(lz4_err("decompressed length differs from the recorded one")),
        Err(e) => Err(lz4_err(lz4_reason(&e))),
    }
}

/// A static description of an LZ4 decoding error (keeps [`DecodeError`] `Copy`).
fn lz4_reason(e: &lz4_flex::block::DecompressError) -> &'static str {
    use lz4_flex::block::DecompressError as E;
    match e {
        E::OutputTooSmall { .. } => "output shorter than the recorded length",
        E::LiteralOutOfBounds => "literal out of bounds",
        E::ExpectedAnotherByte => "data cut short",
        E::OffsetOutOfBounds => "match offset out of bounds",
        _ => "malformed data",
    }
}

/// The uncompressed length recorded in an LZ4 payload (0 if the payload is too short to hold it).
pub fn lz4_uncompressed_len(payload: &[u8]) -> usize {
    get_u32(payload, 0).map_or(0, |n| n as usize)
}

/// The fixed footer at the end of an SST file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footer {
    /// The bloom filter block (size 0 = no filter).
    pub filter: BlockHandle,
    /// The properties block.
    pub properties: BlockHandle,
    /// The index block.
    pub index: BlockHandle,
    /// The format version (`MIN_FORMAT_VERSION..=FORMAT_VERSION`).
    pub version: u32,
}

impl Footer {
    /// Encodes the footer (72 bytes).
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut f = [0u8; FOOTER_LEN];
        let fields = [
            self.filter.offset,
            self.filter.size,
            self.properties.offset,
            self.properties.size,
            self.index.offset,
            self.index.size,
        ];
        for (i, v) in fields.iter().enumerate() {
            f[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        f[48..52].copy_from_slice(&self.version.to_le_bytes());
        // 52..56 reserved (zero).
        let sum = xxh3_64_with_seed(&f[..56], 0);
        f[56..64].copy_from_slice(&sum.to_le_bytes());
        f[64..72].copy_from_slice(&MAGIC.to_le_bytes());
        f
    }

    /// Decodes and validates the footer at the end of `file`.
    pub fn decode(file: &[u8]) -> Result<Self, DecodeError> {
        let start = file
            .len()
            .checked_sub(FOOTER_LEN)
            .ok_or(DecodeError::Truncated {
                offset: 0,
                need: FOOTER_LEN as u64,
            })?;
        let f = file.get(start..).unwrap_or(&[]);
        let field = |i: usize| get_u64(f, i * 8).unwrap_or(0);
        if field(8) != MAGIC {
            return Err(DecodeError::Invalid(
                "bad magic (not an SST file, or truncated)",
            ));
        }
        if !checksum_ok(field(7), xxh3_64_with_seed(f.get(..56).unwrap_or(&[]), 0)) {
            return Err(DecodeError::Checksum {
                what: "fields",
                offset: start as u64,
            });
        }
        let version = get_u32(f, 48).unwrap_or(0);
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION_PREFIX).contains(&version) {
            return Err(DecodeError::Unsupported {
                what: "format version",
                value: u64::from(version),
            });
        }
        if get_u32(f, 52) != Some(0) {
            return Err(DecodeError::Invalid("reserved bytes are not zero"));
        }
        let h = |i: usize| BlockHandle {
            offset: field(i),
            size: field(i + 1),
        };
        Ok(Footer {
            filter: h(0),
            properties: h(2),
            index: h(4),
            version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decompression_into_a_recycled_buffer_returns_exactly_the_block() {
        let block: Vec<u8> = (0..3000u32).map(|i| (i % 7) as u8).collect();
        let mut payload = (block.len() as u32).to_le_bytes().to_vec();
        payload.extend_from_slice(&lz4_flex::block::compress(&block));
        // Longer than the block and full of another block's bytes; shorter; empty.
        for stale in [vec![0xEE; 4096], vec![0xEE; 100], Vec::new()] {
            let out = decompress_lz4(&payload, 0, stale).unwrap();
            assert_eq!(out, block);
        }
        // A payload cut short errors instead of returning the stale tail.
        let cut = &payload[..payload.len() - 5];
        assert!(decompress_lz4(cut, 0, vec![0xEE; 4096]).is_err());
    }

    #[test]
    fn footer_roundtrip() {
        let f = Footer {
            filter: BlockHandle { offset: 1, size: 2 },
            properties: BlockHandle { offset: 3, size: 4 },
            index: BlockHandle { offset: 5, size: 6 },
            version: FORMAT_VERSION,
        };
        let mut file = vec![7u8; 10];
        file.extend_from_slice(&f.encode());
        assert_eq!(Footer::decode(&file).unwrap(), f);
        file[12] ^= 1;
        assert!(Footer::decode(&file).is_err());
    }
}

//! Byte-level pieces shared by the encoder and decoder: layout constants, varints, header, index and footer
//! codecs. See `design/savepoint-format.md` for the layout.

use super::{Compression, KeyGroupBlock, SavepointError, SavepointHeader, FORMAT_VERSION, MAGIC};
use crate::backend::BackendConfig;
use crate::error::{in_memory, Location, IN_MEMORY};
use crate::keygroup::{check_max_parallelism, KeyGroup, KeyGroupRange};
use crate::meta::{StateKind, StateMetaInfo, TtlConfig, TtlUpdateType, TtlVisibility};
use crate::serializer::SerializerSnapshot;

/// `magic | u32 version | u64 flags | u32 header body length`.
pub(crate) const PREAMBLE_LEN: usize = 8 + 4 + 8 + 4;
/// The xxh3-64 after the header body.
pub(crate) const CHECKSUM_LEN: usize = 8;
/// `u32 raw length | u32 stored length | u8 codec`.
pub(crate) const FRAME_HEADER_LEN: usize = 9;
/// The smallest possible frame: header, one payload byte, checksum.
pub(crate) const MIN_FRAME_LEN: u64 = (FRAME_HEADER_LEN + 1 + CHECKSUM_LEN) as u64;
/// `u32 key group | u64 offset | u64 length | u64 entries`.
pub(crate) const INDEX_ENTRY_LEN: usize = 4 + 8 + 8 + 8;
/// `u64 index offset | u64 index length | u64 index checksum | u64 footer checksum | footer magic`.
pub(crate) const FOOTER_LEN: usize = 8 * 4 + 8;
/// Frame codec: raw.
pub(crate) const CODEC_RAW: u8 = 0;
/// Frame codec: LZ4 block.
pub(crate) const CODEC_LZ4: u8 = 1;
/// The record-stream mark that ends a key group (in place of a state index).
pub(crate) const END_OF_KEY_GROUP: u32 = u32::MAX;
/// The record-stream mark that ends a state section (in place of a key length; keys are never empty).
pub(crate) const END_OF_STATE: u8 = 0;
/// Bytes a timer key holds after the key-group prefix at least (the flipped timestamp).
pub(crate) const TIMER_TS_LEN: usize = 8;
/// The smallest file: preamble, smallest header body, header checksum, empty index, footer.
pub(crate) const MIN_FILE_LEN: u64 =
    (PREAMBLE_LEN + MIN_HEADER_BODY_LEN + CHECKSUM_LEN + 4 + FOOTER_LEN) as u64;
/// compression, max parallelism, range start, range count, smallest serializer snapshot, state count.
const MIN_HEADER_BODY_LEN: usize = 1 + 4 + 4 + 4 + 12 + 4;

/// Whether a stored checksum matches. Under `cfg(fuzzing)` (set by cargo-fuzz) every checksum passes, so that
/// the fuzzer reaches the structure behind them; the structural checks must hold on their own.
#[inline]
pub(crate) fn checksum_ok(stored: u64, computed: u64) -> bool {
    cfg!(fuzzing) || stored == computed
}

/// Writes `v` as a minimal LEB128 varint into `buf`, returning its length (1..=5).
#[inline]
pub(crate) fn put_varint(buf: &mut [u8; 5], mut v: u32) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    n + 1
}

/// Outcome of parsing a varint from a slice.
pub(crate) enum Varint {
    /// The value and the bytes it took.
    Value(u32, usize),
    /// The slice ends inside the varint.
    Incomplete,
    /// Overlong (non-minimal) or more than 32 bits.
    Invalid,
}

/// Parses a minimal LEB128 u32 from the front of `buf`.
#[inline]
pub(crate) fn get_varint(buf: &[u8]) -> Varint {
    let mut v: u32 = 0;
    for i in 0..5 {
        let Some(&b) = buf.get(i) else {
            return Varint::Incomplete;
        };
        if i == 4 && b > 0x0f {
            return Varint::Invalid;
        }
        v |= ((b & 0x7f) as u32) << (7 * i);
        if b & 0x80 == 0 {
            if i > 0 && b == 0 {
                return Varint::Invalid;
            }
            return Varint::Value(v, i + 1);
        }
    }
    Varint::Invalid
}

fn unrepresentable(what: impl std::fmt::Display) -> SavepointError {
    SavepointError::Unrepresentable(what.to_string())
}

/// Encodes a serializer snapshot, checking that it decodes back to itself (the snapshot codec silently
/// truncates fields beyond its limits).
fn put_snapshot(
    out: &mut Vec<u8>,
    s: &SerializerSnapshot,
    what: &str,
) -> Result<(), SavepointError> {
    let start = out.len();
    s.encode(out);
    let mut written = out.get(start..).unwrap_or_default();
    match SerializerSnapshot::decode(&mut written) {
        Ok(back) if &back == s && written.is_empty() => Ok(()),
        Ok(_) => Err(unrepresentable(format_args!(
            "{what} serializer snapshot {s} exceeds the snapshot encoding's limits"
        ))),
        Err(e) => Err(unrepresentable(format_args!(
            "{what} serializer snapshot {s} cannot be encoded: {e}"
        ))),
    }
}

fn put_u32_len(len: usize, what: &str) -> Result<[u8; 4], SavepointError> {
    u32::try_from(len)
        .map(u32::to_be_bytes)
        .map_err(|_| unrepresentable(format_args!("{what} is {len} bytes, more than 2^32-1")))
}

fn update_type_code(t: TtlUpdateType) -> u8 {
    match t {
        TtlUpdateType::Disabled => 0,
        TtlUpdateType::OnCreateAndWrite => 1,
        TtlUpdateType::OnReadAndWrite => 2,
    }
}

fn visibility_code(v: TtlVisibility) -> u8 {
    match v {
        TtlVisibility::ReturnExpiredIfNotCleanedUp => 0,
        TtlVisibility::NeverReturnExpired => 1,
    }
}

fn put_ttl(out: &mut Vec<u8>, ttl: &Option<TtlConfig>) {
    let Some(t) = ttl else {
        out.push(0);
        return;
    };
    out.push(1);
    out.extend_from_slice(&t.ttl_millis.to_be_bytes());
    out.push(update_type_code(t.update_type));
    out.push(visibility_code(t.visibility));
    out.push(t.cleanup_full_snapshot as u8);
    match t.cleanup_incremental {
        None => out.push(0),
        Some((size, every_record)) => {
            out.push(1);
            out.extend_from_slice(&size.to_be_bytes());
            out.push(every_record as u8);
        }
    }
    match t.cleanup_compaction_filter {
        None => out.push(0),
        Some(n) => {
            out.push(1);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
    // A compatible addition after the v1 TTL block: the periodic-rewrite bound.
    match t.periodic_compaction_millis {
        None => out.push(0),
        Some(n) => {
            out.push(1);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// Encodes preamble and header body (without the trailing checksum), validating what the format can hold.
pub(crate) fn encode_header(
    config: &BackendConfig,
    states: &[StateMetaInfo],
    compression: Compression,
) -> Result<Vec<u8>, SavepointError> {
    check_max_parallelism(config.max_parallelism).map_err(unrepresentable)?;
    let range = config.key_group_range;
    if !range.is_empty() && u32::from(range.end()) >= config.max_parallelism {
        return Err(unrepresentable(format_args!(
            "key-group range {range} does not fit max parallelism {}",
            config.max_parallelism
        )));
    }
    if states.len() >= END_OF_KEY_GROUP as usize {
        return Err(unrepresentable(format_args!(
            "{} states, more than 2^32-2",
            states.len()
        )));
    }
    let mut names: Vec<&str> = states.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(unrepresentable(format_args!(
            "state name '{}' appears twice",
            w[0]
        )));
    }

    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
    out.extend_from_slice(&super::KNOWN_FLAGS.to_be_bytes());
    out.extend_from_slice(&[0; 4]); // body length, patched below
    out.push(compression.code());
    out.extend_from_slice(&config.max_parallelism.to_be_bytes());
    let (start, count) = if range.is_empty() {
        (0u32, 0u32)
    } else {
        (u32::from(range.start()), range.len() as u32)
    };
    out.extend_from_slice(&start.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    put_snapshot(&mut out, &config.key_serializer, "key")?;
    out.extend_from_slice(&(states.len() as u32).to_be_bytes());
    for (i, s) in states.iter().enumerate() {
        let rec_start = out.len();
        out.extend_from_slice(&[0; 4]); // record length, patched below
        let name = s.name.as_bytes();
        let name_len = u16::try_from(name.len()).map_err(|_| {
            unrepresentable(format_args!(
                "state {i} name is {} bytes, more than 65535",
                name.len()
            ))
        })?;
        out.extend_from_slice(&name_len.to_be_bytes());
        out.extend_from_slice(name);
        out.push(s.kind.code());
        put_snapshot(
            &mut out,
            &s.namespace_serializer,
            &format!("state '{}' namespace", s.name),
        )?;
        put_snapshot(
            &mut out,
            &s.value_serializer,
            &format!("state '{}' value", s.name),
        )?;
        put_ttl(&mut out, &s.ttl);
        let rec_len = put_u32_len(out.len() - rec_start - 4, "a state record")?;
        if let Some(slot) = out.get_mut(rec_start..rec_start + 4) {
            slot.copy_from_slice(&rec_len);
        }
    }
    let body_len = put_u32_len(out.len() - PREAMBLE_LEN, "the header")?;
    if let Some(slot) = out.get_mut(PREAMBLE_LEN - 4..PREAMBLE_LEN) {
        slot.copy_from_slice(&body_len);
    }
    Ok(out)
}

/// A bounds-checked big-endian reader over a region of the file that reports absolute offsets.
pub(crate) struct ByteReader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
    err: fn(u64, String) -> SavepointError,
}

pub(crate) fn header_err(offset: u64, detail: String) -> SavepointError {
    SavepointError::MalformedHeader {
        at: in_memory(offset),
        detail,
    }
}

pub(crate) fn index_err(offset: u64, detail: String) -> SavepointError {
    SavepointError::MalformedIndex {
        at: in_memory(offset),
        detail,
    }
}

impl<'a> ByteReader<'a> {
    pub(crate) fn new(buf: &'a [u8], base: u64, err: fn(u64, String) -> SavepointError) -> Self {
        ByteReader {
            buf,
            pos: 0,
            base,
            err,
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub(crate) fn fail(&self, detail: impl Into<String>) -> SavepointError {
        (self.err)(self.offset(), detail.into())
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], SavepointError> {
        let end = self.pos.checked_add(n);
        match end.and_then(|e| self.buf.get(self.pos..e)) {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => Err(self.fail(format!(
                "truncated while reading {what} ({n} bytes needed, {} left)",
                self.remaining()
            ))),
        }
    }

    pub(crate) fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], SavepointError> {
        let b = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, SavepointError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &str) -> Result<u16, SavepointError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, SavepointError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, SavepointError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    fn bool(&mut self, what: &str) -> Result<bool, SavepointError> {
        let at = self.offset();
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err((self.err)(at, format!("{what} is {b}, expected 0 or 1"))),
        }
    }

    fn snapshot(&mut self, what: &str) -> Result<SerializerSnapshot, SavepointError> {
        let at = self.offset();
        let mut rest = self.buf.get(self.pos..).unwrap_or_default();
        let before = rest.len();
        let s = SerializerSnapshot::decode(&mut rest)
            .map_err(|e| (self.err)(at, format!("{what} serializer snapshot: {e}")))?;
        self.pos += before - rest.len();
        Ok(s)
    }
}

fn get_ttl(r: &mut ByteReader<'_>, state: usize) -> Result<Option<TtlConfig>, SavepointError> {
    if !r.bool(&format!("state {state} TTL presence"))? {
        return Ok(None);
    }
    let ttl_millis = r.u64("TTL millis")?;
    let at = r.offset();
    let update_type = match r.u8("TTL update type")? {
        0 => TtlUpdateType::Disabled,
        1 => TtlUpdateType::OnCreateAndWrite,
        2 => TtlUpdateType::OnReadAndWrite,
        c => {
            return Err(header_err(
                at,
                format!("state {state}: unknown TTL update type {c}"),
            ))
        }
    };
    let at = r.offset();
    let visibility = match r.u8("TTL visibility")? {
        0 => TtlVisibility::ReturnExpiredIfNotCleanedUp,
        1 => TtlVisibility::NeverReturnExpired,
        c => {
            return Err(header_err(
                at,
                format!("state {state}: unknown TTL visibility {c}"),
            ))
        }
    };
    let cleanup_full_snapshot = r.bool("TTL full-snapshot cleanup")?;
    let cleanup_incremental = if r.bool("TTL incremental cleanup presence")? {
        Some((
            r.u32("TTL incremental cleanup size")?,
            r.bool("TTL incremental cleanup per record")?,
        ))
    } else {
        None
    };
    let cleanup_compaction_filter = if r.bool("TTL compaction-filter cleanup presence")? {
        Some(r.u64("TTL compaction-filter query interval")?)
    } else {
        None
    };
    // Absent in records written before the periodic bound existed: Flink's default.
    let periodic_compaction_millis = if r.remaining() == 0 {
        Some(crate::meta::DEFAULT_PERIODIC_COMPACTION_MILLIS)
    } else if r.bool("TTL periodic-compaction presence")? {
        Some(r.u64("TTL periodic-compaction bound")?)
    } else {
        None
    };
    Ok(Some(TtlConfig {
        periodic_compaction_millis,
        ttl_millis,
        update_type,
        visibility,
        cleanup_full_snapshot,
        cleanup_incremental,
        cleanup_compaction_filter,
    }))
}

/// Parses and checks the preamble, header body and header checksum. Returns the header and the offset where
/// key-group blocks start.
pub(crate) fn decode_header(file: &[u8]) -> Result<(SavepointHeader, u64), SavepointError> {
    let mut r = ByteReader::new(file, 0, header_err);
    let magic: [u8; 8] = r.array("magic")?;
    if magic != MAGIC {
        return Err(SavepointError::BadMagic {
            at: in_memory(0),
            found: magic,
        });
    }
    let version_at = r.offset();
    let version = r.u32("format version")?;
    if version != FORMAT_VERSION {
        return Err(SavepointError::UnsupportedVersion {
            at: in_memory(version_at),
            version,
            supported: FORMAT_VERSION,
        });
    }
    let flags_at = r.offset();
    let flags = r.u64("flags")?;
    let body_len = r.u32("header length")? as usize;
    // The header, its checksum, an empty index and the footer must fit.
    let max_body = file
        .len()
        .saturating_sub(PREAMBLE_LEN + CHECKSUM_LEN + 4 + FOOTER_LEN);
    if body_len > max_body {
        return Err(header_err(
            (PREAMBLE_LEN - 4) as u64,
            format!("header length {body_len} exceeds what the file can hold ({max_body})"),
        ));
    }
    let header_end = PREAMBLE_LEN + body_len;
    let (Some(covered), Some(stored)) = (
        file.get(..header_end),
        file.get(header_end..header_end + CHECKSUM_LEN),
    ) else {
        return Err(header_err(
            header_end as u64,
            "header checksum missing".into(),
        ));
    };
    let computed = xxhash_rust::xxh3::xxh3_64(covered);
    let stored = u64::from_be_bytes(stored.try_into().unwrap_or_default());
    if !checksum_ok(stored, computed) {
        return Err(SavepointError::ChecksumMismatch {
            region: "header",
            at: in_memory(0),
            stored,
            computed,
        });
    }
    if flags & !super::KNOWN_FLAGS != 0 {
        return Err(SavepointError::UnknownFlags {
            at: in_memory(flags_at),
            flags,
            unknown: flags & !super::KNOWN_FLAGS,
        });
    }

    let body = covered.get(PREAMBLE_LEN..).unwrap_or_default();
    let mut r = ByteReader::new(body, PREAMBLE_LEN as u64, header_err);
    let at = r.offset();
    let code = r.u8("compression")?;
    let compression = Compression::from_code(code)
        .ok_or_else(|| header_err(at, format!("unknown compression code {code}")))?;
    let at = r.offset();
    let max_parallelism = r.u32("max parallelism")?;
    check_max_parallelism(max_parallelism).map_err(|e| header_err(at, e.to_string()))?;
    let at = r.offset();
    let start = r.u32("key-group range start")?;
    let count = r.u32("key-group range length")?;
    let key_group_range = if count == 0 {
        if start != 0 {
            return Err(header_err(
                at,
                format!("empty key-group range with start {start} (must be 0)"),
            ));
        }
        KeyGroupRange::EMPTY
    } else {
        let end = u64::from(start) + u64::from(count);
        if end > u64::from(max_parallelism) {
            return Err(header_err(
                at,
                format!(
                    "key-group range {start}+{count} exceeds max parallelism {max_parallelism}"
                ),
            ));
        }
        KeyGroupRange::new(start as KeyGroup, (end - 1) as KeyGroup)
    };
    let key_serializer = r.snapshot("key")?;
    let at = r.offset();
    let state_count = r.u32("state count")?;
    if state_count == END_OF_KEY_GROUP {
        return Err(header_err(at, "state count 2^32-1 is reserved".into()));
    }
    let mut states: Vec<StateMetaInfo> = Vec::new();
    for i in 0..state_count as usize {
        let rec_len = r.u32(&format!("state {i} record length"))? as usize;
        let rec_base = r.offset();
        let rec = r.bytes(rec_len, &format!("state {i} record"))?;
        let mut s = ByteReader::new(rec, rec_base, header_err);
        let name_len = s.u16(&format!("state {i} name length"))? as usize;
        let at = s.offset();
        let name = std::str::from_utf8(s.bytes(name_len, &format!("state {i} name"))?)
            .map_err(|_| header_err(at, format!("state {i} name is not valid UTF-8")))?
            .to_string();
        if states.iter().any(|o| o.name == name) {
            return Err(header_err(at, format!("state name '{name}' appears twice")));
        }
        let at = s.offset();
        let kind_code = s.u8(&format!("state {i} kind"))?;
        let kind = StateKind::from_code(kind_code).ok_or_else(|| {
            header_err(
                at,
                format!("state {i} ('{name}'): unknown kind code {kind_code}"),
            )
        })?;
        let namespace_serializer = s.snapshot(&format!("state {i} namespace"))?;
        let value_serializer = s.snapshot(&format!("state {i} value"))?;
        let ttl = get_ttl(&mut s, i)?;
        // Bytes left in the record are fields of a later compatible revision: ignored.
        states.push(StateMetaInfo {
            name,
            kind,
            namespace_serializer,
            value_serializer,
            ttl,
        });
    }
    // Bytes left in the body are fields of a later compatible revision: ignored.
    Ok((
        SavepointHeader {
            format_version: version,
            flags,
            compression,
            max_parallelism,
            key_group_range,
            key_serializer,
            states,
        },
        (header_end + CHECKSUM_LEN) as u64,
    ))
}

/// Encodes the index: `u32 count | count × (u32 kg | u64 offset | u64 length | u64 entries)`.
pub(crate) fn encode_index(blocks: &[KeyGroupBlock]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + blocks.len() * INDEX_ENTRY_LEN);
    out.extend_from_slice(&(blocks.len() as u32).to_be_bytes());
    for b in blocks {
        out.extend_from_slice(&u32::from(b.key_group).to_be_bytes());
        out.extend_from_slice(&b.offset.to_be_bytes());
        out.extend_from_slice(&b.length.to_be_bytes());
        out.extend_from_slice(&b.entries.to_be_bytes());
    }
    out
}

/// Encodes the footer for an index at `index_offset` of `index` bytes.
pub(crate) fn encode_footer(index_offset: u64, index: &[u8]) -> [u8; FOOTER_LEN] {
    let mut f = [0u8; FOOTER_LEN];
    f[0..8].copy_from_slice(&index_offset.to_be_bytes());
    f[8..16].copy_from_slice(&(index.len() as u64).to_be_bytes());
    let index_sum = xxhash_rust::xxh3::xxh3_64_with_seed(index, index_offset);
    f[16..24].copy_from_slice(&index_sum.to_be_bytes());
    let footer_sum = xxhash_rust::xxh3::xxh3_64(&f[0..24]);
    f[24..32].copy_from_slice(&footer_sum.to_be_bytes());
    f[32..40].copy_from_slice(&super::FOOTER_MAGIC);
    f
}

/// Parses and checks footer and index; checks that the blocks tile `data_start..index_offset` exactly, in
/// ascending key-group order within `range`.
pub(crate) fn decode_footer_and_index(
    file: &[u8],
    data_start: u64,
    range: KeyGroupRange,
) -> Result<Vec<KeyGroupBlock>, SavepointError> {
    let len = file.len();
    let footer_at = len.saturating_sub(FOOTER_LEN);
    let footer = file
        .get(footer_at..)
        .filter(|f| f.len() == FOOTER_LEN)
        .ok_or(SavepointError::TooShort {
            at: Location::file(IN_MEMORY),
            len: len as u64,
            min: MIN_FILE_LEN,
        })?;
    let mut r = ByteReader::new(footer, footer_at as u64, index_err);
    let index_offset = r.u64("index offset")?;
    let index_len = r.u64("index length")?;
    let index_sum = r.u64("index checksum")?;
    let footer_sum = r.u64("footer checksum")?;
    let magic: [u8; 8] = r.array("footer magic")?;
    if magic != super::FOOTER_MAGIC {
        return Err(SavepointError::BadFooterMagic {
            at: in_memory((footer_at + 32) as u64),
            found: magic,
        });
    }
    let computed = xxhash_rust::xxh3::xxh3_64(footer.get(..24).unwrap_or_default());
    if !checksum_ok(footer_sum, computed) {
        return Err(SavepointError::ChecksumMismatch {
            region: "footer",
            at: in_memory(footer_at as u64),
            stored: footer_sum,
            computed,
        });
    }
    if index_offset < data_start || index_offset.checked_add(index_len) != Some(footer_at as u64) {
        return Err(index_err(
            footer_at as u64,
            format!(
                "index at {index_offset} of {index_len} bytes does not lie between the header end \
                 {data_start} and the footer at {footer_at}"
            ),
        ));
    }
    let index = file
        .get(index_offset as usize..footer_at)
        .ok_or_else(|| index_err(index_offset, "index outside the file".into()))?;
    let computed = xxhash_rust::xxh3::xxh3_64_with_seed(index, index_offset);
    if !checksum_ok(index_sum, computed) {
        return Err(SavepointError::ChecksumMismatch {
            region: "index",
            at: in_memory(index_offset),
            stored: index_sum,
            computed,
        });
    }
    let mut r = ByteReader::new(index, index_offset, index_err);
    let count = r.u32("index entry count")? as usize;
    if r.remaining() as u64 != count as u64 * INDEX_ENTRY_LEN as u64 {
        return Err(r.fail(format!(
            "{count} index entries need {} bytes, the index holds {}",
            count as u64 * INDEX_ENTRY_LEN as u64,
            r.remaining()
        )));
    }
    let mut blocks = Vec::with_capacity(count);
    let mut expected_offset = data_start;
    let mut prev: Option<u32> = None;
    for i in 0..count {
        let at = r.offset();
        let kg = r.u32("index key group")?;
        let offset = r.u64("index block offset")?;
        let length = r.u64("index block length")?;
        let entries = r.u64("index entry count")?;
        let key_group = KeyGroup::try_from(kg)
            .ok()
            .filter(|k| range.contains(*k))
            .ok_or_else(|| {
                index_err(
                    at,
                    format!("entry {i}: key group {kg} outside the key-group range {range}"),
                )
            })?;
        if prev.is_some_and(|p| kg <= p) {
            return Err(index_err(
                at,
                format!("entry {i}: key group {kg} does not ascend"),
            ));
        }
        prev = Some(kg);
        if offset != expected_offset {
            return Err(index_err(
                at,
                format!("key group {kg}: block offset {offset}, expected {expected_offset} (blocks must be contiguous)"),
            ));
        }
        if length < MIN_FRAME_LEN || entries == 0 {
            return Err(index_err(
                at,
                format!("key group {kg}: block of {length} bytes with {entries} entries"),
            ));
        }
        expected_offset = offset
            .checked_add(length)
            .filter(|e| *e <= index_offset)
            .ok_or_else(|| {
                index_err(at, format!("key group {kg}: block {offset}+{length} runs past the index at {index_offset}"))
            })?;
        blocks.push(KeyGroupBlock {
            key_group,
            offset,
            length,
            entries,
        });
    }
    if expected_offset != index_offset {
        return Err(index_err(
            index_offset,
            format!("blocks end at {expected_offset}, the index starts at {index_offset}"),
        ));
    }
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_minimal_and_round_trip() {
        let mut b = [0u8; 5];
        for v in [0u32, 1, 127, 128, 300, 16383, 16384, u32::MAX] {
            let n = put_varint(&mut b, v);
            match get_varint(&b[..n]) {
                Varint::Value(x, m) => assert_eq!((x, m), (v, n)),
                _ => panic!("varint {v} did not round trip"),
            }
            assert!(matches!(get_varint(&b[..n - 1]), Varint::Incomplete));
        }
        assert!(matches!(get_varint(&[0x80, 0x00]), Varint::Invalid));
        assert!(matches!(
            get_varint(&[0xff, 0xff, 0xff, 0xff, 0x10]),
            Varint::Invalid
        ));
        assert!(matches!(
            get_varint(&[0xff, 0xff, 0xff, 0xff, 0x8f]),
            Varint::Invalid
        ));
    }

    #[test]
    fn header_round_trips_with_ttl() {
        let config = BackendConfig {
            max_parallelism: 256,
            key_group_range: KeyGroupRange::new(10, 20),
            key_serializer: SerializerSnapshot::simple("k", 1),
        };
        let mut ttl = TtlConfig::new(5000);
        ttl.cleanup_incremental = None;
        let states = vec![StateMetaInfo {
            name: "s".into(),
            kind: StateKind::Timers,
            namespace_serializer: SerializerSnapshot::simple("ns", 2),
            value_serializer: SerializerSnapshot::composite(
                "v",
                3,
                vec![SerializerSnapshot::simple("e", 1)],
            ),
            ttl: Some(ttl),
        }];
        let mut bytes = encode_header(&config, &states, Compression::Lz4).unwrap();
        let sum = xxhash_rust::xxh3::xxh3_64(&bytes);
        bytes.extend_from_slice(&sum.to_be_bytes());
        let data_start = bytes.len() as u64;
        bytes.extend_from_slice(&[0; 4 + FOOTER_LEN]);
        let (h, start) = decode_header(&bytes).unwrap();
        assert_eq!(start, data_start);
        assert_eq!(h.states, states);
        assert_eq!(h.backend_config(), config);
        assert_eq!(h.compression, Compression::Lz4);
    }
}

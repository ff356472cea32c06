//! The decoder: [`SavepointReader`] over the bytes of a file (read whole) or bytes in memory.

use std::path::{Path, PathBuf};

use super::format::{
    checksum_ok, decode_footer_and_index, decode_header, get_varint, Varint, CHECKSUM_LEN,
    CODEC_LZ4, CODEC_RAW, END_OF_KEY_GROUP, END_OF_STATE, FRAME_HEADER_LEN, MIN_FILE_LEN,
    TIMER_TS_LEN,
};
use super::{
    Compression, KeyGroupBlock, SavepointError, SavepointHeader, VerifyReport, MAX_FRAME_RAW_LEN,
};
use crate::error::{Error, Location, IN_MEMORY};
use crate::keygroup::{key_group_prefix_len, read_key_group_prefix, KeyGroup};
use crate::meta::StateKind;

/// The savepoint's bytes, owned: a file is read whole, never mapped, so a file truncated or replaced under
/// a reader gives the bytes read or an error, never a signal (`design/checkpoint-fencing.md`, "Readers").
struct Data(Vec<u8>);

impl Data {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A savepoint opened for reading. Opening validates the header (checksum, magic, version, flags, fields),
/// the footer and the key-group index (checksums, every block inside the file, blocks contiguous and in
/// ascending key-group order); key-group data is checked as it is read.
pub struct SavepointReader {
    /// The file's path (`<memory>` for bytes), named by every decoding error.
    name: PathBuf,
    data: Data,
    header: SavepointHeader,
    blocks: Vec<KeyGroupBlock>,
}

impl std::fmt::Debug for SavepointReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavepointReader")
            .field("name", &self.name)
            .field("len", &self.data.bytes().len())
            .field("header", &self.header)
            .field("key_groups", &self.blocks.len())
            .finish()
    }
}

/// The callback of [`SavepointReader::read_key_group`]: `(state index, entry key, value)`.
pub type EntryVisitor<'a> = dyn FnMut(usize, &[u8], &[u8]) -> crate::Result<()> + 'a;

/// [`EntryVisitor`] with any error type (the decoder is shared by `read_key_group` and `verify`).
type Visitor<'a, E> = dyn FnMut(usize, &[u8], &[u8]) -> Result<(), E> + 'a;

/// Counters of one decoded block.
#[derive(Default)]
struct BlockStats {
    frames: u64,
    raw_bytes: u64,
}

impl SavepointReader {
    /// Opens and validates the savepoint file at `path`, read whole into memory (with plain reads: a file
    /// changed or truncated meanwhile yields bytes the checksums refuse, or an error, never a signal).
    /// Decoding errors name `path`.
    pub fn open(path: &Path) -> crate::Result<Self> {
        use std::io::Read;
        let io = |source| Error::io("reading savepoint", path, source);
        let mut file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < MIN_FILE_LEN {
            return Err(SavepointError::TooShort {
                at: Location::file(path),
                len,
                min: MIN_FILE_LEN,
            }
            .into());
        }
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.read_to_end(&mut bytes).map_err(io)?;
        Ok(Self::parse(path.to_path_buf(), Data(bytes))?)
    }

    /// Validates a savepoint held in memory. Decoding errors name the file `<memory>`.
    pub fn from_bytes(bytes: Vec<u8>) -> crate::Result<Self> {
        Ok(Self::parse(PathBuf::from(IN_MEMORY), Data(bytes))?)
    }

    fn parse(name: PathBuf, data: Data) -> Result<Self, SavepointError> {
        let file = data.bytes();
        if (file.len() as u64) < MIN_FILE_LEN {
            return Err(SavepointError::TooShort {
                at: Location::file(&name),
                len: file.len() as u64,
                min: MIN_FILE_LEN,
            });
        }
        let (header, data_start) = decode_header(file).map_err(|e| e.in_file(&name))?;
        let blocks = decode_footer_and_index(file, data_start, header.key_group_range)
            .map_err(|e| e.in_file(&name))?;
        Ok(SavepointReader {
            name,
            data,
            header,
            blocks,
        })
    }

    /// The file's path, or `<memory>` for a savepoint read from bytes.
    pub fn name(&self) -> &Path {
        &self.name
    }

    /// The header: format version, max parallelism, key-group range, serializers, states.
    pub fn header(&self) -> &SavepointHeader {
        &self.header
    }

    /// The key groups that hold data, ascending, with their block's offset, length and entry count.
    pub fn key_groups(&self) -> &[KeyGroupBlock] {
        &self.blocks
    }

    /// The length of the savepoint in bytes.
    pub fn len(&self) -> u64 {
        self.data.bytes().len() as u64
    }

    /// Always false: a valid savepoint is never empty (present for API completeness).
    pub fn is_empty(&self) -> bool {
        self.data.bytes().is_empty()
    }

    /// Calls `f(state_index, key, value)` for every entry of key group `kg`: state by state in ascending state
    /// index, entries in strictly ascending key order. A key group in range without data gives no calls.
    ///
    /// Each frame's checksum is verified before any of its entries is passed on; the structure (end marks,
    /// state indexes, key order, key-group prefixes, entry count) is checked as it goes, so on an error `f`
    /// may already have seen the entries before the damage. Errors from `f` are returned as they are.
    pub fn read_key_group(&self, kg: KeyGroup, f: &mut EntryVisitor<'_>) -> crate::Result<()> {
        if !self.header.key_group_range.contains(kg) {
            return Err(SavepointError::KeyGroupNotInRange {
                key_group: kg,
                range: self.header.key_group_range,
            }
            .into());
        }
        match self.blocks.binary_search_by_key(&kg, |b| b.key_group) {
            Ok(i) => match self.blocks.get(i) {
                Some(block) => self.decode_block(block, f).map(|_| ()),
                None => Ok(()),
            },
            Err(_) => Ok(()),
        }
    }

    /// Decodes every key group, checking every frame checksum and the whole structure. The error names the
    /// first damaged block (key group, file and offsets).
    pub fn verify(&self) -> crate::Result<VerifyReport> {
        let mut report = VerifyReport {
            key_groups: self.blocks.len(),
            frames: 0,
            raw_bytes: 0,
            entries_per_state: vec![0; self.header.states.len()],
            file_bytes: self.len(),
        };
        for block in &self.blocks {
            let counts = &mut report.entries_per_state;
            let stats = self.decode_block(block, &mut |state, _key, _value| {
                if let Some(n) = counts.get_mut(state) {
                    *n += 1;
                }
                Ok::<(), SavepointError>(())
            })?;
            report.frames += stats.frames;
            report.raw_bytes += stats.raw_bytes;
        }
        Ok(report)
    }

    fn decode_block<E: From<SavepointError>>(
        &self,
        block: &KeyGroupBlock,
        f: &mut Visitor<'_, E>,
    ) -> Result<BlockStats, E> {
        let states = &self.header.states;
        let prefix_len = key_group_prefix_len(self.header.max_parallelism);
        let kg = block.key_group;
        let mut cur = BlockCursor::new(
            &self.name,
            self.data.bytes(),
            block,
            self.header.compression == Compression::Lz4,
        );
        let mut prev_key: Vec<u8> = Vec::with_capacity(64);
        let mut last_state: Option<u32> = None;
        let mut entries: u64 = 0;
        loop {
            let mark = cur.read_u32()?;
            if mark == END_OF_KEY_GROUP {
                break;
            }
            let Some(meta) = states.get(mark as usize) else {
                return Err(cur
                    .fail(format!(
                        "state index {mark} out of range (the header lists {} states)",
                        states.len()
                    ))
                    .into());
            };
            if let Some(last) = last_state.filter(|l| mark <= *l) {
                return Err(cur
                    .fail(format!(
                        "state section {mark} after state section {last}: not ascending"
                    ))
                    .into());
            }
            last_state = Some(mark);
            let timers = meta.kind == StateKind::Timers;
            let min_key_len = prefix_len + if timers { TIMER_TS_LEN } else { 0 };
            prev_key.clear();
            let mut state_entries: u64 = 0;
            while let Some(e) = cur.next_entry()? {
                let detail = if e.key.len() < min_key_len {
                    Some(format!(
                        "state {mark}: entry key of {} bytes is shorter than the minimum {min_key_len}",
                        e.key.len()
                    ))
                } else if read_key_group_prefix(e.key, prefix_len) != Some(kg) {
                    Some(format!(
                        "state {mark}: entry key's key-group prefix is not {kg}"
                    ))
                } else if state_entries > 0 && e.key <= prev_key.as_slice() {
                    Some(format!("state {mark}: entry keys not strictly ascending"))
                } else if timers && !e.value.is_empty() {
                    Some(format!("state {mark}: timer entry with a non-empty value"))
                } else {
                    None
                };
                if let Some(detail) = detail {
                    return Err(block_err(
                        kg,
                        block.offset,
                        Location::at(&self.name, e.at),
                        detail,
                    )
                    .into());
                }
                prev_key.clear();
                prev_key.extend_from_slice(e.key);
                state_entries += 1;
                f(mark as usize, e.key, e.value)?;
            }
            if state_entries == 0 {
                return Err(cur
                    .fail(format!("state section {mark} holds no entries"))
                    .into());
            }
            entries += state_entries;
        }
        cur.finish()?;
        if entries != block.entries {
            return Err(cur
                .fail(format!(
                    "block holds {entries} entries, the index says {}",
                    block.entries
                ))
                .into());
        }
        Ok(BlockStats {
            frames: u64::from(cur.frame_no),
            raw_bytes: cur.raw_bytes,
        })
    }
}

fn block_err(
    key_group: KeyGroup,
    block_offset: u64,
    at: Location,
    detail: String,
) -> SavepointError {
    SavepointError::MalformedBlock {
        key_group,
        block_offset,
        at,
        detail,
    }
}

/// One decoded entry, borrowed from the cursor.
struct Entry<'s> {
    key: &'s [u8],
    value: &'s [u8],
    /// File offset of the frame the entry starts in.
    at: u64,
}

/// Reads the record stream of one block across its frames, verifying and decompressing frame by frame.
struct BlockCursor<'a> {
    /// The file's name, for errors.
    name: &'a Path,
    file: &'a [u8],
    key_group: KeyGroup,
    block_offset: u64,
    block_end: usize,
    lz4_allowed: bool,
    /// File offset of the next frame.
    next: usize,
    /// File offset of the current frame.
    frame_at: usize,
    /// Frames loaded so far.
    frame_no: u32,
    /// The current frame's raw bytes when stored raw.
    borrowed: &'a [u8],
    /// The current frame's raw bytes when decompressed.
    owned: Vec<u8>,
    is_owned: bool,
    pos: usize,
    raw_bytes: u64,
    key_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl<'a> BlockCursor<'a> {
    fn new(name: &'a Path, file: &'a [u8], block: &KeyGroupBlock, lz4_allowed: bool) -> Self {
        // The index was checked at open: the block lies inside the file.
        let start = block.offset as usize;
        BlockCursor {
            name,
            file,
            key_group: block.key_group,
            block_offset: block.offset,
            block_end: start.saturating_add(block.length as usize).min(file.len()),
            lz4_allowed,
            next: start,
            frame_at: start,
            frame_no: 0,
            borrowed: &[],
            owned: Vec::new(),
            is_owned: false,
            pos: 0,
            raw_bytes: 0,
            key_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }

    fn fail(&self, detail: String) -> SavepointError {
        block_err(
            self.key_group,
            self.block_offset,
            Location::at(self.name, self.frame_at as u64),
            detail,
        )
    }

    #[inline]
    fn cur(&self) -> &[u8] {
        if self.is_owned {
            &self.owned
        } else {
            self.borrowed
        }
    }

    /// Loads, verifies and (if needed) decompresses the next frame.
    fn load_next_frame(&mut self) -> Result<(), SavepointError> {
        if self.frame_no > 0 && self.cur().len() < MAX_FRAME_RAW_LEN {
            return Err(self.fail(format!(
                "the record stream continues after frame {} of {} raw bytes (only the last frame of a \
                 block may hold less than {MAX_FRAME_RAW_LEN})",
                self.frame_no - 1,
                self.cur().len()
            )));
        }
        if self.next >= self.block_end {
            return Err(self.fail(
                "the block ends inside the record stream (no end-of-key-group mark)".into(),
            ));
        }
        let at = self.next;
        self.frame_at = at;
        let frame_no = self.frame_no;
        let header = self
            .file
            .get(at..at + FRAME_HEADER_LEN)
            .filter(|_| at + FRAME_HEADER_LEN + CHECKSUM_LEN <= self.block_end)
            .ok_or_else(|| self.fail(format!("frame {frame_no} header runs past the block end")))?;
        let raw_len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let stored_len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let codec = header[8];
        let payload_end = (at + FRAME_HEADER_LEN)
            .checked_add(stored_len)
            .filter(|e| e.saturating_add(CHECKSUM_LEN) <= self.block_end)
            .ok_or_else(|| {
                self.fail(format!(
                    "frame {frame_no} of {stored_len} stored bytes runs past the block end"
                ))
            })?;
        let covered = self.file.get(at..payload_end).unwrap_or_default();
        let stored_sum = self
            .file
            .get(payload_end..payload_end + CHECKSUM_LEN)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or_default();
        let computed = xxhash_rust::xxh3::xxh3_64_with_seed(covered, at as u64);
        if !checksum_ok(stored_sum, computed) {
            return Err(SavepointError::FrameChecksum {
                key_group: self.key_group,
                frame: frame_no,
                at: Location::at(self.name, at as u64),
                stored: stored_sum,
                computed,
            });
        }
        if raw_len == 0 || raw_len > MAX_FRAME_RAW_LEN {
            return Err(self.fail(format!(
                "frame {frame_no} raw length {raw_len} outside 1..={MAX_FRAME_RAW_LEN}"
            )));
        }
        let payload = covered.get(FRAME_HEADER_LEN..).unwrap_or_default();
        match codec {
            CODEC_RAW => {
                if stored_len != raw_len {
                    return Err(self.fail(format!(
                        "raw frame {frame_no} with stored length {stored_len} != raw length {raw_len}"
                    )));
                }
                self.borrowed = payload;
                self.is_owned = false;
            }
            CODEC_LZ4 if self.lz4_allowed => {
                if stored_len >= raw_len {
                    return Err(self.fail(format!(
                        "LZ4 frame {frame_no} does not shrink ({stored_len} stored >= {raw_len} raw)"
                    )));
                }
                self.owned.clear();
                self.owned.resize(raw_len, 0);
                match lz4_flex::block::decompress_into(payload, &mut self.owned) {
                    Ok(n) if n == raw_len => {}
                    Ok(n) => {
                        return Err(self.fail(format!(
                            "LZ4 frame {frame_no} decompressed to {n} bytes, expected {raw_len}"
                        )))
                    }
                    Err(e) => {
                        return Err(
                            self.fail(format!("LZ4 frame {frame_no} does not decompress: {e}"))
                        )
                    }
                }
                self.is_owned = true;
            }
            c => {
                return Err(self.fail(format!(
                    "frame {frame_no} has codec {c}, not allowed with header compression {:?}",
                    if self.lz4_allowed {
                        Compression::Lz4
                    } else {
                        Compression::None
                    }
                )))
            }
        }
        self.next = payload_end + CHECKSUM_LEN;
        self.frame_no = self.frame_no.saturating_add(1);
        self.pos = 0;
        self.raw_bytes += raw_len as u64;
        Ok(())
    }

    /// Copies `n` stream bytes into `out` (cleared first), crossing frames.
    fn read_into(&mut self, out: &mut Vec<u8>, mut n: usize) -> Result<(), SavepointError> {
        out.clear();
        while n > 0 {
            let avail = self.cur().len().saturating_sub(self.pos);
            if avail == 0 {
                self.load_next_frame()?;
                continue;
            }
            let take = avail.min(n);
            let pos = self.pos;
            let chunk = self.cur().get(pos..pos + take).unwrap_or_default();
            out.extend_from_slice(chunk);
            self.pos += take;
            n -= take;
        }
        Ok(())
    }

    fn read_byte(&mut self) -> Result<u8, SavepointError> {
        loop {
            if let Some(&b) = self.cur().get(self.pos) {
                self.pos += 1;
                return Ok(b);
            }
            self.load_next_frame()?;
        }
    }

    fn read_u32(&mut self) -> Result<u32, SavepointError> {
        let mut b = [0u8; 4];
        for x in &mut b {
            *x = self.read_byte()?;
        }
        Ok(u32::from_be_bytes(b))
    }

    fn read_varint(&mut self, what: &str) -> Result<u32, SavepointError> {
        let mut buf = [0u8; 5];
        for i in 0..5 {
            buf[i] = self.read_byte()?;
            match get_varint(&buf[..=i]) {
                Varint::Value(v, _) => return Ok(v),
                Varint::Incomplete => {}
                Varint::Invalid => break,
            }
        }
        Err(self.fail(format!("{what}: invalid varint")))
    }

    /// The next entry of the current state section, or `None` at its end mark.
    #[inline]
    fn next_entry(&mut self) -> Result<Option<Entry<'_>>, SavepointError> {
        let at = self.frame_at as u64;
        // Fast path: the whole entry lies in the current frame.
        let rest = self.cur().get(self.pos..).unwrap_or_default();
        if let Varint::Value(klen, n1) = get_varint(rest) {
            if klen == u32::from(END_OF_STATE) {
                self.pos += n1;
                return Ok(None);
            }
            let key_end = n1 + klen as usize;
            if let Varint::Value(vlen, n2) = get_varint(rest.get(key_end..).unwrap_or_default()) {
                let value_start = key_end + n2;
                let value_end = value_start + vlen as usize;
                if value_end <= rest.len() {
                    let base = self.pos;
                    self.pos += value_end;
                    let cur = self.cur();
                    if let (Some(key), Some(value)) = (
                        cur.get(base + n1..base + key_end),
                        cur.get(base + value_start..base + value_end),
                    ) {
                        return Ok(Some(Entry { key, value, at }));
                    }
                    return Err(self.fail("internal: entry bounds".into()));
                }
            }
        }
        // Slow path: the entry spans frames (or is malformed); copy it.
        let klen = self.read_varint("entry key length")?;
        if klen == u32::from(END_OF_STATE) {
            return Ok(None);
        }
        let mut key = std::mem::take(&mut self.key_buf);
        let r = self.read_into(&mut key, klen as usize);
        self.key_buf = key;
        r?;
        let vlen = self.read_varint("entry value length")?;
        let mut value = std::mem::take(&mut self.value_buf);
        let r = self.read_into(&mut value, vlen as usize);
        self.value_buf = value;
        r?;
        Ok(Some(Entry {
            key: &self.key_buf,
            value: &self.value_buf,
            at,
        }))
    }

    /// Checks that nothing follows the end-of-key-group mark.
    fn finish(&self) -> Result<(), SavepointError> {
        let left = self.cur().len().saturating_sub(self.pos);
        if left > 0 {
            return Err(self.fail(format!("{left} bytes follow the end-of-key-group mark")));
        }
        if self.next != self.block_end {
            return Err(self.fail(format!(
                "{} bytes of frames follow the end-of-key-group mark",
                self.block_end.saturating_sub(self.next)
            )));
        }
        Ok(())
    }
}

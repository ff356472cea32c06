//! The streaming encoder and the atomic file writer.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::format::{
    encode_footer, encode_header, encode_index, put_varint, CODEC_LZ4, CODEC_RAW, END_OF_KEY_GROUP,
    END_OF_STATE, FRAME_HEADER_LEN, TIMER_TS_LEN,
};
use super::{
    Compression, KeyGroupBlock, SavepointError, SavepointSummary, WriteOptions, MAX_FRAME_RAW_LEN,
};
use crate::backend::BackendSnapshot;
use crate::error::{Error, Result};
use crate::keygroup::{key_group_prefix_len, read_key_group_prefix, KeyGroup};
use crate::meta::StateKind;
use keyed_state_lsm::storage::{NewFile, OsStorage, Storage};

/// Output buffer size. Smaller than a full frame, so full frames bypass the buffer (`BufWriter` writes a
/// slice at least its capacity straight through after flushing what it holds): one copy less per byte.
const WRITE_BUFFER: usize = 32 * 1024;

/// Length of the frame checksum that follows each frame.
const CHECKSUM_LEN: usize = 8;

/// What [`encode`] names in an I/O error of its output, which may be any `Write`.
const OUTPUT: &str = "<savepoint output>";

/// Cuts the record stream into frames of exactly [`MAX_FRAME_RAW_LEN`] raw bytes (the last frame of a block
/// may be shorter), compresses and checksums them, and tracks the output offset.
struct FrameWriter<W: Write> {
    out: BufWriter<W>,
    /// What I/O errors name: the file written, or [`OUTPUT`].
    target: PathBuf,
    offset: u64,
    /// `FRAME_HEADER_LEN` reserved bytes, then the raw bytes of the open frame.
    frame: Vec<u8>,
    /// `FRAME_HEADER_LEN` reserved bytes, then the compressed frame (LZ4 only).
    compressed: Vec<u8>,
    compression: Compression,
}

impl<W: Write> FrameWriter<W> {
    fn new(out: W, target: PathBuf, compression: Compression) -> Self {
        let compressed = match compression {
            Compression::None => Vec::new(),
            Compression::Lz4 => {
                vec![
                    0;
                    FRAME_HEADER_LEN
                        + lz4_flex::block::get_maximum_output_size(MAX_FRAME_RAW_LEN)
                        + CHECKSUM_LEN
                ]
            }
        };
        let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + MAX_FRAME_RAW_LEN + CHECKSUM_LEN);
        frame.resize(FRAME_HEADER_LEN, 0);
        FrameWriter {
            out: BufWriter::with_capacity(WRITE_BUFFER, out),
            target,
            offset: 0,
            frame,
            compressed,
            compression,
        }
    }

    /// Writes bytes outside frames (header, index, footer).
    fn write_plain(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(Error::io_at("writing savepoint", &self.target))?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    #[inline]
    fn space(&self) -> usize {
        FRAME_HEADER_LEN + MAX_FRAME_RAW_LEN - self.frame.len()
    }

    /// Appends record-stream bytes, closing full frames as needed.
    fn push(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let space = self.space();
            if space == 0 {
                self.flush_frame()?;
                continue;
            }
            let (head, tail) = data.split_at(space.min(data.len()));
            self.frame.extend_from_slice(head);
            data = tail;
        }
        Ok(())
    }

    /// Appends one entry: `varint key length | key | varint value length | value`.
    #[inline]
    fn push_entry(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut kl = [0u8; 5];
        let mut vl = [0u8; 5];
        let kn = put_varint(&mut kl, key.len() as u32);
        let vn = put_varint(&mut vl, value.len() as u32);
        if kn + key.len() + vn + value.len() <= self.space() {
            self.frame.extend_from_slice(&kl[..kn]);
            self.frame.extend_from_slice(key);
            self.frame.extend_from_slice(&vl[..vn]);
            self.frame.extend_from_slice(value);
            Ok(())
        } else {
            self.push(&kl[..kn])?;
            self.push(key)?;
            self.push(&vl[..vn])?;
            self.push(value)
        }
    }

    /// Writes the open frame, if it holds any bytes.
    fn flush_frame(&mut self) -> Result<()> {
        let raw_len = self.frame.len() - FRAME_HEADER_LEN;
        if raw_len == 0 {
            return Ok(());
        }
        let mut use_lz4 = false;
        let mut stored_len = raw_len;
        if self.compression == Compression::Lz4 {
            let (raw, dst) = (
                &self.frame[FRAME_HEADER_LEN..],
                &mut self.compressed[FRAME_HEADER_LEN..],
            );
            if let Ok(n) = lz4_flex::block::compress_into(raw, dst) {
                if n < raw_len {
                    use_lz4 = true;
                    stored_len = n;
                }
            }
        }
        let buf = if use_lz4 {
            &mut self.compressed
        } else {
            &mut self.frame
        };
        buf[0..4].copy_from_slice(&(raw_len as u32).to_be_bytes());
        buf[4..8].copy_from_slice(&(stored_len as u32).to_be_bytes());
        buf[8] = if use_lz4 { CODEC_LZ4 } else { CODEC_RAW };
        let end = FRAME_HEADER_LEN + stored_len;
        let sum = xxhash_rust::xxh3::xxh3_64_with_seed(&buf[..end], self.offset);
        // Frame and checksum in one write (both buffers have room for the checksum after the frame).
        if use_lz4 {
            buf[end..end + CHECKSUM_LEN].copy_from_slice(&sum.to_be_bytes());
        } else {
            buf.truncate(end);
            buf.extend_from_slice(&sum.to_be_bytes());
        }
        self.out
            .write_all(&buf[..end + CHECKSUM_LEN])
            .map_err(Error::io_at("writing savepoint", &self.target))?;
        self.offset += (end + CHECKSUM_LEN) as u64;
        self.frame.truncate(FRAME_HEADER_LEN);
        Ok(())
    }

    fn finish(mut self) -> Result<u64> {
        self.out
            .flush()
            .map_err(Error::io_at("flushing savepoint", &self.target))?;
        Ok(self.offset)
    }
}

/// Encodes one key group at a time: validates the backend's entries and writes the record stream.
struct BlockEncoder<'s, W: Write> {
    w: FrameWriter<W>,
    snapshot: &'s dyn BackendSnapshot,
    prefix_len: usize,
    key_group: KeyGroup,
    state: usize,
    state_entries: u64,
    min_key_len: usize,
    timers: bool,
    prev_key: Vec<u8>,
    block_offset: Option<u64>,
    block_entries: u64,
}

impl<W: Write> BlockEncoder<'_, W> {
    fn invalid(&self, detail: String) -> Error {
        Error::Savepoint(SavepointError::InvalidSnapshot {
            state: self.state,
            name: self
                .snapshot
                .states()
                .get(self.state)
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            key_group: self.key_group,
            detail,
        })
    }

    fn begin_state(&mut self, state: usize, kind: StateKind) {
        self.state = state;
        self.state_entries = 0;
        self.timers = kind == StateKind::Timers;
        self.min_key_len = self.prefix_len + if self.timers { TIMER_TS_LEN } else { 0 };
        self.prev_key.clear();
    }

    #[inline]
    fn entry(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if key.len() < self.min_key_len {
            return Err(self.invalid(format!(
                "entry key of {} bytes is shorter than the minimum {}",
                key.len(),
                self.min_key_len
            )));
        }
        if read_key_group_prefix(key, self.prefix_len) != Some(self.key_group) {
            return Err(self.invalid(format!(
                "entry key {:02x?} does not start with the key-group prefix",
                &key[..self.prefix_len]
            )));
        }
        if self.state_entries > 0 && key <= self.prev_key.as_slice() {
            return Err(self.invalid(format!(
                "entry keys not strictly ascending: {:02x?} after {:02x?}",
                key, self.prev_key
            )));
        }
        if self.timers && !value.is_empty() {
            return Err(self.invalid("timer entry with a non-empty value".into()));
        }
        if key.len() > u32::MAX as usize || value.len() > u32::MAX as usize {
            return Err(self.invalid("entry key or value longer than 2^32-1 bytes".into()));
        }
        if self.block_offset.is_none() {
            self.block_offset = Some(self.w.offset);
        }
        if self.state_entries == 0 {
            self.w.push(&(self.state as u32).to_be_bytes())?;
        }
        self.w.push_entry(key, value)?;
        self.prev_key.clear();
        self.prev_key.extend_from_slice(key);
        self.state_entries += 1;
        self.block_entries += 1;
        Ok(())
    }

    fn end_state(&mut self) -> Result<u64> {
        if self.state_entries > 0 {
            self.w.push(&[END_OF_STATE])?;
        }
        Ok(self.state_entries)
    }

    fn end_block(&mut self) -> Result<Option<KeyGroupBlock>> {
        let Some(offset) = self.block_offset.take() else {
            return Ok(None);
        };
        self.w.push(&END_OF_KEY_GROUP.to_be_bytes())?;
        self.w.flush_frame()?;
        let entries = std::mem::take(&mut self.block_entries);
        Ok(Some(KeyGroupBlock {
            key_group: self.key_group,
            offset,
            length: self.w.offset - offset,
            entries,
        }))
    }
}

/// Streams a savepoint of `snapshot` into `out` (buffered internally) and returns what was written.
///
/// Memory use is bounded by one frame (64 KiB) plus the longest key, whatever the size of a key group. The
/// output is deterministic: it depends only on the configuration, the states and the entries. Errors from
/// the backend's `visit` are returned as they are; entries that break the [`BackendSnapshot`] contract
/// (unsorted, wrong key-group prefix) give [`SavepointError::InvalidSnapshot`]. On error, `out` holds an
/// incomplete savepoint that no reader accepts (it lacks the footer).
pub fn encode<W: Write>(
    snapshot: &dyn BackendSnapshot,
    options: &WriteOptions,
    out: W,
) -> Result<SavepointSummary> {
    encode_to(snapshot, options, out, PathBuf::from(OUTPUT))
}

/// [`encode`] into `out`, whose I/O errors name `target`.
fn encode_to<W: Write>(
    snapshot: &dyn BackendSnapshot,
    options: &WriteOptions,
    out: W,
    target: PathBuf,
) -> Result<SavepointSummary> {
    let config = snapshot.config();
    let states = snapshot.states();
    let header = encode_header(config, states, options.compression)?;
    let mut enc = BlockEncoder {
        w: FrameWriter::new(out, target, options.compression),
        snapshot,
        prefix_len: key_group_prefix_len(config.max_parallelism),
        key_group: 0,
        state: 0,
        state_entries: 0,
        min_key_len: 0,
        timers: false,
        prev_key: Vec::with_capacity(64),
        block_offset: None,
        block_entries: 0,
    };
    enc.w.write_plain(&header)?;
    enc.w
        .write_plain(&xxhash_rust::xxh3::xxh3_64(&header).to_be_bytes())?;

    let mut entries_per_state = vec![0u64; states.len()];
    let mut blocks = Vec::new();
    for kg in config.key_group_range.iter() {
        enc.key_group = kg;
        for (state, meta) in states.iter().enumerate() {
            enc.begin_state(state, meta.kind);
            let mut own_error: Option<Error> = None;
            let visited = snapshot.visit(state, kg, &mut |key, value| {
                enc.entry(key, value).map_err(|e| {
                    own_error = Some(e);
                    crate::Error::Closed("savepoint encoder after an error")
                })
            });
            if let Some(e) = own_error {
                return Err(e);
            }
            visited?;
            if let Some(n) = entries_per_state.get_mut(state) {
                *n += enc.end_state()?;
            }
        }
        if let Some(block) = enc.end_block()? {
            blocks.push(block);
        }
    }

    let index_offset = enc.w.offset;
    let index = encode_index(&blocks);
    enc.w.write_plain(&index)?;
    enc.w.write_plain(&encode_footer(index_offset, &index))?;
    let bytes_written = enc.w.finish()?;
    Ok(SavepointSummary {
        bytes_written,
        entries_per_state,
        key_groups_written: blocks.len(),
    })
}

/// Writes a savepoint of `snapshot` to `path` atomically: into a temporary file in the same directory, which
/// is fsynced and renamed to `path` (replacing any file there), after which the directory is fsynced. On any
/// error before the rename the temporary file is removed and nothing appears at `path`.
pub fn write_savepoint(
    path: &Path,
    snapshot: &dyn BackendSnapshot,
    options: &WriteOptions,
) -> Result<SavepointSummary> {
    write_savepoint_on(&OsStorage, path, snapshot, options)
}

/// [`write_savepoint`] through `storage` (the real file system, or a fault-injecting one in tests).
pub fn write_savepoint_on(
    storage: &dyn Storage,
    path: &Path,
    snapshot: &dyn BackendSnapshot,
    options: &WriteOptions,
) -> Result<SavepointSummary> {
    static TEMP_IDS: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "savepoint path {} has no file name",
            path.display()
        ))
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // A fresh name per attempt: one left by a killed process with the same id is skipped, never reused.
    let (tmp, mut file) = {
        let mut attempt = 0;
        loop {
            let mut tmp_name = std::ffi::OsString::from(".");
            tmp_name.push(name);
            tmp_name.push(format!(
                ".{}-{}.tmp",
                std::process::id(),
                TEMP_IDS.fetch_add(1, Ordering::Relaxed)
            ));
            let tmp = dir.join(tmp_name);
            match storage.create(&tmp) {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 64 => {
                    attempt += 1;
                }
                Err(e) => return Err(Error::io("creating the temporary savepoint file", tmp, e)),
            }
        }
    };
    let written =
        // Write errors name the savepoint's path (the temporary file is an implementation detail, removed).
        encode_to(snapshot, options, NewFileWriter(&mut file), path.to_path_buf()).and_then(|summary| {
            file.sync()
                .map_err(Error::io_at("syncing the temporary savepoint file", &tmp))?;
            drop(file);
            storage.rename(&tmp, path).map_err(Error::io_at(
                "renaming the temporary savepoint file to",
                path,
            ))?;
            Ok(summary)
        });
    let summary = match written {
        Ok(s) => s,
        Err(e) => {
            let _ = storage.remove(&tmp);
            return Err(e);
        }
    };
    storage
        .sync_dir(dir)
        .map_err(Error::io_at("syncing the savepoint directory", dir))?;
    Ok(summary)
}

/// `Write` over a storage's new file.
struct NewFileWriter<'a>(&'a mut NewFile);

impl Write for NewFileWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

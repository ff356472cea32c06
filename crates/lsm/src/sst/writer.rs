//! The SST writer.

use std::path::{Path, PathBuf};

use super::block::BlockBuilder;
use super::format::{
    block_trailer, BlockHandle, Footer, CODEC_LZ4, CODEC_NONE, FORMAT_VERSION,
    FORMAT_VERSION_PREFIX,
};
use super::{
    bloom, properties, Compression, PropertiesCollector, SstMeta, SstOptions, SstProperties,
};
use crate::coding::put_u32;
use crate::ikey::{self, ValueKind};
use crate::io::FileWriter;
use crate::storage::StorageHandle;
use crate::LsmError;

/// Largest `key + value` accepted in one entry (keeps block offsets within `u32`).
pub const MAX_ENTRY_BYTES: usize = 1 << 30;
/// Blocks smaller than this are never compressed.
const MIN_COMPRESS_LEN: usize = 64;

/// Writes one SST file: entries in strictly ascending internal-key order, then [`SstWriter::finish`].
pub struct SstWriter {
    storage: StorageHandle,
    path: PathBuf,
    out: FileWriter,
    options: SstOptions,
    collector: Option<Box<dyn PropertiesCollector>>,
    block: BlockBuilder,
    index: BlockBuilder,
    compress_buf: Vec<u8>,
    handle_buf: Vec<u8>,
    bloom_hashes: Vec<u64>,
    /// Hashes of the distinct prefixes (with a prefix extractor).
    prefix_hashes: Vec<u64>,
    /// The last prefix seen (if any), and whether every entry so far had one (else the filter records none).
    last_prefix: Vec<u8>,
    has_last_prefix: bool,
    all_in_domain: bool,
    props: SstProperties,
}

impl SstWriter {
    /// Creates a new file at `path` (which must not exist).
    #[cfg(feature = "test-util")]
    pub fn create(
        path: &Path,
        options: SstOptions,
        collector: Option<Box<dyn PropertiesCollector>>,
    ) -> Result<Self, LsmError> {
        Self::create_on(&StorageHandle::os(), path, options, collector)
    }

    /// Creates a new file at `path` of `storage` (which must not exist).
    pub fn create_on(
        storage: &StorageHandle,
        path: &Path,
        mut options: SstOptions,
        collector: Option<Box<dyn PropertiesCollector>>,
    ) -> Result<Self, LsmError> {
        options.block_size = options.block_size.clamp(64, 64 << 20);
        options.restart_interval = options.restart_interval.clamp(1, 1 << 16);
        options.bloom_bits_per_key = options.bloom_bits_per_key.min(64);
        options.prefix_bloom_bits_per_key = options.prefix_bloom_bits_per_key.min(64);
        if options.prefix_bloom_bits_per_key == 0
            || options
                .prefix_extractor
                .as_ref()
                .is_some_and(|x| x.name().is_empty() || x.name().len() > bloom::MAX_NAME_LEN)
        {
            options.prefix_extractor = None;
        }
        let out = FileWriter::create_on(&**storage, path, crate::io::DEFAULT_BUFFER)?;
        Ok(SstWriter {
            storage: storage.clone(),
            path: path.to_path_buf(),
            out,
            block: BlockBuilder::with_hash_index(options.restart_interval),
            index: BlockBuilder::new(1),
            options,
            collector,
            compress_buf: Vec::new(),
            handle_buf: Vec::new(),
            bloom_hashes: Vec::new(),
            prefix_hashes: Vec::new(),
            last_prefix: Vec::new(),
            has_last_prefix: false,
            all_in_domain: true,
            props: SstProperties {
                min_seqno: u64::MAX,
                ..SstProperties::default()
            },
        })
    }

    fn input_err(&self, detail: String) -> LsmError {
        LsmError::SstInput {
            file: self.path.clone(),
            detail,
        }
    }

    /// Appends an entry; keys must be strictly ascending by `ikey::compare`.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<(), LsmError> {
        let Some(parsed) = ikey::parse(ikey) else {
            return Err(self.input_err(format!("malformed internal key {:02x?}", ikey)));
        };
        if self.props.entries > 0 && ikey::compare(&self.props.largest, ikey).is_ge() {
            return Err(self.input_err("keys are not strictly ascending".into()));
        }
        if ikey.len().saturating_add(value.len()) > MAX_ENTRY_BYTES {
            return Err(self.input_err(format!(
                "entry of {} bytes exceeds the limit of {MAX_ENTRY_BYTES}",
                ikey.len() + value.len()
            )));
        }
        if !self.block.is_empty()
            && self.block.estimated_size() + ikey.len() + value.len() + 12 > self.options.block_size
        {
            self.flush_block()?;
        }
        self.block.add(ikey, value);
        if self.options.bloom_bits_per_key > 0
            && (self.props.entries == 0 || ikey::user_key(&self.props.largest) != parsed.user_key)
        {
            self.bloom_hashes.push(bloom::key_hash(parsed.user_key));
        }
        // Range tombstones are served from the version, never through a filter.
        if parsed.kind != ValueKind::RangeDelete && self.all_in_domain {
            if let Some(x) = &self.options.prefix_extractor {
                match x
                    .prefix_len(parsed.user_key)
                    .and_then(|n| parsed.user_key.get(..n))
                {
                    Some(p) => {
                        if !self.has_last_prefix || self.last_prefix != p {
                            // A prefix that is the whole key is in the filter already, as that key.
                            let whole = self.options.bloom_bits_per_key > 0;
                            if !(whole && p.len() == parsed.user_key.len()) {
                                self.prefix_hashes.push(bloom::key_hash(p));
                            }
                            self.has_last_prefix = true;
                            self.last_prefix.clear();
                            self.last_prefix.extend_from_slice(p);
                        }
                    }
                    None => {
                        self.all_in_domain = false;
                        self.prefix_hashes = Vec::new();
                    }
                }
            }
        }
        let p = &mut self.props;
        if p.entries == 0 {
            p.smallest = ikey.to_vec();
        }
        p.largest.clear();
        p.largest.extend_from_slice(ikey);
        p.entries += 1;
        match parsed.kind {
            ValueKind::Merge => p.merge_operands += 1,
            ValueKind::Delete => p.tombstones += 1,
            ValueKind::RangeDelete => p.range_tombstones += 1,
            ValueKind::Put => {}
        }
        p.raw_key_bytes += ikey.len() as u64;
        p.raw_value_bytes += value.len() as u64;
        p.min_seqno = p.min_seqno.min(parsed.seqno);
        p.max_seqno = p.max_seqno.max(parsed.seqno);
        if let Some(c) = &mut self.collector {
            c.add(ikey, value);
        }
        Ok(())
    }

    /// Estimated size of the file if finished now.
    pub fn estimated_size(&self) -> u64 {
        self.out.offset()
            + self.block.estimated_size() as u64
            + self.index.estimated_size() as u64
            + self.bloom_hashes.len() as u64 * u64::from(self.options.bloom_bits_per_key) / 8
            + self.prefix_hashes.len() as u64 * u64::from(self.options.prefix_bloom_bits_per_key)
                / 8
            + 128
    }

    fn flush_block(&mut self) -> Result<(), LsmError> {
        if self.block.is_empty() {
            return Ok(());
        }
        let handle = write_block(
            &mut self.out,
            &mut self.compress_buf,
            self.block.finish(),
            self.options.compression,
        )?;
        self.handle_buf.clear();
        handle.encode_varint(&mut self.handle_buf);
        self.index.add(self.block.last_key(), &self.handle_buf);
        self.block.reset();
        Ok(())
    }

    /// Writes the last data block, filter, properties, index and footer, and fsyncs the file.
    pub fn finish(mut self) -> Result<SstMeta, LsmError> {
        self.flush_block()?;
        let mut footer = Footer {
            version: FORMAT_VERSION,
            ..Footer::default()
        };
        let filter = if let Some(x) = self.options.prefix_extractor.clone() {
            // Format version 3: the filter says what it holds.
            footer.version = FORMAT_VERSION_PREFIX;
            let whole = self.options.bloom_bits_per_key > 0;
            let prefixes = self.all_in_domain;
            let flags = u8::from(whole) * bloom::FILTER_WHOLE_KEYS
                + u8::from(prefixes) * bloom::FILTER_PREFIXES;
            (flags != 0).then(|| {
                let mut hashes = Vec::new();
                let mut bits = 0u64;
                if whole {
                    hashes.extend_from_slice(&self.bloom_hashes);
                    bits +=
                        self.bloom_hashes.len() as u64 * u64::from(self.options.bloom_bits_per_key);
                }
                if prefixes {
                    hashes.extend_from_slice(&self.prefix_hashes);
                    bits += self.prefix_hashes.len() as u64
                        * u64::from(self.options.prefix_bloom_bits_per_key);
                }
                let per_key = u32::try_from(bits / (hashes.len() as u64).max(1))
                    .unwrap_or(64)
                    .clamp(1, 64);
                let mut filter = Vec::new();
                let name = if prefixes { x.name().as_bytes() } else { &[] };
                bloom::encode_v3_header(&mut filter, flags, name);
                filter.extend_from_slice(&bloom::build(&hashes, per_key));
                filter
            })
        } else {
            (self.options.bloom_bits_per_key > 0)
                .then(|| bloom::build(&self.bloom_hashes, self.options.bloom_bits_per_key))
        };
        if let Some(filter) = filter {
            footer.filter = write_block(
                &mut self.out,
                &mut self.compress_buf,
                &filter,
                Compression::None,
            )?;
        }
        if self.props.entries == 0 {
            self.props.min_seqno = 0;
        }
        if let Some(c) = &mut self.collector {
            self.props.user = c.finish();
        }
        let props = properties::encode(&self.props);
        footer.properties = write_block(
            &mut self.out,
            &mut self.compress_buf,
            &props,
            Compression::None,
        )?;
        footer.index = write_block(
            &mut self.out,
            &mut self.compress_buf,
            self.index.finish(),
            self.options.compression,
        )?;
        self.out.write_all(&footer.encode())?;
        let file_size = self.out.finish()?;
        Ok(SstMeta {
            file_size,
            properties: self.props,
        })
    }

    /// Abandons the file: closes and deletes it.
    pub fn abandon(self) -> Result<(), LsmError> {
        let path = self.path.clone();
        let storage = self.storage.clone();
        drop(self);
        storage.remove(&path).map_err(|source| LsmError::Io {
            path: path.clone(),
            source,
        })
    }
}

/// Writes `raw` as one block (LZ4 if asked and it shrinks by at least 1/8, raw otherwise) plus its trailer.
fn write_block(
    out: &mut FileWriter,
    buf: &mut Vec<u8>,
    raw: &[u8],
    compression: Compression,
) -> Result<BlockHandle, LsmError> {
    let offset = out.offset();
    if compression == Compression::Lz4 && raw.len() >= MIN_COMPRESS_LEN {
        buf.clear();
        put_u32(buf, raw.len() as u32);
        buf.resize(4 + lz4_flex::block::get_maximum_output_size(raw.len()), 0);
        if let Some(dst) = buf.get_mut(4..) {
            if let Ok(n) = lz4_flex::block::compress_into(raw, dst) {
                buf.truncate(4 + n);
                if buf.len() < raw.len() - raw.len() / 8 {
                    out.write_all(buf)?;
                    out.write_all(&block_trailer(buf, CODEC_LZ4))?;
                    return Ok(BlockHandle {
                        offset,
                        size: buf.len() as u64,
                    });
                }
            }
        }
    }
    out.write_all(raw)?;
    out.write_all(&block_trailer(raw, CODEC_NONE))?;
    Ok(BlockHandle {
        offset,
        size: raw.len() as u64,
    })
}

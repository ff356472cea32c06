//! The Snappy framing format as Flink's `SnappyStreamCompressionDecorator` writes it (xerial
//! `SnappyFramedOutputStream`, 64 KiB blocks, minimum compression ratio 0.85): a stream identifier chunk,
//! then compressed (`0x00`) or uncompressed (`0x01`) data chunks, each with a masked CRC-32C of its
//! uncompressed bytes. Flink starts a new stream for every key group.
//!
//! [`FramedReader`] decodes lazily, one chunk at a time, so a reader can stop where the data it needs ends
//! (the end of a key group) and knows exactly which bytes it consumed. [`FramedWriter`] writes what
//! xerial writes.

use super::FlinkError;

/// The stream identifier chunk (type `0xff`, length 6, `sNaPpY`).
pub const STREAM_IDENTIFIER: [u8; 10] =
    [0xff, 0x06, 0x00, 0x00, b's', b'N', b'a', b'P', b'p', b'Y'];
/// Largest uncompressed chunk.
pub const MAX_BLOCK: usize = 64 * 1024;
/// xerial's default: a block is stored compressed only if it shrinks to at most 85 %.
pub const MIN_COMPRESSION_RATIO: f64 = 0.85;

const CHUNK_COMPRESSED: u8 = 0x00;
const CHUNK_UNCOMPRESSED: u8 = 0x01;

fn crc32c_table() -> &'static [[u32; 256]; 8] {
    static TABLE: std::sync::OnceLock<[[u32; 256]; 8]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [[0u32; 256]; 8];
        for (i, e) in t[0].iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        for i in 0..256 {
            for k in 1..8 {
                let prev = t[k - 1][i];
                t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            }
        }
        t
    })
}

/// CRC-32C by tables, eight bytes at a time (slice-by-8).
fn crc32c_tables(data: &[u8]) -> u32 {
    let t = crc32c_table();
    let mut c = !0u32;
    let mut chunks = data.chunks_exact(8);
    for b in &mut chunks {
        let lo = c ^ u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        c = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][b[4] as usize]
            ^ t[2][b[5] as usize]
            ^ t[1][b[6] as usize]
            ^ t[0][b[7] as usize];
    }
    for &b in chunks.remainder() {
        c = t[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// CRC-32C with the SSE 4.2 `crc32` instruction, eight bytes at a time.
///
/// # Safety
/// The CPU must support SSE 4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut c = !0u64;
    let mut chunks = data.chunks_exact(8);
    for b in &mut chunks {
        let v = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        c = _mm_crc32_u64(c, v);
    }
    let mut c = c as u32;
    for &b in chunks.remainder() {
        c = _mm_crc32_u8(c, b);
    }
    !c
}

/// CRC-32C (Castagnoli) of `data`: the SSE 4.2 instruction where the CPU has it, else tables.
pub fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU supports SSE 4.2 (checked just above).
            return unsafe { crc32c_sse42(data) };
        }
    }
    crc32c_tables(data)
}

/// The framing format's masked checksum.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let c = crc32c(data);
    (c.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// A lazy decoder of one framed stream starting at a given offset.
pub struct FramedReader<'a> {
    data: &'a [u8],
    pos: usize,
    buf: Vec<u8>,
    buf_pos: usize,
    file: &'a str,
    decoder: snap::raw::Decoder,
}

impl<'a> FramedReader<'a> {
    /// A reader of the stream starting at `start`, which must begin with the stream identifier.
    pub fn new(data: &'a [u8], start: usize, file: &'a str) -> Result<Self, FlinkError> {
        let mut r = FramedReader {
            data,
            pos: start.min(data.len()),
            buf: Vec::new(),
            buf_pos: 0,
            file,
            decoder: snap::raw::Decoder::new(),
        };
        if data.get(r.pos..r.pos + STREAM_IDENTIFIER.len()) != Some(&STREAM_IDENTIFIER[..]) {
            return Err(r.err(r.pos, "missing stream identifier chunk"));
        }
        r.pos += STREAM_IDENTIFIER.len();
        Ok(r)
    }

    fn err(&self, offset: usize, detail: impl Into<String>) -> FlinkError {
        FlinkError::Snappy {
            at: keyed_state::Location::at(self.file, offset as u64),
            detail: detail.into(),
        }
    }

    /// Offset just after the last chunk read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Decoded bytes not consumed yet.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.buf_pos
    }

    /// Decodes the next data chunk into the buffer; `false` when the input ends at a chunk boundary.
    fn fill(&mut self) -> Result<bool, FlinkError> {
        loop {
            let at = self.pos;
            if at == self.data.len() {
                return Ok(false);
            }
            let Some(h) = self.data.get(at..at + 4) else {
                return Err(self.err(at, "truncated chunk header"));
            };
            let kind = h[0];
            let len = h[1] as usize | (h[2] as usize) << 8 | (h[3] as usize) << 16;
            let Some(body) = self.data.get(at + 4..at + 4 + len) else {
                return Err(self.err(at, format!("chunk of {len} bytes runs past the end")));
            };
            self.pos = at + 4 + len;
            match kind {
                CHUNK_COMPRESSED | CHUNK_UNCOMPRESSED => {
                    if len < 4 {
                        return Err(self.err(at, "data chunk shorter than its checksum"));
                    }
                    let crc = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
                    let payload = &body[4..];
                    self.buf.clear();
                    self.buf_pos = 0;
                    if kind == CHUNK_COMPRESSED {
                        let n = snap::raw::decompress_len(payload)
                            .map_err(|e| self.err(at, format!("compressed chunk: {e}")))?;
                        if n > MAX_BLOCK {
                            return Err(self.err(at, format!("chunk decompresses to {n} bytes")));
                        }
                        self.buf.resize(n, 0);
                        let got = self
                            .decoder
                            .decompress(payload, &mut self.buf)
                            .map_err(|e| self.err(at, format!("compressed chunk: {e}")))?;
                        self.buf.truncate(got);
                    } else {
                        if payload.len() > MAX_BLOCK {
                            return Err(self.err(at, "uncompressed chunk longer than 64 KiB"));
                        }
                        self.buf.extend_from_slice(payload);
                    }
                    if !cfg!(fuzzing) && masked_crc32c(&self.buf) != crc {
                        return Err(self.err(at, "checksum mismatch"));
                    }
                    if self.buf.is_empty() {
                        continue;
                    }
                    return Ok(true);
                }
                0xff => {
                    if body != &STREAM_IDENTIFIER[4..] {
                        return Err(self.err(at, "bad stream identifier chunk"));
                    }
                }
                0x80..=0xfe => {}
                _ => {
                    return Err(self.err(at, format!("reserved unskippable chunk type {kind:#04x}")))
                }
            }
        }
    }

    /// Appends exactly `n` decoded bytes to `out`.
    pub fn read_into(
        &mut self,
        n: usize,
        out: &mut Vec<u8>,
        what: &'static str,
    ) -> Result<(), FlinkError> {
        let mut left = n;
        while left > 0 {
            if self.buffered() == 0 && !self.fill()? {
                return Err(FlinkError::Truncated {
                    at: keyed_state::Location::at(self.file, self.pos as u64),
                    what,
                });
            }
            let take = left.min(self.buffered());
            out.extend_from_slice(&self.buf[self.buf_pos..self.buf_pos + take]);
            self.buf_pos += take;
            left -= take;
        }
        Ok(())
    }
}

/// Decodes a whole framed stream (all of `data`).
pub fn decode_all(data: &[u8], file: &str) -> Result<Vec<u8>, FlinkError> {
    let mut r = FramedReader::new(data, 0, file)?;
    let mut out = Vec::new();
    while r.fill()? {
        out.extend_from_slice(&r.buf);
        r.buf_pos = r.buf.len();
    }
    Ok(out)
}

/// Writes one framed stream as xerial's `SnappyFramedOutputStream(out, 64 KiB, 0.85)` does.
pub struct FramedWriter {
    pending: Vec<u8>,
    encoder: snap::raw::Encoder,
    scratch: Vec<u8>,
}

impl Default for FramedWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl FramedWriter {
    /// A writer with nothing written yet.
    pub fn new() -> Self {
        FramedWriter {
            pending: Vec::with_capacity(MAX_BLOCK),
            encoder: snap::raw::Encoder::new(),
            scratch: Vec::new(),
        }
    }

    /// Starts a stream: writes the identifier chunk.
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        self.pending.clear();
        out.extend_from_slice(&STREAM_IDENTIFIER);
    }

    /// Buffers `data`, writing a chunk whenever 64 KiB are pending.
    pub fn write(&mut self, mut data: &[u8], out: &mut Vec<u8>) {
        while !data.is_empty() {
            let take = (MAX_BLOCK - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == MAX_BLOCK {
                self.flush(out);
            }
        }
    }

    /// Writes the pending bytes as one chunk (the stream's end; xerial flushes on close).
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        if self.pending.is_empty() {
            return;
        }
        let crc = masked_crc32c(&self.pending);
        self.scratch
            .resize(snap::raw::max_compress_len(self.pending.len()), 0);
        let n = self
            .encoder
            .compress(&self.pending, &mut self.scratch)
            .unwrap_or(usize::MAX);
        let compressed =
            n != usize::MAX && (n as f64) / (self.pending.len() as f64) <= MIN_COMPRESSION_RATIO;
        let (kind, payload) = if compressed {
            (CHUNK_COMPRESSED, &self.scratch[..n])
        } else {
            (CHUNK_UNCOMPRESSED, &self.pending[..])
        };
        let len = payload.len() + 4;
        out.push(kind);
        out.extend_from_slice(&[len as u8, (len >> 8) as u8, (len >> 16) as u8]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(payload);
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_vector() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_tables(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn crc32c_instruction_and_tables_agree_at_every_length_and_alignment() {
        let data: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for end in start..data.len() {
                assert_eq!(crc32c(&data[start..end]), crc32c_tables(&data[start..end]));
            }
        }
    }

    #[test]
    fn framed_round_trip_compressible_and_not() {
        let mut data: Vec<u8> = (0..200_000u32).map(|i| (i % 7) as u8).collect();
        let mut x = 12345u64;
        data.extend((0..70_000).map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            (x >> 33) as u8
        }));
        let mut out = Vec::new();
        let mut w = FramedWriter::new();
        w.begin(&mut out);
        w.write(&data, &mut out);
        w.flush(&mut out);
        assert!(out.len() < data.len());
        assert_eq!(decode_all(&out, "t").unwrap(), data);
        for cut in [0, 5, 10, 13, out.len() - 1] {
            let r = decode_all(&out[..cut], "t");
            assert!(r.is_err() || r.unwrap().len() < data.len());
        }
        let mut bad = out.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(decode_all(&bad, "t").is_err());
    }
}

//! The heap backend's checkpoint file of one (state, key group): its entries in ascending key order, keys
//! without their key-group prefix (the metadata's file record names the key group). Byte layout in
//! `design/checkpoints.md` ("Heap table files"); every decoder check is a typed [`Error::Corruption`] naming the file and offset.
//!
//! ```text
//! u8 format = 1
//! repeated until the end:  varint key length, key bytes, varint value length, value bytes
//! ```
//!
//! Varints are LEB128 (7 bits a byte, low first, at most 10 bytes, no overlong final zero byte).

use std::path::Path;

use crate::error::{Error, Location, Result};

/// The format byte this build writes and reads.
pub const TABLE_FORMAT: u8 = 1;

/// Appends the format byte to `out`: the start of a table file.
pub fn begin(out: &mut Vec<u8>) {
    out.push(TABLE_FORMAT);
}

/// Appends one entry (key without its key-group prefix) to `out`.
pub fn push_entry(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    put_varint(out, key.len() as u64);
    out.extend_from_slice(key);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn table_err(file: &Path, offset: usize, detail: String) -> Error {
    Error::Corruption {
        at: Location::at(file, offset as u64),
        detail: format!("heap table file: {detail}"),
    }
}

fn varint(file: &Path, bytes: &[u8], pos: &mut usize, what: &str) -> Result<u64> {
    let start = *pos;
    let mut n = 0u64;
    for i in 0..10 {
        let Some(&b) = bytes.get(*pos) else {
            return Err(table_err(file, start, format!("{what}: truncated varint")));
        };
        *pos += 1;
        if i == 9 && b > 1 {
            return Err(table_err(
                file,
                start,
                format!("{what}: varint exceeds 64 bits"),
            ));
        }
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(table_err(file, start, format!("{what}: overlong varint")));
            }
            return Ok(n);
        }
    }
    Err(table_err(
        file,
        start,
        format!("{what}: varint exceeds 10 bytes"),
    ))
}

fn slice<'a>(
    file: &Path,
    bytes: &'a [u8],
    pos: &mut usize,
    len: u64,
    what: &str,
) -> Result<&'a [u8]> {
    let left = bytes.len() - *pos;
    let s = usize::try_from(len)
        .ok()
        .filter(|&n| n <= left)
        .and_then(|n| bytes.get(*pos..*pos + n))
        .ok_or_else(|| table_err(file, *pos, format!("{what} of {len} bytes, {left} left")))?;
    *pos += s.len();
    Ok(s)
}

/// Decodes a table file, calling `f` with every (key, value) in order; keys must ascend strictly. Returns
/// the number of entries. Errors name `file`. Never panics.
pub fn decode(
    file: &Path,
    bytes: &[u8],
    f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<usize> {
    match bytes.first() {
        Some(&TABLE_FORMAT) => {}
        Some(&b) => {
            return Err(table_err(
                file,
                0,
                format!("unknown table format {b} (this build reads {TABLE_FORMAT})"),
            ))
        }
        None => return Err(table_err(file, 0, "empty table file".into())),
    }
    let mut pos = 1;
    let mut n = 0;
    let mut prev: Option<&[u8]> = None;
    while pos < bytes.len() {
        let at = pos;
        let kl = varint(file, bytes, &mut pos, "key length")?;
        let key = slice(file, bytes, &mut pos, kl, "key")?;
        let vl = varint(file, bytes, &mut pos, "value length")?;
        let value = slice(file, bytes, &mut pos, vl, "value")?;
        if prev.is_some_and(|p| p >= key) {
            return Err(table_err(file, at, "keys do not ascend".into()));
        }
        prev = Some(key);
        f(key, value)?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut b = Vec::new();
        begin(&mut b);
        push_entry(&mut b, b"a", b"1");
        push_entry(&mut b, b"b", &[7u8; 300]);
        push_entry(&mut b, b"c", b"");
        b
    }

    #[test]
    fn entries_round_trip_in_order() {
        let mut seen = Vec::new();
        let n = decode(Path::new("t"), &sample(), &mut |k, v| {
            seen.push((k.to_vec(), v.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            seen,
            vec![(b"a".to_vec(), 1), (b"b".to_vec(), 300), (b"c".to_vec(), 0)]
        );
    }

    #[test]
    fn every_truncation_and_byte_flip_is_an_error_or_a_different_table() {
        let bytes = sample();
        for n in 0..bytes.len() {
            let r = decode(Path::new("t"), &bytes[..n], &mut |_, _| Ok(()));
            assert!(r.is_err() || r.is_ok_and(|k| k < 3), "prefix {n}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x80;
            let _ = decode(Path::new("t"), &b, &mut |_, _| Ok(()));
        }
    }

    #[test]
    fn descending_keys_and_bad_varints_are_refused() {
        let mut b = Vec::new();
        begin(&mut b);
        push_entry(&mut b, b"b", b"");
        push_entry(&mut b, b"a", b"");
        let e = decode(Path::new("t"), &b, &mut |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("ascend"), "{e}");
        let e = decode(Path::new("t"), &[1, 0x80, 0x00], &mut |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("overlong"), "{e}");
        let e = decode(Path::new("t"), &[2], &mut |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("unknown table format"), "{e}");
    }
}

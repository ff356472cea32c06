//! The canonical keyed-state stream (`FullSnapshotAsyncWriter`): per key group, `i16 kvStateId`, then
//! entries `i32 len | key | i32 len | value`; bit 7 of `key[0]` set on the last entry of a state ("meta
//! data follows"), after which an `i16` gives the next state id or `0xFFFF` (end of key group). With
//! compression, each key group is its own Snappy framed stream.

use super::snappy::{FramedReader, FramedWriter};
use super::FlinkError;
use keyed_state::keygroup::{key_group_prefix_len, read_key_group_prefix, KeyGroup};
use keyed_state::Location;

/// `FullSnapshotUtil.END_OF_KEY_GROUP_MARK`.
pub const END_OF_KEY_GROUP_MARK: u16 = 0xFFFF;
/// `FullSnapshotUtil.FIRST_BIT_IN_BYTE_MASK`: "meta data follows".
pub const FIRST_BIT_IN_BYTE_MASK: u8 = 0x80;

/// The bytes of one key group, plain or Snappy-framed.
enum Source<'a> {
    Plain {
        data: &'a [u8],
        pos: usize,
        file: &'a str,
    },
    Snappy(Box<FramedReader<'a>>),
}

impl Source<'_> {
    fn read_into(
        &mut self,
        n: usize,
        out: &mut Vec<u8>,
        what: &'static str,
    ) -> Result<(), FlinkError> {
        match self {
            Source::Plain { data, pos, file } => {
                let Some(b) = data.get(*pos..pos.saturating_add(n)) else {
                    return Err(FlinkError::Truncated {
                        at: Location::at(*file, *pos as u64),
                        what,
                    });
                };
                out.extend_from_slice(b);
                *pos += n;
                Ok(())
            }
            Source::Snappy(r) => r.read_into(n, out, what),
        }
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], FlinkError> {
        let mut v = Vec::with_capacity(N);
        self.read_into(N, &mut v, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&v);
        Ok(a)
    }

    fn position(&self) -> usize {
        match self {
            Source::Plain { pos, .. } => *pos,
            Source::Snappy(r) => r.position(),
        }
    }
}

impl<'a> Source<'a> {
    /// The next `n` bytes: borrowed from the input when it is plain, else decoded into `scratch`.
    fn take<'s>(
        &mut self,
        n: usize,
        scratch: &'s mut Vec<u8>,
        what: &'static str,
    ) -> Result<&'s [u8], FlinkError>
    where
        'a: 's,
    {
        match self {
            Source::Plain { data, pos, file } => {
                let d: &'a [u8] = data;
                let Some(b) = d.get(*pos..pos.saturating_add(n)) else {
                    return Err(FlinkError::Truncated {
                        at: Location::at(*file, *pos as u64),
                        what,
                    });
                };
                *pos += n;
                Ok(b)
            }
            Source::Snappy(r) => {
                scratch.clear();
                r.read_into(n, scratch, what)?;
                Ok(scratch)
            }
        }
    }
}

/// What a key group held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyGroupStats {
    /// Entries read.
    pub entries: u64,
    /// Key and value bytes read.
    pub bytes: u64,
    /// Offset just after the key group's data (for compressed key groups: after its last chunk).
    pub end: usize,
}

/// Reads key group `kg` starting at `offset` of `data` and calls `f(state_id, key, value)` for every entry,
/// with the flag bit cleared (the slices are valid for the call only). Every key must start with `kg`'s prefix (1 byte up to max parallelism 128, 2
/// above) and the state ids must be below `num_states`.
#[allow(clippy::too_many_arguments)]
pub fn read_key_group(
    data: &[u8],
    offset: usize,
    kg: KeyGroup,
    max_parallelism: u32,
    compressed: bool,
    num_states: usize,
    file: &str,
    f: &mut dyn FnMut(usize, &[u8], &[u8]) -> Result<(), FlinkError>,
) -> Result<KeyGroupStats, FlinkError> {
    let bad = |detail: String| FlinkError::BadKeyGroup {
        at: Location::at(file, offset as u64),
        key_group: kg,
        detail,
    };
    if offset >= data.len() {
        return Err(bad(format!(
            "offset {offset} is outside the stream of {} bytes",
            data.len()
        )));
    }
    let mut src = if compressed {
        Source::Snappy(Box::new(FramedReader::new(data, offset, file)?))
    } else {
        Source::Plain {
            data,
            pos: offset,
            file,
        }
    };
    let prefix_len = key_group_prefix_len(max_parallelism);
    let check_state = |id: u16| -> Result<usize, FlinkError> {
        if (id as usize) < num_states {
            Ok(id as usize)
        } else {
            Err(bad(format!(
                "state id {id} but the stream has {num_states} states"
            )))
        }
    };
    let mut state = check_state(u16::from_be_bytes(src.array("state id")?))?;
    let mut stats = KeyGroupStats::default();
    let mut key = Vec::new();
    let mut value_buf = Vec::new();
    loop {
        key.clear();
        let klen = i32::from_be_bytes(src.array("key length")?);
        if klen <= 0 {
            return Err(bad(format!("key length {klen}")));
        }
        src.read_into(klen as usize, &mut key, "key")?;
        let vlen = i32::from_be_bytes(src.array("value length")?);
        if vlen < 0 {
            return Err(bad(format!("value length {vlen}")));
        }
        let value = src.take(vlen as usize, &mut value_buf, "value")?;
        let last = key[0] & FIRST_BIT_IN_BYTE_MASK != 0;
        key[0] &= !FIRST_BIT_IN_BYTE_MASK;
        if read_key_group_prefix(&key, prefix_len) != Some(kg) {
            return Err(bad(format!(
                "entry key {} of state {state} does not start with the key-group prefix",
                hex(&key[..key.len().min(8)])
            )));
        }
        stats.entries += 1;
        stats.bytes += (key.len() + value.len()) as u64;
        f(state, &key, value)?;
        if last {
            let next = u16::from_be_bytes(src.array("next state id")?);
            if next == END_OF_KEY_GROUP_MARK {
                break;
            }
            state = check_state(next)?;
        }
    }
    if let Source::Snappy(r) = &src {
        if r.buffered() != 0 {
            return Err(bad(format!(
                "{} decompressed bytes after the end-of-key-group mark",
                r.buffered()
            )));
        }
    }
    stats.end = src.position();
    Ok(stats)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes one key group's entries as Flink does: entries grouped by state id (ascending), the flag bit on
/// the last entry of each state, `0xFFFF` at the end; inside a fresh Snappy stream when `snappy` is given.
/// `entries` yields `(state id, key, value)` with each state's entries together; nothing is written for an
/// empty key group.
pub fn write_key_group<'e>(
    entries: impl IntoIterator<Item = (u16, &'e [u8], &'e [u8])>,
    snappy: Option<&mut FramedWriter>,
    out: &mut Vec<u8>,
) {
    let mut raw = Vec::new();
    let mut pending: Option<(u16, &[u8], &[u8])> = None;
    let put = |raw: &mut Vec<u8>, key: &[u8], value: &[u8], flag: bool| {
        raw.extend_from_slice(&(key.len() as i32).to_be_bytes());
        let at = raw.len();
        raw.extend_from_slice(key);
        if flag {
            raw[at] |= FIRST_BIT_IN_BYTE_MASK;
        }
        raw.extend_from_slice(&(value.len() as i32).to_be_bytes());
        raw.extend_from_slice(value);
    };
    for (state, key, value) in entries {
        match pending.take() {
            None => raw.extend_from_slice(&state.to_be_bytes()),
            Some((s, k, v)) if s == state => put(&mut raw, k, v, false),
            Some((_, k, v)) => {
                put(&mut raw, k, v, true);
                raw.extend_from_slice(&state.to_be_bytes());
            }
        }
        pending = Some((state, key, value));
    }
    let Some((_, k, v)) = pending else {
        return;
    };
    put(&mut raw, k, v, true);
    raw.extend_from_slice(&END_OF_KEY_GROUP_MARK.to_be_bytes());
    match snappy {
        Some(w) => {
            w.begin(out);
            w.write(&raw, out);
            w.flush(out);
        }
        None => out.extend_from_slice(&raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(
        data: &[u8],
        compressed: bool,
    ) -> Result<Vec<(usize, Vec<u8>, Vec<u8>)>, FlinkError> {
        let mut v = Vec::new();
        read_key_group(data, 0, 1, 128, compressed, 3, "t", &mut |s, k, val| {
            v.push((s, k.to_vec(), val.to_vec()));
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn write_then_read_plain_and_snappy() {
        let e: Vec<(u16, Vec<u8>, Vec<u8>)> = vec![
            (0, vec![1, 2], vec![9]),
            (0, vec![1, 3], vec![]),
            (2, vec![1, 4], vec![7, 7]),
        ];
        for snappy in [false, true] {
            let mut out = Vec::new();
            let mut w = FramedWriter::new();
            write_key_group(
                e.iter().map(|(s, k, v)| (*s, &k[..], &v[..])),
                snappy.then_some(&mut w),
                &mut out,
            );
            let got = collect(&out, snappy).unwrap();
            let want: Vec<_> = e
                .iter()
                .map(|(s, k, v)| (*s as usize, k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want);
            for cut in 0..out.len() {
                assert!(collect(&out[..cut], snappy).is_err(), "cut {cut}");
            }
        }
    }

    #[test]
    fn two_byte_key_group_prefix_above_max_parallelism_128() {
        let key = [0x01u8, 0x2c, 7];
        let mut out = Vec::new();
        write_key_group([(0u16, &key[..], &[1u8][..])], None, &mut out);
        let mut got = Vec::new();
        read_key_group(&out, 0, 300, 1024, false, 1, "t", &mut |_, k, _| {
            got.push(k.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec![key.to_vec()]);
        assert!(read_key_group(&out, 0, 301, 1024, false, 1, "t", &mut |_, _, _| Ok(())).is_err());
    }

    #[test]
    fn wrong_prefix_and_state_id_are_errors() {
        let mut out = Vec::new();
        write_key_group([(0u16, &[2u8][..], &[][..])], None, &mut out);
        assert!(matches!(
            collect(&out, false),
            Err(FlinkError::BadKeyGroup { .. })
        ));
        let mut out = Vec::new();
        write_key_group([(5u16, &[1u8][..], &[][..])], None, &mut out);
        assert!(matches!(
            collect(&out, false),
            Err(FlinkError::BadKeyGroup { .. })
        ));
    }
}

//! [`SerializerSnapshot`]: what a serializer writes about itself into a savepoint, and its byte codec.
//!
//! Encoding (all integers big-endian), documented in `design/savepoint-format.md`:
//!
//! ```text
//! u16 identifier length | identifier (UTF-8) | u32 version | u32 config length | config bytes
//! | u16 nested count | nested snapshots (same encoding, at most 16 levels deep)
//! ```

/// Identifier, version, configuration bytes and nested snapshots of one serializer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SerializerSnapshot {
    /// Names the serializer's format (for Flink's built-ins: Flink's snapshot class name).
    pub identifier: String,
    /// The version of the serializer's format.
    pub version: u32,
    /// Serializer-specific configuration (empty for simple types).
    pub config: Vec<u8>,
    /// Snapshots of the element serializers of a composite serializer, in a fixed order.
    pub nested: Vec<SerializerSnapshot>,
}

/// The deepest nesting accepted when decoding a snapshot.
pub const MAX_SNAPSHOT_DEPTH: usize = 16;

/// Why snapshot bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotDecodeError {
    /// The bytes end inside the snapshot.
    #[error("serializer snapshot truncated while reading {0}")]
    Truncated(&'static str),
    /// The identifier is not UTF-8.
    #[error("serializer snapshot identifier is not valid UTF-8")]
    BadIdentifier,
    /// Nested deeper than [`MAX_SNAPSHOT_DEPTH`].
    #[error("serializer snapshot nested deeper than {MAX_SNAPSHOT_DEPTH} levels")]
    TooDeep,
}

impl SerializerSnapshot {
    /// A snapshot without configuration or nested snapshots.
    pub fn simple(identifier: impl Into<String>, version: u32) -> Self {
        SerializerSnapshot {
            identifier: identifier.into(),
            version,
            config: Vec::new(),
            nested: Vec::new(),
        }
    }

    /// A composite snapshot over `nested` element snapshots.
    pub fn composite(
        identifier: impl Into<String>,
        version: u32,
        nested: Vec<SerializerSnapshot>,
    ) -> Self {
        SerializerSnapshot {
            identifier: identifier.into(),
            version,
            config: Vec::new(),
            nested,
        }
    }

    /// Appends the encoding of this snapshot to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let id = self.identifier.as_bytes();
        let id_len = id.len().min(u16::MAX as usize);
        out.extend_from_slice(&(id_len as u16).to_be_bytes());
        out.extend_from_slice(&id[..id_len]);
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&(self.config.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.config);
        out.extend_from_slice(&(self.nested.len().min(u16::MAX as usize) as u16).to_be_bytes());
        for n in self.nested.iter().take(u16::MAX as usize) {
            n.encode(out);
        }
    }

    /// The encoding as a fresh vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    /// Decodes one snapshot from the front of `input`, advancing it.
    pub fn decode(input: &mut &[u8]) -> Result<Self, SnapshotDecodeError> {
        Self::decode_depth(input, 0)
    }

    fn decode_depth(input: &mut &[u8], depth: usize) -> Result<Self, SnapshotDecodeError> {
        if depth > MAX_SNAPSHOT_DEPTH {
            return Err(SnapshotDecodeError::TooDeep);
        }
        let id_len = take_u16(input, "identifier length")? as usize;
        let id = take(input, id_len, "identifier")?;
        let identifier =
            String::from_utf8(id.to_vec()).map_err(|_| SnapshotDecodeError::BadIdentifier)?;
        let version = take_u32(input, "version")?;
        let config_len = take_u32(input, "config length")? as usize;
        let config = take(input, config_len, "config")?.to_vec();
        let nested_count = take_u16(input, "nested count")? as usize;
        let mut nested = Vec::with_capacity(nested_count.min(16));
        for _ in 0..nested_count {
            nested.push(Self::decode_depth(input, depth + 1)?);
        }
        Ok(SerializerSnapshot {
            identifier,
            version,
            config,
            nested,
        })
    }

    /// A short human-readable description, e.g. `list<i64>`-like nesting of identifiers' last segments.
    pub fn describe(&self) -> String {
        let short = self
            .identifier
            .rsplit(['.', '$'])
            .next()
            .unwrap_or(&self.identifier)
            .to_string();
        if self.nested.is_empty() {
            format!("{short} v{}", self.version)
        } else {
            let inner: Vec<String> = self.nested.iter().map(|n| n.describe()).collect();
            format!("{short} v{}<{}>", self.version, inner.join(", "))
        }
    }
}

impl std::fmt::Display for SerializerSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (version {})", self.identifier, self.version)?;
        if !self.nested.is_empty() {
            write!(f, " [")?;
            for (i, n) in self.nested.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "{n}")?;
            }
            write!(f, "]")?;
        }
        Ok(())
    }
}

fn take<'a>(
    input: &mut &'a [u8],
    n: usize,
    what: &'static str,
) -> Result<&'a [u8], SnapshotDecodeError> {
    if input.len() < n {
        return Err(SnapshotDecodeError::Truncated(what));
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Ok(head)
}

fn take_u16(input: &mut &[u8], what: &'static str) -> Result<u16, SnapshotDecodeError> {
    let b = take(input, 2, what)?;
    Ok(u16::from_be_bytes([b[0], b[1]]))
}

fn take_u32(input: &mut &[u8], what: &'static str) -> Result<u32, SnapshotDecodeError> {
    let b = take(input, 4, what)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let s = SerializerSnapshot {
            identifier: "outer".into(),
            version: 3,
            config: vec![1, 2, 3],
            nested: vec![SerializerSnapshot::simple("inner", 1)],
        };
        let bytes = s.to_bytes();
        let mut input = &bytes[..];
        assert_eq!(SerializerSnapshot::decode(&mut input).unwrap(), s);
        assert!(input.is_empty());
        for cut in 0..bytes.len() {
            let mut input = &bytes[..cut];
            assert!(SerializerSnapshot::decode(&mut input).is_err());
        }
    }
}

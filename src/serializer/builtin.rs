//! Built-in serializers for primitive types, byte-compatible with Flink's where Flink has one.

use super::{Compatibility, KeySerializer, SerializerError, SerializerSnapshot, TypeSerializer};
use crate::keygroup::{
    java_bool_hash, java_double_hash, java_int_hash, java_long_hash, java_string_hash,
};

/// Flink's `LongSerializer` snapshot identifier.
pub const LONG_SNAPSHOT_ID: &str =
    "org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot";
/// Flink's `IntSerializer` snapshot identifier.
pub const INT_SNAPSHOT_ID: &str =
    "org.apache.flink.api.common.typeutils.base.IntSerializer$IntSerializerSnapshot";
/// Flink's `StringSerializer` snapshot identifier.
pub const STRING_SNAPSHOT_ID: &str =
    "org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot";
/// Flink's `VoidNamespaceSerializer` snapshot identifier.
pub const VOID_NAMESPACE_SNAPSHOT_ID: &str =
    "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot";
/// Flink's `DoubleSerializer` snapshot identifier.
pub const DOUBLE_SNAPSHOT_ID: &str =
    "org.apache.flink.api.common.typeutils.base.DoubleSerializer$DoubleSerializerSnapshot";
/// Flink's `BooleanSerializer` snapshot identifier.
pub const BOOLEAN_SNAPSHOT_ID: &str =
    "org.apache.flink.api.common.typeutils.base.BooleanSerializer$BooleanSerializerSnapshot";
/// Flink's `BytePrimitiveArraySerializer` snapshot identifier.
pub const BYTES_SNAPSHOT_ID: &str = "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot";
/// Version of Flink's `SimpleTypeSerializerSnapshot`s.
pub const SIMPLE_SNAPSHOT_VERSION: u32 = 3;

#[inline]
pub(crate) fn take<'a>(
    input: &mut &'a [u8],
    n: usize,
    what: &'static str,
) -> Result<&'a [u8], SerializerError> {
    if input.len() < n {
        return Err(SerializerError::Truncated {
            what,
            needed: n - input.len(),
        });
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Ok(head)
}

fn simple_compat(id: &str, previous: &SerializerSnapshot) -> Compatibility {
    if previous.identifier == id {
        Compatibility::CompatibleAsIs
    } else {
        Compatibility::Incompatible(format!(
            "{id} cannot read bytes written by {}",
            previous.identifier
        ))
    }
}

/// `i64` as 8 bytes big-endian (Flink's `LongSerializer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LongSerializer;

impl TypeSerializer for LongSerializer {
    type Value = i64;
    #[inline]
    fn serialize(&self, value: &i64, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        out.extend_from_slice(&value.to_be_bytes());
        Ok(())
    }
    #[inline]
    fn deserialize(&self, input: &mut &[u8]) -> Result<i64, SerializerError> {
        let b = take(input, 8, "i64")?;
        Ok(i64::from_be_bytes(b.try_into().unwrap_or([0; 8])))
    }
    fn fixed_length(&self) -> Option<usize> {
        Some(8)
    }
    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(LONG_SNAPSHOT_ID, SIMPLE_SNAPSHOT_VERSION)
    }
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        simple_compat(LONG_SNAPSHOT_ID, previous)
    }
}

impl KeySerializer for LongSerializer {
    #[inline]
    fn key_hash(&self, key: &i64, _serialized: &[u8]) -> i32 {
        java_long_hash(*key)
    }
}

/// `i32` as 4 bytes big-endian (Flink's `IntSerializer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntSerializer;

impl TypeSerializer for IntSerializer {
    type Value = i32;
    #[inline]
    fn serialize(&self, value: &i32, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        out.extend_from_slice(&value.to_be_bytes());
        Ok(())
    }
    #[inline]
    fn deserialize(&self, input: &mut &[u8]) -> Result<i32, SerializerError> {
        let b = take(input, 4, "i32")?;
        Ok(i32::from_be_bytes(b.try_into().unwrap_or([0; 4])))
    }
    fn fixed_length(&self) -> Option<usize> {
        Some(4)
    }
    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(INT_SNAPSHOT_ID, SIMPLE_SNAPSHOT_VERSION)
    }
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        simple_compat(INT_SNAPSHOT_ID, previous)
    }
}

impl KeySerializer for IntSerializer {
    #[inline]
    fn key_hash(&self, key: &i32, _serialized: &[u8]) -> i32 {
        java_int_hash(*key)
    }
}

/// `String` as Flink's `StringValue.writeString`: varint(UTF-16 length + 1), then each UTF-16 unit as a varint.
///
/// Flink's `null` (a single `00` byte) has no Rust counterpart and is rejected on read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StringSerializer;

#[inline]
fn write_varint_u32(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint_u32(input: &mut &[u8], what: &'static str) -> Result<u32, SerializerError> {
    let mut result: u32 = 0;
    let mut shift = 0u32;
    loop {
        let b = take(input, 1, what)?[0];
        // The fifth byte may only carry the top 4 bits of a u32; anything more is not a Java int.
        if shift >= 32 || (shift == 28 && b > 0x0f) {
            return Err(SerializerError::Invalid {
                what,
                detail: "varint does not fit 32 bits".into(),
            });
        }
        result |= ((b & 0x7f) as u32) << shift;
        if b & 0x80 == 0 {
            return Ok(result);
        }
        shift += 7;
    }
}

/// `units + 1` as Java writes it; Java strings hold at most `i32::MAX - 1` units here (`length + 1` must stay
/// a positive `int`).
fn java_string_len_field(units: usize) -> Result<u32, SerializerError> {
    match i32::try_from(units) {
        Ok(n) if n < i32::MAX => Ok(n as u32 + 1),
        _ => Err(SerializerError::Unserializable {
            what: "string",
            detail: format!("{units} UTF-16 units exceed Java's string length limit"),
        }),
    }
}

impl TypeSerializer for StringSerializer {
    type Value = String;
    fn serialize(&self, value: &String, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        if value.is_ascii() {
            // Fast path: one UTF-16 unit per byte, each < 0x80.
            write_varint_u32(out, java_string_len_field(value.len())?);
            out.extend_from_slice(value.as_bytes());
            return Ok(());
        }
        let units = value.encode_utf16().count();
        write_varint_u32(out, java_string_len_field(units)?);
        for c in value.encode_utf16() {
            write_varint_u32(out, c as u32);
        }
        Ok(())
    }
    fn deserialize(&self, input: &mut &[u8]) -> Result<String, SerializerError> {
        let len = read_varint_u32(input, "string length")?;
        if len == 0 {
            return Err(SerializerError::Invalid {
                what: "string",
                detail: "null string (length 0) has no Rust value".into(),
            });
        }
        let units = (len - 1) as usize;
        // Fast path: ASCII bytes.
        if input.len() >= units && input[..units].iter().all(|b| *b < 0x80) {
            let s = take(input, units, "string")?;
            return Ok(String::from_utf8(s.to_vec()).unwrap_or_default());
        }
        let mut buf: Vec<u16> = Vec::with_capacity(units.min(input.len()));
        for _ in 0..units {
            let c = read_varint_u32(input, "string char")?;
            if c > 0xffff {
                return Err(SerializerError::Invalid {
                    what: "string",
                    detail: format!("UTF-16 unit {c:#x} out of range"),
                });
            }
            buf.push(c as u16);
        }
        String::from_utf16(&buf).map_err(|e| SerializerError::Invalid {
            what: "string",
            detail: e.to_string(),
        })
    }
    fn fixed_length(&self) -> Option<usize> {
        None
    }
    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(STRING_SNAPSHOT_ID, SIMPLE_SNAPSHOT_VERSION)
    }
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        simple_compat(STRING_SNAPSHOT_ID, previous)
    }
}

impl KeySerializer for StringSerializer {
    fn key_hash(&self, key: &String, _serialized: &[u8]) -> i32 {
        java_string_hash(key)
    }
}

/// The namespace of states that have none (Flink's `VoidNamespace`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VoidNamespace;

/// Flink's `VoidNamespaceSerializer`: writes one `00` byte, yet reports a fixed length of 0 (kept as in Flink:
/// it decides whether composite keys carry length bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VoidNamespaceSerializer;

impl TypeSerializer for VoidNamespaceSerializer {
    type Value = VoidNamespace;
    #[inline]
    fn serialize(&self, _value: &VoidNamespace, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        out.push(0);
        Ok(())
    }
    #[inline]
    fn deserialize(&self, input: &mut &[u8]) -> Result<VoidNamespace, SerializerError> {
        take(input, 1, "void namespace")?;
        Ok(VoidNamespace)
    }
    fn fixed_length(&self) -> Option<usize> {
        Some(0)
    }
    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(VOID_NAMESPACE_SNAPSHOT_ID, SIMPLE_SNAPSHOT_VERSION)
    }
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        simple_compat(VOID_NAMESPACE_SNAPSHOT_ID, previous)
    }
}

/// `f64` as the 8 big-endian bytes of its IEEE 754 bits (Flink's `DoubleSerializer`).
///
/// Like Java's `writeDouble` (`doubleToLongBits`), every NaN is written as the canonical NaN
/// `0x7ff8000000000000`; all other values, including `-0.0`, keep their exact bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DoubleSerializer;

impl TypeSerializer for DoubleSerializer {
    type Value = f64;
    #[inline]
    fn serialize(&self, value: &f64, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        let bits = if value.is_nan() {
            0x7ff8_0000_0000_0000_u64
        } else {
            value.to_bits()
        };
        out.extend_from_slice(&bits.to_be_bytes());
        Ok(())
    }
    #[inline]
    fn deserialize(&self, input: &mut &[u8]) -> Result<f64, SerializerError> {
        let b = take(input, 8, "f64")?;
        Ok(f64::from_bits(u64::from_be_bytes(
            b.try_into().unwrap_or([0; 8]),
        )))
    }
    fn fixed_length(&self) -> Option<usize> {
        Some(8)
    }
    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(DOUBLE_SNAPSHOT_ID, SIMPLE_SNAPSHOT_VERSION)
    }
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        simple_compat(DOUBLE_SNAPSHOT_ID, previous)
    }
}

impl KeySerializer for DoubleSerializer {
    #[inline]
    fn key_hash(&self, key: &f64, _serialized: &[u8]) -> i32 {
        java_double_hash(*key)
    }
}

/// `bool` as one byte, `00` or `01` (Flink's `BooleanSerializer`); any other byte is rejected on read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BooleanSerializer;

impl TypeSerializer for BooleanSerializer {
    type Value = bool;
    #[inline]
    fn serialize(&self, value: &bool, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        out.push(u8::from(*value));
        Ok(())
    }
    #[inline]
    fn deserialize(&self, input: &mut &[u8]) -> Result<bool, SerializerError> {
        read_bool(input, "bool")
    }
    fn fixed_length(&self) -> Option<usize> {
        Some(1)
    }
    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(BOOLEAN_SNAPSHOT_ID, SIMPLE_SNAPSHOT_VERSION)
    }
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        simple_compat(BOOLEAN_SNAPSHOT_ID, previous)
    }
}

impl KeySerializer for BooleanSerializer {
    #[inline]
    fn key_hash(&self, key: &bool, _serialized: &[u8]) -> i32 {
        java_bool_hash(*key)
    }
}

/// Reads one strict boolean byte (`00` or `01`).
pub(crate) fn read_bool(input: &mut &[u8], what: &'static str) -> Result<bool, SerializerError> {
    match take(input, 1, what)?[0] {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(SerializerError::Invalid {
            what,
            detail: format!("byte {b:#04x} is neither 00 nor 01"),
        }),
    }
}

/// Reads a Java `int` length or size that must be non-negative.
pub(crate) fn read_len_i32(
    input: &mut &[u8],
    what: &'static str,
) -> Result<usize, SerializerError> {
    let b = take(input, 4, what)?;
    let n = i32::from_be_bytes(b.try_into().unwrap_or([0; 4]));
    usize::try_from(n).map_err(|_| SerializerError::Invalid {
        what,
        detail: format!("negative length {n}"),
    })
}

/// Writes a length or size as a Java `int`, failing above `i32::MAX`.
pub(crate) fn write_len_i32(
    out: &mut Vec<u8>,
    len: usize,
    what: &'static str,
) -> Result<(), SerializerError> {
    let n = i32::try_from(len).map_err(|_| SerializerError::Unserializable {
        what,
        detail: format!("length {len} exceeds i32::MAX"),
    })?;
    out.extend_from_slice(&n.to_be_bytes());
    Ok(())
}

/// `Vec<u8>` as an `i32` big-endian length and the bytes (Flink's `BytePrimitiveArraySerializer`; Java's
/// `null` array is not representable and a negative length is rejected).
///
/// As a key it hashes with [`crate::keygroup::bytes_hash`] (Java arrays have identity hash codes, which Flink
/// cannot use for keys either).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BytesSerializer;

impl TypeSerializer for BytesSerializer {
    type Value = Vec<u8>;
    fn serialize(&self, value: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        write_len_i32(out, value.len(), "byte array")?;
        out.extend_from_slice(value);
        Ok(())
    }
    fn deserialize(&self, input: &mut &[u8]) -> Result<Vec<u8>, SerializerError> {
        let len = read_len_i32(input, "byte array length")?;
        Ok(take(input, len, "byte array")?.to_vec())
    }
    fn fixed_length(&self) -> Option<usize> {
        None
    }
    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(BYTES_SNAPSHOT_ID, SIMPLE_SNAPSHOT_VERSION)
    }
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        simple_compat(BYTES_SNAPSHOT_ID, previous)
    }
}

impl KeySerializer for BytesSerializer {}

//! Flink's serializer snapshots (`TypeSerializerSnapshotSerializationUtil`, `CompositeTypeSerializerSnapshot`)
//! read into ours ([`SerializerSnapshot`]), and written back from ours.
//!
//! Flink's snapshot bodies carry no length, so only classes whose body layout is known can be read
//! precisely; [`read_snapshot`] reports any other class as [`SnapshotParse::Unknown`] and the
//! serialization proxy reader then keeps the whole snapshot as raw bytes (`proxy.rs`).

use super::input::{encode_modified_utf8, DataInput};
use super::FlinkError;
use keyed_state::serializer::dynamic::{
    TIMER_SNAPSHOT_ID, TIME_WINDOW_SNAPSHOT_ID, TUPLE_SNAPSHOT_ID,
};
use keyed_state::serializer::{
    SerializerSnapshot, BOOLEAN_SNAPSHOT_ID, BYTES_SNAPSHOT_ID, DOUBLE_SNAPSHOT_ID,
    INT_SNAPSHOT_ID, LIST_SNAPSHOT_ID, LONG_SNAPSHOT_ID, MAP_SNAPSHOT_ID, STRING_SNAPSHOT_ID,
    TTL_SNAPSHOT_ID, VOID_NAMESPACE_SNAPSHOT_ID,
};

/// `TypeSerializerSnapshotSerializationProxy.VERSION`, written before every top-level snapshot.
pub const SNAPSHOT_PROXY_VERSION: i32 = 2;
/// `CompositeTypeSerializerSnapshot.MAGIC_NUMBER`.
pub const COMPOSITE_MAGIC: i32 = 911_108;
/// `NestedSerializersSnapshotDelegate.MAGIC_NUMBER`.
pub const NESTED_MAGIC: i32 = 1_333_245;
/// The snapshot version Flink's simple and composite snapshots write.
pub const FLINK_SNAPSHOT_VERSION: i32 = 3;

/// Simple snapshots (empty body at version 3) that map one-to-one onto ours: the identifiers are equal.
const MAPPED_SIMPLE: &[&str] = &[
    LONG_SNAPSHOT_ID,
    INT_SNAPSHOT_ID,
    STRING_SNAPSHOT_ID,
    DOUBLE_SNAPSHOT_ID,
    BOOLEAN_SNAPSHOT_ID,
    BYTES_SNAPSHOT_ID,
    VOID_NAMESPACE_SNAPSHOT_ID,
    TIME_WINDOW_SNAPSHOT_ID,
];

/// Other `SimpleTypeSerializerSnapshot`s of Flink's: read precisely, kept under their class name (our
/// `dump` shows their values as hex).
const OTHER_SIMPLE: &[&str] = &[
    "org.apache.flink.api.common.typeutils.base.ShortSerializer$ShortSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.ByteSerializer$ByteSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.FloatSerializer$FloatSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.CharSerializer$CharSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.VoidSerializer$VoidSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.BigIntSerializer$BigIntSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.BigDecSerializer$BigDecSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.InstantSerializer$InstantSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.DateSerializer$DateSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.SqlTimestampSerializer$SqlTimestampSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.LocalDateSerializer$LocalDateSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.LocalDateTimeSerializer$LocalDateTimeSerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.array.LongPrimitiveArraySerializer$LongPrimitiveArraySerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.array.IntPrimitiveArraySerializer$IntPrimitiveArraySerializerSnapshot",
    "org.apache.flink.api.common.typeutils.base.array.StringArraySerializer$StringArraySerializerSnapshot",
    "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot",
];

/// Composite snapshots whose outer snapshot is empty: class, our identifier, outer version, nested count.
const COMPOSITES: &[(&str, &str, i32, usize)] = &[
    (LIST_SNAPSHOT_ID, LIST_SNAPSHOT_ID, 1, 1),
    (MAP_SNAPSHOT_ID, MAP_SNAPSHOT_ID, 1, 2),
    (TTL_SNAPSHOT_ID, TTL_SNAPSHOT_ID, 2, 2),
    (TIMER_SNAPSHOT_ID, TIMER_SNAPSHOT_ID, 2, 2),
];

/// Deepest nesting read.
const MAX_DEPTH: usize = 16;

/// Why a snapshot could not be read precisely.
#[derive(Debug)]
pub enum SnapshotParse {
    /// A class whose body layout this reader does not know (at any depth): the caller keeps raw bytes.
    Unknown {
        /// The class name.
        class: String,
    },
    /// The bytes are damaged.
    Bad(FlinkError),
}

impl From<FlinkError> for SnapshotParse {
    fn from(e: FlinkError) -> Self {
        SnapshotParse::Bad(e)
    }
}

/// Reads one versioned snapshot (`UTF class | i32 version | body`, the nested form) at the cursor.
pub fn read_snapshot(d: &mut DataInput<'_>) -> Result<SerializerSnapshot, SnapshotParse> {
    read_depth(d, 0)
}

fn read_depth(d: &mut DataInput<'_>, depth: usize) -> Result<SerializerSnapshot, SnapshotParse> {
    let at = d.pos();
    if depth > MAX_DEPTH {
        return Err(d
            .malformed(at, "serializer snapshot", "nested too deeply")
            .into());
    }
    let class = d.utf("serializer snapshot class")?;
    let version = d.i32("serializer snapshot version")?;
    if MAPPED_SIMPLE.contains(&class.as_str()) || OTHER_SIMPLE.contains(&class.as_str()) {
        match version {
            3 => {}
            2 => {
                // Version 2 wrote the serializer's class name.
                d.utf("legacy serializer class")?;
            }
            _ => return Err(SnapshotParse::Unknown { class }),
        }
        return Ok(SerializerSnapshot::simple(
            class,
            FLINK_SNAPSHOT_VERSION as u32,
        ));
    }
    let composite = COMPOSITES.iter().find(|c| c.0 == class);
    let is_tuple = class == TUPLE_SNAPSHOT_ID;
    if (composite.is_none() && !is_tuple) || version != FLINK_SNAPSHOT_VERSION {
        return Err(SnapshotParse::Unknown { class });
    }
    let at = d.pos();
    if d.i32("composite snapshot magic")? != COMPOSITE_MAGIC {
        return Err(d
            .malformed(at, "composite snapshot", "bad magic number")
            .into());
    }
    let outer_version = d.i32("outer snapshot version")?;
    let mut config = Vec::new();
    if let Some(&(_, _, expected, _)) = composite {
        if outer_version != expected {
            return Err(SnapshotParse::Unknown { class });
        }
    } else {
        // TupleSerializerSnapshot: the outer snapshot is the tuple class name.
        let name = d.utf("tuple class")?;
        config.extend_from_slice(&outer_version.to_be_bytes());
        config.extend_from_slice(name.as_bytes());
    }
    let at = d.pos();
    if d.i32("nested snapshots magic")? != NESTED_MAGIC {
        return Err(d
            .malformed(at, "nested serializer snapshots", "bad magic number")
            .into());
    }
    let at = d.pos();
    let v = d.i32("nested snapshots version")?;
    if v != 1 {
        return Err(d
            .malformed(at, "nested serializer snapshots", format!("version {v}"))
            .into());
    }
    let n = d.count("number of nested snapshots", 6)?;
    if let Some(&(_, _, _, count)) = composite {
        if n != count {
            return Err(d
                .malformed(
                    at,
                    "nested serializer snapshots",
                    format!("{n} for {class}"),
                )
                .into());
        }
    }
    let mut nested = Vec::with_capacity(n);
    for _ in 0..n {
        nested.push(read_depth(d, depth + 1)?);
    }
    Ok(SerializerSnapshot {
        identifier: class,
        version: FLINK_SNAPSHOT_VERSION as u32,
        config,
        nested,
    })
}

/// Whether `s` is a snapshot that [`write_snapshot`] can write as Flink bytes.
pub fn is_writable(s: &SerializerSnapshot) -> bool {
    writable_depth(s, 0)
}

fn writable_depth(s: &SerializerSnapshot, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let id = s.identifier.as_str();
    if MAPPED_SIMPLE.contains(&id) || OTHER_SIMPLE.contains(&id) {
        return s.nested.is_empty();
    }
    if let Some(c) = COMPOSITES.iter().find(|c| c.0 == id) {
        return s.nested.len() == c.3 && s.nested.iter().all(|n| writable_depth(n, depth + 1));
    }
    if id == TUPLE_SNAPSHOT_ID {
        return s.config.len() >= 4 && s.nested.iter().all(|n| writable_depth(n, depth + 1));
    }
    // Raw snapshots read from Flink: class, version and the body bytes as they were.
    id.starts_with("org.apache.flink.") || id.contains('.') && s.nested.is_empty()
}

fn put_utf(out: &mut Vec<u8>, s: &str) {
    let b = encode_modified_utf8(s);
    let n = b.len().min(u16::MAX as usize);
    out.extend_from_slice(&(n as u16).to_be_bytes());
    out.extend_from_slice(&b[..n]);
}

/// Writes `s` in Flink's nested form (`UTF class | i32 version | body`). Raw snapshots are written back as
/// they were read (class, version, body bytes in `config`).
pub fn write_snapshot(s: &SerializerSnapshot, out: &mut Vec<u8>) {
    put_utf(out, &s.identifier);
    out.extend_from_slice(&(s.version as i32).to_be_bytes());
    let id = s.identifier.as_str();
    if MAPPED_SIMPLE.contains(&id) || OTHER_SIMPLE.contains(&id) {
        return;
    }
    let composite = COMPOSITES.iter().find(|c| c.0 == id);
    if composite.is_none() && id != TUPLE_SNAPSHOT_ID {
        out.extend_from_slice(&s.config);
        return;
    }
    out.extend_from_slice(&COMPOSITE_MAGIC.to_be_bytes());
    match composite {
        Some(c) => out.extend_from_slice(&c.2.to_be_bytes()),
        None => {
            let (v, name) = s.config.split_at(s.config.len().min(4));
            out.extend_from_slice(v);
            put_utf(out, &String::from_utf8_lossy(name));
        }
    }
    out.extend_from_slice(&NESTED_MAGIC.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&(s.nested.len() as i32).to_be_bytes());
    for n in &s.nested {
        write_snapshot(n, out);
    }
}

/// Writes a top-level snapshot: `i32 2` then the nested form.
pub fn write_top_level_snapshot(s: &SerializerSnapshot, out: &mut Vec<u8>) {
    out.extend_from_slice(&SNAPSHOT_PROXY_VERSION.to_be_bytes());
    write_snapshot(s, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composites_round_trip_through_flink_bytes() {
        let s = SerializerSnapshot::composite(
            MAP_SNAPSHOT_ID,
            3,
            vec![
                SerializerSnapshot::simple(STRING_SNAPSHOT_ID, 3),
                SerializerSnapshot::composite(
                    TTL_SNAPSHOT_ID,
                    3,
                    vec![
                        SerializerSnapshot::simple(LONG_SNAPSHOT_ID, 3),
                        SerializerSnapshot::simple(LONG_SNAPSHOT_ID, 3),
                    ],
                ),
            ],
        );
        let mut b = Vec::new();
        write_snapshot(&s, &mut b);
        let mut d = DataInput::new(&b, "t");
        assert_eq!(read_snapshot(&mut d).ok(), Some(s));
        assert_eq!(d.remaining(), 0);
        for cut in 0..b.len() {
            let mut d = DataInput::new(&b[..cut], "t");
            assert!(read_snapshot(&mut d).is_err());
        }
    }

    #[test]
    fn unknown_classes_are_reported_by_name() {
        let mut b = Vec::new();
        put_utf(&mut b, "com.example.PojoSnapshot");
        b.extend_from_slice(&3i32.to_be_bytes());
        let mut d = DataInput::new(&b, "t");
        match read_snapshot(&mut d) {
            Err(SnapshotParse::Unknown { class }) => assert_eq!(class, "com.example.PojoSnapshot"),
            other => panic!("{other:?}"),
        }
    }
}

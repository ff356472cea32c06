//! Composite serializers built from element serializers: [`ListSerializer`], [`MapSerializer`],
//! [`OptionSerializer`] and [`TtlSerializer`].

use std::collections::BTreeMap;

use super::builtin::{read_bool, read_len_i32, write_len_i32, LongSerializer};
use super::{Compatibility, KeySerializer, SerializerError, SerializerSnapshot, TypeSerializer};

/// Flink's `ListSerializerSnapshot` identifier.
pub const LIST_SNAPSHOT_ID: &str =
    "org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot";
/// Flink's `MapSerializerSnapshot` identifier.
pub const MAP_SNAPSHOT_ID: &str =
    "org.apache.flink.api.common.typeutils.base.MapSerializerSnapshot";
/// Flink's TTL value serializer snapshot identifier.
pub const TTL_SNAPSHOT_ID: &str =
    "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot";
/// Identifier of this crate's [`OptionSerializer`] (no Flink counterpart).
pub const OPTION_SNAPSHOT_ID: &str = "keyed-state/option";
/// Version of Flink's `CompositeTypeSerializerSnapshot`s (list, map, TTL).
pub const COMPOSITE_SNAPSHOT_VERSION: u32 = 3;
/// Version of the [`OptionSerializer`] format.
pub const OPTION_SNAPSHOT_VERSION: u32 = 1;
/// Flink's *outer* snapshot version of `ListSerializerSnapshot` (written inside Flink's composite body; not
/// part of [`SerializerSnapshot`], for savepoint writers that frame Flink's bytes).
pub const LIST_OUTER_VERSION: u32 = 1;
/// Flink's *outer* snapshot version of `MapSerializerSnapshot` (see [`LIST_OUTER_VERSION`]).
pub const MAP_OUTER_VERSION: u32 = 1;
/// Flink's *outer* snapshot version of `TtlSerializerSnapshot` (see [`LIST_OUTER_VERSION`]).
pub const TTL_OUTER_VERSION: u32 = 2;

/// Combines element compatibilities as Flink's `CompositeTypeSerializerSnapshot` does (used by every
/// composite here; usable by user composites).
///
/// The previous snapshot must have the same identifier and as many nested snapshots. Then any incompatible
/// element makes the whole incompatible (the reason names the element), any element needing migration makes
/// the whole need migration, any reconfigured element makes the whole reconfigured, and otherwise the whole
/// is compatible as is. Migration then reads element by element, through
/// [`TypeSerializer::deserialize_previous`] for the elements that need it.
///
/// `elements` pairs each element's name with its compatibility against the previous nested snapshot. Returns
/// [`Compatibility::Incompatible`] naming both serializers when the identifiers or the nested counts differ.
pub fn composite_compatibility(
    current: &SerializerSnapshot,
    previous: &SerializerSnapshot,
    elements: &[(&str, Compatibility)],
) -> Compatibility {
    if previous.identifier != current.identifier {
        return Compatibility::Incompatible(format!(
            "{} cannot read bytes written by {}",
            current.identifier, previous.identifier
        ));
    }
    if previous.nested.len() != elements.len() {
        return Compatibility::Incompatible(format!(
            "{} expects {} nested serializers, the previous snapshot has {}",
            current.identifier,
            elements.len(),
            previous.nested.len()
        ));
    }
    let mut migrate = false;
    let mut reconfigure = false;
    for (name, c) in elements {
        match c {
            Compatibility::Incompatible(reason) => {
                return Compatibility::Incompatible(format!(
                    "{} {name} serializer: {reason}",
                    current.identifier
                ))
            }
            Compatibility::CompatibleAfterMigration => migrate = true,
            Compatibility::CompatibleWithReconfiguredSerializer => reconfigure = true,
            Compatibility::CompatibleAsIs => {}
        }
    }
    if migrate {
        Compatibility::CompatibleAfterMigration
    } else if reconfigure {
        Compatibility::CompatibleWithReconfiguredSerializer
    } else {
        Compatibility::CompatibleAsIs
    }
}

/// The compatibility of `element` against the `index`-th nested snapshot of `previous` (incompatible if it
/// is missing).
fn nested_compat<S: TypeSerializer + ?Sized>(
    element: &S,
    previous: &SerializerSnapshot,
    index: usize,
) -> Compatibility {
    match previous.nested.get(index) {
        Some(p) => element.compatibility(p),
        None => Compatibility::Incompatible(format!(
            "previous snapshot {} has no nested serializer #{index}",
            previous.identifier
        )),
    }
}

/// How to read one element of a migrating composite: with the previous nested snapshot if the element needs
/// migration, or `None` to read it as is.
fn element_reader<'p, S: TypeSerializer + ?Sized>(
    element: &S,
    previous: &'p SerializerSnapshot,
    index: usize,
) -> Result<Option<&'p SerializerSnapshot>, SerializerError> {
    let prev = previous
        .nested
        .get(index)
        .ok_or_else(|| SerializerError::NotMigratable {
            previous: previous.identifier.clone(),
            new: element.snapshot().identifier,
        })?;
    match element.compatibility(prev) {
        Compatibility::CompatibleAfterMigration => Ok(Some(prev)),
        Compatibility::Incompatible(_) => Err(SerializerError::NotMigratable {
            previous: prev.identifier.clone(),
            new: element.snapshot().identifier,
        }),
        _ => Ok(None),
    }
}

fn read_element<S: TypeSerializer + ?Sized>(
    element: &S,
    previous: Option<&SerializerSnapshot>,
    input: &mut &[u8],
) -> Result<S::Value, SerializerError> {
    match previous {
        Some(p) => element.deserialize_previous(p, input),
        None => element.deserialize(input),
    }
}

/// Fails unless `previous` has `id`, so that `deserialize_previous` is never fed foreign bytes.
fn check_same_id(id: &str, previous: &SerializerSnapshot) -> Result<(), SerializerError> {
    if previous.identifier == id {
        Ok(())
    } else {
        Err(SerializerError::NotMigratable {
            previous: previous.identifier.clone(),
            new: id.to_string(),
        })
    }
}

/// Reads a list body (`i32` size, then elements) with `read`.
///
/// The declared size is checked against the remaining input before anything is allocated: every element
/// must take at least one byte unless its type is zero-sized (which allocates nothing).
fn read_list<T>(
    input: &mut &[u8],
    mut read: impl FnMut(&mut &[u8]) -> Result<T, SerializerError>,
) -> Result<Vec<T>, SerializerError> {
    let size = read_len_i32(input, "list size")?;
    if std::mem::size_of::<T>() != 0 && size > input.len() {
        return Err(SerializerError::Truncated {
            what: "list elements",
            needed: size - input.len(),
        });
    }
    let mut out = Vec::with_capacity(size.min(input.len()).min(1 << 16));
    for _ in 0..size {
        let before = input.len();
        let v = read(input)?;
        if std::mem::size_of::<T>() != 0 && input.len() == before {
            return Err(SerializerError::Invalid {
                what: "list element",
                detail: "element serializer consumed no bytes".into(),
            });
        }
        out.push(v);
    }
    Ok(out)
}

/// Flink's `ListSerializer`: `Vec<E::Value>` as an `i32` big-endian size, then the elements.
///
/// Element serializers must write at least one byte per element unless the element type is zero-sized (the
/// decoder relies on it to bound allocations by the input length).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListSerializer<E> {
    /// The element serializer.
    pub element: E,
}

impl<E> ListSerializer<E> {
    /// A list serializer over `element`.
    pub fn new(element: E) -> Self {
        ListSerializer { element }
    }
}

impl<E: TypeSerializer> TypeSerializer for ListSerializer<E> {
    type Value = Vec<E::Value>;

    fn serialize(&self, value: &Self::Value, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        write_len_i32(out, value.len(), "list")?;
        for v in value {
            let before = out.len();
            self.element.serialize(v, out)?;
            if std::mem::size_of::<E::Value>() != 0 && out.len() == before {
                return Err(SerializerError::Unserializable {
                    what: "list element",
                    detail: "element serializer wrote no bytes".into(),
                });
            }
        }
        Ok(())
    }

    fn deserialize(&self, input: &mut &[u8]) -> Result<Self::Value, SerializerError> {
        read_list(input, |i| self.element.deserialize(i))
    }

    fn fixed_length(&self) -> Option<usize> {
        None
    }

    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::composite(
            LIST_SNAPSHOT_ID,
            COMPOSITE_SNAPSHOT_VERSION,
            vec![self.element.snapshot()],
        )
    }

    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        composite_compatibility(
            &self.snapshot(),
            previous,
            &[("element", nested_compat(&self.element, previous, 0))],
        )
    }

    fn deserialize_previous(
        &self,
        previous: &SerializerSnapshot,
        input: &mut &[u8],
    ) -> Result<Self::Value, SerializerError> {
        check_same_id(LIST_SNAPSHOT_ID, previous)?;
        let prev = element_reader(&self.element, previous, 0)?;
        read_list(input, |i| read_element(&self.element, prev, i))
    }
}

impl<E: TypeSerializer> KeySerializer for ListSerializer<E> {}

/// Flink's `MapSerializer` over a [`BTreeMap`], so that entries are written in key order (deterministic).
///
/// Bytes: `i32` big-endian size, then per entry the key, a boolean `isNull` byte (`00`) and the value.
/// Flink's `null` values (`isNull = 01`) have no Rust value and are rejected on read, as are duplicate keys.
/// Maps written by Flink (in `HashMap` order) are read fine; they are written back in key order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapSerializer<K, V> {
    /// The key serializer.
    pub key: K,
    /// The value serializer.
    pub value: V,
}

impl<K, V> MapSerializer<K, V> {
    /// A map serializer over `key` and `value`.
    pub fn new(key: K, value: V) -> Self {
        MapSerializer { key, value }
    }
}

impl<K: TypeSerializer, V: TypeSerializer> MapSerializer<K, V>
where
    K::Value: Ord,
{
    fn read_map(
        &self,
        input: &mut &[u8],
        key_prev: Option<&SerializerSnapshot>,
        value_prev: Option<&SerializerSnapshot>,
    ) -> Result<BTreeMap<K::Value, V::Value>, SerializerError> {
        let size = read_len_i32(input, "map size")?;
        // Each entry takes at least its null-flag byte.
        if size > input.len() {
            return Err(SerializerError::Truncated {
                what: "map entries",
                needed: size - input.len(),
            });
        }
        let mut out = BTreeMap::new();
        for _ in 0..size {
            let k = read_element(&self.key, key_prev, input)?;
            if read_bool(input, "map value null flag")? {
                return Err(SerializerError::Invalid {
                    what: "map",
                    detail: "null map value has no Rust value".into(),
                });
            }
            let v = read_element(&self.value, value_prev, input)?;
            if out.insert(k, v).is_some() {
                return Err(SerializerError::Invalid {
                    what: "map",
                    detail: "duplicate key".into(),
                });
            }
        }
        Ok(out)
    }
}

impl<K: TypeSerializer, V: TypeSerializer> TypeSerializer for MapSerializer<K, V>
where
    K::Value: Ord,
{
    type Value = BTreeMap<K::Value, V::Value>;

    fn serialize(&self, value: &Self::Value, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        write_len_i32(out, value.len(), "map")?;
        for (k, v) in value {
            self.key.serialize(k, out)?;
            out.push(0);
            self.value.serialize(v, out)?;
        }
        Ok(())
    }

    fn deserialize(&self, input: &mut &[u8]) -> Result<Self::Value, SerializerError> {
        self.read_map(input, None, None)
    }

    fn fixed_length(&self) -> Option<usize> {
        None
    }

    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::composite(
            MAP_SNAPSHOT_ID,
            COMPOSITE_SNAPSHOT_VERSION,
            vec![self.key.snapshot(), self.value.snapshot()],
        )
    }

    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        composite_compatibility(
            &self.snapshot(),
            previous,
            &[
                ("key", nested_compat(&self.key, previous, 0)),
                ("value", nested_compat(&self.value, previous, 1)),
            ],
        )
    }

    fn deserialize_previous(
        &self,
        previous: &SerializerSnapshot,
        input: &mut &[u8],
    ) -> Result<Self::Value, SerializerError> {
        check_same_id(MAP_SNAPSHOT_ID, previous)?;
        let key_prev = element_reader(&self.key, previous, 0)?;
        let value_prev = element_reader(&self.value, previous, 1)?;
        self.read_map(input, key_prev, value_prev)
    }
}

impl<K: TypeSerializer, V: TypeSerializer> KeySerializer for MapSerializer<K, V> where K::Value: Ord {}

/// `Option<E::Value>`: one flag byte, `00` for `None` or `01` followed by the value (this crate's own
/// format, identifier [`OPTION_SNAPSHOT_ID`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptionSerializer<E> {
    /// The serializer of the present value.
    pub element: E,
}

impl<E> OptionSerializer<E> {
    /// An option serializer over `element`.
    pub fn new(element: E) -> Self {
        OptionSerializer { element }
    }
}

impl<E: TypeSerializer> OptionSerializer<E> {
    fn read_option(
        &self,
        input: &mut &[u8],
        prev: Option<&SerializerSnapshot>,
    ) -> Result<Option<E::Value>, SerializerError> {
        if read_bool(input, "option flag")? {
            Ok(Some(read_element(&self.element, prev, input)?))
        } else {
            Ok(None)
        }
    }
}

impl<E: TypeSerializer> TypeSerializer for OptionSerializer<E> {
    type Value = Option<E::Value>;

    fn serialize(&self, value: &Self::Value, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        match value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                self.element.serialize(v, out)?;
            }
        }
        Ok(())
    }

    fn deserialize(&self, input: &mut &[u8]) -> Result<Self::Value, SerializerError> {
        self.read_option(input, None)
    }

    fn fixed_length(&self) -> Option<usize> {
        None
    }

    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::composite(
            OPTION_SNAPSHOT_ID,
            OPTION_SNAPSHOT_VERSION,
            vec![self.element.snapshot()],
        )
    }

    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        composite_compatibility(
            &self.snapshot(),
            previous,
            &[("element", nested_compat(&self.element, previous, 0))],
        )
    }

    fn deserialize_previous(
        &self,
        previous: &SerializerSnapshot,
        input: &mut &[u8],
    ) -> Result<Self::Value, SerializerError> {
        check_same_id(OPTION_SNAPSHOT_ID, previous)?;
        let prev = element_reader(&self.element, previous, 0)?;
        self.read_option(input, prev)
    }
}

impl<E: TypeSerializer> KeySerializer for OptionSerializer<E> {}

/// A user value with its last-access timestamp (Flink's `TtlValue`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TtlValue<T> {
    /// The user value.
    pub value: T,
    /// The last-access timestamp in milliseconds.
    pub timestamp: i64,
}

impl<T> TtlValue<T> {
    /// `value` last accessed at `timestamp`.
    pub fn new(value: T, timestamp: i64) -> Self {
        TtlValue { value, timestamp }
    }
}

/// Flink's TTL value serializer: `i64` big-endian last-access timestamp, then the user value.
///
/// Snapshot: [`TTL_SNAPSHOT_ID`], nested `[LongSerializer, user]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TtlSerializer<S> {
    /// The user value serializer.
    pub user: S,
}

impl<S> TtlSerializer<S> {
    /// A TTL serializer around `user`.
    pub fn new(user: S) -> Self {
        TtlSerializer { user }
    }
}

impl<S: TypeSerializer> TypeSerializer for TtlSerializer<S> {
    type Value = TtlValue<S::Value>;

    fn serialize(&self, value: &Self::Value, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        out.extend_from_slice(&value.timestamp.to_be_bytes());
        self.user.serialize(&value.value, out)
    }

    fn deserialize(&self, input: &mut &[u8]) -> Result<Self::Value, SerializerError> {
        let timestamp = LongSerializer.deserialize(input)?;
        let value = self.user.deserialize(input)?;
        Ok(TtlValue { value, timestamp })
    }

    fn fixed_length(&self) -> Option<usize> {
        self.user.fixed_length().and_then(|n| n.checked_add(8))
    }

    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::composite(
            TTL_SNAPSHOT_ID,
            COMPOSITE_SNAPSHOT_VERSION,
            vec![LongSerializer.snapshot(), self.user.snapshot()],
        )
    }

    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        composite_compatibility(
            &self.snapshot(),
            previous,
            &[
                ("timestamp", nested_compat(&LongSerializer, previous, 0)),
                ("user value", nested_compat(&self.user, previous, 1)),
            ],
        )
    }

    fn deserialize_previous(
        &self,
        previous: &SerializerSnapshot,
        input: &mut &[u8],
    ) -> Result<Self::Value, SerializerError> {
        check_same_id(TTL_SNAPSHOT_ID, previous)?;
        // The timestamp serializer is always Long (checked as-is by `compatibility`).
        let ts_prev = element_reader(&LongSerializer, previous, 0)?;
        let user_prev = element_reader(&self.user, previous, 1)?;
        let timestamp = read_element(&LongSerializer, ts_prev, input)?;
        let value = read_element(&self.user, user_prev, input)?;
        Ok(TtlValue { value, timestamp })
    }
}

//! Serializers with snapshots and compatibility checks (Flink's `TypeSerializer` / `TypeSerializerSnapshot`).
//!
//! Every value that reaches a backend is serialized bytes. A serializer writes its [`SerializerSnapshot`]
//! (identifier, version, configuration bytes, nested snapshots) into every savepoint, so that a restore can
//! tell whether the serializer it is given now still reads the bytes written then: [`Compatibility`].
//!
//! The built-in serializers for `i32`, `i64` and `String` encode byte for byte as Flink's `IntSerializer`,
//! `LongSerializer` and `StringSerializer`, and use Flink's snapshot class names as identifiers, so that
//! reading and writing Flink's own savepoints is a matter of framing. So do [`DoubleSerializer`],
//! [`BooleanSerializer`], [`BytesSerializer`] (`byte[]`), [`ListSerializer`], [`MapSerializer`] and
//! [`TtlSerializer`] (Flink's `TtlValue`); [`OptionSerializer`] has no Flink counterpart. User types go
//! through serde with [`SerdeSerializer`] (schema versions and migrations), or implement [`TypeSerializer`]
//! by hand. [`dynamic`] decodes bytes of the built-ins to JSON from a snapshot alone.

mod builtin;
mod composite;
pub mod dynamic;
mod serde_support;
mod snapshot;

use keyed_state_lsm::ErrorKind;

pub use builtin::*;
pub use composite::*;
pub use serde_support::*;
pub use snapshot::{SerializerSnapshot, SnapshotDecodeError, MAX_SNAPSHOT_DEPTH};

/// Errors from serializing or deserializing one value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SerializerError {
    /// The input ended before the value was complete.
    #[error("input truncated: {what} needs {needed} more bytes")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// How many bytes were missing (at least).
        needed: usize,
    },
    /// The bytes do not form a valid value.
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// What was being read.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The value cannot be written by this serializer.
    #[error("cannot serialize {what}: {detail}")]
    Unserializable {
        /// What was being written.
        what: &'static str,
        /// Why.
        detail: String,
    },
    /// This serializer cannot read bytes written by the previous serializer.
    #[error("serializer {new} cannot read bytes written by {previous}")]
    NotMigratable {
        /// The previous serializer's identifier.
        previous: String,
        /// This serializer's identifier.
        new: String,
    },
}

impl SerializerError {
    /// What kind of failure this is: bytes that do not decode are [`Corruption`](ErrorKind::Corruption),
    /// a value the serializer cannot write or a serializer that cannot read older bytes is
    /// [`InvalidInput`](ErrorKind::InvalidInput).
    pub fn kind(&self) -> ErrorKind {
        match self {
            SerializerError::Truncated { .. } | SerializerError::Invalid { .. } => {
                ErrorKind::Corruption
            }
            SerializerError::Unserializable { .. } | SerializerError::NotMigratable { .. } => {
                ErrorKind::InvalidInput
            }
        }
    }
}

/// How a new serializer relates to the serializer that wrote existing bytes (Flink's
/// `TypeSerializerSchemaCompatibility`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compatibility {
    /// The new serializer reads the old bytes as they are.
    CompatibleAsIs,
    /// The new serializer reads the old bytes once reconfigured; the bytes themselves need no change.
    CompatibleWithReconfiguredSerializer,
    /// The old bytes must be migrated: read with [`TypeSerializer::deserialize_previous`], written with the new
    /// serializer.
    CompatibleAfterMigration,
    /// The old bytes cannot be read; the reason says why.
    Incompatible(String),
}

impl Compatibility {
    /// Whether existing bytes may be used without rewriting them.
    pub fn is_compatible_as_is(&self) -> bool {
        matches!(
            self,
            Compatibility::CompatibleAsIs | Compatibility::CompatibleWithReconfiguredSerializer
        )
    }

    /// Whether the old bytes must be rewritten.
    pub fn requires_migration(&self) -> bool {
        matches!(self, Compatibility::CompatibleAfterMigration)
    }

    /// Whether the old bytes cannot be used at all.
    pub fn is_incompatible(&self) -> bool {
        matches!(self, Compatibility::Incompatible(_))
    }
}

/// A serializer for values of one type, with a snapshot describing its format.
///
/// Implementations must be deterministic: the same value always gives the same bytes.
pub trait TypeSerializer: Send + Sync + 'static {
    /// The type this serializer reads and writes.
    type Value: Clone + Send + Sync + 'static;

    /// Appends the bytes of `value` to `out`.
    fn serialize(&self, value: &Self::Value, out: &mut Vec<u8>) -> Result<(), SerializerError>;

    /// Reads one value from the front of `input`, advancing it past the bytes consumed.
    fn deserialize(&self, input: &mut &[u8]) -> Result<Self::Value, SerializerError>;

    /// The length of every serialized value if it is fixed (Flink's `getLength() >= 0`), else `None`.
    ///
    /// This decides whether composite keys carry length bytes (see `layout`). Note Flink's quirk, kept here:
    /// the void namespace reports `Some(0)` but writes one byte.
    fn fixed_length(&self) -> Option<usize>;

    /// The snapshot written into savepoints: identifier, version, configuration and nested snapshots.
    fn snapshot(&self) -> SerializerSnapshot;

    /// How this serializer relates to the one described by `previous`. The default: as-is when the snapshots
    /// are equal, incompatible otherwise.
    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        let current = self.snapshot();
        if &current == previous {
            Compatibility::CompatibleAsIs
        } else {
            Compatibility::Incompatible(format!(
                "{} (version {}) cannot read {} (version {})",
                current.identifier, current.version, previous.identifier, previous.version
            ))
        }
    }

    /// Reads a value written by the serializer that `previous` describes (only called when
    /// [`compatibility`](Self::compatibility) answered [`Compatibility::CompatibleAfterMigration`]).
    fn deserialize_previous(
        &self,
        previous: &SerializerSnapshot,
        input: &mut &[u8],
    ) -> Result<Self::Value, SerializerError> {
        let _ = input;
        Err(SerializerError::NotMigratable {
            previous: previous.identifier.clone(),
            new: self.snapshot().identifier,
        })
    }
}

/// A serializer that can also be used for keys: it supplies the hash that decides the key group.
pub trait KeySerializer: TypeSerializer {
    /// The 32-bit hash of a key whose serialized bytes are `serialized`. Built-in key types return Java's
    /// `hashCode` (so that key groups equal Flink's); the default is [`crate::keygroup::bytes_hash`].
    fn key_hash(&self, key: &Self::Value, serialized: &[u8]) -> i32 {
        let _ = key;
        crate::keygroup::bytes_hash(serialized)
    }
}

/// Serializes `value` into a fresh vector.
pub fn to_bytes<S: TypeSerializer + ?Sized>(
    serializer: &S,
    value: &S::Value,
) -> Result<Vec<u8>, SerializerError> {
    let mut out = Vec::new();
    serializer.serialize(value, &mut out)?;
    Ok(out)
}

/// Deserializes one value that must use up all of `bytes`.
pub fn from_bytes<S: TypeSerializer + ?Sized>(
    serializer: &S,
    bytes: &[u8],
) -> Result<S::Value, SerializerError> {
    let mut input = bytes;
    let v = serializer.deserialize(&mut input)?;
    if !input.is_empty() {
        return Err(SerializerError::Invalid {
            what: "value",
            detail: format!("{} trailing bytes after the value", input.len()),
        });
    }
    Ok(v)
}

/// A shared serializer serializes as the serializer it shares (so composites such as [`TtlSerializer`] can
/// wrap a serializer that handles also hold).
impl<S: TypeSerializer> TypeSerializer for std::sync::Arc<S> {
    type Value = S::Value;

    fn serialize(&self, value: &Self::Value, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        (**self).serialize(value, out)
    }

    fn deserialize(&self, input: &mut &[u8]) -> Result<Self::Value, SerializerError> {
        (**self).deserialize(input)
    }

    fn fixed_length(&self) -> Option<usize> {
        (**self).fixed_length()
    }

    fn snapshot(&self) -> SerializerSnapshot {
        (**self).snapshot()
    }

    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        (**self).compatibility(previous)
    }

    fn deserialize_previous(
        &self,
        previous: &SerializerSnapshot,
        input: &mut &[u8],
    ) -> Result<Self::Value, SerializerError> {
        (**self).deserialize_previous(previous, input)
    }
}

//! Serializers for user types through serde: [`SerdeSerializer`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Compatibility, KeySerializer, SerializerError, SerializerSnapshot, TypeSerializer};

/// Prefix of the snapshot identifiers of [`SerdeSerializer`]s; the user's type name follows.
pub const SERDE_SNAPSHOT_PREFIX: &str = "keyed-state/serde-postcard:";

/// Reads one value written by an older schema version from the front of the input, advancing it.
pub type MigrationFn<T> = dyn Fn(&mut &[u8]) -> Result<T, SerializerError> + Send + Sync;

/// A serializer for any `T: Serialize + DeserializeOwned`, encoded with postcard, with a user-given type
/// name and schema version and optional migrations from older versions.
///
/// Values are encoded with [postcard](https://docs.rs/postcard) (its 1.x wire format is stable and
/// specified): compact (varint integers, no field names) and deterministic for deterministic types. Use
/// `BTreeMap`/`BTreeSet` rather than `HashMap`/`HashSet` inside state types, or the bytes depend on hash order.
/// Decoding never panics and pre-allocates at most what the remaining input can fill (serde's cautious size
/// hints), but self-recursive types (`Box<Tree>`) are decoded recursively without a depth limit.
///
/// # Schema versions and migration
///
/// The snapshot of a `SerdeSerializer` names the user's type ([`SERDE_SNAPSHOT_PREFIX`] + type name) and
/// carries the user's schema version as its version. When the type changes incompatibly, bump the version
/// and register how to read each older version:
///
/// ```
/// use keyed_state::serializer::{Compatibility, SerdeSerializer, TypeSerializer};
/// #[derive(serde::Serialize, serde::Deserialize, Clone)]
/// struct V1 { count: u32 }
/// #[derive(serde::Serialize, serde::Deserialize, Clone)]
/// struct V2 { count: u64, label: String }
///
/// let old = SerdeSerializer::<V1>::new("Counter", 1);
/// let new = SerdeSerializer::<V2>::new("Counter", 2)
///     .with_serde_migration::<V1>(1, |v| V2 { count: v.count.into(), label: String::new() });
/// assert_eq!(new.compatibility(&old.snapshot()), Compatibility::CompatibleAfterMigration);
/// ```
///
/// Versions with a registered migration answer [`Compatibility::CompatibleAfterMigration`] and are read by
/// [`TypeSerializer::deserialize_previous`]; the same version answers [`Compatibility::CompatibleAsIs`];
/// anything else (another type name, a newer version, a version without migration) is
/// [`Compatibility::Incompatible`].
pub struct SerdeSerializer<T> {
    type_name: Arc<str>,
    version: u32,
    migrations: Vec<(u32, Arc<MigrationFn<T>>)>,
    _marker: PhantomData<fn() -> T>,
}

impl<T> Clone for SerdeSerializer<T> {
    fn clone(&self) -> Self {
        SerdeSerializer {
            type_name: self.type_name.clone(),
            version: self.version,
            migrations: self.migrations.clone(),
            _marker: PhantomData,
        }
    }
}

impl<T> fmt::Debug for SerdeSerializer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from: Vec<u32> = self.migrations.iter().map(|(v, _)| *v).collect();
        f.debug_struct("SerdeSerializer")
            .field("type_name", &self.type_name)
            .field("version", &self.version)
            .field("migrates_from", &from)
            .finish()
    }
}

impl<T> SerdeSerializer<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// A serializer for `T` named `type_name` (stable across renames of the Rust type) at schema `version`.
    pub fn new(type_name: impl Into<String>, version: u32) -> Self {
        SerdeSerializer {
            type_name: Arc::from(type_name.into()),
            version,
            migrations: Vec::new(),
            _marker: PhantomData,
        }
    }

    /// The user-given type name.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The user-given schema version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Registers how to read values written at schema `from_version`: `read` consumes one old value from the
    /// front of its input (advancing it) and returns the value in the current schema. Replaces an earlier
    /// migration from the same version.
    pub fn with_migration<F>(mut self, from_version: u32, read: F) -> Self
    where
        F: Fn(&mut &[u8]) -> Result<T, SerializerError> + Send + Sync + 'static,
    {
        self.migrations.retain(|(v, _)| *v != from_version);
        self.migrations.push((from_version, Arc::new(read)));
        self
    }

    /// Registers a migration from schema `from_version`, whose values were the serde type `Old` (written by a
    /// `SerdeSerializer<Old>`), converted with `upgrade`.
    pub fn with_serde_migration<Old>(
        self,
        from_version: u32,
        upgrade: impl Fn(Old) -> T + Send + Sync + 'static,
    ) -> Self
    where
        Old: DeserializeOwned,
    {
        self.with_migration(from_version, move |input| {
            decode_postcard::<Old>(input).map(&upgrade)
        })
    }

    /// The schema versions this serializer can migrate from.
    pub fn migratable_versions(&self) -> Vec<u32> {
        self.migrations.iter().map(|(v, _)| *v).collect()
    }

    fn identifier(&self) -> String {
        format!("{SERDE_SNAPSHOT_PREFIX}{}", self.type_name)
    }

    fn migration(&self, version: u32) -> Option<&MigrationFn<T>> {
        self.migrations
            .iter()
            .find(|(v, _)| *v == version)
            .map(|(_, f)| f.as_ref())
    }
}

/// Decodes one postcard value of type `V` from the front of `input`, advancing it.
pub fn decode_postcard<V: DeserializeOwned>(input: &mut &[u8]) -> Result<V, SerializerError> {
    let (v, rest) = postcard::take_from_bytes::<V>(input).map_err(|e| match e {
        postcard::Error::DeserializeUnexpectedEnd => SerializerError::Truncated {
            what: "serde value",
            needed: 1,
        },
        other => SerializerError::Invalid {
            what: "serde value",
            detail: other.to_string(),
        },
    })?;
    *input = rest;
    Ok(v)
}

/// Appends the postcard encoding of `value` to `out`.
pub fn encode_postcard<V: Serialize + ?Sized>(
    value: &V,
    out: &mut Vec<u8>,
) -> Result<(), SerializerError> {
    let len = out.len();
    match postcard::to_extend(value, Appender(out)) {
        Ok(_) => Ok(()),
        Err(e) => {
            out.truncate(len);
            Err(SerializerError::Unserializable {
                what: "serde value",
                detail: e.to_string(),
            })
        }
    }
}

/// Lets postcard append to a borrowed vector.
struct Appender<'a>(&'a mut Vec<u8>);

impl Extend<u8> for Appender<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl<T> TypeSerializer for SerdeSerializer<T>
where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn serialize(&self, value: &T, out: &mut Vec<u8>) -> Result<(), SerializerError> {
        encode_postcard(value, out)
    }

    fn deserialize(&self, input: &mut &[u8]) -> Result<T, SerializerError> {
        decode_postcard(input)
    }

    fn fixed_length(&self) -> Option<usize> {
        None
    }

    fn snapshot(&self) -> SerializerSnapshot {
        SerializerSnapshot::simple(self.identifier(), self.version)
    }

    fn compatibility(&self, previous: &SerializerSnapshot) -> Compatibility {
        let id = self.identifier();
        if previous.identifier != id {
            return Compatibility::Incompatible(format!(
                "{id} cannot read bytes written by {}",
                previous.identifier
            ));
        }
        if previous.version == self.version {
            Compatibility::CompatibleAsIs
        } else if self.migration(previous.version).is_some() {
            Compatibility::CompatibleAfterMigration
        } else {
            Compatibility::Incompatible(format!(
                "{id} version {} has no migration from version {} (migrates from {:?})",
                self.version,
                previous.version,
                self.migratable_versions()
            ))
        }
    }

    fn deserialize_previous(
        &self,
        previous: &SerializerSnapshot,
        input: &mut &[u8],
    ) -> Result<T, SerializerError> {
        let id = self.identifier();
        if previous.identifier == id {
            if previous.version == self.version {
                return self.deserialize(input);
            }
            if let Some(m) = self.migration(previous.version) {
                return m(input);
            }
        }
        Err(SerializerError::NotMigratable {
            previous: format!("{} (version {})", previous.identifier, previous.version),
            new: format!("{id} (version {})", self.version),
        })
    }
}

/// Keys hash with [`crate::keygroup::bytes_hash`] of their serialized bytes.
impl<T> KeySerializer for SerdeSerializer<T> where
    T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

//! How a typed descriptor becomes a registration: the type-erased compatibility checks and migrations a
//! registered state keeps for restored serializers, per state kind.

use std::sync::Arc;

use super::descriptor::*;
use crate::backend::{StateBackend, StateId};
use crate::error::{Error, Result};
use crate::layout::LIST_DELIMITER;
use crate::meta::{StateKind, StateMetaInfo};
use crate::serializer::{Compatibility, SerializerSnapshot, TtlSerializer, TypeSerializer};
use crate::ttl::TtlLayout;

pub(super) type CompatFn = Arc<dyn Fn(&SerializerSnapshot) -> Compatibility + Send + Sync>;
pub(super) type MigrateFn =
    Arc<dyn Fn(&SerializerSnapshot, &[u8]) -> Result<Vec<u8>> + Send + Sync>;

/// A state registered through the store: its meta and type-erased checks against restored serializers.
#[derive(Clone)]
pub(crate) struct Registered {
    pub(crate) meta: StateMetaInfo,
    pub(super) ns_compat: CompatFn,
    pub(super) value_compat: CompatFn,
    pub(super) migrate: MigrateFn,
    /// Where the stored values carry their TTL timestamps (TTL states only).
    pub(super) ttl_layout: Option<TtlLayout>,
}

/// What must happen to a restored state's values for a registration to use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestorePlan {
    /// Use the bytes as they are.
    AsIs,
    /// Rewrite every value with the registration's migration.
    Migrate,
}

impl Registered {
    /// Checks a restored state against this registration (kind, namespace, value serializers).
    pub(crate) fn check(&self, restored: &StateMetaInfo) -> Result<RestorePlan> {
        let meta = &self.meta;
        if restored.kind != meta.kind {
            return Err(Error::StateKindMismatch {
                name: meta.name.clone(),
                existing: restored.kind,
                requested: meta.kind,
            });
        }
        if restored.ttl.is_some() != meta.ttl.is_some() {
            return Err(Error::TtlToggled {
                name: meta.name.clone(),
                restored_with_ttl: restored.ttl.is_some(),
            });
        }
        let nc = (self.ns_compat)(&restored.namespace_serializer);
        if !nc.is_compatible_as_is() {
            return Err(incompatible(
                &meta.name,
                "namespace",
                &restored.namespace_serializer,
                &meta.namespace_serializer,
                nc,
            ));
        }
        match (self.value_compat)(&restored.value_serializer) {
            Compatibility::CompatibleAsIs | Compatibility::CompatibleWithReconfiguredSerializer => {
                Ok(RestorePlan::AsIs)
            }
            Compatibility::CompatibleAfterMigration => Ok(RestorePlan::Migrate),
            vc @ Compatibility::Incompatible(_) => Err(incompatible(
                &meta.name,
                "value",
                &restored.value_serializer,
                &meta.value_serializer,
                vc,
            )),
        }
    }

    /// Rewrites the values of backend state `id` from the restored serializer `previous`.
    pub(crate) fn migrate(
        &self,
        backend: &mut dyn StateBackend,
        id: StateId,
        previous: &SerializerSnapshot,
    ) -> Result<()> {
        let m = self.migrate.clone();
        let prev = previous.clone();
        backend.transform_values(id, &mut |bytes| m(&prev, bytes).map(Some))
    }
}

/// The registration of a state whose value is one serialized value (value, reducing, aggregating): the value
/// serializer checks compatibility itself and migrates the whole value. With TTL, the stored serializer is
/// Flink's `TtlSerializer` around `ser`.
pub(super) fn whole_value_registration<S: TypeSerializer, N: TypeSerializer>(
    name: &str,
    kind: StateKind,
    ns: &Arc<N>,
    ser: &Arc<S>,
    ttl: Option<crate::meta::TtlConfig>,
) -> Registered {
    match ttl {
        Some(ttl) => {
            let stored = Arc::new(TtlSerializer::new(ser.clone()));
            let mut reg = stored_value_registration(name, kind, ns, &stored, Some(ttl));
            reg.ttl_layout = Some(TtlLayout::Value);
            reg
        }
        None => stored_value_registration(name, kind, ns, ser, None),
    }
}

pub(super) fn stored_value_registration<S: TypeSerializer, N: TypeSerializer>(
    name: &str,
    kind: StateKind,
    ns: &Arc<N>,
    ser: &Arc<S>,
    ttl: Option<crate::meta::TtlConfig>,
) -> Registered {
    let (compat_ser, migrate_ser, n) = (ser.clone(), ser.clone(), name.to_string());
    Registered {
        meta: meta(name, kind, ns.snapshot(), ser.snapshot(), ttl),
        ns_compat: ns_compat(ns),
        value_compat: Arc::new(move |old| compat_ser.compatibility(old)),
        migrate: Arc::new(move |prev, b| migrate_whole(&n, &*migrate_ser, prev, b)),
        ttl_layout: None,
    }
}

/// The registration of a list state whose stored elements `el` writes.
pub(super) fn list_registration<S: TypeSerializer, N: TypeSerializer>(
    name: &str,
    ns: &Arc<N>,
    el: Arc<S>,
    ttl: Option<crate::meta::TtlConfig>,
) -> Registered {
    Registered {
        meta: meta(
            name,
            StateKind::List,
            ns.snapshot(),
            list_state_snapshot(el.snapshot()),
            ttl,
        ),
        ns_compat: ns_compat(ns),
        value_compat: {
            let e = el.clone();
            Arc::new(move |old| nested_compat(old, LIST_SNAPSHOT_ID, 0, |s| e.compatibility(s)))
        },
        migrate: {
            let n = name.to_string();
            Arc::new(move |prev, b| {
                let prev_el = prev.nested.first().cloned().unwrap_or_else(|| prev.clone());
                migrate_list(&n, &*el, &prev_el, b)
            })
        },
        ttl_layout: None,
    }
}

/// The registration of a map state whose stored values `uv` writes.
pub(super) fn map_registration<UK: TypeSerializer, S: TypeSerializer, N: TypeSerializer>(
    name: &str,
    ns: &Arc<N>,
    uk: &Arc<UK>,
    uv: Arc<S>,
    ttl: Option<crate::meta::TtlConfig>,
) -> Registered {
    Registered {
        meta: meta(
            name,
            StateKind::Map,
            ns.snapshot(),
            map_state_snapshot(uk.snapshot(), uv.snapshot()),
            ttl,
        ),
        ns_compat: ns_compat(ns),
        value_compat: {
            let (uk, uv) = (uk.clone(), uv.clone());
            Arc::new(move |old| {
                // The user key is part of the entry key: it may never be migrated (as in Flink).
                let kc = nested_compat(old, MAP_SNAPSHOT_ID, 0, |s| uk.compatibility(s));
                match kc {
                    Compatibility::CompatibleAsIs | Compatibility::CompatibleWithReconfiguredSerializer => {
                        nested_compat(old, MAP_SNAPSHOT_ID, 1, |s| uv.compatibility(s))
                    }
                    Compatibility::Incompatible(r) => Compatibility::Incompatible(r),
                    Compatibility::CompatibleAfterMigration => Compatibility::Incompatible(
                        "the map user-key serializer would need migration; user keys are never migrated".into(),
                    ),
                }
            })
        },
        migrate: {
            let n = name.to_string();
            Arc::new(move |prev, b| {
                let prev_v = prev.nested.get(1).cloned().unwrap_or_else(|| prev.clone());
                migrate_map_value(&n, &*uv, &prev_v, b)
            })
        },
        ttl_layout: None,
    }
}

/// The length function of stored TTL list elements: a fixed length when the serializer has one, else one
/// deserialization per element.
pub(super) fn element_length<S: TypeSerializer>(el: Arc<S>) -> crate::ttl::ElementLength {
    match el.fixed_length() {
        Some(n) => Arc::new(move |b: &[u8]| (b.len() >= n).then_some(n)),
        None => Arc::new(move |b: &[u8]| {
            let mut input = b;
            el.deserialize(&mut input).ok()?;
            Some(b.len() - input.len())
        }),
    }
}

pub(super) fn ns_compat<N: TypeSerializer>(ns: &Arc<N>) -> CompatFn {
    let ns = ns.clone();
    Arc::new(move |old| ns.compatibility(old))
}

pub(crate) fn incompatible(
    state: &str,
    role: &'static str,
    previous: &SerializerSnapshot,
    new: &SerializerSnapshot,
    compat: Compatibility,
) -> Error {
    let reason = match compat {
        Compatibility::Incompatible(r) => r,
        Compatibility::CompatibleAfterMigration => {
            format!("{role} serializers can be reconfigured but never migrated")
        }
        _ => String::new(),
    };
    Error::IncompatibleSerializer {
        state: state.to_string(),
        role,
        previous: Box::new(previous.clone()),
        new: Box::new(new.clone()),
        reason,
    }
}

/// Compatibility of a nested serializer of a composite state snapshot (list element, map key or value).
pub(super) fn nested_compat(
    old: &SerializerSnapshot,
    expected_id: &str,
    index: usize,
    check: impl Fn(&SerializerSnapshot) -> Compatibility,
) -> Compatibility {
    if old.identifier != expected_id {
        return Compatibility::Incompatible(format!(
            "expected {expected_id}, found {}",
            old.identifier
        ));
    }
    match old.nested.get(index) {
        Some(n) => check(n),
        None => Compatibility::Incompatible(format!(
            "{} has no nested serializer {index}",
            old.identifier
        )),
    }
}

pub(super) fn migrate_whole<S: TypeSerializer>(
    name: &str,
    ser: &S,
    prev: &SerializerSnapshot,
    bytes: &[u8],
) -> Result<Vec<u8>> {
    let mut input = bytes;
    let v = ser
        .deserialize_previous(prev, &mut input)
        .map_err(|e| Error::serializer(name, e))?;
    let mut out = Vec::with_capacity(bytes.len());
    ser.serialize(&v, &mut out)
        .map_err(|e| Error::serializer(name, e))?;
    Ok(out)
}

pub(super) fn migrate_list<S: TypeSerializer>(
    name: &str,
    ser: &S,
    prev: &SerializerSnapshot,
    bytes: &[u8],
) -> Result<Vec<u8>> {
    let mut input = bytes;
    let mut out = Vec::with_capacity(bytes.len());
    while !input.is_empty() {
        let v = ser
            .deserialize_previous(prev, &mut input)
            .map_err(|e| Error::serializer(name, e))?;
        if !out.is_empty() {
            out.push(LIST_DELIMITER);
        }
        ser.serialize(&v, &mut out)
            .map_err(|e| Error::serializer(name, e))?;
        if !input.is_empty() {
            input = &input[1..];
        }
    }
    Ok(out)
}

pub(super) fn migrate_map_value<S: TypeSerializer>(
    name: &str,
    ser: &S,
    prev: &SerializerSnapshot,
    bytes: &[u8],
) -> Result<Vec<u8>> {
    match bytes.split_first() {
        Some((&crate::layout::MAP_VALUE_PRESENT, rest)) => {
            let mut out = vec![crate::layout::MAP_VALUE_PRESENT];
            let mut input = rest;
            let v = ser
                .deserialize_previous(prev, &mut input)
                .map_err(|e| Error::serializer(name, e))?;
            ser.serialize(&v, &mut out)
                .map_err(|e| Error::serializer(name, e))?;
            Ok(out)
        }
        _ => Ok(bytes.to_vec()),
    }
}

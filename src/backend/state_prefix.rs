//! The LSM backend's prefix extractor: the `state id | KG | K | NS` part of every engine key.
//!
//! With it the engine's SST filters record one prefix per (state, key, namespace), so a point read of any
//! state, and a scan of one map (`MapState` keys, values, entries, emptiness), skip every file that holds
//! nothing of that key and namespace. It maps a state's keys only when the key and namespace serializers
//! both write a fixed number of bytes (then the prefix of every key of the state has one width, set when the
//! state is registered and never changed); keys of other states are out of its domain, and a file holding
//! any of them records no prefixes at all (the engine then reads it as if it had no prefix filter).

use std::sync::atomic::{AtomicU32, Ordering};

use crate::keygroup::key_group_prefix_len;
use crate::meta::{StateKind, StateMetaInfo};
use crate::serializer::dynamic::is_fixed_length;
use crate::serializer::SerializerSnapshot;
use keyed_state_lsm::PrefixExtractor;

/// Bytes of the state id in front of every engine key.
const STATE_ID_LEN: usize = 2;
/// Bytes of a timer's timestamp (`KG | TS | K | NS`).
const TIMER_TS_LEN: usize = 8;

/// See the module documentation.
pub(crate) struct StateKeyPrefix {
    name: String,
    /// `STATE_ID_LEN + KG` bytes.
    head: usize,
    /// Bytes of every serialized key.
    key_len: usize,
    /// Prefix width per state id; 0 = not mapped (yet).
    widths: Box<[AtomicU32]>,
}

impl StateKeyPrefix {
    /// The extractor for a backend of `max_parallelism` whose key serializer is `key_serializer`, or None
    /// when serialized keys vary in length.
    pub(crate) fn new(max_parallelism: u32, key_serializer: &SerializerSnapshot) -> Option<Self> {
        let Some(Some(key_len)) = is_fixed_length(key_serializer) else {
            return None;
        };
        let kg = key_group_prefix_len(max_parallelism);
        Some(StateKeyPrefix {
            // The name pins everything a width depends on besides the state's own namespace serializer.
            name: format!("keyed-state.state-key-prefix/v1/kg{kg}/key{key_len}"),
            head: STATE_ID_LEN + kg,
            key_len,
            widths: (0..=usize::from(u16::MAX))
                .map(|_| AtomicU32::new(0))
                .collect(),
        })
    }

    /// The prefix width a state with `meta` gets, if its keys have one.
    pub(crate) fn width_for(&self, meta: &StateMetaInfo) -> Option<usize> {
        let Some(Some(ns_len)) = is_fixed_length(&meta.namespace_serializer) else {
            return None;
        };
        let ts = if meta.kind == StateKind::Timers {
            TIMER_TS_LEN
        } else {
            0
        };
        Some(self.head + ts + self.key_len + ns_len)
    }

    /// Maps the keys of state `id` (first registration wins: a width, once given, never changes — the
    /// files written under it rely on it; the backend refuses a re-registration that would change it).
    pub(crate) fn register(&self, id: usize, meta: &StateMetaInfo) {
        let (Some(slot), Some(width)) = (self.widths.get(id), self.width_for(meta)) else {
            return;
        };
        if let Ok(w) = u32::try_from(width) {
            let _ = slot.compare_exchange(0, w, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// The prefix width of state `id`'s keys, if mapped.
    pub(crate) fn width(&self, id: usize) -> Option<usize> {
        let w = self.widths.get(id)?.load(Ordering::Acquire);
        (w != 0).then_some(w as usize)
    }
}

impl PrefixExtractor for StateKeyPrefix {
    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn prefix_len(&self, user_key: &[u8]) -> Option<usize> {
        let id = u16::from_be_bytes([*user_key.first()?, *user_key.get(1)?]);
        let w = self.widths.get(usize::from(id))?.load(Ordering::Acquire) as usize;
        (w != 0 && user_key.len() >= w).then_some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serializer::{
        LongSerializer, StringSerializer, TypeSerializer, VoidNamespaceSerializer,
    };

    fn meta(kind: StateKind, ns: SerializerSnapshot) -> StateMetaInfo {
        StateMetaInfo {
            name: "s".into(),
            kind,
            namespace_serializer: ns,
            value_serializer: LongSerializer.snapshot(),
            ttl: None,
        }
    }

    #[test]
    fn widths_cover_state_id_key_group_key_and_namespace() {
        let x = StateKeyPrefix::new(128, &LongSerializer.snapshot()).unwrap();
        x.register(0, &meta(StateKind::Map, VoidNamespaceSerializer.snapshot()));
        x.register(1, &meta(StateKind::Value, LongSerializer.snapshot()));
        x.register(
            2,
            &meta(StateKind::Timers, VoidNamespaceSerializer.snapshot()),
        );
        x.register(3, &meta(StateKind::Value, StringSerializer.snapshot()));
        // 2 (state) + 1 (KG at max parallelism 128) + 8 (long key) + 1 (void namespace byte).
        assert_eq!(x.width(0), Some(12));
        assert_eq!(x.width(1), Some(19));
        assert_eq!(x.width(2), Some(20));
        assert_eq!(x.width(3), None);
        let key = [
            &[0u8, 0][..],
            &[5],
            &7i64.to_be_bytes(),
            &[0],
            &3i64.to_be_bytes(),
        ]
        .concat();
        assert_eq!(x.prefix_len(&key), Some(12));
        assert_eq!(x.prefix_len(&key[..11]), None);
        assert_eq!(x.prefix_len(&[0, 3, 1, 2]), None);
        // A state's width never changes.
        x.register(0, &meta(StateKind::Map, LongSerializer.snapshot()));
        assert_eq!(x.width(0), Some(12));
    }

    #[test]
    fn variable_length_keys_have_no_extractor() {
        assert!(StateKeyPrefix::new(128, &StringSerializer.snapshot()).is_none());
    }
}

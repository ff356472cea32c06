//! Flink's `KeyedBackendSerializationProxy` (the header of every keyed-state stream and of the RocksDB
//! meta-data file): key serializer snapshot and one `StateMetaInfoSnapshot` per state, mapped onto our
//! [`StateMetaInfo`].

use super::input::DataInput;
use super::typeser::{read_snapshot, SnapshotParse, SNAPSHOT_PROXY_VERSION};
use super::FlinkError;
use keyed_state::meta::{StateKind, StateMetaInfo};
use keyed_state::serializer::dynamic::TIMER_SNAPSHOT_ID;
use keyed_state::serializer::{SerializerSnapshot, VOID_NAMESPACE_SNAPSHOT_ID};

/// The proxy version Flink writes from 1.14 to 2.3 (`KeyedBackendSerializationProxy.VERSION`), the only one read.
pub const PROXY_VERSION: i32 = 6;
/// `StateMetaInfoSnapshot` option key naming the state kind.
pub const KEYED_STATE_TYPE: &str = "KEYED_STATE_TYPE";
/// Serializer key of the namespace serializer.
pub const NAMESPACE_SERIALIZER: &str = "NAMESPACE_SERIALIZER";
/// Serializer key of the value (state, or priority-queue element) serializer.
pub const VALUE_SERIALIZER: &str = "VALUE_SERIALIZER";

/// Flink's `BackendStateType`, by ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendStateType {
    /// 0: keyed value, list, map, reducing, aggregating state.
    KeyValue,
    /// 1: operator state.
    Operator,
    /// 2: broadcast state.
    Broadcast,
    /// 3: timers and other priority queues.
    PriorityQueue,
    /// 4: async keyed state (`KEY_VALUE_V2`).
    KeyValueV2,
}

impl BackendStateType {
    fn from_ordinal(o: i32) -> Option<Self> {
        Some(match o {
            0 => BackendStateType::KeyValue,
            1 => BackendStateType::Operator,
            2 => BackendStateType::Broadcast,
            3 => BackendStateType::PriorityQueue,
            4 => BackendStateType::KeyValueV2,
            _ => return None,
        })
    }

    /// The ordinal written.
    pub fn ordinal(self) -> i32 {
        match self {
            BackendStateType::KeyValue => 0,
            BackendStateType::Operator => 1,
            BackendStateType::Broadcast => 2,
            BackendStateType::PriorityQueue => 3,
            BackendStateType::KeyValueV2 => 4,
        }
    }
}

/// A serializer snapshot as read from Flink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlinkSnapshot {
    /// The snapshot, mapped onto ours; for raw snapshots the class, version and body bytes.
    pub snapshot: SerializerSnapshot,
    /// `Some(class)` when the snapshot (or a class nested in it) has no known layout and the whole
    /// snapshot is kept as raw bytes.
    pub raw_because: Option<String>,
}

/// One `StateMetaInfoSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlinkStateMeta {
    /// The state name.
    pub name: String,
    /// The backend state type.
    pub backend_type: BackendStateType,
    /// Options, in file order.
    pub options: Vec<(String, String)>,
    /// Serializer snapshots by key, in file order.
    pub serializers: Vec<(String, FlinkSnapshot)>,
}

impl FlinkStateMeta {
    /// The serializer under `key`.
    pub fn serializer(&self, key: &str) -> Option<&FlinkSnapshot> {
        self.serializers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| s)
    }

    /// The option under `key`.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Our meta information for this state. Timers (priority queues of `TimerSerializer` elements) become
    /// [`StateKind::Timers`] with the timer's namespace serializer; TTL is kept in the values (the TTL
    /// serializer stays the value serializer, `ttl` is `None`: Flink's files do not record the TTL
    /// configuration).
    pub fn to_meta(&self, file: &str) -> Result<StateMetaInfo, FlinkError> {
        let unsupported = |detail: String| FlinkError::UnsupportedState {
            file: file.to_string(),
            state: self.name.clone(),
            detail,
        };
        let value = self
            .serializer(VALUE_SERIALIZER)
            .ok_or_else(|| unsupported("no VALUE_SERIALIZER".into()))?
            .snapshot
            .clone();
        match self.backend_type {
            BackendStateType::KeyValue | BackendStateType::KeyValueV2 => {
                let kind = match self.option(KEYED_STATE_TYPE) {
                    Some("VALUE") => StateKind::Value,
                    Some("LIST") => StateKind::List,
                    Some("MAP") => StateKind::Map,
                    Some("REDUCING") => StateKind::Reducing,
                    Some("AGGREGATING") => StateKind::Aggregating,
                    other => {
                        return Err(unsupported(format!(
                            "keyed state type {} is not supported",
                            other.unwrap_or("(missing)")
                        )))
                    }
                };
                let namespace = self
                    .serializer(NAMESPACE_SERIALIZER)
                    .ok_or_else(|| unsupported("no NAMESPACE_SERIALIZER".into()))?
                    .snapshot
                    .clone();
                Ok(StateMetaInfo {
                    name: self.name.clone(),
                    kind,
                    namespace_serializer: namespace,
                    value_serializer: value,
                    ttl: None,
                })
            }
            BackendStateType::PriorityQueue => {
                let namespace = if value.identifier == TIMER_SNAPSHOT_ID && value.nested.len() == 2
                {
                    value.nested[1].clone()
                } else {
                    SerializerSnapshot::simple(VOID_NAMESPACE_SNAPSHOT_ID, 3)
                };
                Ok(StateMetaInfo {
                    name: self.name.clone(),
                    kind: StateKind::Timers,
                    namespace_serializer: namespace,
                    value_serializer: value,
                    ttl: None,
                })
            }
            BackendStateType::Operator | BackendStateType::Broadcast => Err(unsupported(format!(
                "{:?} state in a keyed-state stream",
                self.backend_type
            ))),
        }
    }
}

/// A decoded serialization proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedProxy {
    /// The proxy version (6).
    pub version: i32,
    /// Key groups are Snappy-compressed.
    pub compressed: bool,
    /// The key serializer.
    pub key_serializer: FlinkSnapshot,
    /// Every state, by Flink's `kvStateId`.
    pub states: Vec<FlinkStateMeta>,
    /// The byte offset where the proxy ends.
    pub end: usize,
}

impl KeyedProxy {
    /// Classes kept raw, with the place they appear (`key`, or the state name).
    pub fn raw_serializers(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(c) = &self.key_serializer.raw_because {
            out.push(("<key>".to_string(), c.clone()));
        }
        for s in &self.states {
            for (_, f) in &s.serializers {
                if let Some(c) = &f.raw_because {
                    out.push((s.name.clone(), c.clone()));
                }
            }
        }
        out
    }
}

/// What may follow a snapshot, for finding the end of one that is kept raw.
#[derive(Clone, Copy)]
enum Next {
    /// `i16 numStates` then the first state (the key serializer).
    StateCount,
    /// Another `UTF key | snapshot` of the same state.
    SerializerEntry,
    /// The next state's meta info.
    StateStart,
    /// The end of the proxy at this offset.
    End(usize),
}

fn looks_like_serializer_entry(d: &DataInput<'_>, q: usize) -> bool {
    let mut c = d.clone();
    c.seek(q);
    let Ok(key) = c.utf("serializer key") else {
        return false;
    };
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
        return false;
    }
    if c.i32("snapshot proxy version").ok() != Some(SNAPSHOT_PROXY_VERSION) {
        return false;
    }
    matches!(c.utf("serializer class"), Ok(class) if class.contains('.'))
}

fn looks_like_state_start(d: &DataInput<'_>, q: usize) -> bool {
    let mut c = d.clone();
    c.seek(q);
    if c.utf("state name").is_err() {
        return false;
    }
    if !matches!(c.i32("type"), Ok(0..=4)) {
        return false;
    }
    let Ok(n) = c.i32("options") else {
        return false;
    };
    if !(0..=16).contains(&n) {
        return false;
    }
    for _ in 0..n {
        if c.utf("option key").is_err() || c.utf("option value").is_err() {
            return false;
        }
    }
    if !matches!(c.i32("serializers"), Ok(1..=16)) {
        return false;
    }
    looks_like_serializer_entry(&c, c.pos())
}

fn anchor_matches(d: &DataInput<'_>, q: usize, next: Next) -> bool {
    match next {
        Next::End(end) => q == end,
        Next::SerializerEntry => looks_like_serializer_entry(d, q),
        Next::StateStart => looks_like_state_start(d, q),
        Next::StateCount => {
            let mut c = d.clone();
            c.seek(q);
            match c.u16("number of states") {
                Ok(0) => false,
                Ok(n) if n <= i16::MAX as u16 => looks_like_state_start(&c, q + 2),
                _ => false,
            }
        }
    }
}

/// Reads a top-level snapshot (`i32 2 | UTF class | i32 version | body`); an unknown class is kept raw up
/// to the first offset where what must follow (`next`) matches.
fn top_level(d: &mut DataInput<'_>, next: Next, limit: usize) -> Result<FlinkSnapshot, FlinkError> {
    let at = d.pos();
    let v = d.i32("serializer snapshot proxy version")?;
    if v != SNAPSHOT_PROXY_VERSION {
        return Err(d.malformed(
            at,
            "serializer snapshot",
            format!("snapshot proxy version {v} (only 2 is supported)"),
        ));
    }
    let start = d.pos();
    match read_snapshot(d) {
        Ok(snapshot) => Ok(FlinkSnapshot {
            snapshot,
            raw_because: None,
        }),
        Err(SnapshotParse::Bad(e)) => Err(e),
        Err(SnapshotParse::Unknown { class }) => {
            d.seek(start);
            let outer = d.utf("serializer snapshot class")?;
            let version = d.i32("serializer snapshot version")?;
            let body_start = d.pos();
            let limit = limit.min(d.data().len());
            let end = (body_start..=limit)
                .find(|&q| anchor_matches(d, q, next))
                .ok_or_else(|| {
                    d.malformed(
                        start,
                        "serializer snapshot",
                        format!(
                            "cannot find the end of the snapshot of {outer} (its class {class} has no known layout)"
                        ),
                    )
                })?;
            let body = d.data()[body_start..end].to_vec();
            d.seek(end);
            Ok(FlinkSnapshot {
                snapshot: SerializerSnapshot {
                    identifier: outer,
                    version: version as u32,
                    config: body,
                    nested: Vec::new(),
                },
                raw_because: Some(class),
            })
        }
    }
}

/// Reads the proxy at the start of `data`. `header_end`, when known (the first key-group offset), is where
/// the proxy must end; it lets a raw snapshot at the very end be delimited.
pub fn read_proxy(
    data: &[u8],
    file: &str,
    header_end: Option<usize>,
) -> Result<KeyedProxy, FlinkError> {
    let mut d = DataInput::new(data, file);
    let version = d.i32("serialization proxy version")?;
    if version != PROXY_VERSION {
        return Err(FlinkError::UnsupportedProxyVersion {
            at: keyed_state::Location::at(file, 0),
            version,
        });
    }
    let compressed = d.bool("key-group compression flag")?;
    let limit = header_end.unwrap_or(data.len());
    let key_serializer = top_level(&mut d, Next::StateCount, limit)?;
    let at = d.pos();
    let n = d.u16("number of states")?;
    if n > i16::MAX as u16 {
        return Err(d.malformed(at, "number of states", format!("{}", n as i16)));
    }
    let mut states = Vec::with_capacity(n as usize);
    for i in 0..n {
        let name = d.utf("state name")?;
        let at = d.pos();
        let ordinal = d.i32("backend state type")?;
        let backend_type = BackendStateType::from_ordinal(ordinal)
            .ok_or_else(|| d.malformed(at, "backend state type", format!("ordinal {ordinal}")))?;
        let n_opt = d.count("number of options", 4)?;
        let mut options = Vec::with_capacity(n_opt);
        for _ in 0..n_opt {
            options.push((d.utf("option key")?, d.utf("option value")?));
        }
        let n_ser = d.count("number of serializers", 8)?;
        let mut serializers = Vec::with_capacity(n_ser);
        for j in 0..n_ser {
            let key = d.utf("serializer key")?;
            let next = if j + 1 < n_ser {
                Next::SerializerEntry
            } else if i + 1 < n {
                Next::StateStart
            } else {
                match header_end {
                    Some(e) => Next::End(e),
                    None => Next::End(data.len()),
                }
            };
            serializers.push((key, top_level(&mut d, next, limit)?));
        }
        states.push(FlinkStateMeta {
            name,
            backend_type,
            options,
            serializers,
        });
    }
    if let Some(e) = header_end {
        if d.pos() != e {
            return Err(d.malformed(
                d.pos(),
                "serialization proxy",
                format!(
                    "ends at byte {}, but the first key group starts at {e}",
                    d.pos()
                ),
            ));
        }
    }
    Ok(KeyedProxy {
        version,
        compressed,
        key_serializer,
        states,
        end: d.pos(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::encode_modified_utf8;
    use crate::typeser::write_top_level_snapshot;
    use keyed_state::serializer::{LIST_SNAPSHOT_ID, LONG_SNAPSHOT_ID};

    fn utf(out: &mut Vec<u8>, s: &str) {
        let b = encode_modified_utf8(s);
        out.extend_from_slice(&(b.len() as u16).to_be_bytes());
        out.extend_from_slice(&b);
    }

    fn pojo() -> SerializerSnapshot {
        SerializerSnapshot {
            identifier: "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot".into(),
            version: 2,
            // A body that itself holds a known class name, as a POJO snapshot's field serializers do.
            config: {
                let mut b = vec![0, 0, 0, 1];
                utf(&mut b, LONG_SNAPSHOT_ID);
                b.extend_from_slice(&3i32.to_be_bytes());
                b
            },
            nested: vec![],
        }
    }

    /// A proxy with two value states; `value_of(i)` is the value serializer of state i.
    fn proxy_bytes(value_of: &dyn Fn(usize) -> SerializerSnapshot) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&6i32.to_be_bytes());
        b.push(0);
        write_top_level_snapshot(&SerializerSnapshot::simple(LONG_SNAPSHOT_ID, 3), &mut b);
        b.extend_from_slice(&2u16.to_be_bytes());
        for i in 0..2 {
            utf(&mut b, &format!("s{i}"));
            b.extend_from_slice(&0i32.to_be_bytes());
            b.extend_from_slice(&1i32.to_be_bytes());
            utf(&mut b, KEYED_STATE_TYPE);
            utf(&mut b, "VALUE");
            b.extend_from_slice(&2i32.to_be_bytes());
            utf(&mut b, VALUE_SERIALIZER);
            write_top_level_snapshot(&value_of(i), &mut b);
            utf(&mut b, NAMESPACE_SERIALIZER);
            write_top_level_snapshot(
                &SerializerSnapshot::simple(VOID_NAMESPACE_SNAPSHOT_ID, 3),
                &mut b,
            );
        }
        b
    }

    #[test]
    fn unknown_serializers_are_kept_raw_with_exact_bounds() {
        let list_of_pojo = SerializerSnapshot::composite(LIST_SNAPSHOT_ID, 3, vec![pojo()]);
        let b = proxy_bytes(&|i| if i == 0 { pojo() } else { list_of_pojo.clone() });
        let p = read_proxy(&b, "t", Some(b.len())).unwrap();
        assert_eq!(p.end, b.len());
        let s0 = p.states[0].serializer(VALUE_SERIALIZER).unwrap();
        assert_eq!(s0.snapshot, pojo());
        assert!(s0.raw_because.is_some());
        // The list is known, its element is not: the whole list snapshot is raw, ending where it ends.
        let s1 = p.states[1].serializer(VALUE_SERIALIZER).unwrap();
        assert_eq!(s1.snapshot.identifier, LIST_SNAPSHOT_ID);
        assert!(s1.snapshot.nested.is_empty());
        assert_eq!(p.raw_serializers().len(), 2);
        assert_eq!(
            p.states[1]
                .serializer(NAMESPACE_SERIALIZER)
                .unwrap()
                .snapshot
                .identifier,
            VOID_NAMESPACE_SNAPSHOT_ID
        );
        for cut in 0..b.len() {
            assert!(read_proxy(&b[..cut], "t", None).is_err() || cut > b.len() - 8);
        }
    }

    #[test]
    fn known_proxy_maps_to_our_meta() {
        let b = proxy_bytes(&|_| SerializerSnapshot::simple(LONG_SNAPSHOT_ID, 3));
        let p = read_proxy(&b, "t", None).unwrap();
        assert!(p.raw_serializers().is_empty());
        let m = p.states[1].to_meta("t").unwrap();
        assert_eq!((m.name.as_str(), m.kind), ("s1", StateKind::Value));
        assert_eq!(
            m.value_serializer,
            SerializerSnapshot::simple(LONG_SNAPSHOT_ID, 3)
        );
        let err = read_proxy(&b, "t", Some(b.len() + 1)).unwrap_err();
        assert!(err.to_string().contains("first key group"), "{err}");
    }
}

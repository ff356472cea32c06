//! State descriptors (what to register) and the typed handles that registration returns.

use std::sync::Arc;

use crate::backend::StateId;
use crate::meta::{StateKind, StateMetaInfo, TtlConfig};
use crate::serializer::{SerializerSnapshot, TypeSerializer, VoidNamespaceSerializer};

pub use crate::serializer::{COMPOSITE_SNAPSHOT_VERSION, LIST_SNAPSHOT_ID, MAP_SNAPSHOT_ID};

/// Combines two values of a reducing state (Flink's `ReduceFunction`).
pub type ReduceFn<V> = Arc<dyn Fn(&V, &V) -> V + Send + Sync>;

/// An aggregation with an accumulator (Flink's `AggregateFunction`).
pub trait AggregateFunction: Send + Sync + 'static {
    /// Input values.
    type In;
    /// The accumulator, stored in the state.
    type Acc;
    /// The result returned by `get`.
    type Out;
    /// A fresh accumulator.
    fn create_accumulator(&self) -> Self::Acc;
    /// Adds one input to the accumulator.
    fn add(&self, value: &Self::In, acc: Self::Acc) -> Self::Acc;
    /// The result for an accumulator.
    fn get_result(&self, acc: &Self::Acc) -> Self::Out;
    /// Merges two accumulators (namespace merging).
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

/// Describes a `ValueState<V>` in namespaces of `N`.
pub struct ValueStateDescriptor<V: TypeSerializer, N: TypeSerializer = VoidNamespaceSerializer> {
    pub(crate) name: String,
    pub(crate) ttl: Option<TtlConfig>,
    pub(crate) serializer: V,
    pub(crate) namespace: N,
    pub(crate) default: Option<V::Value>,
}

impl<V: TypeSerializer> ValueStateDescriptor<V> {
    /// A value state without namespaces.
    pub fn new(name: impl Into<String>, serializer: V) -> Self {
        ValueStateDescriptor {
            name: name.into(),
            ttl: None,
            serializer,
            namespace: VoidNamespaceSerializer,
            default: None,
        }
    }
}

impl<V: TypeSerializer, N: TypeSerializer> ValueStateDescriptor<V, N> {
    /// Gives the state a time to live (Flink's `StateDescriptor.enableTimeToLive`).
    pub fn with_ttl(mut self, ttl: TtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The same state in namespaces serialized by `namespace`.
    pub fn with_namespace<N2: TypeSerializer>(self, namespace: N2) -> ValueStateDescriptor<V, N2> {
        ValueStateDescriptor {
            name: self.name,
            ttl: self.ttl,
            serializer: self.serializer,
            namespace,
            default: self.default,
        }
    }

    /// The value returned when the state holds none (copied on each access).
    pub fn with_default(mut self, default: V::Value) -> Self {
        self.default = Some(default);
        self
    }
}

/// Describes a `ListState<E>`.
pub struct ListStateDescriptor<E: TypeSerializer, N: TypeSerializer = VoidNamespaceSerializer> {
    pub(crate) name: String,
    pub(crate) ttl: Option<TtlConfig>,
    pub(crate) element: E,
    pub(crate) namespace: N,
}

impl<E: TypeSerializer> ListStateDescriptor<E> {
    /// A list state without namespaces.
    pub fn new(name: impl Into<String>, element: E) -> Self {
        ListStateDescriptor {
            name: name.into(),
            ttl: None,
            element,
            namespace: VoidNamespaceSerializer,
        }
    }
}

impl<E: TypeSerializer, N: TypeSerializer> ListStateDescriptor<E, N> {
    /// Gives the state a time to live (Flink's `StateDescriptor.enableTimeToLive`).
    pub fn with_ttl(mut self, ttl: TtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The same state in namespaces serialized by `namespace`.
    pub fn with_namespace<N2: TypeSerializer>(self, namespace: N2) -> ListStateDescriptor<E, N2> {
        ListStateDescriptor {
            name: self.name,
            ttl: self.ttl,
            element: self.element,
            namespace,
        }
    }
}

/// Describes a `MapState<UK, UV>`.
pub struct MapStateDescriptor<
    UK: TypeSerializer,
    UV: TypeSerializer,
    N: TypeSerializer = VoidNamespaceSerializer,
> {
    pub(crate) name: String,
    pub(crate) ttl: Option<TtlConfig>,
    pub(crate) user_key: UK,
    pub(crate) user_value: UV,
    pub(crate) namespace: N,
}

impl<UK: TypeSerializer, UV: TypeSerializer> MapStateDescriptor<UK, UV> {
    /// A map state without namespaces.
    pub fn new(name: impl Into<String>, user_key: UK, user_value: UV) -> Self {
        MapStateDescriptor {
            name: name.into(),
            ttl: None,
            user_key,
            user_value,
            namespace: VoidNamespaceSerializer,
        }
    }
}

impl<UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer> MapStateDescriptor<UK, UV, N> {
    /// Gives the state a time to live (Flink's `StateDescriptor.enableTimeToLive`).
    pub fn with_ttl(mut self, ttl: TtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The same state in namespaces serialized by `namespace`.
    pub fn with_namespace<N2: TypeSerializer>(
        self,
        namespace: N2,
    ) -> MapStateDescriptor<UK, UV, N2> {
        MapStateDescriptor {
            name: self.name,
            ttl: self.ttl,
            user_key: self.user_key,
            user_value: self.user_value,
            namespace,
        }
    }
}

/// How the adds of a reducing or aggregating state may be stored as merge operands instead of being read,
/// folded and written (`design/merge-operands.md`). Backends without merge operands (heap, RocksDB) and
/// states with a time to live keep reading, folding and writing; the results are the same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperandFolding {
    /// Operands are folded only onto the value below them, oldest first: on a read, and in compactions
    /// that reach that value or the last level. Exact for any reduce function; operands of keys that are
    /// written much and read little pile up until such a compaction.
    InOrder,
    /// The function is associative (`f(f(a, b), c) == f(a, f(b, c))`), so flushes and compactions may also
    /// fold adjacent operands into one without the value below them.
    Associative,
}

/// Describes a `ReducingState<V>`.
pub struct ReducingStateDescriptor<V: TypeSerializer, N: TypeSerializer = VoidNamespaceSerializer> {
    pub(crate) name: String,
    pub(crate) ttl: Option<TtlConfig>,
    pub(crate) serializer: V,
    pub(crate) namespace: N,
    pub(crate) reduce: ReduceFn<V::Value>,
    pub(crate) operands: Option<OperandFolding>,
}

impl<V: TypeSerializer> ReducingStateDescriptor<V> {
    /// A reducing state without namespaces, folding added values with `reduce`.
    pub fn new(
        name: impl Into<String>,
        serializer: V,
        reduce: impl Fn(&V::Value, &V::Value) -> V::Value + Send + Sync + 'static,
    ) -> Self {
        ReducingStateDescriptor {
            name: name.into(),
            ttl: None,
            serializer,
            namespace: VoidNamespaceSerializer,
            reduce: Arc::new(reduce),
            operands: None,
        }
    }
}

impl<V: TypeSerializer, N: TypeSerializer> ReducingStateDescriptor<V, N> {
    /// Gives the state a time to live (Flink's `StateDescriptor.enableTimeToLive`).
    pub fn with_ttl(mut self, ttl: TtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Stores adds as merge operands where the backend can (the LSM backend): an add then writes the added
    /// value without reading the state, and reads and compactions fold the operands with the reduce
    /// function, oldest first. The reduce function then also runs in the engine's background threads.
    /// No effect on a state with a time to live: its timestamps are decided at each add.
    pub fn with_merge_operands(mut self, folding: OperandFolding) -> Self {
        self.operands = Some(folding);
        self
    }

    /// The same state in namespaces serialized by `namespace`.
    pub fn with_namespace<N2: TypeSerializer>(
        self,
        namespace: N2,
    ) -> ReducingStateDescriptor<V, N2> {
        ReducingStateDescriptor {
            name: self.name,
            ttl: self.ttl,
            serializer: self.serializer,
            namespace,
            reduce: self.reduce,
            operands: self.operands,
        }
    }
}

/// Describes an `AggregatingState<IN, OUT>` with accumulators serialized by `A`.
pub struct AggregatingStateDescriptor<F, A, N = VoidNamespaceSerializer>
where
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
    N: TypeSerializer,
{
    pub(crate) name: String,
    pub(crate) ttl: Option<TtlConfig>,
    pub(crate) function: F,
    pub(crate) accumulator: A,
    pub(crate) namespace: N,
    pub(crate) operands: Option<OperandFolding>,
}

impl<F, A> AggregatingStateDescriptor<F, A>
where
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
{
    /// An aggregating state without namespaces.
    pub fn new(name: impl Into<String>, function: F, accumulator: A) -> Self {
        AggregatingStateDescriptor {
            name: name.into(),
            ttl: None,
            function,
            accumulator,
            namespace: VoidNamespaceSerializer,
            operands: None,
        }
    }
}

impl<F, A, N> AggregatingStateDescriptor<F, A, N>
where
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
    N: TypeSerializer,
{
    /// Gives the state a time to live (Flink's `StateDescriptor.enableTimeToLive`).
    pub fn with_ttl(mut self, ttl: TtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Stores adds as merge operands where the backend can (the LSM backend): an add writes the accumulator
    /// of the one input, `add(input, create_accumulator())`, without reading the state, and reads and
    /// compactions fold the operands with [`AggregateFunction::merge`], oldest first. The result equals the
    /// read-modify-write path's when `merge(acc, add(x, create_accumulator())) == add(x, acc)`, as for the
    /// usual sums, counts, minima and averages; [`OperandFolding::Associative`] also requires `merge` to be
    /// associative. The functions then also run in the engine's background threads. No effect on a state
    /// with a time to live: its timestamps are decided at each add.
    pub fn with_merge_operands(mut self, folding: OperandFolding) -> Self {
        self.operands = Some(folding);
        self
    }

    /// The same state in namespaces serialized by `namespace`.
    pub fn with_namespace<N2: TypeSerializer>(
        self,
        namespace: N2,
    ) -> AggregatingStateDescriptor<F, A, N2> {
        AggregatingStateDescriptor {
            name: self.name,
            ttl: self.ttl,
            function: self.function,
            accumulator: self.accumulator,
            namespace,
            operands: self.operands,
        }
    }
}

/// What every handle knows: id, name, namespace serializer (internal).
#[doc(hidden)]
pub struct HandleCore<N> {
    pub(crate) id: StateId,
    pub(crate) name: Arc<str>,
    pub(crate) namespace: Arc<N>,
    /// Whether entry keys carry length bytes (key and namespace serializers both variable-length).
    pub(crate) ambiguous: bool,
    /// The state's TTL, if it has one.
    pub(crate) ttl: Option<TtlParams>,
}

/// What accessors need of a state's TTL configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtlParams {
    /// Time to live in milliseconds.
    pub(crate) ttl_millis: u64,
    /// Reads refresh the timestamp (`OnReadAndWrite`).
    pub(crate) update_on_read: bool,
    /// An expired value still stored is returned once (`ReturnExpiredIfNotCleanedUp`).
    pub(crate) return_expired: bool,
    /// Entries judged by the incremental cleanup per access (0: off).
    pub(crate) cleanup_per_access: u32,
}

impl TtlParams {
    pub(crate) fn of(config: &TtlConfig) -> Self {
        TtlParams {
            ttl_millis: config.ttl_millis,
            update_on_read: config.updates_on_read(),
            return_expired: config.returns_expired(),
            cleanup_per_access: config.cleanup_incremental.map_or(0, |c| c.0),
        }
    }

    /// Whether a value last accessed at `ts` has expired at `now`.
    #[inline]
    pub(crate) fn expired(&self, ts: i64, now: i64) -> bool {
        crate::ttl::is_expired(ts, self.ttl_millis, now)
    }
}

impl<N> Clone for HandleCore<N> {
    fn clone(&self) -> Self {
        HandleCore {
            id: self.id,
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            ambiguous: self.ambiguous,
            ttl: self.ttl,
        }
    }
}

/// A registered value state. Cheap to clone.
pub struct ValueState<V: TypeSerializer, N: TypeSerializer = VoidNamespaceSerializer> {
    pub(crate) core: HandleCore<N>,
    pub(crate) serializer: Arc<V>,
    pub(crate) default: Option<Arc<V::Value>>,
}

/// A registered list state. Cheap to clone.
pub struct ListState<E: TypeSerializer, N: TypeSerializer = VoidNamespaceSerializer> {
    pub(crate) core: HandleCore<N>,
    pub(crate) element: Arc<E>,
}

/// A registered map state. Cheap to clone.
pub struct MapState<
    UK: TypeSerializer,
    UV: TypeSerializer,
    N: TypeSerializer = VoidNamespaceSerializer,
> {
    pub(crate) core: HandleCore<N>,
    pub(crate) user_key: Arc<UK>,
    pub(crate) user_value: Arc<UV>,
}

/// A registered reducing state. Cheap to clone.
pub struct ReducingState<V: TypeSerializer, N: TypeSerializer = VoidNamespaceSerializer> {
    pub(crate) core: HandleCore<N>,
    pub(crate) serializer: Arc<V>,
    pub(crate) reduce: ReduceFn<V::Value>,
    /// Adds are merge operands (`merge_value`) rather than reads, folds and writes.
    pub(crate) operands: bool,
}

/// A registered aggregating state. Cheap to clone.
pub struct AggregatingState<F, A, N = VoidNamespaceSerializer>
where
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
    N: TypeSerializer,
{
    pub(crate) core: HandleCore<N>,
    pub(crate) function: Arc<F>,
    pub(crate) accumulator: Arc<A>,
    /// Adds are merge operands (`merge_value`) rather than reads, folds and writes.
    pub(crate) operands: bool,
}

impl<V: TypeSerializer, N: TypeSerializer> Clone for ValueState<V, N> {
    fn clone(&self) -> Self {
        ValueState {
            core: self.core.clone(),
            serializer: self.serializer.clone(),
            default: self.default.clone(),
        }
    }
}
impl<E: TypeSerializer, N: TypeSerializer> Clone for ListState<E, N> {
    fn clone(&self) -> Self {
        ListState {
            core: self.core.clone(),
            element: self.element.clone(),
        }
    }
}
impl<UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer> Clone for MapState<UK, UV, N> {
    fn clone(&self) -> Self {
        MapState {
            core: self.core.clone(),
            user_key: self.user_key.clone(),
            user_value: self.user_value.clone(),
        }
    }
}
impl<V: TypeSerializer, N: TypeSerializer> Clone for ReducingState<V, N> {
    fn clone(&self) -> Self {
        ReducingState {
            core: self.core.clone(),
            serializer: self.serializer.clone(),
            reduce: self.reduce.clone(),
            operands: self.operands,
        }
    }
}
impl<F, A, N> Clone for AggregatingState<F, A, N>
where
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
    N: TypeSerializer,
{
    fn clone(&self) -> Self {
        AggregatingState {
            core: self.core.clone(),
            function: self.function.clone(),
            accumulator: self.accumulator.clone(),
            operands: self.operands,
        }
    }
}

/// Anything registered: gives its id, name and namespace serializer (used by key iteration and merging).
pub trait StateHandle {
    /// The namespace serializer type.
    type Namespace: TypeSerializer;
    /// The state's id in its backend.
    fn id(&self) -> StateId;
    /// The state's name.
    fn name(&self) -> &str;
    /// The state's kind.
    fn kind(&self) -> StateKind;
    #[doc(hidden)]
    fn core(&self) -> &HandleCore<Self::Namespace>;
}

macro_rules! impl_handle {
    ($kind:expr, $t:ident < $($g:ident),* >, $n:ident $(where $($bounds:tt)*)?) => {
        impl<$($g),*> StateHandle for $t<$($g),*> $(where $($bounds)*)? {
            type Namespace = $n;
            fn id(&self) -> StateId { self.core.id }
            fn name(&self) -> &str { &self.core.name }
            fn kind(&self) -> StateKind { $kind }
            fn core(&self) -> &HandleCore<$n> { &self.core }
        }
    };
}

impl_handle!(StateKind::Value, ValueState<V, N>, N where V: TypeSerializer, N: TypeSerializer);
impl_handle!(StateKind::List, ListState<E, N>, N where E: TypeSerializer, N: TypeSerializer);
impl_handle!(StateKind::Map, MapState<UK, UV, N>, N where UK: TypeSerializer, UV: TypeSerializer, N: TypeSerializer);
impl_handle!(StateKind::Reducing, ReducingState<V, N>, N where V: TypeSerializer, N: TypeSerializer);
impl_handle!(StateKind::Aggregating, AggregatingState<F, A, N>, N where F: AggregateFunction, A: TypeSerializer<Value = F::Acc>, N: TypeSerializer);

/// The list-state serializer snapshot over an element snapshot (Flink's `ListSerializerSnapshot`).
pub fn list_state_snapshot(element: SerializerSnapshot) -> SerializerSnapshot {
    SerializerSnapshot::composite(LIST_SNAPSHOT_ID, COMPOSITE_SNAPSHOT_VERSION, vec![element])
}

/// The map-state serializer snapshot over user key and value snapshots (Flink's `MapSerializerSnapshot`).
pub fn map_state_snapshot(
    user_key: SerializerSnapshot,
    user_value: SerializerSnapshot,
) -> SerializerSnapshot {
    SerializerSnapshot::composite(
        MAP_SNAPSHOT_ID,
        COMPOSITE_SNAPSHOT_VERSION,
        vec![user_key, user_value],
    )
}

/// Builds the meta information recorded for a state.
pub(crate) fn meta(
    name: &str,
    kind: StateKind,
    namespace: SerializerSnapshot,
    value: SerializerSnapshot,
    ttl: Option<TtlConfig>,
) -> StateMetaInfo {
    StateMetaInfo {
        name: name.to_string(),
        kind,
        namespace_serializer: namespace,
        value_serializer: value,
        ttl,
    }
}

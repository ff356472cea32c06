//! Flink's TTL timelines (Flink's `TtlStateTestBase`) against every backend: TTL 100 ms on
//! a manual clock, with a savepoint and a restore into a fresh backend between the steps (so every timestamp
//! must survive the savepoint), for each state kind's context values.

use std::fmt::Debug;
use std::sync::Arc;

use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{LongSerializer, StringSerializer};
use keyed_state::state::*;
use keyed_state::ttl::ManualClock;
use keyed_state::Error;

use super::{savepoint_of, store_long, Factory};

type Store = KeyedStateStore<LongSerializer>;

/// One state kind under test: how to write the three updates A, B, C and what a read gives after them.
pub trait Ctx: Sized {
    type Out: PartialEq + Debug;
    fn register(s: &mut Store, ttl: StateTtlConfig) -> Self;
    /// Writes update `which` (0 = A, 1 = B, 2 = C) at the current key.
    fn update(&self, s: &mut Store, which: usize);
    fn get(&self, s: &mut Store) -> Self::Out;
    fn empty() -> Self::Out;
    /// The read after A; after A then B (A expired where it is per element); after C once B expired.
    fn expected(which: usize) -> Self::Out;
}

pub struct ValueCtx(ValueState<LongSerializer>);
impl Ctx for ValueCtx {
    type Out = Option<i64>;
    fn register(s: &mut Store, ttl: StateTtlConfig) -> Self {
        ValueCtx(
            s.register_value(ValueStateDescriptor::new("ttl-value", LongSerializer).with_ttl(ttl))
                .unwrap(),
        )
    }
    fn update(&self, s: &mut Store, which: usize) {
        s.value(&self.0)
            .unwrap()
            .update(&[11, 21, 31][which])
            .unwrap();
    }
    fn get(&self, s: &mut Store) -> Self::Out {
        s.value(&self.0).unwrap().get().unwrap()
    }
    fn empty() -> Self::Out {
        None
    }
    fn expected(which: usize) -> Self::Out {
        Some([11, 21, 31][which])
    }
}

pub struct ListCtx(ListState<LongSerializer>);
const LIST_UPDATES: [&[i64]; 3] = [&[5, 7, 10], &[8, 9, 11], &[1, 4]];
impl Ctx for ListCtx {
    type Out = Option<Vec<i64>>;
    fn register(s: &mut Store, ttl: StateTtlConfig) -> Self {
        ListCtx(
            s.register_list(ListStateDescriptor::new("ttl-list", LongSerializer).with_ttl(ttl))
                .unwrap(),
        )
    }
    fn update(&self, s: &mut Store, which: usize) {
        s.list(&self.0)
            .unwrap()
            .add_all(LIST_UPDATES[which])
            .unwrap();
    }
    fn get(&self, s: &mut Store) -> Self::Out {
        s.list(&self.0).unwrap().get().unwrap()
    }
    fn empty() -> Self::Out {
        None
    }
    fn expected(which: usize) -> Self::Out {
        // Per-element TTL: after B, A's elements have expired.
        Some(LIST_UPDATES[which].to_vec())
    }
}

/// A list of variable-length elements (Flink's `TtlNonFixedLenElemListStateTestContext`).
pub struct StringListCtx(ListState<StringSerializer>);
impl Ctx for StringListCtx {
    type Out = Option<Vec<String>>;
    fn register(s: &mut Store, ttl: StateTtlConfig) -> Self {
        StringListCtx(
            s.register_list(ListStateDescriptor::new("ttl-slist", StringSerializer).with_ttl(ttl))
                .unwrap(),
        )
    }
    fn update(&self, s: &mut Store, which: usize) {
        let v: Vec<String> = LIST_UPDATES[which]
            .iter()
            .map(|x| format!("e{x}"))
            .collect();
        s.list(&self.0).unwrap().add_all(&v).unwrap();
        // One more element through `add`: a single merge operand on LSM backends.
        s.list(&self.0).unwrap().add(&format!("x{which}")).unwrap();
    }
    fn get(&self, s: &mut Store) -> Self::Out {
        s.list(&self.0).unwrap().get().unwrap()
    }
    fn empty() -> Self::Out {
        None
    }
    fn expected(which: usize) -> Self::Out {
        let mut v: Vec<String> = LIST_UPDATES[which]
            .iter()
            .map(|x| format!("e{x}"))
            .collect();
        v.push(format!("x{which}"));
        Some(v)
    }
}

pub struct MapAllCtx(MapState<LongSerializer, StringSerializer>);
impl Ctx for MapAllCtx {
    type Out = Vec<(i64, String)>;
    fn register(s: &mut Store, ttl: StateTtlConfig) -> Self {
        MapAllCtx(
            s.register_map(
                MapStateDescriptor::new("ttl-map", LongSerializer, StringSerializer).with_ttl(ttl),
            )
            .unwrap(),
        )
    }
    fn update(&self, s: &mut Store, which: usize) {
        let entries: &[(i64, &str)] = match which {
            0 => &[(1, "a1"), (2, "a2"), (3, "a3")],
            1 => &[(2, "b2"), (4, "b4")],
            _ => &[(5, "c5")],
        };
        let e: Vec<(i64, String)> = entries.iter().map(|(k, v)| (*k, v.to_string())).collect();
        s.map(&self.0).unwrap().put_all(&e).unwrap();
    }
    fn get(&self, s: &mut Store) -> Self::Out {
        s.map(&self.0)
            .unwrap()
            .entries()
            .collect::<keyed_state::Result<Vec<_>>>()
            .unwrap()
    }
    fn empty() -> Self::Out {
        Vec::new()
    }
    fn expected(which: usize) -> Self::Out {
        let e: &[(i64, &str)] = match which {
            0 => &[(1, "a1"), (2, "a2"), (3, "a3")],
            // Entries 1 and 3 (written with A) expired; 2 was overwritten by B.
            1 => &[(2, "b2"), (4, "b4")],
            _ => &[(5, "c5")],
        };
        e.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }
}

pub struct MapElementCtx(MapState<LongSerializer, StringSerializer>);
impl Ctx for MapElementCtx {
    type Out = Option<String>;
    fn register(s: &mut Store, ttl: StateTtlConfig) -> Self {
        MapElementCtx(
            s.register_map(
                MapStateDescriptor::new("ttl-map-el", LongSerializer, StringSerializer)
                    .with_ttl(ttl),
            )
            .unwrap(),
        )
    }
    fn update(&self, s: &mut Store, which: usize) {
        let v = format!("test value{}", which + 1);
        s.map(&self.0).unwrap().put(&1, &v).unwrap();
    }
    fn get(&self, s: &mut Store) -> Self::Out {
        s.map(&self.0).unwrap().get(&1).unwrap()
    }
    fn empty() -> Self::Out {
        None
    }
    fn expected(which: usize) -> Self::Out {
        Some(format!("test value{}", which + 1))
    }
}

pub struct ReducingCtx(ReducingState<LongSerializer>);
impl Ctx for ReducingCtx {
    type Out = Option<i64>;
    fn register(s: &mut Store, ttl: StateTtlConfig) -> Self {
        ReducingCtx(
            s.register_reducing(
                ReducingStateDescriptor::new("ttl-reducing", LongSerializer, |a, b| a + b)
                    .with_ttl(ttl),
            )
            .unwrap(),
        )
    }
    fn update(&self, s: &mut Store, which: usize) {
        s.reducing(&self.0).unwrap().add(&[5, 7, 6][which]).unwrap();
    }
    fn get(&self, s: &mut Store) -> Self::Out {
        s.reducing(&self.0).unwrap().get().unwrap()
    }
    fn empty() -> Self::Out {
        None
    }
    fn expected(which: usize) -> Self::Out {
        // C after B expired: 6, the expired accumulator is dropped, not merged.
        Some([5, 12, 6][which])
    }
}

/// Flink's `TtlAggregatingStateTestContext`: the accumulator starts at 3, the result is its string.
pub struct Sum3;
impl AggregateFunction for Sum3 {
    type In = i64;
    type Acc = i64;
    type Out = String;
    fn create_accumulator(&self) -> i64 {
        3
    }
    fn add(&self, v: &i64, acc: i64) -> i64 {
        acc + v
    }
    fn get_result(&self, acc: &i64) -> String {
        acc.to_string()
    }
    fn merge(&self, a: i64, b: i64) -> i64 {
        a + b
    }
}

pub struct AggregatingCtx(AggregatingState<Sum3, LongSerializer>);
impl Ctx for AggregatingCtx {
    type Out = Option<String>;
    fn register(s: &mut Store, ttl: StateTtlConfig) -> Self {
        AggregatingCtx(
            s.register_aggregating(
                AggregatingStateDescriptor::new("ttl-aggregating", Sum3, LongSerializer)
                    .with_ttl(ttl),
            )
            .unwrap(),
        )
    }
    fn update(&self, s: &mut Store, which: usize) {
        s.aggregating(&self.0)
            .unwrap()
            .add(&[5, 7, 6][which])
            .unwrap();
    }
    fn get(&self, s: &mut Store) -> Self::Out {
        s.aggregating(&self.0).unwrap().get().unwrap()
    }
    fn empty() -> Self::Out {
        None
    }
    fn expected(which: usize) -> Self::Out {
        Some(["8", "15", "9"][which].to_string())
    }
}

/// A store with one TTL state on a manual clock; `restore` moves it into a fresh backend through a savepoint.
pub struct Harness<'f, C: Ctx> {
    f: &'f Factory,
    pub s: Store,
    pub clock: Arc<ManualClock>,
    pub ttl: StateTtlConfig,
    pub c: C,
}

impl<'f, C: Ctx> Harness<'f, C> {
    pub fn new(f: &'f Factory, ttl: StateTtlConfig) -> Self {
        let clock = ManualClock::new(0);
        let mut s = store_long(f, 128, KeyGroupRange::all(128));
        s.set_ttl_time_provider(clock.clone());
        let c = C::register(&mut s, ttl.clone());
        s.set_current_key(&1).unwrap();
        Harness {
            f,
            s,
            clock,
            ttl,
            c,
        }
    }

    /// Flink's `takeAndRestoreSnapshot`: savepoint, restore into a fresh backend, same current key.
    pub fn restore(&mut self) {
        let key = self.s.current_key().unwrap();
        let sp = savepoint_of(&mut self.s);
        let mut t = store_long(self.f, 128, KeyGroupRange::all(128));
        t.set_ttl_time_provider(self.clock.clone());
        self.c = C::register(&mut t, self.ttl.clone());
        t.restore(&[sp]).unwrap();
        if let Some(k) = key {
            t.set_current_key(&k).unwrap();
        }
        self.s = t;
    }

    pub fn at(&mut self, t: i64) -> &mut Self {
        self.clock.set(t);
        self
    }

    pub fn update(&mut self, which: usize) {
        self.c.update(&mut self.s, which);
    }

    pub fn get(&mut self) -> C::Out {
        self.c.get(&mut self.s)
    }

    /// Whether any stored entry remains (Flink's `isOriginalEmptyValue` is its negation).
    pub fn stored(&mut self) -> bool {
        self.s.num_entries().unwrap() > 0
    }
}

fn config() -> StateTtlConfig {
    StateTtlConfig::new(100).disable_cleanup_in_background()
}

fn exact_expiration_on_write<C: Ctx>(f: &Factory) {
    let mut h = Harness::<C>::new(f, config());
    assert_eq!(h.get(), C::empty());
    h.at(0).update(0);
    h.restore();
    h.at(20);
    assert_eq!(h.get(), C::expected(0), "t20: a read does not extend");
    h.restore();
    h.at(50).update(1);
    h.restore();
    h.at(120);
    assert_eq!(h.get(), C::expected(1), "t120");
    h.restore();
    h.at(170).update(2);
    h.restore();
    h.at(220);
    assert_eq!(h.get(), C::expected(2), "t220");
    h.restore();
    h.at(300);
    assert_eq!(h.get(), C::empty(), "t300: expired");
    assert!(!h.stored(), "the expired entry is deleted on access");
}

fn relaxed_expiration_on_write<C: Ctx>(f: &Factory) {
    let ttl = config().with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp);
    let mut h = Harness::<C>::new(f, ttl);
    h.at(0).update(0);
    h.restore();
    h.at(120);
    assert_eq!(
        h.get(),
        C::expected(0),
        "the expired value is returned once"
    );
    assert_eq!(h.get(), C::empty(), "then it is gone");
    assert!(!h.stored());
}

fn exact_expiration_on_read<C: Ctx>(f: &Factory) {
    let ttl = config().with_update_type(TtlUpdateType::OnReadAndWrite);
    let mut h = Harness::<C>::new(f, ttl);
    h.at(0).update(0);
    h.restore();
    h.at(50);
    assert_eq!(h.get(), C::expected(0), "t50 read extends to 150");
    h.restore();
    h.at(120);
    assert_eq!(h.get(), C::expected(0), "t120 still there, extends to 220");
    h.restore();
    h.at(250);
    assert_eq!(h.get(), C::empty(), "t250 expired");
    assert!(!h.stored());
}

fn relaxed_expiration_on_read<C: Ctx>(f: &Factory) {
    let ttl = config()
        .with_update_type(TtlUpdateType::OnReadAndWrite)
        .with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp);
    let mut h = Harness::<C>::new(f, ttl);
    h.at(0).update(0);
    h.restore();
    h.at(50);
    assert_eq!(h.get(), C::expected(0));
    h.restore();
    h.at(170);
    assert_eq!(h.get(), C::expected(0), "expired at 150, returned once");
    assert_eq!(h.get(), C::empty());
}

fn expiration_timestamp_overflow<C: Ctx>(f: &Factory) {
    let mut h = Harness::<C>::new(f, StateTtlConfig::new(i64::MAX as u64));
    h.at(10).update(0);
    h.restore();
    h.at(50);
    assert_eq!(h.get(), C::expected(0), "no overflow into the past");
}

fn snapshot_change_restore<C: Ctx>(f: &Factory) {
    // testSnapshotChangeRestore: the restore brings back the original write timestamps.
    let mut h = Harness::<C>::new(f, config());
    h.at(0).update(0);
    h.at(50).update(1);
    h.s.set_current_key(&2).unwrap();
    h.at(100).update(0);
    let sp = savepoint_of(&mut h.s);
    h.at(170);
    h.s.set_current_key(&1).unwrap();
    h.update(2);
    h.s.set_current_key(&2).unwrap();
    h.update(2);
    // Restore the savepoint taken before the changes.
    let mut t = store_long(h.f, 128, KeyGroupRange::all(128));
    t.set_ttl_time_provider(h.clock.clone());
    h.c = C::register(&mut t, h.ttl.clone());
    t.restore(&[sp]).unwrap();
    h.s = t;
    h.at(180);
    h.s.set_current_key(&1).unwrap();
    assert_eq!(h.get(), C::empty(), "k1 last written at 50: expired at 150");
    h.s.set_current_key(&2).unwrap();
    assert_eq!(h.get(), C::expected(0), "k2 written at 100: live until 200");
}

macro_rules! per_kind {
    ($timeline:ident) => {
        paste_kinds!(
            $timeline,
            ValueCtx,
            ListCtx,
            StringListCtx,
            MapAllCtx,
            MapElementCtx,
            ReducingCtx,
            AggregatingCtx
        );
    };
}

macro_rules! paste_kinds {
    ($timeline:ident, $($ctx:ident),*) => {
        pub fn $timeline(f: &Factory) {
            $( self::timelines::$timeline::<$ctx>(f); )*
        }
    };
}

mod timelines {
    pub(super) use super::{
        exact_expiration_on_read, exact_expiration_on_write, expiration_timestamp_overflow,
        relaxed_expiration_on_read, relaxed_expiration_on_write, snapshot_change_restore,
    };
}

/// Every kind's TTL timelines, one test function per timeline.
pub mod suite {
    use super::*;
    per_kind!(exact_expiration_on_write);
    per_kind!(relaxed_expiration_on_write);
    per_kind!(exact_expiration_on_read);
    per_kind!(relaxed_expiration_on_read);
    per_kind!(expiration_timestamp_overflow);
    per_kind!(snapshot_change_restore);
}

#[allow(unused_imports)]
pub use suite::{
    exact_expiration_on_read as ttl_exact_expiration_on_read,
    exact_expiration_on_write as ttl_exact_expiration_on_write,
    expiration_timestamp_overflow as ttl_expiration_timestamp_overflow,
    relaxed_expiration_on_read as ttl_relaxed_expiration_on_read,
    relaxed_expiration_on_write as ttl_relaxed_expiration_on_write,
    snapshot_change_restore as ttl_snapshot_change_restore,
};

pub fn ttl_merge_namespaces(f: &Factory) {
    // testMergeNamespaces: updates to namespaces at t0, t120 and t150; merge at t230 into the target.
    // Namespaces 0..2 written at t0 (expired by 230), 3..4 at t150 (live until 250), target 5 at t120
    // (expired at 220) and at t150 again for the list (per element).
    let clock = ManualClock::new(0);
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    s.set_ttl_time_provider(clock.clone());
    let ttl = config();
    let l = s
        .register_list(
            ListStateDescriptor::new("l", LongSerializer)
                .with_namespace(LongSerializer)
                .with_ttl(ttl.clone()),
        )
        .unwrap();
    let r = s
        .register_reducing(
            ReducingStateDescriptor::new("r", LongSerializer, |a, b| a + b)
                .with_namespace(LongSerializer)
                .with_ttl(ttl.clone()),
        )
        .unwrap();
    let a = s
        .register_aggregating(
            AggregatingStateDescriptor::new("a", Sum3, LongSerializer)
                .with_namespace(LongSerializer)
                .with_ttl(ttl),
        )
        .unwrap();
    s.set_current_key(&1).unwrap();
    let write = |s: &mut Store, ns: i64, v: i64| {
        s.list_in(&l, &ns).unwrap().add(&v).unwrap();
        s.reducing_in(&r, &ns).unwrap().add(&v).unwrap();
        s.aggregating_in(&a, &ns).unwrap().add(&v).unwrap();
    };
    clock.set(0);
    for ns in 0..3 {
        write(&mut s, ns, 1);
    }
    clock.set(120);
    write(&mut s, 5, 10);
    clock.set(150);
    write(&mut s, 3, 100);
    write(&mut s, 4, 100);
    let sp = savepoint_of(&mut s);
    let mut t = store_long(f, 128, KeyGroupRange::all(128));
    t.set_ttl_time_provider(clock.clone());
    let l = t
        .register_list(
            ListStateDescriptor::new("l", LongSerializer)
                .with_namespace(LongSerializer)
                .with_ttl(config()),
        )
        .unwrap();
    let r = t
        .register_reducing(
            ReducingStateDescriptor::new("r", LongSerializer, |a, b| a + b)
                .with_namespace(LongSerializer)
                .with_ttl(config()),
        )
        .unwrap();
    let a = t
        .register_aggregating(
            AggregatingStateDescriptor::new("a", Sum3, LongSerializer)
                .with_namespace(LongSerializer)
                .with_ttl(config()),
        )
        .unwrap();
    t.restore(&[sp]).unwrap();
    t.set_current_key(&1).unwrap();
    clock.set(230);
    let sources = [0, 1, 2, 3, 4];
    t.merge_list_namespaces(&l, &5, &sources).unwrap();
    t.merge_reducing_namespaces(&r, &5, &sources).unwrap();
    t.merge_aggregating_namespaces(&a, &5, &sources).unwrap();
    assert_eq!(
        t.list_in(&l, &5).unwrap().get().unwrap(),
        Some(vec![100, 100])
    );
    assert_eq!(t.reducing_in(&r, &5).unwrap().get().unwrap(), Some(200));
    // The accumulator of each live source namespace is 3 + 100.
    assert_eq!(
        t.aggregating_in(&a, &5).unwrap().get().unwrap(),
        Some("206".to_string())
    );
    for ns in sources {
        assert_eq!(t.list_in(&l, &ns).unwrap().get().unwrap(), None);
        assert_eq!(t.reducing_in(&r, &ns).unwrap().get().unwrap(), None);
    }
    // The merged value is stamped at the merge: it lives until 330.
    clock.set(320);
    assert_eq!(t.reducing_in(&r, &5).unwrap().get().unwrap(), Some(200));
    write(&mut t, 5, 1);
    assert_eq!(
        t.list_in(&l, &5).unwrap().get().unwrap(),
        Some(vec![1]),
        "merged list elements keep their own timestamps: written at 150, expired at 250"
    )
}

pub fn ttl_snapshot_cleanup_drops_expired_state(f: &Factory) {
    // testMultipleKeysWithSnapshotCleanup: expired entries never reach the savepoint, even when the clock
    // is set back after the restore.
    let clock = ManualClock::new(0);
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    s.set_ttl_time_provider(clock.clone());
    let ttl = config().cleanup_full_snapshot();
    let register = |s: &mut Store| {
        (
            s.register_value(ValueStateDescriptor::new("v", LongSerializer).with_ttl(ttl.clone()))
                .unwrap(),
            s.register_list(ListStateDescriptor::new("l", LongSerializer).with_ttl(ttl.clone()))
                .unwrap(),
            s.register_map(
                MapStateDescriptor::new("m", LongSerializer, LongSerializer).with_ttl(ttl.clone()),
            )
            .unwrap(),
        )
    };
    let (v, l, m) = register(&mut s);
    for k in 0..20i64 {
        clock.set(if k % 2 == 0 { 0 } else { 50 });
        s.set_current_key(&k).unwrap();
        s.value(&v).unwrap().update(&k).unwrap();
        s.list(&l).unwrap().add(&k).unwrap();
        s.map(&m).unwrap().put(&k, &k).unwrap();
        clock.set(60);
        s.list(&l).unwrap().add(&(k + 100)).unwrap();
    }
    clock.set(120);
    let sp = savepoint_of(&mut s);
    // Even keys' value and map entry expired at 100; lists keep their element written at 60.
    let mut t = store_long(f, 128, KeyGroupRange::all(128));
    t.set_ttl_time_provider(clock.clone());
    let summary = t.restore(&[sp]).unwrap();
    assert_eq!(summary.entries, 10 + 20 + 10);
    clock.set(70);
    let (v, l, m) = register(&mut t);
    for k in 0..20i64 {
        t.set_current_key(&k).unwrap();
        let live = k % 2 == 1;
        assert_eq!(t.value(&v).unwrap().get().unwrap(), live.then_some(k));
        assert_eq!(t.map(&m).unwrap().get(&k).unwrap(), live.then_some(k));
        let want = if live {
            vec![k, k + 100]
        } else {
            vec![k + 100]
        };
        assert_eq!(t.list(&l).unwrap().get().unwrap(), Some(want));
    }
}

pub fn ttl_cannot_be_toggled_across_restore(f: &Factory) {
    // testRestoreTtlAndRegisterNonTtlStateCompatFailure (heap's rule, on every backend).
    let clock = ManualClock::new(0);
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    s.set_ttl_time_provider(clock);
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer).with_ttl(config()))
        .unwrap();
    let plain = s
        .register_value(ValueStateDescriptor::new("p", LongSerializer))
        .unwrap();
    s.set_current_key(&1).unwrap();
    s.value(&v).unwrap().update(&1).unwrap();
    s.value(&plain).unwrap().update(&1).unwrap();
    let sp = savepoint_of(&mut s);
    assert!(sp.header().states[0].ttl.is_some());
    assert_eq!(
        sp.header().states[0].value_serializer.identifier,
        keyed_state::serializer::TTL_SNAPSHOT_ID
    );
    let mut t = store_long(f, 128, KeyGroupRange::all(128));
    t.set_ttl_time_provider(ManualClock::new(10));
    t.restore(&[sp]).unwrap();
    let e = t
        .register_value(ValueStateDescriptor::new("v", LongSerializer))
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::TtlToggled { ref name, restored_with_ttl: true } if name == "v"),
        "{e}"
    );
    let e = t
        .register_value(ValueStateDescriptor::new("p", LongSerializer).with_ttl(config()))
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            Error::TtlToggled {
                restored_with_ttl: false,
                ..
            }
        ),
        "{e}"
    );
    // Another time to live is fine (testStateMigrationAfterChangingTTL).
    let v = t
        .register_value(
            ValueStateDescriptor::new("v", LongSerializer).with_ttl(StateTtlConfig::new(1000)),
        )
        .unwrap();
    t.set_current_key(&1).unwrap();
    assert_eq!(t.value(&v).unwrap().get().unwrap(), Some(1));
}

pub fn ttl_value_bytes_are_flinks_ttl_value(f: &Factory) {
    // Flink's TtlValue layout: i64 BE timestamp first; per element for lists; after the null flag for maps.
    let clock = ManualClock::new(0x0102);
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    s.set_ttl_time_provider(clock);
    let v = s
        .register_value(ValueStateDescriptor::new("v", LongSerializer).with_ttl(config()))
        .unwrap();
    let l = s
        .register_list(ListStateDescriptor::new("l", LongSerializer).with_ttl(config()))
        .unwrap();
    let m = s
        .register_map(
            MapStateDescriptor::new("m", LongSerializer, LongSerializer).with_ttl(config()),
        )
        .unwrap();
    s.set_current_key(&7).unwrap();
    s.value(&v).unwrap().update(&5).unwrap();
    s.list(&l).unwrap().add(&5).unwrap();
    s.list(&l).unwrap().add(&6).unwrap();
    s.map(&m).unwrap().put(&1, &5).unwrap();
    let sp = savepoint_of(&mut s);
    let ts = 0x0102i64.to_be_bytes();
    let mut values = Vec::new();
    for b in sp.key_groups() {
        sp.read_key_group(b.key_group, &mut |st, _k, v| {
            values.push((st, v.to_vec()));
            Ok(())
        })
        .unwrap();
    }
    values.sort();
    let el = |x: i64| [&ts[..], &x.to_be_bytes()[..]].concat();
    assert_eq!(values[0].1, el(5));
    assert_eq!(values[1].1, [el(5), vec![0x2c], el(6)].concat());
    assert_eq!(values[2].1, [vec![0u8], el(5)].concat());
}

/// A TTL map of more entries than one batch of the map iterators: streaming removes the expired entries as it
/// passes them, across batch boundaries, and yields exactly the live ones.
pub fn ttl_map_iteration_removes_expired_entries_across_batches(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let clock = ManualClock::new(0);
    s.set_ttl_time_provider(clock.clone());
    let m = s
        .register_map(
            MapStateDescriptor::new("ttl-stream", LongSerializer, StringSerializer)
                .with_ttl(StateTtlConfig::new(100).disable_cleanup_in_background()),
        )
        .unwrap();
    s.set_current_key(&9).unwrap();
    let n = 2 * MAP_BATCH as i64 + 11;
    // Even keys written at 0 (expire at 100), odd keys at 60 (expire at 160).
    for k in (0..n).filter(|k| k % 2 == 0) {
        s.map(&m).unwrap().put(&k, &format!("e{k}")).unwrap();
    }
    clock.set(60);
    for k in (0..n).filter(|k| k % 2 == 1) {
        s.map(&m).unwrap().put(&k, &format!("o{k}")).unwrap();
    }
    clock.set(120);
    let live: Vec<(i64, String)> = (0..n)
        .filter(|k| k % 2 == 1)
        .map(|k| (k, format!("o{k}")))
        .collect();
    let got: Vec<(i64, String)> = s
        .map(&m)
        .unwrap()
        .entries()
        .collect::<keyed_state::Result<_>>()
        .unwrap();
    assert_eq!(got, live);
    // The expired entries were removed on the way: the raw map holds only the live ones now.
    assert_eq!(s.num_entries().unwrap(), live.len() as u64);
    clock.set(200);
    assert!(s.map(&m).unwrap().is_empty().unwrap());
    assert_eq!(s.num_entries().unwrap(), 0);
}

/// A TTL map whose entries all went into the backend's engine (a write-back), then iterated twice, with some
/// entries expiring between the two: the second iteration (from a cache that holds the map whole, on a
/// backend with one) yields exactly the live entries and removes the expired ones; an entry written after
/// the first iteration is seen.
pub fn ttl_map_read_whole_twice_drops_entries_expiring_between(f: &Factory) {
    let mut s = store_long(f, 128, KeyGroupRange::all(128));
    let clock = ManualClock::new(0);
    s.set_ttl_time_provider(clock.clone());
    let m = s
        .register_map(
            MapStateDescriptor::new("ttl-whole", LongSerializer, StringSerializer)
                .with_ttl(StateTtlConfig::new(100).disable_cleanup_in_background()),
        )
        .unwrap();
    s.set_current_key(&3).unwrap();
    for k in 0..6i64 {
        clock.set(if k % 2 == 0 { 0 } else { 60 });
        s.map(&m).unwrap().put(&k, &format!("v{k}")).unwrap();
    }
    s.backend_mut().write_back().unwrap();
    let all: Vec<(i64, String)> = (0..6).map(|k| (k, format!("v{k}"))).collect();
    let read = |s: &mut KeyedStateStore<LongSerializer>| -> Vec<(i64, String)> {
        s.map(&m)
            .unwrap()
            .entries()
            .collect::<keyed_state::Result<_>>()
            .unwrap()
    };
    assert_eq!(read(&mut s), all);
    clock.set(120);
    s.map(&m).unwrap().put(&9, &"new".to_string()).unwrap();
    let mut live: Vec<(i64, String)> = (0..6)
        .filter(|k| k % 2 == 1)
        .map(|k| (k, format!("v{k}")))
        .collect();
    live.push((9, "new".to_string()));
    assert_eq!(read(&mut s), live);
    assert_eq!(s.map(&m).unwrap().get(&0).unwrap(), None);
    assert_eq!(s.map(&m).unwrap().get(&1).unwrap(), Some("v1".to_string()));
    assert_eq!(s.num_entries().unwrap(), live.len() as u64);
    clock.set(300);
    assert!(s.map(&m).unwrap().is_empty().unwrap());
}

//! Keyed operators on timely: records exchanged to the worker owning their key group, state in a
//! keyed-state store, event-time timers fired as the input frontier passes each epoch, and the synchronous
//! part of every checkpoint taken between two epochs.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use keyed_state::checkpoint::Checkpointer;
use keyed_state::keygroup::{java_long_hash, key_group_for_hash, operator_index_for_key_group};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::{KeyedStateStore, Timer, TimerService};
use keyed_state_lsm::MemoryReservation;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::Capability;
use timely::dataflow::StreamVec;
use timely::ExchangeData;

use crate::checkpoints;
use crate::context::{PartDone, WorkerCtx};
use crate::error::Result;

/// The store of every keyed operator: `i64` keys (auction, person, bidder or window).
pub type Store = KeyedStateStore<LongSerializer>;

/// A timer of a keyed operator: its key and an `i64` namespace (a window's start).
pub type KeyedTimer = Timer<i64, i64>;

/// The worker that owns `key`: the operator index of its key group, as Flink assigns contiguous ranges.
pub fn owner(key: i64, max_parallelism: u32, workers: usize) -> usize {
    let kg = key_group_for_hash(java_long_hash(key), max_parallelism);
    operator_index_for_key_group(
        max_parallelism,
        u32::try_from(workers).unwrap_or(u32::MAX),
        kg,
    ) as usize
}

/// What a keyed operator does with its records and timers.
pub trait KeyedLogic: Sized + 'static {
    /// Its records (ordered: an epoch's records are applied in their order, so that the state after an
    /// epoch, lists included, does not depend on the order in which the workers' records arrived).
    type In: ExchangeData + Ord;
    /// What it emits.
    type Out: ExchangeData;
    /// The key of a record.
    fn key(record: &Self::In) -> i64;
    /// Registers its states and timers in `store` (fresh or restored).
    fn open(store: &mut Store) -> Result<Self>;
    /// Its event-time timers.
    fn timers(&self) -> &TimerService<LongSerializer>;
    /// Handles one record, with its key as the current key.
    fn on_record(
        &mut self,
        store: &mut Store,
        record: Self::In,
        out: &mut Vec<Self::Out>,
    ) -> Result<()>;
    /// Handles a timer that fired, with its key as the current key.
    fn on_timer(
        &mut self,
        store: &mut Store,
        timer: KeyedTimer,
        out: &mut Vec<Self::Out>,
    ) -> Result<()>;
}

/// One worker's instance of a keyed operator: its store and its checkpointer.
pub struct Instance {
    /// The operator's name (its checkpoint root is `ROOT/state/<name>`).
    pub name: String,
    /// The store over the instance's backend.
    pub store: Store,
    /// The instance's checkpointer.
    pub checkpointer: Checkpointer,
    /// A heap backend's state charged to the process's memory budget, at its size in the last checkpoint
    /// (`None` for the LSM and RocksDB backends, whose engines charge their own memory or keep their own).
    pub heap_memory: Option<Arc<Mutex<MemoryReservation>>>,
}

/// Runs one epoch: its records, then the timers up to its watermark.
fn run_epoch<L: KeyedLogic>(
    logic: &mut L,
    store: &mut Store,
    records: Vec<L::In>,
    watermark: i64,
    out: &mut Vec<L::Out>,
) -> Result<()> {
    for r in records {
        store
            .set_current_key(&L::key(&r))
            .map_err(crate::error::Error::state("setting the key"))?;
        logic.on_record(store, r, out)?;
    }
    let svc = logic.timers().clone();
    let mut failed = None;
    store
        .advance_watermark(&svc, watermark, |store, timer| {
            if let Err(e) = logic.on_timer(store, timer, out) {
                failed = Some(e);
                return Err(keyed_state::Error::NoCurrentKey);
            }
            Ok(())
        })
        .map_err(crate::error::Error::state("firing timers"))
        .or_else(|e| failed.take().map_or(Err(e), Err))?;
    Ok(())
}

/// Adds keyed operator `L` on `stream`: records go to the worker owning their key's key group; epoch `e`
/// runs once the input frontier passes it (its records, then the timers up to the watermark after `e`);
/// after a checkpoint epoch the synchronous part runs and the asynchronous part uploads on its own thread.
pub fn keyed<'s, L: KeyedLogic>(
    stream: StreamVec<'s, u64, L::In>,
    instance: Instance,
    ctx: &Rc<WorkerCtx>,
) -> StreamVec<'s, u64, L::Out> {
    let max_p = ctx.spec.identity.max_parallelism;
    let workers = ctx.peers;
    let exchange = Exchange::new(move |r: &L::In| owner(L::key(r), max_p, workers) as u64);
    let ctx = Rc::clone(ctx);
    *ctx.parts_expected.borrow_mut() += 1;
    ctx.checkpointers
        .borrow_mut()
        .push((instance.name.clone(), instance.checkpointer.clone()));
    let name = instance.name.clone();
    stream.unary_frontier(exchange, &name, move |cap: Capability<u64>, _info| {
        let Instance {
            name,
            mut store,
            checkpointer,
            heap_memory,
        } = instance;
        let context = format!("operator {name}, {}", ctx.name());
        let mut logic = match L::open(&mut store) {
            Ok(l) => Some(l),
            Err(e) => {
                ctx.fail(&e);
                None
            }
        };
        let spec = Rc::new(ctx.spec.identity.events);
        let last = spec.last_epoch();
        let mut next = ctx.start_epoch;
        let mut held = if next <= last {
            let mut c = cap;
            c.downgrade(&next);
            Some(c)
        } else {
            None
        };
        let mut stash: BTreeMap<u64, Vec<L::In>> = BTreeMap::new();
        let mut out = Vec::new();
        move |(input, frontier), output| {
            input.for_each_stamp(|cap, data| {
                let Some(&t) = cap.least() else { return };
                let v = stash.entry(t).or_default();
                for d in data {
                    v.append(d);
                }
            });
            let Some(logic) = logic.as_mut() else { return };
            while let Some(c) = held.as_mut() {
                if frontier.less_equal(&next) {
                    break;
                }
                let e = next;
                let mut records = stash.remove(&e).unwrap_or_default();
                records.sort_unstable();
                if let Err(err) = run_epoch(
                    logic,
                    &mut store,
                    records,
                    spec.watermark_after(e),
                    &mut out,
                ) {
                    ctx.fail(&err);
                    return;
                }
                if !out.is_empty() {
                    output.session(&*c).give_iterator(out.drain(..));
                }
                if ctx.spec.is_checkpoint_epoch(e) {
                    ctx.started
                        .borrow_mut()
                        .entry(e)
                        .or_insert_with(Instant::now);
                    match checkpoints::begin(&mut store, &checkpointer, e + 1, &context) {
                        Ok(part) => {
                            let tx = ctx.parts_tx.clone();
                            let act = ctx.ack_activator.borrow().clone();
                            let memory = heap_memory.clone();
                            std::thread::spawn(move || {
                                let result = part.run().map(Some);
                                if let (Ok(Some(stats)), Some(m)) = (&result, &memory) {
                                    if let Ok(mut m) = m.lock() {
                                        m.resize(
                                            usize::try_from(stats.state_bytes)
                                                .unwrap_or(usize::MAX),
                                        );
                                    }
                                }
                                let _ = tx.send(PartDone { epoch: e, result });
                                if let Some(a) = act {
                                    let _ = a.activate();
                                }
                            });
                        }
                        Err(err) => {
                            ctx.fail(&err);
                            return;
                        }
                    }
                }
                next += 1;
                if next > last {
                    held = None;
                } else {
                    c.downgrade(&next);
                }
            }
        }
    })
}

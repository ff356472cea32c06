//! The checkpoint protocol as a timely dataflow beside the query (`design/timely-host.md`, "Protocol"):
//! each worker acknowledges a checkpoint once all its parts are durable, worker 0 collects the
//! acknowledgements, writes the job's record (the commit point) and confirms the checkpoint on every
//! worker, which then confirms it on its checkpointers and commits its output.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::Instant;

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::{Scope, StreamVec};

use crate::checkpoints::{self, JobCheckpoint, JobRoot};
use crate::context::{PartDone, WorkerCtx};
use crate::sink;

/// A worker's acknowledgement of a checkpoint: every part of it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ack {
    /// The checkpoint's epoch.
    pub epoch: u64,
    /// The worker.
    pub worker: usize,
}

/// The coordinator's confirmation of a complete checkpoint, to one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Confirm {
    /// The checkpoint's epoch.
    pub epoch: u64,
    /// The worker it goes to.
    pub to: usize,
}

/// One worker's acknowledgements: collects the finished parts of each checkpoint (from upload threads and
/// the sink) and emits an [`Ack`] once all of a checkpoint's parts are done, in checkpoint order; stops
/// after the last checkpoint.
pub fn acks<'s>(
    scope: Scope<'s, u64>,
    ctx: &Rc<WorkerCtx>,
    parts: mpsc::Receiver<PartDone>,
) -> StreamVec<'s, u64, Ack> {
    let ctx = Rc::clone(ctx);
    source(scope, "Acks", move |cap, info| {
        *ctx.ack_activator.borrow_mut() =
            Some(scope.worker().sync_activator_for(info.address.to_vec()));
        let last = ctx.spec.identity.events.last_epoch();
        let mut next =
            (ctx.start_epoch <= last).then(|| ctx.spec.checkpoint_epoch_of(ctx.start_epoch));
        let mut cap = next.map(|_| cap);
        let mut done: BTreeMap<u64, usize> = BTreeMap::new();
        move |output| {
            while let Ok(p) = parts.try_recv() {
                match p.result {
                    Err(e) => {
                        ctx.fail(&e);
                        return;
                    }
                    Ok(stats) => {
                        *done.entry(p.epoch).or_default() += 1;
                        if let Some(s) = stats {
                            let mut w = ctx.stats.borrow_mut();
                            w.sync_micros.push(s.sync_micros);
                            w.async_micros.push(s.async_micros);
                            w.bytes_uploaded += s.bytes_written;
                            // Parts arrive in checkpoint order per operator: the last one seen holds the
                            // newest state size of its operator; sum per checkpoint below.
                            let e = w.state_by_epoch.entry(p.epoch).or_default();
                            *e += s.state_bytes;
                        }
                    }
                }
            }
            let expected = *ctx.parts_expected.borrow();
            while let (Some(c), Some(k)) = (next, cap.as_ref()) {
                if done.get(&c).copied().unwrap_or(0) < expected {
                    break;
                }
                done.remove(&c);
                {
                    let mut w = ctx.stats.borrow_mut();
                    if let Some(b) = w.state_by_epoch.remove(&c) {
                        w.state_bytes = b;
                        w.state_bytes_peak = w.state_bytes_peak.max(b);
                    }
                }
                output.session(k).give(Ack {
                    epoch: c,
                    worker: ctx.worker,
                });
                next = if c >= last {
                    None
                } else {
                    Some(ctx.spec.checkpoint_epoch_of(c + 1))
                };
            }
            if next.is_none() {
                cap = None;
            }
        }
    })
}

/// The coordinator (worker 0): once every worker acknowledged a checkpoint, writes the job's record and
/// confirms the checkpoint to every worker.
pub fn coordinate<'s>(
    acks: StreamVec<'s, u64, Ack>,
    ctx: &Rc<WorkerCtx>,
    root: std::sync::Arc<JobRoot>,
    processes: usize,
    workers: usize,
) -> StreamVec<'s, u64, Confirm> {
    let ctx = Rc::clone(ctx);
    acks.unary(
        Exchange::new(|_: &Ack| 0),
        "Coordinator",
        move |_cap, _info| {
            let mut count: BTreeMap<u64, usize> = BTreeMap::new();
            move |input, output| {
                input.for_each_stamp(|cap, data| {
                    for batch in data {
                        for a in batch.drain(..) {
                            *count.entry(a.epoch).or_default() += 1;
                        }
                    }
                    while let Some((&c, &n)) = count.first_key_value() {
                        if n < ctx.peers {
                            break;
                        }
                        count.remove(&c);
                        let identity = ctx.spec.identity.clone();
                        let rec = JobCheckpoint {
                            id: c + 1,
                            epoch: c,
                            offset: identity.events.epoch_events(c).1,
                            operators: identity
                                .query
                                .operators()
                                .iter()
                                .map(|s| s.to_string())
                                .collect(),
                            job: identity,
                            processes,
                            workers,
                        };
                        if let Err(e) = root.commit(&rec) {
                            ctx.fail(&e);
                            return;
                        }
                        let mut s = output.session(&cap);
                        for to in 0..ctx.peers {
                            s.give(Confirm { epoch: c, to });
                        }
                    }
                });
            }
        },
    )
}

/// Every worker: a confirmed checkpoint is confirmed on each of the worker's checkpointers, and the
/// worker's output up to it is committed.
pub fn commit(confirms: StreamVec<'_, u64, Confirm>, ctx: &Rc<WorkerCtx>) {
    let ctx = Rc::clone(ctx);
    confirms.sink(
        Exchange::new(|c: &Confirm| c.to as u64),
        "Commit",
        move |(input, _)| {
            input.for_each_stamp(|_cap, data| {
                for batch in data {
                    for c in batch.drain(..) {
                        let context = ctx.name();
                        for (name, cp) in ctx.checkpointers.borrow().iter() {
                            if let Err(e) = checkpoints::confirm(
                                cp,
                                c.epoch + 1,
                                &format!("operator {name}, {context}"),
                            ) {
                                ctx.fail(&e);
                                return;
                            }
                        }
                        if let Err(e) = sink::commit(&ctx, c.epoch) {
                            ctx.fail(&e);
                            return;
                        }
                        let started = ctx.started.borrow_mut().remove(&c.epoch);
                        let mut s = ctx.stats.borrow_mut();
                        s.checkpoints += 1;
                        if let Some(t) = started {
                            s.confirm_micros.push(micros(t));
                        }
                    }
                }
            });
        },
    );
}

fn micros(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

//! The Nexmark source: each worker emits its share of every epoch's events of the types the query reads
//! (it accounts for its share of all events), from the epoch after the restored checkpoint on, at most two
//! epochs ahead of what the sink has finished.

use std::rc::Rc;
use std::time::Duration;

use nexmark::event::Event;
use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::{ProbeHandle, Scope, StreamVec};

use crate::context::WorkerCtx;

/// Epochs the source may run ahead of the sink's frontier.
const LEAD: u64 = 2;

/// The events of this worker, one epoch per timestamp.
pub fn nexmark<'s>(
    scope: Scope<'s, u64>,
    ctx: &Rc<WorkerCtx>,
    finished: ProbeHandle<u64>,
) -> StreamVec<'s, u64, Event> {
    let spec = ctx.spec.identity.events;
    let kinds = ctx.spec.identity.query.event_types();
    epochs(scope, ctx, finished, move |e, w, peers, out| {
        for &kind in kinds {
            out.extend(spec.worker_events_of(e, kind, w, peers));
        }
    })
}

/// This worker's share of each epoch's events as `generate(epoch, worker, workers, out)` makes them (the
/// events themselves, or a projection of them), one epoch per timestamp.
pub fn epochs<'s, D, G>(
    scope: Scope<'s, u64>,
    ctx: &Rc<WorkerCtx>,
    finished: ProbeHandle<u64>,
    mut generate: G,
) -> StreamVec<'s, u64, D>
where
    D: Clone + 'static,
    G: FnMut(u64, u64, u64, &mut Vec<D>) + 'static,
{
    let ctx = Rc::clone(ctx);
    source(scope, "Nexmark", move |cap, info| {
        let act = scope.activator_for(info.address);
        let spec = ctx.spec.identity.events;
        let last = spec.last_epoch();
        let mut next = ctx.start_epoch;
        let mut cap = (next <= last).then(|| {
            let mut c = cap;
            c.downgrade(&next);
            c
        });
        let (w, peers) = (ctx.worker as u64, ctx.peers as u64);
        let mut batch = Vec::new();
        move |output| {
            let Some(c) = cap.as_mut() else { return };
            if next >= LEAD && finished.less_than(&(next - LEAD)) {
                act.activate_after(Duration::from_millis(1));
                return;
            }
            generate(next, w, peers, &mut batch);
            output.session(&*c).give_iterator(batch.drain(..));
            ctx.stats.borrow_mut().events += spec.worker_share(next, w, peers);
            next += 1;
            if next > last {
                cap = None;
            } else {
                c.downgrade(&next);
                act.activate();
            }
        }
    })
}

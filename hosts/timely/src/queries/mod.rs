//! The Nexmark queries, as keyed operators over the generator's events (`design/timely-host.md`,
//! "Queries"). Each query's result is a set of text rows; the tests' single-threaded references compute
//! the same rows from the same events.
//!
//! | query | what | keyed operators |
//! |---|---|---|
//! | q3 | local item suggestion: auctions of category 10 joined with their sellers in OR, ID or CA (incremental join, unbounded state) | `q3-join` by person |
//! | q5 | hot items: per 10 s window sliding by 2 s, the auctions with the most bids | `q5-counts` by auction, `q5-hot` by window |
//! | q7 | highest bid: per 10 s tumbling window, the bids at the highest price | `q7-local` by auction, `q7-max` by window |
//! | q8 | new users: people who registered and created an auction in the same 10 s tumbling window | `q8-join` by person |
//! | q11 | user sessions: bids per bidder per session (10 s gap) | `q11-sessions` by bidder |

use std::rc::Rc;

use nexmark::event::Event;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::{ProbeHandle, Scope, StreamVec};

use crate::context::WorkerCtx;
use crate::error::{Error, Result};
use crate::keyed::{keyed, Instance};
use crate::source;

pub mod q11;
pub mod q3;
pub mod q5;
pub mod q7;
pub mod q8;

/// Nexmark's window size: 10 s.
pub const WINDOW_MS: i64 = 10_000;
/// q5's slide: 2 s.
pub const SLIDE_MS: i64 = 2_000;
/// q11's session gap: 10 s.
pub const SESSION_GAP_MS: i64 = 10_000;

pub use crate::query::Query;

impl Query {
    /// Builds the query on this worker's share of the events (its source paced by `finished`, the sink's
    /// probe) with this worker's operator `instances` (in [`operators`](Self::operators) order); returns
    /// its result rows.
    pub fn build<'s>(
        self,
        scope: Scope<'s, u64>,
        finished: ProbeHandle<u64>,
        instances: Vec<Instance>,
        ctx: &Rc<WorkerCtx>,
    ) -> Result<StreamVec<'s, u64, String>> {
        let mut it = instances.into_iter();
        let mut next = |name: &str| {
            it.next()
                .ok_or_else(|| Error::Config(format!("no instance of operator {name}")))
        };
        Ok(match self {
            Query::Q3 => {
                let input = q3::source(scope, ctx, finished)?;
                keyed::<q3::Join>(input, next("q3-join")?, ctx)
            }
            _ => {
                let events = source::nexmark(scope, ctx, finished);
                self.build_on_events(events, &mut next, ctx)?
            }
        })
    }

    /// The queries that read whole events.
    fn build_on_events<'s>(
        self,
        events: StreamVec<'s, u64, Event>,
        next: &mut impl FnMut(&str) -> Result<Instance>,
        ctx: &Rc<WorkerCtx>,
    ) -> Result<StreamVec<'s, u64, String>> {
        Ok(match self {
            Query::Q3 => {
                let input = events.flat_map(q3::input);
                keyed::<q3::Join>(input, next("q3-join")?, ctx)
            }
            Query::Q5 => {
                let input = events.flat_map(q5::input);
                let counts = keyed::<q5::Counts>(input, next("q5-counts")?, ctx);
                keyed::<q5::Hot>(counts, next("q5-hot")?, ctx)
            }
            Query::Q7 => {
                let input = events.flat_map(q7::input);
                let local = keyed::<q7::LocalMax>(input, next("q7-local")?, ctx);
                keyed::<q7::WindowMax>(local, next("q7-max")?, ctx)
            }
            Query::Q8 => {
                let input = events.flat_map(q8::input);
                keyed::<q8::Join>(input, next("q8-join")?, ctx)
            }
            Query::Q11 => {
                let input = events.flat_map(q11::input);
                keyed::<q11::Sessions>(input, next("q11-sessions")?, ctx)
            }
        })
    }
}

/// The start of the tumbling window of `ts`.
pub fn tumble(ts: i64) -> i64 {
    ts - ts.rem_euclid(WINDOW_MS)
}

/// The starts of the sliding windows that hold `ts`, oldest first.
pub fn hops(ts: i64) -> impl Iterator<Item = i64> {
    let last = ts - ts.rem_euclid(SLIDE_MS);
    let n = WINDOW_MS / SLIDE_MS;
    (0..n).rev().map(move |k| last - k * SLIDE_MS)
}

/// A keyed-state error in query code.
pub(crate) fn st(what: &'static str) -> impl FnOnce(keyed_state::Error) -> Error {
    Error::state(what)
}

/// An id of the generator as an `i64` key.
pub(crate) fn id(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

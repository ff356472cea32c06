//! q5, hot items: per 10 s window sliding by 2 s, the auctions with the most bids. Row:
//! `window_start,window_end,auction,bids`.
//!
//! `q5-counts` (by auction) counts each auction's bids per window and sends the count when the window
//! closes; `q5-hot` (by window) keeps the highest count and its auctions and emits them at the same
//! watermark.

use keyed_state::serializer::LongSerializer;
use keyed_state::state::{
    ListState, ListStateDescriptor, TimerService, ValueState, ValueStateDescriptor,
};
use nexmark::event::Event;

use super::{hops, id, st, WINDOW_MS};
use crate::error::Result;
use crate::events::event_time;
use crate::keyed::{KeyedLogic, KeyedTimer, Store};

/// A bid: its auction and time.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Bid {
    /// The auction.
    pub auction: i64,
    /// Event time (ms).
    pub ts: i64,
}

/// An auction's bids in one window.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Count {
    /// The window's start.
    pub window: i64,
    /// The auction.
    pub auction: i64,
    /// Its bids in the window.
    pub bids: i64,
}

/// The query's input: bids.
pub fn input(e: Event) -> Option<Bid> {
    let ts = event_time(&e);
    match e {
        Event::Bid(b) => Some(Bid {
            auction: id(b.auction),
            ts,
        }),
        _ => None,
    }
}

/// `q5-counts`, keyed by auction: a count per window (the namespace).
pub struct Counts {
    count: ValueState<LongSerializer, LongSerializer>,
    timers: TimerService<LongSerializer>,
}

impl KeyedLogic for Counts {
    type In = Bid;
    type Out = Count;

    fn key(r: &Bid) -> i64 {
        r.auction
    }

    fn open(store: &mut Store) -> Result<Self> {
        Ok(Counts {
            count: store
                .register_value(
                    ValueStateDescriptor::new("bids", LongSerializer)
                        .with_namespace(LongSerializer),
                )
                .map_err(st("q5: registering bids"))?,
            timers: store
                .register_timer_service("window-timers", LongSerializer)
                .map_err(st("q5: registering window-timers"))?,
        })
    }

    fn timers(&self) -> &TimerService<LongSerializer> {
        &self.timers
    }

    fn on_record(&mut self, store: &mut Store, r: Bid, _out: &mut Vec<Count>) -> Result<()> {
        for w in hops(r.ts) {
            let n = store
                .value_in(&self.count, &w)
                .and_then(|mut v| v.get())
                .map_err(st("q5: reading a count"))?;
            store
                .value_in(&self.count, &w)
                .and_then(|mut v| v.update(&(n.unwrap_or(0) + 1)))
                .map_err(st("q5: writing a count"))?;
            if n.is_none() {
                store
                    .register_event_time_timer(&self.timers, &w, w + WINDOW_MS - 1)
                    .map_err(st("q5: registering a timer"))?;
            }
        }
        Ok(())
    }

    fn on_timer(&mut self, store: &mut Store, t: KeyedTimer, out: &mut Vec<Count>) -> Result<()> {
        let w = t.namespace;
        let n = store
            .value_in(&self.count, &w)
            .and_then(|mut v| v.get())
            .map_err(st("q5: reading a count"))?;
        store
            .value_in(&self.count, &w)
            .and_then(|mut v| v.clear())
            .map_err(st("q5: clearing a count"))?;
        if let Some(bids) = n {
            out.push(Count {
                window: w,
                auction: t.key,
                bids,
            });
        }
        Ok(())
    }
}

/// `q5-hot`, keyed by window: the highest count and the auctions with it.
pub struct Hot {
    max: ValueState<LongSerializer, LongSerializer>,
    auctions: ListState<LongSerializer, LongSerializer>,
    timers: TimerService<LongSerializer>,
}

impl KeyedLogic for Hot {
    type In = Count;
    type Out = String;

    fn key(r: &Count) -> i64 {
        r.window
    }

    fn open(store: &mut Store) -> Result<Self> {
        Ok(Hot {
            max: store
                .register_value(
                    ValueStateDescriptor::new("max-bids", LongSerializer)
                        .with_namespace(LongSerializer),
                )
                .map_err(st("q5: registering max-bids"))?,
            auctions: store
                .register_list(
                    ListStateDescriptor::new("hot-auctions", LongSerializer)
                        .with_namespace(LongSerializer),
                )
                .map_err(st("q5: registering hot-auctions"))?,
            timers: store
                .register_timer_service("window-timers", LongSerializer)
                .map_err(st("q5: registering window-timers"))?,
        })
    }

    fn timers(&self) -> &TimerService<LongSerializer> {
        &self.timers
    }

    fn on_record(&mut self, store: &mut Store, r: Count, _out: &mut Vec<String>) -> Result<()> {
        let w = r.window;
        let max = store
            .value_in(&self.max, &w)
            .and_then(|mut v| v.get())
            .map_err(st("q5: reading max-bids"))?;
        match max {
            Some(m) if r.bids < m => {}
            Some(m) if r.bids == m => store
                .list_in(&self.auctions, &w)
                .and_then(|mut l| l.add(&r.auction))
                .map_err(st("q5: adding an auction"))?,
            _ => {
                store
                    .value_in(&self.max, &w)
                    .and_then(|mut v| v.update(&r.bids))
                    .map_err(st("q5: writing max-bids"))?;
                store
                    .list_in(&self.auctions, &w)
                    .and_then(|mut l| l.update(&[r.auction]))
                    .map_err(st("q5: writing hot-auctions"))?;
                store
                    .register_event_time_timer(&self.timers, &w, w + WINDOW_MS - 1)
                    .map_err(st("q5: registering a timer"))?;
            }
        }
        Ok(())
    }

    fn on_timer(&mut self, store: &mut Store, t: KeyedTimer, out: &mut Vec<String>) -> Result<()> {
        let w = t.namespace;
        let max = store
            .value_in(&self.max, &w)
            .and_then(|mut v| v.get())
            .map_err(st("q5: reading max-bids"))?;
        let auctions = store
            .list_in(&self.auctions, &w)
            .and_then(|mut l| l.get())
            .map_err(st("q5: reading hot-auctions"))?
            .unwrap_or_default();
        if let Some(m) = max {
            for a in auctions {
                out.push(format!("{w},{},{a},{m}", w + WINDOW_MS));
            }
        }
        store
            .value_in(&self.max, &w)
            .and_then(|mut v| v.clear())
            .map_err(st("q5: clearing max-bids"))?;
        store
            .list_in(&self.auctions, &w)
            .and_then(|mut l| l.clear())
            .map_err(st("q5: clearing hot-auctions"))?;
        Ok(())
    }
}

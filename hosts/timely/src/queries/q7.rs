//! q7, highest bid: per 10 s tumbling window, every bid at the window's highest price. Row:
//! `window_start,auction,bidder,price,date_time`.
//!
//! `q7-local` (by auction) keeps each auction's highest bids per window and, when the window closes, sends
//! them to `q7-max` (by window), which keeps the window's highest and emits them at the same watermark.

use keyed_state::serializer::{LongSerializer, SerdeSerializer};
use keyed_state::state::{
    ListState, ListStateDescriptor, TimerService, ValueState, ValueStateDescriptor,
};
use nexmark::event::Event;

use super::{id, st, tumble, WINDOW_MS};
use crate::error::Result;
use crate::events::event_time;
use crate::keyed::{KeyedLogic, KeyedTimer, Store};

/// A bid.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Bid {
    /// The auction.
    pub auction: i64,
    /// The bidder.
    pub bidder: i64,
    /// The price.
    pub price: i64,
    /// Event time (ms).
    pub ts: i64,
}

/// A window's candidate: a bid at its auction's highest price in `window`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Candidate {
    /// The window's start.
    pub window: i64,
    /// The bid.
    pub bid: Bid,
}

/// The query's input: bids.
pub fn input(e: Event) -> Option<Bid> {
    match e {
        Event::Bid(b) => Some(Bid {
            auction: id(b.auction),
            bidder: id(b.bidder),
            price: id(b.price),
            ts: event_time(&Event::Bid(b)),
        }),
        _ => None,
    }
}

/// The highest price and the bids at it, per window (the namespace).
struct Highest {
    max: ValueState<LongSerializer, LongSerializer>,
    bids: ListState<SerdeSerializer<Bid>, LongSerializer>,
    timers: TimerService<LongSerializer>,
}

impl Highest {
    fn open(store: &mut Store) -> Result<Self> {
        Ok(Highest {
            max: store
                .register_value(
                    ValueStateDescriptor::new("max-price", LongSerializer)
                        .with_namespace(LongSerializer),
                )
                .map_err(st("q7: registering max-price"))?,
            bids: store
                .register_list(
                    ListStateDescriptor::new(
                        "bids-at-max",
                        SerdeSerializer::<Bid>::new("q7.Bid", 1),
                    )
                    .with_namespace(LongSerializer),
                )
                .map_err(st("q7: registering bids-at-max"))?,
            timers: store
                .register_timer_service("window-timers", LongSerializer)
                .map_err(st("q7: registering window-timers"))?,
        })
    }

    fn add(&self, store: &mut Store, window: i64, bid: Bid) -> Result<()> {
        let max = store
            .value_in(&self.max, &window)
            .and_then(|mut v| v.get())
            .map_err(st("q7: reading max-price"))?;
        match max {
            Some(m) if bid.price < m => {}
            Some(m) if bid.price == m => store
                .list_in(&self.bids, &window)
                .and_then(|mut l| l.add(&bid))
                .map_err(st("q7: adding a bid"))?,
            _ => {
                store
                    .value_in(&self.max, &window)
                    .and_then(|mut v| v.update(&bid.price))
                    .map_err(st("q7: writing max-price"))?;
                store
                    .list_in(&self.bids, &window)
                    .and_then(|mut l| l.update(&[bid]))
                    .map_err(st("q7: writing bids-at-max"))?;
                store
                    .register_event_time_timer(&self.timers, &window, window + WINDOW_MS - 1)
                    .map_err(st("q7: registering a timer"))?;
            }
        }
        Ok(())
    }

    fn take(&self, store: &mut Store, window: i64) -> Result<Vec<Bid>> {
        let bids = store
            .list_in(&self.bids, &window)
            .and_then(|mut l| l.get())
            .map_err(st("q7: reading bids-at-max"))?
            .unwrap_or_default();
        store
            .list_in(&self.bids, &window)
            .and_then(|mut l| l.clear())
            .map_err(st("q7: clearing bids-at-max"))?;
        store
            .value_in(&self.max, &window)
            .and_then(|mut v| v.clear())
            .map_err(st("q7: clearing max-price"))?;
        Ok(bids)
    }
}

/// `q7-local`, keyed by auction.
pub struct LocalMax(Highest);

impl KeyedLogic for LocalMax {
    type In = Bid;
    type Out = Candidate;

    fn key(r: &Bid) -> i64 {
        r.auction
    }

    fn open(store: &mut Store) -> Result<Self> {
        Highest::open(store).map(LocalMax)
    }

    fn timers(&self) -> &TimerService<LongSerializer> {
        &self.0.timers
    }

    fn on_record(&mut self, store: &mut Store, r: Bid, _out: &mut Vec<Candidate>) -> Result<()> {
        self.0.add(store, tumble(r.ts), r)
    }

    fn on_timer(
        &mut self,
        store: &mut Store,
        t: KeyedTimer,
        out: &mut Vec<Candidate>,
    ) -> Result<()> {
        for bid in self.0.take(store, t.namespace)? {
            out.push(Candidate {
                window: t.namespace,
                bid,
            });
        }
        Ok(())
    }
}

/// `q7-max`, keyed by window.
pub struct WindowMax(Highest);

impl KeyedLogic for WindowMax {
    type In = Candidate;
    type Out = String;

    fn key(r: &Candidate) -> i64 {
        r.window
    }

    fn open(store: &mut Store) -> Result<Self> {
        Highest::open(store).map(WindowMax)
    }

    fn timers(&self) -> &TimerService<LongSerializer> {
        &self.0.timers
    }

    fn on_record(&mut self, store: &mut Store, r: Candidate, _out: &mut Vec<String>) -> Result<()> {
        self.0.add(store, r.window, r.bid)
    }

    fn on_timer(&mut self, store: &mut Store, t: KeyedTimer, out: &mut Vec<String>) -> Result<()> {
        for b in self.0.take(store, t.namespace)? {
            out.push(format!(
                "{},{},{},{},{}",
                t.namespace, b.auction, b.bidder, b.price, b.ts
            ));
        }
        Ok(())
    }
}

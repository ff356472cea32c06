//! q8, new users: people who registered and created an auction in the same 10 s tumbling window (a
//! person ⋈ auction window join on person id = seller). Row: `person_id,name,window_start`.

use keyed_state::serializer::{BooleanSerializer, LongSerializer, StringSerializer};
use keyed_state::state::{TimerService, ValueState, ValueStateDescriptor};
use nexmark::event::Event;

use super::{id, st, tumble, WINDOW_MS};
use crate::error::Result;
use crate::events::event_time;
use crate::keyed::{KeyedLogic, KeyedTimer, Store};

/// The join's input.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Input {
    /// A person registered.
    Person {
        /// The person.
        id: i64,
        /// The name.
        name: String,
        /// Event time (ms).
        ts: i64,
    },
    /// An auction was created.
    Auction {
        /// The seller.
        seller: i64,
        /// Event time (ms).
        ts: i64,
    },
}

/// The query's input: people and auctions.
pub fn input(e: Event) -> Option<Input> {
    let ts = event_time(&e);
    match e {
        Event::Person(p) => Some(Input::Person {
            id: id(p.id),
            name: p.name,
            ts,
        }),
        Event::Auction(a) => Some(Input::Auction {
            seller: id(a.seller),
            ts,
        }),
        Event::Bid(_) => None,
    }
}

/// `q8-join`, keyed by person: per window (the namespace) the person's name and whether they sold.
pub struct Join {
    name: ValueState<StringSerializer, LongSerializer>,
    sold: ValueState<BooleanSerializer, LongSerializer>,
    timers: TimerService<LongSerializer>,
}

impl KeyedLogic for Join {
    type In = Input;
    type Out = String;

    fn key(r: &Input) -> i64 {
        match r {
            Input::Person { id, .. } => *id,
            Input::Auction { seller, .. } => *seller,
        }
    }

    fn open(store: &mut Store) -> Result<Self> {
        Ok(Join {
            name: store
                .register_value(
                    ValueStateDescriptor::new("person", StringSerializer)
                        .with_namespace(LongSerializer),
                )
                .map_err(st("q8: registering person"))?,
            sold: store
                .register_value(
                    ValueStateDescriptor::new("sold", BooleanSerializer)
                        .with_namespace(LongSerializer),
                )
                .map_err(st("q8: registering sold"))?,
            timers: store
                .register_timer_service("window-timers", LongSerializer)
                .map_err(st("q8: registering window-timers"))?,
        })
    }

    fn timers(&self) -> &TimerService<LongSerializer> {
        &self.timers
    }

    fn on_record(&mut self, store: &mut Store, r: Input, _out: &mut Vec<String>) -> Result<()> {
        let w = match &r {
            Input::Person { ts, .. } | Input::Auction { ts, .. } => tumble(*ts),
        };
        match r {
            Input::Person { name, .. } => store
                .value_in(&self.name, &w)
                .and_then(|mut v| v.update(&name))
                .map_err(st("q8: writing person"))?,
            Input::Auction { .. } => store
                .value_in(&self.sold, &w)
                .and_then(|mut v| v.update(&true))
                .map_err(st("q8: writing sold"))?,
        }
        store
            .register_event_time_timer(&self.timers, &w, w + WINDOW_MS - 1)
            .map_err(st("q8: registering a timer"))
    }

    fn on_timer(&mut self, store: &mut Store, t: KeyedTimer, out: &mut Vec<String>) -> Result<()> {
        let w = t.namespace;
        let name = store
            .value_in(&self.name, &w)
            .and_then(|mut v| v.get())
            .map_err(st("q8: reading person"))?;
        let sold = store
            .value_in(&self.sold, &w)
            .and_then(|mut v| v.get())
            .map_err(st("q8: reading sold"))?;
        if let (Some(name), Some(true)) = (name, sold) {
            out.push(format!("{},{name},{w}", t.key));
        }
        store
            .value_in(&self.name, &w)
            .and_then(|mut v| v.clear())
            .map_err(st("q8: clearing person"))?;
        store
            .value_in(&self.sold, &w)
            .and_then(|mut v| v.clear())
            .map_err(st("q8: clearing sold"))
    }
}

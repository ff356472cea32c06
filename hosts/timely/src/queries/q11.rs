//! q11, user sessions: each bidder's bids grouped into sessions (a session ends 10 s after its last
//! bid; sessions that overlap merge). Row: `bidder,bids,session_start,session_end`.

use keyed_state::serializer::{LongSerializer, SerdeSerializer};
use keyed_state::state::{TimerService, ValueState, ValueStateDescriptor};
use nexmark::event::Event;

use super::{id, st, SESSION_GAP_MS};
use crate::error::Result;
use crate::events::event_time;
use crate::keyed::{KeyedLogic, KeyedTimer, Store};

/// A bid: its bidder and time.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Bid {
    /// The bidder.
    pub bidder: i64,
    /// Event time (ms).
    pub ts: i64,
}

/// An open session: `[start, end)`, `end` = last bid + gap.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Session {
    /// The first bid's time.
    pub start: i64,
    /// The last bid's time + the gap.
    pub end: i64,
    /// Bids in the session.
    pub bids: i64,
}

/// The query's input: bids.
pub fn input(e: Event) -> Option<Bid> {
    let ts = event_time(&e);
    match e {
        Event::Bid(b) => Some(Bid {
            bidder: id(b.bidder),
            ts,
        }),
        _ => None,
    }
}

/// `q11-sessions`, keyed by bidder: the bidder's open sessions, each with a timer at its end (namespace:
/// its start).
pub struct Sessions {
    open: ValueState<SerdeSerializer<Vec<Session>>>,
    timers: TimerService<LongSerializer>,
}

impl Sessions {
    fn read(&self, store: &mut Store) -> Result<Vec<Session>> {
        Ok(store
            .value(&self.open)
            .and_then(|mut v| v.get())
            .map_err(st("q11: reading sessions"))?
            .unwrap_or_default())
    }

    fn write(&self, store: &mut Store, open: &[Session]) -> Result<()> {
        if open.is_empty() {
            store.value(&self.open).and_then(|mut v| v.clear())
        } else {
            store
                .value(&self.open)
                .and_then(|mut v| v.update(&open.to_vec()))
        }
        .map_err(st("q11: writing sessions"))
    }
}

impl KeyedLogic for Sessions {
    type In = Bid;
    type Out = String;

    fn key(r: &Bid) -> i64 {
        r.bidder
    }

    fn open(store: &mut Store) -> Result<Self> {
        Ok(Sessions {
            open: store
                .register_value(ValueStateDescriptor::new(
                    "sessions",
                    SerdeSerializer::<Vec<Session>>::new("q11.Sessions", 1),
                ))
                .map_err(st("q11: registering sessions"))?,
            timers: store
                .register_timer_service("session-timers", LongSerializer)
                .map_err(st("q11: registering session-timers"))?,
        })
    }

    fn timers(&self) -> &TimerService<LongSerializer> {
        &self.timers
    }

    fn on_record(&mut self, store: &mut Store, r: Bid, _out: &mut Vec<String>) -> Result<()> {
        let mut merged = Session {
            start: r.ts,
            end: r.ts + SESSION_GAP_MS,
            bids: 1,
        };
        let mut keep = Vec::new();
        for s in self.read(store)? {
            if s.start < merged.end && merged.start < s.end {
                merged.start = merged.start.min(s.start);
                merged.end = merged.end.max(s.end);
                merged.bids += s.bids;
                store
                    .delete_event_time_timer(&self.timers, &s.start, s.end - 1)
                    .map_err(st("q11: deleting a timer"))?;
            } else {
                keep.push(s);
            }
        }
        keep.push(merged);
        keep.sort_by_key(|s| s.start);
        self.write(store, &keep)?;
        store
            .register_event_time_timer(&self.timers, &merged.start, merged.end - 1)
            .map_err(st("q11: registering a timer"))
    }

    fn on_timer(&mut self, store: &mut Store, t: KeyedTimer, out: &mut Vec<String>) -> Result<()> {
        let mut open = self.read(store)?;
        let before = open.len();
        open.retain(|s| {
            if s.start == t.namespace && s.end - 1 == t.timestamp {
                out.push(format!("{},{},{},{}", t.key, s.bids, s.start, s.end));
                false
            } else {
                true
            }
        });
        if open.len() != before {
            self.write(store, &open)?;
        }
        Ok(())
    }
}

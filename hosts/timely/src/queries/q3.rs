//! q3, local item suggestion: every auction of category 10 joined with its seller when the seller lives
//! in OR, ID or CA — an incremental (unwindowed) join whose state grows with the input. Row:
//! `name,city,state,auction`.

use keyed_state::serializer::{LongSerializer, SerdeSerializer};
use keyed_state::state::{
    ListState, ListStateDescriptor, TimerService, ValueState, ValueStateDescriptor,
};
use nexmark::event::Event;

use std::rc::Rc;

use timely::dataflow::{ProbeHandle, Scope, StreamVec};

use super::{id, st};
use crate::context::WorkerCtx;
use crate::error::Result;
use crate::keyed::{KeyedLogic, KeyedTimer, Store};
use crate::projected::Projector;
use crate::source;

/// The category q3 selects.
pub const CATEGORY: usize = 10;
/// The states q3 selects (the generator writes them in lower case).
pub const STATES: [&str; 3] = ["or", "id", "ca"];

/// A seller's details.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Person {
    /// The name.
    pub name: String,
    /// The city.
    pub city: String,
    /// The state.
    pub state: String,
}

/// The join's input.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Input {
    /// A person of a selected state.
    Person {
        /// The person.
        id: i64,
        /// The details.
        person: Person,
    },
    /// An auction of the selected category.
    Auction {
        /// The auction.
        id: i64,
        /// The seller.
        seller: i64,
    },
}

/// The query's input: people of the selected states, auctions of the selected category.
pub fn input(e: Event) -> Option<Input> {
    match e {
        Event::Person(p) if STATES.contains(&p.state.as_str()) => Some(Input::Person {
            id: id(p.id),
            person: Person {
                name: p.name,
                city: p.city,
                state: p.state,
            },
        }),
        Event::Auction(a) if a.category == CATEGORY => Some(Input::Auction {
            id: id(a.id),
            seller: id(a.seller),
        }),
        _ => None,
    }
}

/// The query's input straight from the generator, projected on the fields q3 reads
/// ([`crate::projected`]): the same records as [`input`] makes from the whole events, without building the
/// strings q3 never reads.
pub fn source<'s>(
    scope: Scope<'s, u64>,
    ctx: &Rc<WorkerCtx>,
    finished: ProbeHandle<u64>,
) -> Result<StreamVec<'s, u64, Input>> {
    let spec = ctx.spec.identity.events;
    let p = Projector::new(&spec)?;
    Ok(source::epochs(
        scope,
        ctx,
        finished,
        move |e, w, peers, out| {
            for person in p.worker_people(&spec, e, w, peers) {
                if STATES.contains(&person.state.as_str()) {
                    out.push(Input::Person {
                        id: id(person.id),
                        person: Person {
                            name: person.name,
                            city: person.city,
                            state: person.state,
                        },
                    });
                }
            }
            for a in p.worker_auctions(&spec, e, w, peers) {
                if a.category == CATEGORY {
                    out.push(Input::Auction {
                        id: id(a.id),
                        seller: id(a.seller),
                    });
                }
            }
        },
    ))
}

/// `q3-join`, keyed by person: the person once seen, and the auctions that came before them.
pub struct Join {
    person: ValueState<SerdeSerializer<Person>>,
    waiting: ListState<LongSerializer>,
    timers: TimerService<LongSerializer>,
}

fn row(p: &Person, auction: i64) -> String {
    format!("{},{},{},{auction}", p.name, p.city, p.state)
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
            person: store
                .register_value(ValueStateDescriptor::new(
                    "person",
                    SerdeSerializer::<Person>::new("q3.Person", 1),
                ))
                .map_err(st("q3: registering person"))?,
            waiting: store
                .register_list(ListStateDescriptor::new("waiting-auctions", LongSerializer))
                .map_err(st("q3: registering waiting-auctions"))?,
            // q3 has no timers; the service exists because every keyed operator advances one.
            timers: store
                .register_timer_service("unused-timers", LongSerializer)
                .map_err(st("q3: registering timers"))?,
        })
    }

    fn timers(&self) -> &TimerService<LongSerializer> {
        &self.timers
    }

    fn on_record(&mut self, store: &mut Store, r: Input, out: &mut Vec<String>) -> Result<()> {
        match r {
            Input::Person { person, .. } => {
                let waiting = store
                    .list(&self.waiting)
                    .and_then(|mut l| l.get())
                    .map_err(st("q3: reading waiting-auctions"))?
                    .unwrap_or_default();
                for a in waiting {
                    out.push(row(&person, a));
                }
                store
                    .list(&self.waiting)
                    .and_then(|mut l| l.clear())
                    .map_err(st("q3: clearing waiting-auctions"))?;
                store
                    .value(&self.person)
                    .and_then(|mut v| v.update(&person))
                    .map_err(st("q3: writing person"))
            }
            Input::Auction { id, .. } => {
                let p = store
                    .value(&self.person)
                    .and_then(|mut v| v.get())
                    .map_err(st("q3: reading person"))?;
                match p {
                    Some(p) => {
                        out.push(row(&p, id));
                        Ok(())
                    }
                    None => store
                        .list(&self.waiting)
                        .and_then(|mut l| l.add(&id))
                        .map_err(st("q3: adding a waiting auction")),
                }
            }
        }
    }

    fn on_timer(
        &mut self,
        _store: &mut Store,
        _t: KeyedTimer,
        _out: &mut Vec<String>,
    ) -> Result<()> {
        Ok(())
    }
}

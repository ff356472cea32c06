//! The generator's people and auctions projected on the fields a query reads: the same values as the
//! `nexmark` crate's `Event::new` gives those fields, without building the strings the query never reads.
//!
//! The crate draws every field of an event from one `SmallRng` seeded by the event's id, in a fixed order,
//! and builds every string character by character (an auction's name, description and padding `extra` are
//! about 450 random letters). A projection makes the same draws in the same order, so the fields it keeps
//! are identical, but it keeps no string it does not return and stops before the trailing `extra`. A test
//! checks every projected field against the crate's events. Only the single-rate configuration
//! [`EventSpec::config`](crate::events::EventSpec::config) makes is modelled ([`Projector::new`] refuses
//! others).

use nexmark::config::NexmarkConfig;
use nexmark::event::EventType;
use rand08::rngs::SmallRng;
use rand08::seq::SliceRandom;
use rand08::{Rng, SeedableRng};

use crate::error::{Error, Result};
use crate::events::{type_count, EventSpec};

/// The generator's share of hot sellers: 1 in this many (`nexmark::event`'s `HOT_SELLER_RATIO`).
const HOT_SELLER_RATIO: usize = 100;

/// A person's id, name, city and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonFields {
    /// The person's id.
    pub id: usize,
    /// The full name.
    pub name: String,
    /// The city.
    pub city: String,
    /// The state.
    pub state: String,
}

/// An auction's id, seller and category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuctionFields {
    /// The auction's id.
    pub id: usize,
    /// The seller (a person's id).
    pub seller: usize,
    /// The category.
    pub category: usize,
}

/// Projected people and auctions of one generator configuration.
#[derive(Debug, Clone)]
pub struct Projector {
    cfg: NexmarkConfig,
    denominator: usize,
    /// Microseconds between two events (the crate's single inter-event delay).
    delay: f32,
}

impl Projector {
    /// A projector of `spec`'s events.
    pub fn new(spec: &EventSpec) -> Result<Projector> {
        let cfg = spec.config();
        if cfg.first_rate != cfg.next_rate || cfg.first_rate == 0 {
            return Err(Error::Config(format!(
                "the projected generator models one event rate, not {} then {}",
                cfg.first_rate, cfg.next_rate
            )));
        }
        let denominator = cfg.person_proportion + cfg.auction_proportion + cfg.bid_proportion;
        // As the crate: `us_per_unit / rate * generators`, in f32.
        let delay =
            cfg.us_per_unit as f32 / cfg.first_rate as f32 * cfg.num_event_generators as f32;
        Ok(Projector {
            cfg,
            denominator,
            delay,
        })
    }

    /// The event number of the `o`-th event of type `kind` (the crate's typed `global_offset`).
    fn event_number(&self, kind: EventType, o: usize) -> usize {
        let c = &self.cfg;
        let global = match kind {
            EventType::Person => {
                o / c.person_proportion * self.denominator + o % c.person_proportion
            }
            EventType::Auction => {
                o / c.auction_proportion * self.denominator
                    + c.person_proportion
                    + o % c.auction_proportion
            }
            EventType::Bid => {
                o / c.bid_proportion * self.denominator
                    + c.person_proportion
                    + c.auction_proportion
                    + o % c.bid_proportion
            }
        };
        c.first_event_number + global
    }

    /// The time of event `event_number` (the crate's `event_timestamp` with one rate).
    fn timestamp(&self, event_number: usize) -> u64 {
        self.cfg.base_time + ((event_number as f32 * self.delay) / 1000.0).round() as u64
    }

    fn person_last_id(&self, event_id: usize) -> usize {
        let c = &self.cfg;
        let epoch = event_id / self.denominator;
        let offset = (event_id % self.denominator).min(c.person_proportion - 1);
        epoch * c.person_proportion + offset
    }

    fn person_next_id(&self, event_id: usize, rng: &mut SmallRng) -> usize {
        let people = self.person_last_id(event_id) + 1;
        let active = people.min(self.cfg.active_people);
        people - active + rng.gen_range(0..active + self.cfg.person_id_lead)
    }

    fn auction_last_id(&self, event_id: usize) -> usize {
        let c = &self.cfg;
        let mut epoch = event_id / self.denominator;
        let mut offset = event_id % self.denominator;
        if offset < c.person_proportion {
            epoch -= 1;
            offset = c.auction_proportion - 1;
        } else if c.person_proportion + c.auction_proportion <= offset {
            offset = c.auction_proportion - 1;
        } else {
            offset -= c.person_proportion;
        }
        epoch * c.auction_proportion + offset
    }

    /// The `o`-th person (counting people only).
    pub fn person(&self, o: usize) -> PersonFields {
        let c = &self.cfg;
        let event_id = c.first_event_id + self.event_number(EventType::Person, o);
        let rng = &mut SmallRng::seed_from_u64(event_id as u64);
        let id = self.person_last_id(event_id) + c.first_person_id;
        let first = c.first_names.choose(rng).map_or("", String::as_str);
        let last = c.last_names.choose(rng).map_or("", String::as_str);
        let name = format!("{first} {last}");
        // The e-mail address: 7 and 5 letters.
        skip_letters(rng, 12);
        // The credit card: four numbers below 10 000.
        for _ in 0..4 {
            let _: i32 = rng.gen_range(0..10000);
        }
        let city = c.us_cities.choose(rng).cloned().unwrap_or_default();
        let state = c.us_states.choose(rng).cloned().unwrap_or_default();
        PersonFields {
            id,
            name,
            city,
            state,
        }
    }

    /// The `o`-th auction (counting auctions only).
    pub fn auction(&self, o: usize) -> AuctionFields {
        let c = &self.cfg;
        let event_number = self.event_number(EventType::Auction, o);
        let event_id = c.first_event_id + event_number;
        let time = self.timestamp(event_number);
        let rng = &mut SmallRng::seed_from_u64(event_id as u64);
        let id = self.auction_last_id(event_id) + c.first_auction_id;
        // The item's name (20 letters) and description (100 letters).
        skip_letters(rng, 120);
        // The initial bid and the reserve: one price each.
        let _: f32 = rng.gen();
        let _: f32 = rng.gen();
        // The expiry: the auction's length, drawn below twice the horizon.
        let events_for_auctions = (c.in_flight_auctions * self.denominator) / c.auction_proportion;
        let horizon = self.timestamp(event_number + events_for_auctions) - time;
        let _: u64 = rng.gen_range(0..(horizon * 2).max(1));
        let seller = if rng.gen_range(0..c.hot_seller_ratio) > 0 {
            (self.person_last_id(event_id) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO
        } else {
            self.person_next_id(event_id, rng)
        } + c.first_person_id;
        let category = c.first_category_id + rng.gen_range(0..c.num_categories);
        AuctionFields {
            id,
            seller,
            category,
        }
    }

    /// The people of epoch `e` that worker `worker` of `workers` emits, in order (as
    /// [`EventSpec::worker_events_of`]).
    pub fn worker_people(
        &self,
        spec: &EventSpec,
        e: u64,
        worker: u64,
        workers: u64,
    ) -> impl Iterator<Item = PersonFields> + '_ {
        worker_offsets(spec, EventType::Person, e, worker, workers).map(|o| self.person(o))
    }

    /// The auctions of epoch `e` that worker `worker` of `workers` emits, in order.
    pub fn worker_auctions(
        &self,
        spec: &EventSpec,
        e: u64,
        worker: u64,
        workers: u64,
    ) -> impl Iterator<Item = AuctionFields> + '_ {
        worker_offsets(spec, EventType::Auction, e, worker, workers).map(|o| self.auction(o))
    }
}

/// Draws `n` letters as the crate's `gen_exact_string` does, keeping none.
fn skip_letters(rng: &mut SmallRng, n: usize) {
    for _ in 0..n {
        let _: u8 = rng.gen_range(b'a'..=b'z');
    }
}

/// The typed offsets of the events of type `kind` in epoch `e` that worker `worker` of `workers` emits.
fn worker_offsets(
    spec: &EventSpec,
    kind: EventType,
    e: u64,
    worker: u64,
    workers: u64,
) -> impl Iterator<Item = usize> {
    let workers = workers.max(1);
    let (start, end) = spec.epoch_events(e);
    let (k0, k1) = (type_count(kind, start), type_count(kind, end));
    let first = k0 + (worker + workers - k0 % workers) % workers;
    let to = usize::try_from(k1).unwrap_or(usize::MAX);
    (usize::try_from(first).unwrap_or(usize::MAX)..to)
        .step_by(usize::try_from(workers).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexmark::event::Event;

    fn spec(seed: u64, rate: usize) -> EventSpec {
        EventSpec {
            events: 60_000,
            seed,
            per_epoch: 700,
            rate,
        }
    }

    #[test]
    fn projected_fields_equal_the_crates_events() {
        for (seed, rate) in [(0, 10_000), (1, 10_000), (7, 1_000), (3, 37)] {
            let spec = spec(seed, rate);
            let p = Projector::new(&spec).unwrap();
            for workers in [1u64, 3] {
                for e in 0..spec.epochs() {
                    for w in 0..workers {
                        let people: Vec<_> = p.worker_people(&spec, e, w, workers).collect();
                        let want: Vec<_> = spec
                            .worker_events_of(e, EventType::Person, w, workers)
                            .map(|x| match x {
                                Event::Person(x) => PersonFields {
                                    id: x.id,
                                    name: x.name,
                                    city: x.city,
                                    state: x.state,
                                },
                                other => panic!("{other:?}"),
                            })
                            .collect();
                        assert_eq!(people, want, "seed {seed}, epoch {e}, worker {w}/{workers}");
                        let auctions: Vec<_> = p.worker_auctions(&spec, e, w, workers).collect();
                        let want: Vec<_> = spec
                            .worker_events_of(e, EventType::Auction, w, workers)
                            .map(|x| match x {
                                Event::Auction(x) => AuctionFields {
                                    id: x.id,
                                    seller: x.seller,
                                    category: x.category,
                                },
                                other => panic!("{other:?}"),
                            })
                            .collect();
                        assert_eq!(
                            auctions, want,
                            "seed {seed}, epoch {e}, worker {w}/{workers}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_configuration_it_does_not_model_is_refused() {
        let mut s = spec(0, 10_000);
        s.rate = 0;
        assert!(Projector::new(&s).is_err());
    }
}

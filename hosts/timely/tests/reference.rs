//! Plain single-threaded, in-memory references of the queries: the rows each must produce, computed
//! directly from the generator's events (no timely, no keyed-state).

use std::collections::{BTreeMap, BTreeSet};

use keyed_state_timely::events::EventSpec;
use keyed_state_timely::queries::Query;
use nexmark::event::Event;

const WINDOW: i64 = 10_000;
const SLIDE: i64 = 2_000;
const GAP: i64 = 10_000;

fn ts(e: &Event) -> i64 {
    e.timestamp() as i64
}

fn tumble(t: i64) -> i64 {
    t - t.rem_euclid(WINDOW)
}

/// The query's rows, sorted.
pub fn rows(query: Query, spec: &EventSpec) -> Vec<String> {
    let events: Vec<Event> = spec.all_events().collect();
    let mut out = match query {
        Query::Q3 => q3(&events),
        Query::Q5 => q5(&events),
        Query::Q7 => q7(&events),
        Query::Q8 => q8(&events),
        Query::Q11 => q11(&events),
    };
    out.sort();
    out
}

fn q3(events: &[Event]) -> Vec<String> {
    let mut people = BTreeMap::new();
    let mut auctions = Vec::new();
    for e in events {
        match e {
            Event::Person(p) if ["or", "id", "ca"].contains(&p.state.as_str()) => {
                people.insert(p.id, (p.name.clone(), p.city.clone(), p.state.clone()));
            }
            Event::Auction(a) if a.category == 10 => auctions.push((a.id, a.seller)),
            _ => {}
        }
    }
    auctions
        .iter()
        .filter_map(|(id, seller)| {
            people
                .get(seller)
                .map(|(n, c, s)| format!("{n},{c},{s},{id}"))
        })
        .collect()
}

fn q5(events: &[Event]) -> Vec<String> {
    let mut counts: BTreeMap<(i64, usize), i64> = BTreeMap::new();
    for e in events {
        if let Event::Bid(b) = e {
            let t = ts(e);
            let last = t - t.rem_euclid(SLIDE);
            let mut w = last;
            while w > t - WINDOW {
                *counts.entry((w, b.auction)).or_default() += 1;
                w -= SLIDE;
            }
        }
    }
    let mut max: BTreeMap<i64, i64> = BTreeMap::new();
    for ((w, _), n) in &counts {
        let m = max.entry(*w).or_default();
        *m = (*m).max(*n);
    }
    counts
        .iter()
        .filter(|((w, _), n)| max[w] == **n)
        .map(|((w, a), n)| format!("{w},{},{a},{n}", w + WINDOW))
        .collect()
}

fn q7(events: &[Event]) -> Vec<String> {
    let mut max: BTreeMap<i64, usize> = BTreeMap::new();
    for e in events {
        if let Event::Bid(b) = e {
            let m = max.entry(tumble(ts(e))).or_default();
            *m = (*m).max(b.price);
        }
    }
    events
        .iter()
        .filter_map(|e| match e {
            Event::Bid(b) if max[&tumble(ts(e))] == b.price => Some(format!(
                "{},{},{},{},{}",
                tumble(ts(e)),
                b.auction,
                b.bidder,
                b.price,
                ts(e)
            )),
            _ => None,
        })
        .collect()
}

fn q8(events: &[Event]) -> Vec<String> {
    let mut sold = BTreeSet::new();
    for e in events {
        if let Event::Auction(a) = e {
            sold.insert((a.seller, tumble(ts(e))));
        }
    }
    events
        .iter()
        .filter_map(|e| match e {
            Event::Person(p) if sold.contains(&(p.id, tumble(ts(e)))) => {
                Some(format!("{},{},{}", p.id, p.name, tumble(ts(e))))
            }
            _ => None,
        })
        .collect()
}

fn q11(events: &[Event]) -> Vec<String> {
    let mut by_bidder: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    for e in events {
        if let Event::Bid(b) = e {
            by_bidder.entry(b.bidder).or_default().push(ts(e));
        }
    }
    let mut out = Vec::new();
    for (bidder, mut times) in by_bidder {
        times.sort_unstable();
        let mut start = times[0];
        let mut end = times[0] + GAP;
        let mut n = 0;
        for t in times {
            if t >= end {
                out.push(format!("{bidder},{n},{start},{end}"));
                start = t;
                n = 0;
            }
            n += 1;
            end = t + GAP;
        }
        out.push(format!("{bidder},{n},{start},{end}"));
    }
    out
}

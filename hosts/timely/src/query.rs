//! Which Nexmark query a job runs: its name, its keyed operators and the event types it reads. Building
//! its dataflow is [`crate::queries`]' job.

use nexmark::event::EventType;

/// A query.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Query {
    /// q3: local item suggestion (incremental join).
    Q3,
    /// q5: hot items (sliding window).
    Q5,
    /// q7: highest bid (tumbling window).
    Q7,
    /// q8: new users (tumbling-window join).
    Q8,
    /// q11: user sessions (session windows).
    Q11,
}

impl Query {
    /// Every query.
    pub const ALL: [Query; 5] = [Query::Q3, Query::Q5, Query::Q7, Query::Q8, Query::Q11];

    /// Parses `q5`, `Q5` or `5`.
    pub fn parse(s: &str) -> Option<Query> {
        match s.trim_start_matches(['q', 'Q']) {
            "3" => Some(Query::Q3),
            "5" => Some(Query::Q5),
            "7" => Some(Query::Q7),
            "8" => Some(Query::Q8),
            "11" => Some(Query::Q11),
            _ => None,
        }
    }

    /// `q5`, ...
    pub fn name(self) -> &'static str {
        match self {
            Query::Q3 => "q3",
            Query::Q5 => "q5",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
            Query::Q11 => "q11",
        }
    }

    /// Its keyed operators, in dataflow order (each has its checkpoint root `ROOT/state/<name>`).
    pub fn operators(self) -> &'static [&'static str] {
        match self {
            Query::Q3 => &["q3-join"],
            Query::Q5 => &["q5-counts", "q5-hot"],
            Query::Q7 => &["q7-local", "q7-max"],
            Query::Q8 => &["q8-join"],
            Query::Q11 => &["q11-sessions"],
        }
    }

    /// The event types it reads (the source generates only these).
    pub fn event_types(self) -> &'static [EventType] {
        match self {
            Query::Q3 | Query::Q8 => &[EventType::Person, EventType::Auction],
            Query::Q5 | Query::Q7 | Query::Q11 => &[EventType::Bid],
        }
    }
}

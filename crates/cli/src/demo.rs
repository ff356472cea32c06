//! The demo workload: clicks and impressions per user, with value, list and map state.
//!
//! A deterministic event stream (the same seed and record count always give the same events, on every
//! machine) is processed per user key:
//! - `clicks` and `impressions`: `ValueState<i64>` counters;
//! - `recent-pages`: `ListState<String>` of the pages a user clicked, appended one at a time and trimmed to
//!   the last 8 whenever it reaches 16;
//! - `page-clicks`: `MapState<String, i64>` counting clicks per page;
//! - `ctr-window`: `ReducingState<i64>` of clicks per hour window (namespace = window start).

use keyed_state::backend::StateBackend;
use keyed_state::keygroup::KeyGroupRange;
use keyed_state::serializer::{LongSerializer, StringSerializer};
use keyed_state::state::*;
use keyed_state::Result;

/// A small, stable pseudo-random generator (SplitMix64): the event stream must not depend on a crate's
/// version.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One event of the demo stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The user (the key).
    pub user: i64,
    /// A click (true) or an impression.
    pub click: bool,
    /// The page.
    pub page: u32,
    /// Event time in milliseconds.
    pub timestamp: i64,
}

/// The deterministic event stream: `records` events over `max(records / 20, 1)` users with a skewed
/// distribution, pages `0..50`, one click per five events on average.
pub fn events(seed: u64, records: u64) -> impl Iterator<Item = Event> {
    let mut rng = SplitMix64::new(seed);
    let users = (records / 20).max(1);
    (0..records).map(move |i| {
        // Skew: half the events go to the first tenth of the users.
        let user = if rng.below(2) == 0 {
            rng.below((users / 10).max(1))
        } else {
            rng.below(users)
        } as i64;
        Event {
            user,
            click: rng.below(5) == 0,
            page: rng.below(50) as u32,
            timestamp: 1_700_000_000_000 + i as i64 * 37,
        }
    })
}

/// The states of the demo job.
pub struct DemoStates {
    /// Clicks per user.
    pub clicks: ValueState<LongSerializer>,
    /// Impressions per user.
    pub impressions: ValueState<LongSerializer>,
    /// Recently clicked pages.
    pub recent_pages: ListState<StringSerializer>,
    /// Clicks per page.
    pub page_clicks: MapState<StringSerializer, LongSerializer>,
    /// Clicks per hour window.
    pub hourly: ReducingState<LongSerializer, LongSerializer>,
}

/// The max parallelism of the demo job.
pub const DEMO_MAX_PARALLELISM: u32 = 128;

/// Registers the demo states.
pub fn register(store: &mut KeyedStateStore<LongSerializer>) -> Result<DemoStates> {
    Ok(DemoStates {
        clicks: store.register_value(ValueStateDescriptor::new("clicks", LongSerializer))?,
        impressions: store
            .register_value(ValueStateDescriptor::new("impressions", LongSerializer))?,
        recent_pages: store
            .register_list(ListStateDescriptor::new("recent-pages", StringSerializer))?,
        page_clicks: store.register_map(MapStateDescriptor::new(
            "page-clicks",
            StringSerializer,
            LongSerializer,
        ))?,
        hourly: store.register_reducing(
            ReducingStateDescriptor::new("clicks-per-hour", LongSerializer, |a, b| a + b)
                .with_namespace(LongSerializer),
        )?,
    })
}

/// A store for the demo over `backend` (which must use the demo's max parallelism and the long key
/// serializer).
pub fn store(backend: Box<dyn StateBackend>) -> Result<KeyedStateStore<LongSerializer>> {
    KeyedStateStore::new(backend, LongSerializer)
}

/// The backend configuration of the demo (one instance owning all key groups).
pub fn config() -> keyed_state::backend::BackendConfig {
    KeyedStateStore::config_for(
        &LongSerializer,
        DEMO_MAX_PARALLELISM,
        KeyGroupRange::all(DEMO_MAX_PARALLELISM),
    )
}

/// Processes one event.
pub fn process(
    store: &mut KeyedStateStore<LongSerializer>,
    s: &DemoStates,
    e: &Event,
) -> Result<()> {
    store.set_current_key(&e.user)?;
    if e.click {
        let mut v = store.value(&s.clicks)?;
        let n = v.get()?.unwrap_or(0);
        v.update(&(n + 1))?;
        let page = format!("/page/{}", e.page);
        store.list(&s.recent_pages)?.add(&page)?;
        let mut m = store.map(&s.page_clicks)?;
        let c = m.get(&page)?.unwrap_or(0);
        m.put(&page, &(c + 1))?;
        let window = e.timestamp - e.timestamp.rem_euclid(3_600_000);
        store.reducing_in(&s.hourly, &window)?.add(&1)?;
        if n % 16 == 15 {
            // Trim the list to its last 8 pages.
            let mut l = store.list(&s.recent_pages)?;
            if let Some(pages) = l.get()? {
                let keep = pages[pages.len().saturating_sub(8)..].to_vec();
                l.update(&keep)?;
            }
        }
    } else {
        let mut v = store.value(&s.impressions)?;
        let n = v.get()?.unwrap_or(0);
        v.update(&(n + 1))?;
    }
    Ok(())
}

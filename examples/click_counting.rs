//! A keyed job, as a stream processor runs it: click counting per user with value, list and map state, on
//! two parallel instances; each takes a savepoint, and the job is restored at parallelism 3 (a rescale), on
//! another backend, with every count intact.
//!
//! `cargo run --release --example click_counting`

use std::collections::BTreeMap;
use std::path::Path;

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::StateBackend;
use keyed_state::keygroup::key_group_range_for_operator;
use keyed_state::savepoint::{write_savepoint, SavepointReader, WriteOptions};
use keyed_state::serializer::{LongSerializer, StringSerializer};
use keyed_state::state::{
    KeyedStateStore, ListState, ListStateDescriptor, MapState, MapStateDescriptor, ValueState,
    ValueStateDescriptor,
};

/// The job's max parallelism: the number of key groups, fixed for the job's lifetime.
const MAX_PARALLELISM: u32 = 128;

/// One click of the input stream.
struct Click {
    user: i64,
    page: String,
}

/// The state one instance of the operator registers.
struct ClickState {
    store: KeyedStateStore<LongSerializer>,
    clicks: ValueState<LongSerializer>,
    recent: ListState<StringSerializer>,
    per_page: MapState<StringSerializer, LongSerializer>,
}

impl ClickState {
    /// Instance `index` of `parallelism` on `backend`, owning its share of the key groups.
    fn new(
        index: u32,
        parallelism: u32,
        backend: impl FnOnce(
            keyed_state::backend::BackendConfig,
        ) -> keyed_state::Result<Box<dyn StateBackend>>,
    ) -> keyed_state::Result<Self> {
        let range = key_group_range_for_operator(MAX_PARALLELISM, parallelism, index)?;
        let config = KeyedStateStore::config_for(&LongSerializer, MAX_PARALLELISM, range);
        let mut store = KeyedStateStore::new(backend(config)?, LongSerializer)?;
        let clicks = store.register_value(ValueStateDescriptor::new("clicks", LongSerializer))?;
        let recent = store.register_list(ListStateDescriptor::new("recent", StringSerializer))?;
        let per_page = store.register_map(MapStateDescriptor::new(
            "per-page",
            StringSerializer,
            LongSerializer,
        ))?;
        Ok(ClickState {
            store,
            clicks,
            recent,
            per_page,
        })
    }

    /// Processes one click of a user this instance owns.
    fn process(&mut self, click: &Click) -> keyed_state::Result<()> {
        self.store.set_current_key(&click.user)?;
        let n = self.store.value(&self.clicks)?.get()?.unwrap_or(0);
        self.store.value(&self.clicks)?.update(&(n + 1))?;
        self.store.list(&self.recent)?.add(&click.page)?;
        let on_page = self
            .store
            .map(&self.per_page)?
            .get(&click.page)?
            .unwrap_or(0);
        self.store
            .map(&self.per_page)?
            .put(&click.page, &(on_page + 1))?;
        Ok(())
    }

    /// Whether this instance owns `user` (the stream processor routes each record to its owner).
    fn owns(&self, user: i64) -> keyed_state::Result<bool> {
        Ok(self
            .store
            .config()
            .key_group_range
            .contains(self.store.key_group_of(&user)?))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pages = ["/home", "/search", "/cart", "/checkout"];
    let stream: Vec<Click> = (0..10_000i64)
        .map(|i| Click {
            user: (i * 7919) % 500,
            page: pages[(i % 4) as usize].to_string(),
        })
        .collect();

    // Parallelism 2, on the LSM backend (each instance in a temporary directory).
    let mut job: Vec<ClickState> = (0..2)
        .map(|i| ClickState::new(i, 2, |config| Ok(Box::new(LsmBackend::temp(config)?) as _)))
        .collect::<Result<_, _>>()?;
    for click in &stream {
        let owner = job
            .iter_mut()
            .position(|s| s.owns(click.user).unwrap_or(false));
        job[owner.ok_or("no instance owns the user")?].process(click)?;
    }

    // Savepoint: the synchronous part pins a view; writing it could run on another thread.
    let dir = tempfile::tempdir()?;
    let mut paths = Vec::new();
    for (i, instance) in job.iter_mut().enumerate() {
        let path = dir.path().join(format!("savepoint-{i}"));
        let snapshot = instance.store.snapshot()?;
        let summary = write_savepoint(&path, &*snapshot, &WriteOptions::default())?;
        println!(
            "instance {i}: savepoint of {} entries, {} bytes",
            summary.total_entries(),
            summary.bytes_written
        );
        paths.push(path);
    }

    // Rescale to parallelism 3 on the heap backend: every new instance reads every savepoint and keeps its
    // own key groups.
    let readers: Vec<SavepointReader> = paths
        .iter()
        .map(|p| SavepointReader::open(Path::new(p)))
        .collect::<Result<_, _>>()?;
    let mut rescaled: Vec<ClickState> = (0..3)
        .map(|i| ClickState::new(i, 3, |config| Ok(Box::new(HeapBackend::new(config)?) as _)))
        .collect::<Result<_, _>>()?;
    for instance in &mut rescaled {
        let restored = instance.store.restore(&readers)?;
        println!(
            "restored {} entries in {} key groups",
            restored.entries, restored.key_groups
        );
    }

    // Every user's counts survived the rescale.
    let mut expected: BTreeMap<i64, i64> = BTreeMap::new();
    for click in &stream {
        *expected.entry(click.user).or_default() += 1;
    }
    for (&user, &count) in &expected {
        let owner = rescaled
            .iter_mut()
            .position(|s| s.owns(user).unwrap_or(false));
        let instance = &mut rescaled[owner.ok_or("no instance owns the user")?];
        instance.store.set_current_key(&user)?;
        let clicks = instance.store.value(&instance.clicks)?.get()?;
        let recent = instance
            .store
            .list(&instance.recent)?
            .get()?
            .unwrap_or_default();
        let per_page: i64 = instance
            .store
            .map(&instance.per_page)?
            .values()
            .sum::<keyed_state::Result<i64>>()?;
        assert_eq!(clicks, Some(count), "clicks of user {user}");
        assert_eq!(recent.len() as i64, count, "recent pages of user {user}");
        assert_eq!(per_page, count, "per-page clicks of user {user}");
    }
    println!(
        "{} users, {} clicks: every count restored at parallelism 3",
        expected.len(),
        stream.len()
    );
    Ok(())
}

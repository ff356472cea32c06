//! The typed state API: descriptors, the keyed state store, and accessors for each state kind.
//!
//! ```
//! use keyed_state::backend::heap::HeapBackend;
//! use keyed_state::keygroup::KeyGroupRange;
//! use keyed_state::serializer::{LongSerializer, StringSerializer};
//! use keyed_state::state::{KeyedStateStore, ListStateDescriptor, ValueStateDescriptor};
//!
//! let config = KeyedStateStore::config_for(&LongSerializer, 128, KeyGroupRange::all(128));
//! let mut store = KeyedStateStore::new(Box::new(HeapBackend::new(config)?), LongSerializer)?;
//! let clicks = store.register_value(ValueStateDescriptor::new("clicks", LongSerializer))?;
//! let pages = store.register_list(ListStateDescriptor::new("pages", StringSerializer))?;
//!
//! store.set_current_key(&42)?;
//! let n = store.value(&clicks)?.get()?.unwrap_or(0);
//! store.value(&clicks)?.update(&(n + 1))?;
//! store.list(&pages)?.add(&"/home".to_string())?;
//! assert_eq!(store.value(&clicks)?.get()?, Some(1));
//! # Ok::<(), keyed_state::Error>(())
//! ```

mod access;
mod descriptor;
mod operands;
mod registration;
mod restore;
mod store;
mod timer_queue;
mod timers;
mod ttl;

pub use crate::meta::TtlConfig as StateTtlConfig;
pub use crate::meta::{TtlUpdateType, TtlVisibility};
pub use access::*;
pub use descriptor::*;
pub use restore::RestoreSummary;
pub use store::{KeyedStateStore, StateKeys, StateKeysAndNamespaces};
pub use timer_queue::{
    Timer, TimerQueue, TimerService, EVENT_TIMERS_PREFIX, PROCESSING_TIMERS_PREFIX,
    TIMER_SNAPSHOT_ID,
};

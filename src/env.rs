//! The environment of one process (or one slot of a stream processor): what every backend and checkpoint
//! storage opened with it shares (`design/shared-env.md`).
//!
//! * the LSM engines' [`SharedEnv`]: one pool of background threads for every flush and compaction, and one
//!   memory budget for every memtable, the one row cache, the one block cache and SST metadata;
//! * the budget's reservations ([`StateEnv::memory`]): memory held above the engines (a cache, a heap
//!   backend's state) is charged to the same capacity with [`MemoryBudget::reserve`]; heap backends opened
//!   with [`StateEnv::heap`] charge their estimated state size by themselves, without a cap;
//! * (feature `checkpoints`) one I/O runtime for every checkpoint storage opened with
//!   [`StateEnv::open_storage`], which never `block_on`s inside the caller's runtime.
//!
//! A backend opened without an environment keeps its own threads, cache and runtime, as before.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use keyed_state_lsm::{EnvOptions, EnvStats, MemoryBudget, MemoryUsage, Options, SharedEnv};

use crate::backend::heap::HeapBackend;
use crate::backend::lsm::LsmBackend;
use crate::backend::BackendConfig;
use crate::error::{Error, Result};

/// How a [`StateEnv`] is sized.
#[derive(Debug, Clone)]
pub struct StateEnvOptions {
    /// Bytes every LSM backend of the environment shares: memtables, row cache, block cache, SST metadata
    /// and reservations (default `None`: no budget; each engine bounded by its own options).
    pub memory_budget: Option<usize>,
    /// The share of the budget memtables may take, in `(0, 1]` (default 0.5, as Flink's
    /// `state.backend.rocksdb.memory.write-buffer-ratio`).
    pub write_buffer_ratio: f64,
    /// The share of the budget the read-modify-write caches of the LSM backends take together, in
    /// `[0, 1]`, divided equally among the backends of the environment that keep the default capacity and
    /// resized as backends open and close (`design/rmw-cache.md`, "Default capacity"). Default
    /// [`DEFAULT_RMW_CACHE_RATIO`](crate::backend::lsm::DEFAULT_RMW_CACHE_RATIO), 0: backends get no cache
    /// unless they set a capacity themselves;
    /// [`SUGGESTED_RMW_CACHE_RATIO`](crate::backend::lsm::SUGGESTED_RMW_CACHE_RATIO) (a quarter) turns them on.
    pub rmw_cache_ratio: f64,
    /// The share of the budget the engines' one row cache may hold, in `[0, 1)` (default
    /// [`DEFAULT_ROW_CACHE_RATIO`](keyed_state_lsm::DEFAULT_ROW_CACHE_RATIO), 1/16; 0: none;
    /// [`EnvOptions::row_cache_ratio`]).
    pub row_cache_ratio: f64,
    /// Threads running every engine's flushes and compactions (default: the machine's cores, 2 to 4).
    pub background_threads: usize,
    /// Worker threads of the checkpoint storages' I/O runtime (default 2).
    pub io_threads: usize,
    /// Bytes of upload buffers the checkpoint storages of the environment hold together at most (default
    /// 32 MiB), within what the memory budget leaves them: one pool for all, charged to the budget
    /// (`design/checkpoints.md`, "Upload buffers"). At least one S3 part (5 MiB) is always allowed.
    pub upload_buffer_bytes: usize,
}

impl Default for StateEnvOptions {
    fn default() -> Self {
        let lsm = EnvOptions::default();
        StateEnvOptions {
            memory_budget: lsm.memory_budget,
            write_buffer_ratio: lsm.write_buffer_ratio,
            rmw_cache_ratio: crate::backend::lsm::DEFAULT_RMW_CACHE_RATIO,
            row_cache_ratio: lsm.row_cache_ratio,
            background_threads: lsm.background_threads,
            io_threads: 2,
            upload_buffer_bytes: 32 << 20,
        }
    }
}

/// The environment of a process or slot (see the module documentation). Cheap to clone: clones share.
#[derive(Debug, Clone)]
pub struct StateEnv {
    lsm: SharedEnv,
    #[cfg(feature = "checkpoints")]
    io: Arc<crate::checkpoint::IoRuntime>,
    /// The upload buffers every checkpoint storage of the environment shares.
    #[cfg(feature = "checkpoints")]
    uploads: Arc<crate::checkpoint::UploadBuffers>,
    options: StateEnvOptions,
    /// Bytes heap backends of the environment charge (a part of the budget's reservations).
    heap_state: Arc<AtomicUsize>,
}

/// Where an environment's memory goes: the engines' breakdown, and the part of its reservations that heap
/// backends hold. [`total`](Self::total) is what the budget charges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateEnvMemory {
    /// Memtables, block cache, SST metadata, reservations (heap state included) and the row cache.
    pub engines: MemoryUsage,
    /// Estimated state bytes of the heap backends opened with [`StateEnv::heap`] (included in
    /// `engines.reserved`).
    pub heap_state: usize,
    /// What the LSM backends' read-modify-write caches charge (capacity, doorkeeper and hash table;
    /// included in `engines.reserved`).
    pub rmw_caches: usize,
}

impl StateEnvMemory {
    /// Every component together: what the budget charges.
    pub fn total(&self) -> usize {
        self.engines.total()
    }

    /// Reservations other than heap state and read-modify-write caches.
    pub fn other_reserved(&self) -> usize {
        self.engines
            .reserved
            .saturating_sub(self.heap_state)
            .saturating_sub(self.rmw_caches)
    }
}

impl StateEnv {
    /// Starts an environment: the engines' background threads now, the I/O runtime at the first request.
    pub fn new(options: StateEnvOptions) -> Result<StateEnv> {
        if !(0.0..=1.0).contains(&options.rmw_cache_ratio) {
            return Err(Error::InvalidArgument(format!(
                "rmw_cache_ratio {} is not in [0, 1]",
                options.rmw_cache_ratio
            )));
        }
        let lsm = SharedEnv::new(EnvOptions {
            memory_budget: options.memory_budget,
            write_buffer_ratio: options.write_buffer_ratio,
            row_cache_ratio: options.row_cache_ratio,
            background_threads: options.background_threads,
            ..EnvOptions::default()
        })?;
        crate::backend::lsm::set_rmw_cache_ratio(lsm.memory(), options.rmw_cache_ratio);
        #[cfg(feature = "checkpoints")]
        let uploads = crate::checkpoint::UploadBuffers::new(
            Some(Arc::clone(lsm.memory())),
            options.upload_buffer_bytes,
        );
        Ok(StateEnv {
            lsm,
            #[cfg(feature = "checkpoints")]
            io: Arc::new(crate::checkpoint::IoRuntime::new(options.io_threads)),
            #[cfg(feature = "checkpoints")]
            uploads,
            options,
            heap_state: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The options the environment was made with.
    pub fn options(&self) -> &StateEnvOptions {
        &self.options
    }

    /// The LSM engines' environment.
    pub fn lsm(&self) -> &SharedEnv {
        &self.lsm
    }

    /// `options` on this environment: engines opened with them share its threads, budget and cache.
    pub fn lsm_options(&self, options: Options) -> Options {
        Options {
            env: Some(self.lsm.clone()),
            ..options
        }
    }

    /// An LSM backend in `dir` on this environment ([`LsmBackend::open`]).
    pub fn open_lsm(
        &self,
        dir: impl AsRef<Path>,
        config: BackendConfig,
        options: Options,
    ) -> Result<LsmBackend> {
        LsmBackend::open(dir, config, self.lsm_options(options))
    }

    /// An LSM backend in a temporary directory on this environment ([`LsmBackend::temp_with`]).
    pub fn temp_lsm(&self, config: BackendConfig, options: Options) -> Result<LsmBackend> {
        LsmBackend::temp_with(config, self.lsm_options(options))
    }

    /// A heap backend that charges its estimated state size (see [`HeapEngine`](crate::backend::heap::HeapEngine))
    /// to this environment's budget, as a reservation that it resizes as the state grows and shrinks. The
    /// charge is never refused: a heap backend has no cap, but the engines' block cache shrinks to make
    /// room, and [`memory_usage`](Self::memory_usage) shows it as `heap_state`.
    pub fn heap(&self, config: BackendConfig) -> Result<HeapBackend> {
        let mut backend = HeapBackend::new(config)?;
        backend.charge_to(crate::backend::heap::usage_charge(
            self.memory().reserve(0),
            Arc::clone(&self.heap_state),
        ));
        Ok(backend)
    }

    /// Where the environment's memory goes ([`StateEnvMemory`]); its parts add up to what the budget
    /// charges.
    pub fn memory_usage(&self) -> StateEnvMemory {
        StateEnvMemory {
            engines: self.stats().memory,
            heap_state: self.heap_state.load(Ordering::Relaxed),
            rmw_caches: crate::backend::lsm::rmw_caches_charged_on(self.memory()),
        }
    }

    /// The memory budget: [`MemoryBudget::reserve`] charges it for memory held above the engines.
    pub fn memory(&self) -> &Arc<MemoryBudget> {
        self.lsm.memory()
    }

    /// Memory and background-work figures of the engines' environment.
    pub fn stats(&self) -> EnvStats {
        self.lsm.stats()
    }

    /// [`stats`](Self::stats) under RocksDB's names where they exist ([`EnvStats::metrics`]), the
    /// environment's threads as `keyed-state.env.threads`, its heap backends' charge as
    /// `keyed-state.env.heap-state` and its read-modify-write caches' as `keyed-state.env.rmw-caches` (both
    /// parts of `keyed-state.env.reserved`).
    pub fn metrics(&self) -> Vec<keyed_state_lsm::Metric> {
        let mut m = self.stats().metrics();
        m.push(keyed_state_lsm::Metric {
            name: "keyed-state.env.threads".into(),
            value: self.threads() as u64,
        });
        m.push(keyed_state_lsm::Metric {
            name: "keyed-state.env.heap-state".into(),
            value: self.heap_state.load(Ordering::Relaxed) as u64,
        });
        m.push(keyed_state_lsm::Metric {
            name: "keyed-state.env.rmw-caches".into(),
            value: crate::backend::lsm::rmw_caches_charged_on(self.memory()) as u64,
        });
        m
    }

    /// Publishes [`metrics`](Self::metrics) as gauges of the `metrics` facade (feature `metrics`), each
    /// labelled `scope` = `scope`; an engine's [`EngineHandle::metrics`](crate::backend::EngineHandle::metrics)
    /// go through [`publish_metrics`] with the instance's name as scope.
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self, scope: &str) {
        publish_metrics(&self.metrics(), scope);
    }

    /// Threads the environment runs: the engines' background threads, and the I/O runtime's once started.
    pub fn threads(&self) -> usize {
        let io = {
            #[cfg(feature = "checkpoints")]
            {
                if self.io.started() {
                    self.io.threads()
                } else {
                    0
                }
            }
            #[cfg(not(feature = "checkpoints"))]
            {
                0
            }
        };
        self.lsm.options().background_threads + io
    }

    /// The I/O runtime the environment's checkpoint storages share.
    #[cfg(feature = "checkpoints")]
    pub fn io(&self) -> &Arc<crate::checkpoint::IoRuntime> {
        &self.io
    }

    /// The upload buffers the environment's checkpoint storages share, charged to its budget.
    #[cfg(feature = "checkpoints")]
    pub fn upload_buffers(&self) -> &Arc<crate::checkpoint::UploadBuffers> {
        &self.uploads
    }

    /// Opens checkpoint storage at `root` ([`CheckpointStorage::open`](crate::checkpoint::CheckpointStorage::open))
    /// on the environment's I/O runtime, with the environment's upload buffers.
    #[cfg(feature = "checkpoints")]
    pub fn open_storage(&self, root: &str) -> Result<Arc<crate::checkpoint::CheckpointStorage>> {
        self.open_storage_with(root, &[])
    }

    /// [`open_storage`](Self::open_storage) with store settings
    /// ([`CheckpointStorage::open_with`](crate::checkpoint::CheckpointStorage::open_with)).
    #[cfg(feature = "checkpoints")]
    pub fn open_storage_with(
        &self,
        root: &str,
        settings: &[(&str, &str)],
    ) -> Result<Arc<crate::checkpoint::CheckpointStorage>> {
        Ok(Arc::new(
            crate::checkpoint::CheckpointStorage::open_with(root, settings)?
                .with_io(Arc::clone(&self.io))
                .with_buffers(Arc::clone(&self.uploads)),
        ))
    }
}

/// Sets one gauge of the `metrics` facade per figure, named as the figure and labelled `scope` = `scope`
/// (feature `metrics`).
#[cfg(feature = "metrics")]
pub fn publish_metrics(figures: &[keyed_state_lsm::Metric], scope: &str) {
    for m in figures {
        metrics::gauge!(m.name.clone(), "scope" => scope.to_string()).set(m.value as f64);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod metrics_tests {
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    /// A recorder keeping the last value of every gauge, by name and labels.
    #[derive(Default)]
    struct Gauges(Arc<Mutex<Vec<(String, f64)>>>);

    struct Slot(String, Arc<Mutex<Vec<(String, f64)>>>);

    impl GaugeFn for Slot {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        fn set(&self, value: f64) {
            self.1.lock().unwrap().push((self.0.clone(), value));
        }
    }

    impl Recorder for Gauges {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            Gauge::from_arc(Arc::new(Slot(
                format!("{}{{{}}}", key.name(), labels.join(",")),
                Arc::clone(&self.0),
            )))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn the_environment_publishes_its_figures_as_labelled_gauges() {
        let env = super::StateEnv::new(super::StateEnvOptions {
            memory_budget: Some(32 << 20),
            ..super::StateEnvOptions::default()
        })
        .unwrap();
        let _r = env.memory().reserve(1 << 20);
        let rec = Gauges::default();
        metrics::with_local_recorder(&rec, || env.publish_metrics("slot-1"));
        let got = rec.0.lock().unwrap().clone();
        assert!(
            got.contains(&(
                "keyed-state.env.reserved{scope=slot-1}".to_string(),
                (1 << 20) as f64
            )),
            "{got:?}"
        );
        assert!(
            got.contains(&(
                "keyed-state.env.memory-budget{scope=slot-1}".to_string(),
                (32 << 20) as f64
            )),
            "{got:?}"
        );
        assert_eq!(got.len(), env.metrics().len());
    }
}

/// A size in bytes from `512MiB`, `1GiB`, `64M`, `2G`, `1.5KiB` or `4096` (binary units, case-insensitive;
/// no unit is bytes), as hosts take a memory budget on their command line. Anything else, or less than one
/// byte, is an [`Error::InvalidArgument`] naming the text.
pub fn parse_size(s: &str) -> Result<usize> {
    let bad = |why: String| Error::InvalidArgument(why);
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| bad(format!("{s:?} is not a size (e.g. 512MiB, 2GiB, 65536)")))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(bad(format!(
                "unknown size unit {other:?} in {s:?} (use KiB, MiB or GiB)"
            )))
        }
    };
    let bytes = n * mult;
    if !(bytes >= 1.0 && bytes < usize::MAX as f64) {
        return Err(bad(format!("{s:?} is not a size of at least one byte")));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_in_binary_units_and_bad_ones_say_why() {
        assert_eq!(parse_size("256MiB").ok(), Some(256 << 20));
        assert_eq!(parse_size("1g").ok(), Some(1 << 30));
        assert_eq!(parse_size("2G").ok(), Some(2 << 30));
        assert_eq!(parse_size("64 M").ok(), Some(64 << 20));
        assert_eq!(parse_size("64k").ok(), Some(64 << 10));
        assert_eq!(parse_size("4096").ok(), Some(4096));
        assert_eq!(parse_size("1.5KiB").ok(), Some(1536));
        assert_eq!(parse_size("1.5GiB").ok(), Some(3 << 29));
        let why = |s: &str| {
            parse_size(s)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            why("lots").contains("\"lots\" is not a size"),
            "{}",
            why("lots")
        );
        assert!(why("3 parsecs").contains("unknown size unit \"parsecs\""));
        assert!(why("0").contains("at least one byte"));
    }
}

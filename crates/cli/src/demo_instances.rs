//! `keyed-state demo --instances N`: the demo job as N operator instances (N key-group ranges) in one
//! process, every LSM backend on one `StateEnv` (shared background threads, and with `--memory-budget` one
//! memory budget), each event processed by the instance owning its key group. Prints throughput, peak
//! memory (`VmHWM`, and `RssAnon` sampled every 20 ms), threads and write stall time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keyed_state::backend::lsm::LsmEngine;
use keyed_state::env::{StateEnv, StateEnvOptions};
use keyed_state::keygroup::key_group_range_for_operator;
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state::Error;
use keyed_state_lsm::Options;

use crate::demo;
use crate::host_memory;

/// A field of `/proc/self/status` in KiB (0 where there is none).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One instance: its store, states and engine.
struct Instance {
    store: KeyedStateStore<LongSerializer>,
    states: demo::DemoStates,
    engine: LsmEngine,
}

/// Runs the demo job as `instances` instances on one environment.
pub fn run(
    instances: usize,
    memory_budget: Option<usize>,
    records: u64,
    seed: u64,
    allocator: &host_memory::Settings,
) -> Result<(), Error> {
    let max_p = demo::DEMO_MAX_PARALLELISM;
    if instances == 0 || instances > max_p as usize {
        return Err(Error::InvalidArgument(format!(
            "--instances {instances}: between 1 and the demo's max parallelism {max_p}"
        )));
    }
    let baseline = status_kib("RssAnon:");
    let peak = Arc::new(AtomicU64::new(baseline));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (Arc::clone(&peak), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(status_kib("RssAnon:"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let env = StateEnv::new(StateEnvOptions {
        memory_budget,
        ..StateEnvOptions::default()
    })?;
    let mut insts = Vec::with_capacity(instances);
    let mut owner = vec![0usize; max_p as usize];
    for i in 0..instances {
        let range = key_group_range_for_operator(max_p, instances as u32, i as u32)?;
        for kg in range.start()..=range.end() {
            if let Some(o) = owner.get_mut(kg as usize) {
                *o = i;
            }
        }
        let config = KeyedStateStore::config_for(&LongSerializer, max_p, range);
        let backend = env.temp_lsm(config, Options::default())?;
        let engine = backend.engine();
        let mut store = demo::store(Box::new(backend))?;
        let states = demo::register(&mut store)?;
        insts.push(Instance {
            store,
            states,
            engine,
        });
    }
    let start = Instant::now();
    for e in demo::events(seed, records) {
        let kg = insts[0].store.key_group_of(&e.user)?;
        let i = owner.get(kg as usize).copied().unwrap_or(0);
        let inst = &mut insts[i];
        demo::process(&mut inst.store, &inst.states, &e)?;
    }
    let secs = start.elapsed().as_secs_f64();
    let threads = status_kib("Threads:");
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let stalls: u64 = insts
        .iter()
        .map(|i| i.engine.stats().write_stall_micros)
        .sum();
    let mut entries = 0u64;
    for i in insts.iter_mut() {
        entries += i.store.num_entries()?;
    }
    let s = env.stats();
    let mib = |b: f64| b / (1024.0 * 1024.0);
    println!(
        "instances:      {instances} LSM backends on one environment ({} background threads)",
        s.background_threads
    );
    match memory_budget {
        Some(b) => println!(
            "memory budget:  {:.0} MiB (memtables {:.0} MiB of it)",
            mib(b as f64),
            mib(s.write_buffer_limit.unwrap_or(0) as f64)
        ),
        None => println!("memory budget:  none (each engine bounded by its own options)"),
    }
    println!("events:         {records}, seed {seed}");
    println!("allocator:      {allocator}");
    println!(
        "processing:     {:.2} s, {:.0} events/s",
        secs,
        records as f64 / secs.max(1e-9)
    );
    println!("state entries:  {entries}");
    println!(
        "peak memory:    RssAnon {:.0} MiB (before the engines: {:.0} MiB), VmHWM {:.0} MiB",
        peak.load(Ordering::Relaxed) as f64 / 1024.0,
        baseline as f64 / 1024.0,
        status_kib("VmHWM:") as f64 / 1024.0
    );
    let m = &s.memory;
    println!(
        "budget charges: {:.1} MiB now: memtables {:.1}, block cache {:.1}, SST metadata {:.1}, reserved {:.1}",
        mib(m.total() as f64),
        mib(m.memtables() as f64),
        mib(m.block_cache as f64),
        mib(m.sst_metadata as f64),
        mib(m.reserved as f64)
    );
    println!("threads:        {threads} in the process");
    println!(
        "write stalls:   {:.0} ms over all instances ({:.0} ms waiting for the memory budget)",
        stalls as f64 / 1000.0,
        s.write_buffer_stall_micros as f64 / 1000.0
    );
    Ok(())
}

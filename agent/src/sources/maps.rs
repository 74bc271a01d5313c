//! The kernel maps as a source: the counter blocks, the mirror sessions and the flows of a
//! loaded object, merged over CPUs (read at every poll; the loader owns the object).

use crate::sources::prog_run::flush_flow_cache;
use agent_common::ring::{slot_of, RingSlot, MAP_RING, RING_SLOTS};
use agent_common::{
    FlowKey, FlowKey4, FlowStats, Hook, HookCounters, HookSlot, SessionKey, SessionStats,
    MAP_COUNTERS, MAP_FLOWS, MAP_FLOWS4, MAP_SESSIONS,
};
use anyhow::{Context, Result};
use aya::maps::{PerCpuArray, PerCpuHashMap};
use aya::{Ebpf, Pod};
use rustc_hash::FxHashMap;

/// Every mirror session of an object, merged over CPUs.
pub fn read_sessions(ebpf: &Ebpf) -> Result<FxHashMap<SessionKey, SessionStats>> {
    let map = ebpf.map(MAP_SESSIONS).context("SESSIONS map missing")?;
    let sessions: PerCpuHashMap<_, SessionKey, SessionStats> = PerCpuHashMap::try_from(map)?;
    let mut out = FxHashMap::default();
    for (k, values) in sessions.iter().flatten() {
        let s: &mut SessionStats = out.entry(k).or_default();
        for v in values.iter() {
            s.merge(v);
        }
    }
    Ok(out)
}

/// The counter blocks of every hook of an object, summed over CPUs (each CPU's value is a
/// [`HookSlot`]: the block, then the kernel's working state, which is not read).
pub fn read_counters(ebpf: &Ebpf) -> Result<[HookCounters; Hook::COUNT]> {
    let map = ebpf.map(MAP_COUNTERS).context("COUNTERS map missing")?;
    let arr: PerCpuArray<_, HookSlot> = PerCpuArray::try_from(map)?;
    let mut out = [HookCounters::ZERO; Hook::COUNT];
    for h in Hook::ALL {
        let values = arr.get(&(h as u32), 0).context("read COUNTERS")?;
        for v in values.iter() {
            out[h as usize].add(&v.counters);
        }
    }
    Ok(out)
}

/// Every flow of an object (the IPv4 map and the IPv6 map), merged over CPUs, and the number
/// of entries that failed to read. The kernel's flow cache is flushed into the maps first
/// ([`flush_flow_cache`]); a flush that fails counts as one read error (the maps then lack
/// the packets still in the cache, which the next flush brings).
pub fn read_flows(ebpf: &Ebpf) -> Result<(Vec<(FlowKey, FlowStats)>, u64)> {
    let mut errors = 0;
    if let Err(e) = flush_flow_cache(ebpf) {
        log::debug!("{e:#}");
        errors += 1;
    }
    let mut out = Vec::new();
    errors += read_flow_map(ebpf, MAP_FLOWS4, FlowKey4::key, &mut out)?
        + read_flow_map(ebpf, MAP_FLOWS, |k: &FlowKey| *k, &mut out)?;
    Ok((out, errors))
}

/// One flow map's flows, under their full keys, appended to `out`; returns the entries that
/// failed to read. Uses BPF_MAP_LOOKUP_BATCH (a few syscalls for the whole map); falls back to
/// walking the keys (two syscalls per flow) on kernels without batch support.
fn read_flow_map<K: Pod + Default>(
    ebpf: &Ebpf,
    name: &str,
    full: impl Fn(&K) -> FlowKey,
    out: &mut Vec<(FlowKey, FlowStats)>,
) -> Result<u64> {
    let map = ebpf
        .map(name)
        .with_context(|| format!("{name} map missing"))?;
    if let aya::maps::Map::PerCpuLruHashMap(data) | aya::maps::Map::PerCpuHashMap(data) = map {
        use std::os::fd::{AsFd, AsRawFd};
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        let start = out.len();
        let read = crate::sources::batch::lookup_percpu::<K, FlowStats>(
            data.fd().as_fd().as_raw_fd(),
            cpus,
            |k, values| out.push((full(k), merged(values))),
        );
        match read {
            Ok(()) => return Ok(0),
            Err(e) => {
                out.truncate(start);
                log::debug!("batch lookup unavailable ({e}); walking the keys");
            }
        }
    }
    // Key by key (an LRU map can evict a key between the key walk and the lookup, which
    // counts as a read error).
    let flows: PerCpuHashMap<_, K, FlowStats> = PerCpuHashMap::try_from(map)?;
    let mut errors = 0;
    for item in flows.iter() {
        match item {
            Ok((k, values)) => out.push((full(&k), merged(&values))),
            Err(_) => errors += 1,
        }
    }
    Ok(errors)
}

/// One flow's per-CPU values as one.
fn merged(values: &[FlowStats]) -> FlowStats {
    let mut s = FlowStats::default();
    for v in values {
        s.merge(v);
    }
    s
}

/// The kernel's monotonic clock in milliseconds (`bpf_ktime_get_ns` reads the same clock).
pub fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// The resolution of the kernel's coarse monotonic clock (`bpf_ktime_get_coarse_ns` reads the
/// same clock): one tick, 1 ms at HZ=1000, 4 ms at HZ=250. `u64::MAX` if unknown.
pub fn coarse_clock_resolution_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    if unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return u64::MAX;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// RoCE packets and bytes per millisecond from `from_ms` to `to_ms` (inclusive) out of the
/// ring ([`agent_common::ring`]), summed over CPUs; a slot of another lap held nothing then.
/// At most [`RING_SLOTS`] milliseconds back from `to_ms` can be had: `from_ms` is raised to
/// that (the caller counts what it lost).
pub fn read_ring(ebpf: &Ebpf, from_ms: u64, to_ms: u64) -> Result<Vec<(u64, u64)>> {
    let map = ebpf.map(MAP_RING).context("RING map missing")?;
    let arr: PerCpuArray<_, RingSlot> = PerCpuArray::try_from(map)?;
    let from = from_ms.max(to_ms.saturating_sub(u64::from(RING_SLOTS) - 1));
    let mut out = Vec::with_capacity(to_ms.saturating_sub(from) as usize + 1);
    for ms in from..=to_ms {
        let values = arr.get(&slot_of(ms), 0).context("read RING")?;
        let (mut p, mut b) = (0, 0);
        for v in values.iter() {
            if let Some((vp, vb)) = v.at(ms) {
                p += vp;
                b += vb;
            }
        }
        out.push((p, b));
    }
    Ok(out)
}

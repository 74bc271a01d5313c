//! The kernel maps as a source: the counter blocks, the mirror sessions and the flows of a
//! loaded object, merged over CPUs (read at every poll; the loader owns the object).

use crate::sources::prog_run::flush_flow_cache;
use agent_common::cache_mode::FlushState;
use agent_common::flow_cache::{
    key_of, CachedFlow, DIRTY, FLOW_CACHE_SLOTS, MAP_FLOW_CACHE, MAP_FLOW_FLUSHING,
};
use agent_common::ring::{slot_of, RingSlot, LANES, MAP_RING, RING_SLOTS};
use agent_common::{
    FlowKey, FlowKey4, FlowStats, Hook, HookCounters, HookSlot, SessionKey, SessionStats,
    MAP_COUNTERS, MAP_FLOWS, MAP_FLOWS4, MAP_FLOWS_OUT, MAP_SESSIONS,
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
/// of entries that failed to read. The kernel's flow cache is flushed into the maps first, on
/// every online CPU ([`flush_flow_cache`]). A CPU that is offline (or that the flush could not
/// reach) runs no program, so its cache slots hold still: their counts not yet written back are
/// read from here and added to that CPU's values, so its packets are not held back until it
/// returns.
pub fn read_flows(ebpf: &Ebpf) -> Result<(Vec<(FlowKey, FlowStats)>, u64)> {
    let online = aya::util::online_cpus()
        .map_err(|(_, e)| e)
        .context("read the online CPUs")?;
    read_flows_with(ebpf, &online)
}

/// A flow's counts in the cache slots of CPUs read from userspace: `(cpu, slot state)`.
type Held = FxHashMap<FlowKey, Vec<(usize, FlowStats)>>;

/// [`read_flows`] with `online` taken as the online CPUs (tests pretend a CPU is offline).
pub fn read_flows_with(ebpf: &Ebpf, online: &[u32]) -> Result<(Vec<(FlowKey, FlowStats)>, u64)> {
    let mut errors = 0;
    let missed = flush_flow_cache(ebpf, online);
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    let unflushed: Vec<usize> = (0..cpus)
        .filter(|&c| {
            let c = c as u32;
            !online.contains(&c) || missed.contains(&c)
        })
        .collect();
    let mut held = Held::default();
    if !unflushed.is_empty() {
        match held_slots(ebpf, &unflushed) {
            Ok(h) => held = h,
            Err(e) => {
                log::debug!("{e:#}");
                errors += 1;
            }
        }
    }
    let mut out = Vec::new();
    errors += read_flow_map(ebpf, MAP_FLOWS4, FlowKey4::key, cpus, &mut held, &mut out)?
        + read_flow_map(ebpf, MAP_FLOWS, |k: &FlowKey| *k, cpus, &mut held, &mut out)?;
    // An object from before the map of sent flows (under `--ab`) has none.
    if ebpf.map(MAP_FLOWS_OUT).is_some() {
        errors += read_flow_map(
            ebpf,
            MAP_FLOWS_OUT,
            |k: &FlowKey| *k,
            cpus,
            &mut held,
            &mut out,
        )?;
    }
    // A held flow its map no longer has (deleted since it was cached): its slots alone.
    for (key, slots) in held {
        out.push((key, merged(&[], &slots)));
    }
    Ok((out, errors))
}

/// The changed cache slots of the CPUs `cpus` (none runs a program now) that ever counted a
/// frame (the others hold nothing: reading their slots would cost a copy of every slot of
/// every possible CPU), by flow.
fn held_slots(ebpf: &Ebpf, cpus: &[usize]) -> Result<Held> {
    let mut out = Held::default();
    let counters = ebpf.map(MAP_COUNTERS).context("COUNTERS map missing")?;
    let counters: PerCpuArray<_, HookSlot> = PerCpuArray::try_from(counters)?;
    let mut counted = Vec::new();
    for h in Hook::ALL {
        let values = counters.get(&(h as u32), 0).context("read COUNTERS")?;
        counted.extend(
            cpus.iter()
                .copied()
                .filter(|&c| values.get(c).is_some_and(|v| v.counters.frames > 0)),
        );
    }
    if counted.is_empty() {
        return Ok(out);
    }
    // An object from before the cache (under `--ab`) has none.
    let Some(cache) = ebpf.map(MAP_FLOW_CACHE) else {
        return Ok(out);
    };
    let cache: PerCpuArray<_, CachedFlow> = PerCpuArray::try_from(cache)?;
    for slot in 0..FLOW_CACHE_SLOTS {
        let values = cache.get(&slot, 0).context("read FLOW_CACHE")?;
        for &cpu in &counted {
            if let Some(v) = values.get(cpu).filter(|v| v.state == DIRTY) {
                let slots = out.entry(key_of(&v.key)).or_default();
                if !slots.iter().any(|(c, _)| *c == cpu) {
                    slots.push((cpu, v.stats));
                }
            }
        }
    }
    Ok(out)
}

/// One flow map's flows (`cpus`: the possible CPUs, one value each), under their full keys,
/// appended to `out` (a flow in `held` with its held slots' counts added, and taken out of
/// it); returns the entries that failed to read. Uses BPF_MAP_LOOKUP_BATCH (a few syscalls for the whole map); falls back to
/// walking the keys (two syscalls per flow) on kernels without batch support.
fn read_flow_map<K: Pod + Default>(
    ebpf: &Ebpf,
    name: &str,
    full: impl Fn(&K) -> FlowKey,
    cpus: usize,
    held: &mut Held,
    out: &mut Vec<(FlowKey, FlowStats)>,
) -> Result<u64> {
    let map = ebpf
        .map(name)
        .with_context(|| format!("{name} map missing"))?;
    let entry = |k: &K, values: &[FlowStats]| {
        let key = full(k);
        let slots = held.get(&key).map_or(&[][..], Vec::as_slice);
        (key, merged(values, slots))
    };
    let mut got = Vec::new();
    let mut errors = 0;
    let mut batched = false;
    if let aya::maps::Map::PerCpuLruHashMap(data) | aya::maps::Map::PerCpuHashMap(data) = map {
        use std::os::fd::{AsFd, AsRawFd};
        match crate::sources::batch::lookup_percpu::<K, FlowStats>(
            data.fd().as_fd().as_raw_fd(),
            cpus,
            |k, values| got.push(entry(k, values)),
        ) {
            Ok(()) => batched = true,
            Err(e) => log::debug!("batch lookup unavailable ({e}); walking the keys"),
        }
    }
    if !batched {
        // What a failed batch read is dropped; key by key (a key deleted between the key walk
        // and the lookup counts as a read error).
        got.clear();
        let flows: PerCpuHashMap<_, K, FlowStats> = PerCpuHashMap::try_from(map)?;
        for item in flows.iter() {
            match item {
                Ok((k, values)) => got.push(entry(&k, &values)),
                Err(_) => errors += 1,
            }
        }
    }
    for (key, _) in &got {
        held.remove(key);
    }
    out.append(&mut got);
    Ok(errors)
}

/// Deletes `keys` from their flow map (the host's sent flows' map, else their family's: the
/// agent's idle timeout, which keeps room in the maps so that new flows push nothing out). Returns the flows deleted and the deletions that
/// failed for another reason than the flow being gone already.
pub fn delete_flows(ebpf: &mut Ebpf, keys: &[FlowKey]) -> Result<(u64, u64)> {
    let (mut deleted, mut errors) = (0, 0);
    let (out, incoming): (Vec<&FlowKey>, Vec<&FlowKey>) =
        keys.iter().partition(|k| Hook::sends(k.hook));
    let (v4, v6): (Vec<&FlowKey>, Vec<&FlowKey>) =
        incoming.into_iter().partition(|k| k.ip_version == 4);
    let mut count = |r: Result<(), aya::maps::MapError>| match r {
        Ok(()) => deleted += 1,
        Err(e) if gone(&e) => {}
        Err(e) => {
            log::debug!("delete an idle flow: {e}");
            errors += 1;
        }
    };
    if !v4.is_empty() {
        let map = ebpf.map_mut(MAP_FLOWS4).context("FLOWS4 map missing")?;
        let mut m: PerCpuHashMap<_, FlowKey4, FlowStats> = PerCpuHashMap::try_from(map)?;
        for k in v4 {
            count(m.remove(&FlowKey4::of(k)));
        }
    }
    for (name, keys) in [(MAP_FLOWS, v6), (MAP_FLOWS_OUT, out)] {
        if keys.is_empty() {
            continue;
        }
        let map = ebpf
            .map_mut(name)
            .with_context(|| format!("{name} map missing"))?;
        let mut m: PerCpuHashMap<_, FlowKey, FlowStats> = PerCpuHashMap::try_from(map)?;
        for k in keys {
            count(m.remove(k));
        }
    }
    Ok((deleted, errors))
}

/// Whether a flow read from the maps has had no packet since `before_ns`. A flow without a
/// last-seen time is never idle: its value was read while a CPU counted its first packet
/// (the reads are unlocked), so it is new, not quiet.
pub fn idle(s: &FlowStats, before_ns: u64) -> bool {
    s.last_seen_ns != 0 && s.last_seen_ns < before_ns
}

/// Whether a failed delete found the key gone already (ENOENT).
fn gone(e: &aya::maps::MapError) -> bool {
    match e {
        aya::maps::MapError::KeyNotFound => true,
        aya::maps::MapError::SyscallError(s) => s.io_error.raw_os_error() == Some(libc::ENOENT),
        _ => false,
    }
}

/// One flow's per-CPU values as one, with the `held` slots' counts (those not yet written
/// back into the map) added.
fn merged(values: &[FlowStats], held: &[(usize, FlowStats)]) -> FlowStats {
    let mut s = FlowStats::default();
    for v in values.iter().chain(held.iter().map(|(_, h)| h)) {
        s.merge(v);
    }
    s
}

/// The kernel's monotonic clock in nanoseconds (`bpf_ktime_get_ns` reads the same clock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The kernel's monotonic clock in milliseconds.
pub fn monotonic_ms() -> u64 {
    monotonic_ns() / 1_000_000
}

/// What to add to a time of the kernel's monotonic clock (a flow's first and last seen) to
/// make it Unix time, nanoseconds: the API says times since the epoch, as `analyze` does.
pub fn monotonic_to_unix_ns() -> u64 {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    unix.saturating_sub(monotonic_ns())
}

pub use crate::config::switches::coarse_clock_resolution_ns;

/// One millisecond of the ring, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingMs {
    pub packets: u64,
    pub bytes: u64,
    /// Per source lane ([`agent_common::ring::lane_of`]), in [`agent_common::ring::LANE_UNIT`]s.
    pub lanes: [u64; LANES],
}

/// RoCE packets and bytes per millisecond from `from_ms` to `to_ms` (inclusive) out of the
/// ring ([`agent_common::ring`]), summed over CPUs; a slot of another lap held nothing then.
/// At most [`RING_SLOTS`] milliseconds back from `to_ms` can be had: `from_ms` is raised to
/// that (the caller counts what it lost).
pub fn read_ring(ebpf: &Ebpf, from_ms: u64, to_ms: u64) -> Result<Vec<RingMs>> {
    let map = ebpf.map(MAP_RING).context("RING map missing")?;
    let arr: PerCpuArray<_, RingSlot> = PerCpuArray::try_from(map)?;
    let from = from_ms.max(to_ms.saturating_sub(u64::from(RING_SLOTS) - 1));
    let mut out = Vec::with_capacity(to_ms.saturating_sub(from) as usize + 1);
    for ms in from..=to_ms {
        let values = arr.get(&slot_of(ms), 0).context("read RING")?;
        let mut m = RingMs::default();
        for v in values.iter() {
            if let Some((vp, vb)) = v.at(ms) {
                m.packets += vp;
                m.bytes += vb;
                for (sum, &u) in m.lanes.iter_mut().zip(v.lanes.iter()) {
                    *sum += u64::from(u);
                }
            }
        }
        out.push(m);
    }
    Ok(out)
}

/// The online CPUs whose flow cache is on, draining and off
/// ([`agent_common::cache_mode`]), as the flush left them. An object without the cache's
/// state (a build from before it, or before its present layout) has every CPU on.
pub fn cache_modes(ebpf: &Ebpf) -> Result<[u64; 3]> {
    let online = aya::util::online_cpus()
        .map_err(|(_, e)| e)
        .context("read the online CPUs")?;
    let mut out = [0u64; 3];
    let Some(map) = ebpf.map(MAP_FLOW_FLUSHING) else {
        out[0] = online.len() as u64;
        return Ok(out);
    };
    // A build from before the state's present layout (under `--ab`): its modes are not read.
    let Ok(states) = PerCpuArray::<_, FlushState>::try_from(map) else {
        out[0] = online.len() as u64;
        return Ok(out);
    };
    let values = states.get(&0, 0)?;
    for cpu in online {
        let mode = values.get(cpu as usize).map_or(0, |s| s.mode) as usize;
        out[mode.min(2)] += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packets(n: u64) -> FlowStats {
        FlowStats {
            packets: n,
            ..FlowStats::default()
        }
    }

    #[test]
    fn per_cpu_values_are_summed() {
        assert_eq!(merged(&[packets(1), packets(2)], &[]).packets, 3);
    }

    #[test]
    fn a_held_slot_adds_its_counts_to_its_cpu_s_value() {
        let s = merged(&[packets(1), packets(2), packets(4)], &[(1, packets(20))]);
        assert_eq!(s.packets, 27);
    }

    #[test]
    fn held_states_alone_make_a_flow_the_map_no_longer_has() {
        assert_eq!(merged(&[], &[(0, packets(3)), (5, packets(4))]).packets, 7);
    }
}

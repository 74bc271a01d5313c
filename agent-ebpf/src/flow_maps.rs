//! The kernel's flow maps and per-CPU slots, as the counting sequence's store reaches them:
//! this CPU's hook slot, the load-time switches, a flow's value in its map (the host's sent
//! flows apart, else its family's)
//! (inserted with its first packet when new; a full map pushes out the flows nobody looked up
//! first, then the least recently used) and the flow step on it. Shared by the counting
//! entry ([`crate::count`]) and the flow cache's miss and write-back paths
//! ([`crate::flow_cache`]).

pub use crate::hook_slot::{on, slot};
use crate::{FLOWS, FLOWS4, FLOWS_OUT, SCRATCH};
use agent_common::count::flow_step;
use agent_common::{FlowKey4, FlowStats, Hook, HookCounters, PacketRecord};
use aya_ebpf::{bindings::BPF_NOEXIST, maps::LruPerCpuHashMap};

/// Load-time switch: PSN tracking (gaps, retransmissions per flow), set by the loader before
/// the verifier runs (off: pruned).
#[no_mangle]
static ROCEMON_TRACK_PSN: u8 = 1;

/// Whether flows track PSNs.
#[inline(always)]
pub fn psn_on() -> bool {
    on(&ROCEMON_TRACK_PSN)
}

/// Counts a RoCE packet into its flow's state and the flow events into the counter block.
#[inline(always)]
pub fn flow_record(
    s: &mut FlowStats,
    rec: &PacketRecord,
    c: &mut HookCounters,
    frame_len: u64,
    now: u64,
) {
    let ev = flow_step(s, rec, c, frame_len, now, psn_on());
    if ev.psn.gap != 0 {
        // What other CPUs counted of the gap was not lost (see `crate::psn_cpus`).
        let covered = u64::from(crate::psn_cpus::rocemon_psn_covered(
            rec.key.hook as u32,
            ev.psn.gap,
        ));
        s.psn_gaps = s.psn_gaps.saturating_sub(covered);
        c.psn_gaps = c.psn_gaps.saturating_sub(covered);
    }
}

/// Counts a RoCE packet in its flow map, without the cache. `hook` is the record's (passed
/// apart: a constant where the entry program inlines this, so each program keeps only the
/// maps it can reach). Returns true when the map
/// refused the flow (counted in `flow_update_errors`).
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(always)]
pub fn flow_to_map(
    rec: &PacketRecord,
    hook: Hook,
    c: &mut HookCounters,
    frame_len: u64,
    now: u64,
) -> bool {
    let refused = if Hook::sends(hook as u8) {
        to_map(&FLOWS_OUT, &rec.key, rec, c, frame_len, now)
    } else if rec.key.ip_version == 4 {
        to_map(&FLOWS4, &FlowKey4::of(&rec.key), rec, c, frame_len, now)
    } else {
        to_map(&FLOWS, &rec.key, rec, c, frame_len, now)
    };
    if refused {
        c.flow_update_errors += 1;
    }
    refused
}

/// This CPU's value of the packet's flow in its family's map, if the map holds the flow
/// (looked up: the LRU map marks it used).
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(always)]
pub fn flow_value_of(rec: &PacketRecord, hook: Hook) -> Option<*mut FlowStats> {
    if Hook::sends(hook as u8) {
        FLOWS_OUT.get_ptr_mut(&rec.key)
    } else if rec.key.ip_version == 4 {
        FLOWS4.get_ptr_mut(&FlowKey4::of(&rec.key))
    } else {
        FLOWS.get_ptr_mut(&rec.key)
    }
}

/// Inserts the packet's flow, empty, when its map does not hold it (counted as created),
/// never looking it up (see [`to_map`]): a flow cache slot counts it from there.
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(always)]
pub fn flow_new(rec: &PacketRecord, hook: Hook, c: &mut HookCounters, empty: &FlowStats) {
    let inserted = if Hook::sends(hook as u8) {
        FLOWS_OUT.insert(&rec.key, empty, BPF_NOEXIST as u64)
    } else if rec.key.ip_version == 4 {
        FLOWS4.insert(&FlowKey4::of(&rec.key), empty, BPF_NOEXIST as u64)
    } else {
        FLOWS.insert(&rec.key, empty, BPF_NOEXIST as u64)
    };
    if inserted.is_ok() {
        c.flows_created += 1;
    }
}

/// [`flow_to_map`] in `map`: a held flow is counted in this CPU's value (the lookup marks it
/// used); a new one is counted into the scratch value and inserted with its first packet,
/// never looked up. The full LRU map pushes out the elements nobody looked up first, so the
/// flows seen once (a flood of spoofed 5-tuples) go before any flow seen again. Where another
/// CPU inserted the flow in between, the packet's record goes into this CPU's value of that
/// element (zero until then). Returns true when the map refused the flow.
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(always)]
fn to_map<K>(
    map: &LruPerCpuHashMap<K, FlowStats>,
    key: &K,
    rec: &PacketRecord,
    c: &mut HookCounters,
    frame_len: u64,
    now: u64,
) -> bool {
    if let Some(s) = map.get_ptr_mut(key) {
        // SAFETY: this CPU's value of an element of the map; BPF programs do not preempt
        // each other on a CPU.
        flow_record(unsafe { &mut *s }, rec, c, frame_len, now);
        return false;
    }
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: this CPU's scratch slot, zeroed in place (a `FlowStats` does not fit on the
    // stack next to the record); the map copies the value.
    let first = unsafe {
        core::ptr::write_bytes(scratch, 0, 1);
        &mut *scratch
    };
    flow_record(first, rec, c, frame_len, now);
    if map.insert(key, &*first, BPF_NOEXIST as u64).is_ok() {
        c.flows_created += 1;
        return false;
    }
    let Some(v) = map.get_ptr_mut(key) else {
        return true;
    };
    // SAFETY: as above.
    unsafe { (*v).merge(first) };
    false
}

//! The kernel's flow maps and per-CPU slots, as the counting sequence's store reaches them:
//! this CPU's hook slot, the load-time switches, a flow's value in its family's map
//! (created zeroed when new; a full map pushes out its least recently used flow) and the flow step on it. Shared by the counting entry
//! ([`crate::count`]) and the flow cache's miss and write-back paths ([`crate::flow_cache`]).

pub use crate::hook_slot::{on, slot};
use crate::{FLOWS, FLOWS4, SCRATCH};
use agent_common::count::flow_step;
use agent_common::{FlowKey4, FlowStats, HookCounters, PacketRecord};
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

/// Counts a RoCE packet in its flow map, without the cache. Returns true when the map
/// refused the flow (counted in `flow_update_errors`).
#[inline(always)]
pub fn flow_to_map(rec: &PacketRecord, c: &mut HookCounters, frame_len: u64, now: u64) -> bool {
    let Some(s) = flow_slot_of(rec, c) else {
        c.flow_update_errors += 1;
        return true;
    };
    // SAFETY: this CPU's value of an element of the map; BPF programs do not preempt each
    // other on a CPU.
    flow_record(unsafe { &mut *s }, rec, c, frame_len, now);
    false
}

/// This CPU's value of the packet's flow in its family's map (see [`flow_slot`]).
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(always)]
pub fn flow_slot_of(rec: &PacketRecord, c: &mut HookCounters) -> Option<*mut FlowStats> {
    if rec.key.ip_version == 4 {
        flow_slot(&FLOWS4, &FlowKey4::of(&rec.key), c)
    } else {
        flow_slot(&FLOWS, &rec.key, c)
    }
}

/// This CPU's value of the flow `key` in `map`: looked up, else inserted zeroed
/// (`BPF_NOEXIST`: another CPU may insert it in between, then its element is used) and looked
/// up again, so the packet is counted in one place. `None` when the map refused the flow.
#[inline(always)]
fn flow_slot<K>(
    map: &LruPerCpuHashMap<K, FlowStats>,
    key: &K,
    c: &mut HookCounters,
) -> Option<*mut FlowStats> {
    if let Some(s) = map.get_ptr_mut(key) {
        return Some(s);
    }
    let scratch = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's scratch slot, zeroed in place (a `FlowStats` does not fit on the
    // stack next to the record); the map copies the value.
    let zeroed = unsafe {
        core::ptr::write_bytes(scratch, 0, 1);
        &*scratch
    };
    if map.insert(key, zeroed, BPF_NOEXIST as u64).is_ok() {
        c.flows_created += 1;
    }
    map.get_ptr_mut(key)
}

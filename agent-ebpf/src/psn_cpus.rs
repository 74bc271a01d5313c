//! PSN gaps judged per flow, not per CPU. The flow maps are per-CPU, and each CPU keeps its
//! own expected PSN for a flow: when a flow's packets are counted on more than one CPU (a
//! veth or tc egress sender that moves between CPUs), each CPU sees a gap where the other
//! counted the packets. A gap is therefore reconciled before it counts: the other CPUs'
//! states of the flow (their map value and their flow cache slot, read with
//! `bpf_map_lookup_percpu_elem`) that expect a PSN inside the gap saw that part of it, which
//! was not lost ([`agent_common::psn::gap_covered`]). Only on a gap (rare where nothing is
//! lost): the hot path pays one branch.

use crate::hook_slot::slot;
use crate::{FLOWS, FLOWS4, FLOWS_OUT, FLOW_CACHE};
use agent_common::flow_cache::{same_key, slot_of, CachedFlow, CLEAN, DIRTY};
use agent_common::psn::{gap_covered, PsnTrack};
use agent_common::{FlowKey4, FlowStats, Hook, HookSlot};
use aya_ebpf::cty::c_void;
use aya_ebpf::helpers::{bpf_get_smp_processor_id, bpf_map_lookup_percpu_elem};

/// The possible CPUs, set by the loader ([`agent_common::GLOBAL_NR_CPUS`]); 0: none is
/// consulted (an object loaded without it judges per CPU).
#[no_mangle]
static ROCEMON_NR_CPUS: u32 = 0;

/// CPUs consulted at most (the verifier walks each iteration of the loop).
const MAX_CPUS: u32 = 256;

/// The packets of a gap of `gap` the other CPUs counted, for the packet in `hook`'s record
/// on this CPU. Takes only scalars (a global function): the packet is in this CPU's record.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rocemon_psn_covered(hook: u32, gap: u32) -> u32 {
    let Some(HookSlot { record: rec, .. }) = slot(Hook::from_u32(hook)) else {
        return 0;
    };
    // SAFETY: a valid reference to a static the loader may have rewritten.
    let cpus = unsafe { core::ptr::read_volatile(&ROCEMON_NR_CPUS) };
    // SAFETY: the helper has no preconditions.
    let me = unsafe { bpf_get_smp_processor_id() };
    let psn = rec.psn();
    let words = rec.key_words();
    let slot = slot_of(&words);
    let key4 = FlowKey4::of(&rec.key);
    let v4 = rec.key.ip_version == 4;
    let out = Hook::sends(rec.key.hook);
    let mut best = 0;
    let mut judge = |t: &PsnTrack| {
        if t.valid != 0 {
            best = best.max(gap_covered(psn, gap, t.expected));
        }
    };
    for cpu in 0..MAX_CPUS {
        if cpu >= cpus {
            break;
        }
        if cpu == me {
            continue;
        }
        // SAFETY: the maps' definitions and keys of their types; the helper returns null or
        // that CPU's value.
        let v = unsafe {
            if out {
                bpf_map_lookup_percpu_elem(
                    core::ptr::addr_of!(FLOWS_OUT) as *mut c_void,
                    core::ptr::addr_of!(rec.key) as *const c_void,
                    cpu,
                )
            } else if v4 {
                bpf_map_lookup_percpu_elem(
                    core::ptr::addr_of!(FLOWS4) as *mut c_void,
                    core::ptr::addr_of!(key4) as *const c_void,
                    cpu,
                )
            } else {
                bpf_map_lookup_percpu_elem(
                    core::ptr::addr_of!(FLOWS) as *mut c_void,
                    core::ptr::addr_of!(rec.key) as *const c_void,
                    cpu,
                )
            }
        } as *const FlowStats;
        if !v.is_null() {
            // SAFETY: another CPU's value of the element (read racily: a judgement's sample).
            judge(unsafe { &(*v).psn });
        }
        // SAFETY: as above, the cache's slot on that CPU.
        let e = unsafe {
            bpf_map_lookup_percpu_elem(
                core::ptr::addr_of!(FLOW_CACHE) as *mut c_void,
                core::ptr::addr_of!(slot) as *const c_void,
                cpu,
            )
        } as *const CachedFlow;
        if !e.is_null() {
            // SAFETY: as above.
            let c = unsafe { &*e };
            if (c.state == CLEAN || c.state == DIRTY) && same_key(&c.key, &words) {
                judge(&c.stats.psn);
            }
        }
    }
    best
}

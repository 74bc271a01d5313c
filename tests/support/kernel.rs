//! Set-up shared by the kernel test files (`kernel.rs`, `kernel_ring.rs`,
//! `kernel_flow_cache.rs`).
// Each including crate uses a part of it.
#![allow(dead_code)]

use agent_common::FlowStats;
use rocemon::kernel::loader;
use rocemon_testkit::require_root;

/// Whether this test can load programs (as root; else it says why and the test skips), with
/// the memlock limit raised and, when `pinned`, the test thread on one CPU (a test run then
/// counts into one CPU's slot of the per-CPU maps).
pub fn ready(pinned: bool) -> bool {
    if !require_root("a kernel test (CAP_BPF, to load programs)") {
        return false;
    }
    loader::raise_memlock();
    if pinned {
        crate::testrun::pin_to_one_cpu().unwrap();
    }
    true
}

/// Flow stats without the clock fields, which only the kernel sets.
pub fn comparable(s: &FlowStats) -> FlowStats {
    FlowStats {
        first_seen_ns: 0,
        last_seen_ns: 0,
        ..*s
    }
}

/// The object with `flow_entries` per flow map and `switches`, its XDP programs loaded (the
/// verifier has run; nothing is attached).
pub fn xdp_object(flow_entries: u32, switches: loader::Switches) -> aya::Ebpf {
    let mut ebpf = loader::load_object_with(flow_entries, switches).unwrap();
    loader::load_programs(&mut ebpf, &[agent_common::Hook::Xdp]).unwrap();
    ebpf
}

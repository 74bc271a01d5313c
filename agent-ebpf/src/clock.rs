//! The packet clock through this CPU's cache ([`agent_common::clock`]): the inlined tick
//! counter first, the clock helper only when the cached reading may not serve.

use agent_common::clock::{ClockCache, CLOCK_COARSE, CLOCK_FINE, CLOCK_SLOTS, FINE_REUSES};
use aya_ebpf::{
    helpers::{bpf_jiffies64, bpf_ktime_get_coarse_ns, bpf_ktime_get_ns},
    macros::map,
    maps::PerCpuArray,
};

/// One cached reading per clock and CPU.
#[map]
static CLOCK: PerCpuArray<ClockCache> = PerCpuArray::with_max_entries(CLOCK_SLOTS, 0);

/// The fine clock (CLOCK_MONOTONIC) as `(ns, ms)`, read on one packet in `FINE_REUSES + 1`
/// and at each tick (the ring's milliseconds).
#[inline(always)]
pub fn fine() -> (u64, u64) {
    // SAFETY: the helpers have no preconditions.
    cached(CLOCK_FINE, FINE_REUSES, || unsafe { bpf_ktime_get_ns() })
}

/// The coarse clock (the time of the last tick) as `(ns, ms)`, read once per tick.
#[inline(always)]
pub fn coarse() -> (u64, u64) {
    // SAFETY: the helper has no preconditions.
    cached(CLOCK_COARSE, u32::MAX, || unsafe {
        bpf_ktime_get_coarse_ns()
    })
}

#[inline(always)]
fn cached(slot: u32, max_reuses: u32, read: impl Fn() -> u64) -> (u64, u64) {
    // SAFETY: the helper has no preconditions (inlined by the verifier: one load).
    let jiffies = unsafe { bpf_jiffies64() };
    let Some(c) = CLOCK.get_ptr_mut(slot) else {
        return ClockCache::default().store(jiffies, read());
    };
    // SAFETY: this CPU's slot; an interrupting program is handled by the write order (see
    // `agent_common::clock`).
    let c = unsafe { &mut *c };
    match c.reuse(jiffies, max_reuses) {
        Some(r) => r,
        None => c.store(jiffies, read()),
    }
}

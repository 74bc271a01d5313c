//! The packet clock through this CPU's cache ([`agent_common::clock`]): the inlined tick
//! counter first, the clock helper only when the cached reading may not serve.

use agent_common::clock::{ClockCache, Reuse};
use aya_ebpf::helpers::{bpf_jiffies64, bpf_ktime_get_coarse_ns, bpf_ktime_get_ns};

/// The fine clock (CLOCK_MONOTONIC) as `(ns, ms)` through this CPU's cache `c` (in the hook's
/// [`agent_common::HookSlot`]): read by every packet, or by one in eight while this CPU's
/// packets are dense, and at each tick (the ring's milliseconds).
#[inline(always)]
pub fn fine(c: &mut ClockCache) -> (u64, u64) {
    // SAFETY: the helper has no preconditions.
    cached(c, Reuse::WhileDense, || unsafe { bpf_ktime_get_ns() })
}

/// The coarse clock (the time of the last tick) as `(ns, ms)` through this CPU's cache `c`,
/// read once per tick.
#[inline(always)]
pub fn coarse(c: &mut ClockCache) -> (u64, u64) {
    // SAFETY: the helper has no preconditions.
    cached(c, Reuse::WithinTick, || unsafe {
        bpf_ktime_get_coarse_ns()
    })
}

/// This CPU's cache `c` of one clock, or a fresh reading when it may not serve. An
/// interrupting program is handled by the write order (see `agent_common::clock`).
#[inline(always)]
fn cached(c: &mut ClockCache, policy: Reuse, read: impl Fn() -> u64) -> (u64, u64) {
    // SAFETY: the helper has no preconditions (inlined by the verifier: one load).
    let jiffies = unsafe { bpf_jiffies64() };
    match c.reuse(jiffies) {
        Some(r) => r,
        None => c.store(jiffies, read(), policy),
    }
}

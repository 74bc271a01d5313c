//! This CPU's count of elements inserted into the flow maps (both families, every hook): how
//! far the LRU maps have turned over since a cached flow's element was last looked up (see
//! [`crate::flow_cache::refresh`]). A heuristic's count: an insert by the flush that a packet
//! interrupts may be lost, which only moves a lookup by one insert.

use aya_ebpf::{macros::map, maps::PerCpuArray};

#[map]
static CHURN: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Load-time global ([`agent_common::flow_cache::GLOBAL_REF_EVERY`]): the loader sets it
/// from the maps' sizes and the CPUs
/// ([`agent_common::flow_cache::ref_every`]); this default fits the default sizes.
#[no_mangle]
static ROCEMON_REF_EVERY: u32 = 512;

/// An element was inserted into a flow map on this CPU.
#[inline(always)]
pub fn inserted() {
    if let Some(n) = CHURN.get_ptr_mut(0) {
        // SAFETY: this CPU's value.
        unsafe { *n += 1 };
    }
}

/// This CPU's inserts so far.
#[inline(always)]
pub fn count() -> u64 {
    CHURN.get(0).copied().unwrap_or(0)
}

/// Inserts between two lookups of a cached flow's element.
#[inline(always)]
pub fn every() -> u64 {
    // SAFETY: a valid reference to a static the loader may have rewritten.
    u64::from(unsafe { core::ptr::read_volatile(&ROCEMON_REF_EVERY) })
}

//! The pause ring ([`agent_common::pause_ring`]): every PFC and PAUSE frame with its time,
//! per CPU, for the agent's union of the pause intervals.

use agent_common::headers::mac_control::MacControl;
use agent_common::pause_ring::{slot_of, PauseEvent, PAUSE_RING_SLOTS};
use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray};

/// This CPU's frames, slot `n % PAUSE_RING_SLOTS` the `n`-th.
#[map]
static PAUSE_RING: PerCpuArray<PauseEvent> = PerCpuArray::with_max_entries(PAUSE_RING_SLOTS, 0);

/// This CPU's head: the frames it has written so far (written after the slot).
#[map]
static PAUSE_HEAD: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Keeps the MAC control frame `m` with the time now.
#[inline(always)]
pub fn push(m: &MacControl) {
    let Some(head) = PAUSE_HEAD.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's head; programs do not preempt each other on a CPU.
    let n = unsafe { *head };
    let Some(e) = PAUSE_RING.get_ptr_mut(slot_of(n)) else {
        return;
    };
    // SAFETY: this CPU's slot; the helper has no preconditions.
    unsafe {
        (*e).ts_ns = bpf_ktime_get_ns();
        (*e).opcode = m.opcode;
        (*e).class_enable = m.class_enable;
        (*e).times = m.times;
        // The head after the slot (a reader takes only slots below it; stores keep their
        // order on x86, and a torn slot on a weaker CPU is one frame's time).
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
        core::ptr::write_volatile(head, n.wrapping_add(1));
    }
}

//! This CPU's slot of a hook (its counter block and working state) and the load-time
//! switches, as every part of the counting sequence reaches them.

use crate::COUNTERS;
use agent_common::{Hook, HookSlot};

/// A switch, read where the code it guards starts (a plain read is folded by LLVM; read
/// early it costs spills).
#[inline(always)]
pub fn on(switch: &u8) -> bool {
    // SAFETY: a valid reference to a static the loader may have rewritten.
    unsafe { core::ptr::read_volatile(switch) != 0 }
}

/// This CPU's value of a hook: its counter block and its working state (parse record, clock
/// caches), one lookup for both.
#[inline(always)]
pub fn slot(hook: Hook) -> Option<&'static mut HookSlot> {
    let s = COUNTERS.get_ptr_mut(hook as u32)?;
    // SAFETY: a per-CPU array value for this CPU; the packet programs run with bottom halves
    // disabled and do not interrupt each other on a CPU, so no other reference to it is live
    // (the flush program, which can be interrupted by them, touches only the counter block's
    // `flow_update_errors` and the slot's `cache`: it sets the mode packets only read, and
    // resets the misses, where a packet's count lost to the interruption is a judgement's
    // sample, see `agent_common::cache_mode`).
    Some(unsafe { &mut *s })
}

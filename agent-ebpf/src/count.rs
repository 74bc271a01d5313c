//! The kernel side of the one counting sequence: the hook's counter block, the mirror session
//! and the flow, through `agent-common`'s update functions (userspace runs the same sequence
//! in `rocemon::sources::tally`).

use crate::{COUNTERS, FLOWS, SCRATCH, SESSIONS};
use agent_common::{Hook, HookCounters, Outcome, RoceInfo, SessionKey, SessionStats};
use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_ktime_get_coarse_ns};

/// Which program counts a frame (for the kernel-only counters).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Fast,
    Slow,
    /// The AF_XDP program meant to hand this frame to a socket and found none.
    RedirectFailed,
    /// The AF_XDP slow program, same.
    SlowRedirectFailed,
}

/// This CPU's counter block of a hook.
#[inline(always)]
fn block(hook: Hook) -> Option<&'static mut HookCounters> {
    let c = COUNTERS.get_ptr_mut(hook as u32)?;
    // SAFETY: a per-CPU array value for this CPU; BPF programs do not preempt each other on a
    // CPU, so no other reference to it is live.
    Some(unsafe { &mut *c })
}

/// A frame the slow program could not be reached for: counted, under no outcome.
#[inline(always)]
pub fn unreachable(hook: Hook, frame_len: u64) {
    if let Some(c) = block(hook) {
        c.frames += 1;
        c.frame_bytes += frame_len;
        c.slow_path_unreachable += 1;
    }
}

/// Counts one parsed frame: the hook's counter block, its mirror session and its flow.
/// Returns true when a flow update failed for the first time on this CPU (so the caller logs
/// once, not per packet).
// Keys and values are passed by reference on purpose: by value they would be copied onto the
// 512-byte BPF stack once more.
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(always)]
pub fn parsed(parsed: &Result<RoceInfo, Outcome>, hook: Hook, frame_len: u64, path: Path) -> bool {
    let Some(c) = block(hook) else {
        return false;
    };
    c.record(parsed, frame_len);
    if matches!(path, Path::Slow | Path::SlowRedirectFailed) {
        c.slow_path_frames += 1;
    }
    if matches!(path, Path::RedirectFailed | Path::SlowRedirectFailed) {
        c.capture_redirect_failures += 1;
    }
    let Ok(info) = parsed else {
        return false;
    };
    if let Some(sk) = SessionKey::of(info, hook) {
        let ce_cnp = SessionStats::flags(info);
        if !session(sk.to_bits(), ce_cnp, frame_len) {
            c.session_overflow += 1;
        }
    }
    let key = info.flow_key(hook);
    // The coarse clock (jiffy resolution) is enough for first/last seen and rates over polls,
    // and cheaper per packet than bpf_ktime_get_ns.
    // SAFETY: the helper has no preconditions.
    let now = unsafe { bpf_ktime_get_coarse_ns() };
    if let Some(s) = FLOWS.get_ptr_mut(&key) {
        // SAFETY: this CPU's value of an existing element, as above.
        let ev = unsafe { (*s).record(info, frame_len, now) };
        c.record_psn(&ev);
        return false;
    }
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        c.flow_update_errors += 1;
        return c.flow_update_errors == 1;
    };
    // SAFETY: this CPU's scratch slot; zeroed in place (no stack copy), then filled.
    let ev = unsafe {
        core::ptr::write_bytes(scratch, 0, 1);
        (*scratch).record(info, frame_len, now)
    };
    // SAFETY: as above; the map copies the value.
    if FLOWS
        .insert(&key, unsafe { &*scratch }, BPF_NOEXIST as u64)
        .is_ok()
    {
        c.record_psn(&ev);
        c.flows_created += 1;
        return false;
    }
    // Another CPU inserted the flow in between: count into its element.
    if let Some(s) = FLOWS.get_ptr_mut(&key) {
        // SAFETY: as above.
        let ev = unsafe { (*s).record(info, frame_len, now) };
        c.record_psn(&ev);
        return false;
    }
    c.flow_update_errors += 1;
    c.flow_update_errors == 1
}

/// Adds a packet to its mirror session's counters (a new session is inserted; a full map is
/// counted by the caller). A separate BPF function taking only scalars: the verifier checks it
/// without the parse path's state, so it does not multiply the paths it explores.
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(never)]
fn session(key_bits: u64, ce_cnp: u64, frame_len: u64) -> bool {
    let sk = SessionKey::from_bits(key_bits);
    if let Some(s) = SESSIONS.get_ptr_mut(&sk) {
        // SAFETY: this CPU's value of an existing element.
        unsafe { (*s).add(ce_cnp, frame_len) };
        return true;
    }
    let mut s = SessionStats::default();
    s.add(ce_cnp, frame_len);
    if SESSIONS.insert(&sk, &s, BPF_NOEXIST as u64).is_ok() {
        return true;
    }
    if let Some(s) = SESSIONS.get_ptr_mut(&sk) {
        // SAFETY: as above (another CPU inserted it in between).
        unsafe { (*s).add(ce_cnp, frame_len) };
        return true;
    }
    false
}

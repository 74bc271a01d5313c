//! rocemon's kernel programs: one XDP program and two tc classifiers (ingress, egress).
//!
//! Each entry point is a thin shell around [`count`], which parses with `agent-common`'s one
//! parser and updates the per-CPU counter block of its hook and the LRU per-CPU flow map with
//! `agent-common`'s update functions. Nothing is ever dropped or changed: XDP returns
//! `XDP_PASS`, tc returns `TC_ACT_PIPE` (TCX: continue with the next program).
#![no_std]
#![no_main]

mod tc;
mod xdp;

use agent_common::{
    parse, FlowKey, FlowStats, Hook, HookCounters, LinkType, Outcome, PacketReader, RoceInfo,
    SessionKey, SessionStats, FLOW_MAP_ENTRIES, MAX_CAPTURE_QUEUES, SESSION_MAP_ENTRIES,
};
use aya_ebpf::{
    bindings::{xdp_action, BPF_NOEXIST, TC_ACT_PIPE},
    helpers::{bpf_ktime_get_coarse_ns, bpf_xdp_get_buff_len},
    macros::{classifier, map, xdp},
    maps::{LruPerCpuHashMap, PerCpuArray, PerCpuHashMap, XskMap},
    programs::{TcContext, XdpContext},
};
use aya_log_ebpf::warn;

/// One counter block per hook (per-CPU: no atomics on the hot path).
#[map]
static COUNTERS: PerCpuArray<HookCounters> = PerCpuArray::with_max_entries(Hook::COUNT as u32, 0);

/// Flows, LRU so a full map evicts the oldest flow instead of refusing new ones; userspace
/// may resize it at load time.
#[map]
static FLOWS: LruPerCpuHashMap<FlowKey, FlowStats> =
    LruPerCpuHashMap::with_max_entries(FLOW_MAP_ENTRIES, 0);

/// `frags`: multi-buffer aware, so jumbo RoCE frames (4 KiB IB MTU) work in native mode; the
/// headers always sit in the first buffer, and the wire length comes from
/// `bpf_xdp_get_buff_len`.
/// Scratch space for a new flow's first record: a `FlowStats` does not fit on the 512-byte
/// BPF stack next to the parsed packet.
#[map]
static SCRATCH: PerCpuArray<FlowStats> = PerCpuArray::with_max_entries(1, 0);

/// Mirror sessions / tunnel ids (bounded: a full map counts `session_overflow`, it never
/// evicts, so the exported label set stays stable).
#[map]
static SESSIONS: PerCpuHashMap<SessionKey, SessionStats> =
    PerCpuHashMap::with_max_entries(SESSION_MAP_ENTRIES, 0);

/// AF_XDP capture mode: receive queue -> the socket userspace bound to it.
#[map]
static XSKS: XskMap = XskMap::with_max_entries(MAX_CAPTURE_QUEUES, 0);

#[xdp(frags)]
pub fn rocemon_xdp(ctx: XdpContext) -> u32 {
    // SAFETY: the helper only reads the context it is given.
    let len = unsafe { bpf_xdp_get_buff_len(ctx.ctx) };
    let r = xdp::XdpReader::new(&ctx, len);
    if count(&r, Hook::Xdp, len) {
        warn!(&ctx, "rocemon: flow map update failed (first on this CPU)");
    }
    xdp_action::XDP_PASS
}

#[classifier]
pub fn rocemon_tc_ingress(ctx: TcContext) -> i32 {
    tc_common(&ctx, Hook::TcIngress)
}

#[classifier]
pub fn rocemon_tc_egress(ctx: TcContext) -> i32 {
    tc_common(&ctx, Hook::TcEgress)
}

#[inline(always)]
fn tc_common(ctx: &TcContext, hook: Hook) -> i32 {
    let r = tc::TcReader::new(ctx);
    if count(&r, hook, tc::wire_len(ctx)) {
        warn!(ctx, "rocemon: flow map update failed (first on this CPU)");
    }
    TC_ACT_PIPE
}

/// AF_XDP capture mode (`rocemon run --capture afxdp`): RoCE frames and broken mirror
/// encapsulations go to the socket of their receive queue, where userspace parses and counts
/// them with the same code; everything else is counted here and passed to the stack. A frame
/// whose queue has no socket is counted here too (and as a redirect failure), so nothing is
/// lost. `frags`: jumbo frames arrive as several descriptors on sockets bound with XDP_USE_SG.
#[xdp(frags)]
pub fn rocemon_xdp_afxdp(ctx: XdpContext) -> u32 {
    // SAFETY: the helper only reads the context it is given.
    let len = unsafe { bpf_xdp_get_buff_len(ctx.ctx) };
    let r = xdp::XdpReader::new(&ctx, len);
    let parsed = parse(&r, LinkType::Ethernet);
    let wanted = agent_common::parse::captured(&parsed);
    if wanted {
        // SAFETY: reading a field of the context the program was given.
        let queue = unsafe { (*ctx.ctx).rx_queue_index };
        if let Ok(action) = XSKS.redirect(queue, 0) {
            return action;
        }
    }
    if count_parsed(&parsed, Hook::AfXdp, len, wanted) {
        warn!(&ctx, "rocemon: flow map update failed (first on this CPU)");
    }
    xdp_action::XDP_PASS
}

/// Parses and counts one frame. Returns true when a flow update failed for the first time on
/// this CPU (so the caller logs once, not per packet).
#[inline(always)]
fn count<R: PacketReader>(r: &R, hook: Hook, frame_len: u64) -> bool {
    count_parsed(&parse(r, LinkType::Ethernet), hook, frame_len, false)
}

/// Counts one parsed frame: the hook's counter block, its mirror session and its flow.
/// `redirect_failed`: the AF_XDP program meant to hand this frame to a socket.
// Keys and values are passed by reference on purpose: by value they would be copied onto the
// 512-byte BPF stack once more.
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(always)]
fn count_parsed(
    parsed: &Result<RoceInfo, Outcome>,
    hook: Hook,
    frame_len: u64,
    redirect_failed: bool,
) -> bool {
    let Some(c) = COUNTERS.get_ptr_mut(hook as u32) else {
        return false;
    };
    // SAFETY: a per-CPU array value for this CPU; BPF programs do not preempt each other on a
    // CPU, so no other reference to it is live.
    let c = unsafe { &mut *c };
    c.record(parsed, frame_len);
    if redirect_failed {
        c.capture_redirect_failures += 1;
    }
    let Ok(info) = parsed else {
        return false;
    };
    if let Some(sk) = SessionKey::of(info, hook) {
        let ce_cnp = SessionStats::flags(info);
        if !count_session(sk.to_bits(), ce_cnp, frame_len) {
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
fn count_session(key_bits: u64, ce_cnp: u64, frame_len: u64) -> bool {
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

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

/// Benchmark baseline (`cargo xtask bench`): the cheapest useful program, one per-CPU counter
/// bump. Never attached by the agent.
#[map]
static BASELINE: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[xdp]
pub fn rocemon_baseline_xdp(_ctx: XdpContext) -> u32 {
    bump_baseline();
    xdp_action::XDP_PASS
}

#[classifier]
pub fn rocemon_baseline_tc(_ctx: TcContext) -> i32 {
    bump_baseline();
    TC_ACT_PIPE
}

#[inline(always)]
fn bump_baseline() {
    if let Some(c) = BASELINE.get_ptr_mut(0) {
        // SAFETY: this CPU's slot.
        unsafe { *c += 1 };
    }
}

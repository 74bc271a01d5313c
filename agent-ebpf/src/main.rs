//! rocemon's kernel programs: XDP, two tc classifiers (ingress, egress) and the AF_XDP capture
//! classifier, each a fast entry program plus a slow program reached by a tail call.
//!
//! The entry programs parse the common shapes with `agent-common`'s fast path
//! ([`agent_common::fast`]: direct packet access at constant offsets) and count them; any other
//! frame (tunnels and mirror sessions, QinQ, IPv4 options and fragments, IPv6 extension
//! headers, frames cut short) is handed to the hook's slow program, which runs the general
//! parser over helper reads. Both end in `count::parsed`, the kernel's entry into the one
//! counting sequence (`agent_common::count`). Nothing is ever dropped or changed: XDP returns
//! `XDP_PASS`, tc returns `TC_ACT_PIPE` (TCX: continue with the next program).
#![no_std]
#![no_main]
// BPF inline assembly (the direct reader's word loads); the kernel programs build on nightly.
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]

mod clock;
mod count;
mod direct;
mod flow_cache;
mod flow_maps;
mod helper_reader;
mod hook_slot;
mod pause_ring;
mod psn_cpus;
mod tc;
mod xdp;
mod yardsticks;

use agent_common::flow_cache::{CachedFlow, FLOW_CACHE_SLOTS};
use agent_common::{
    fast::Fast, FlowKey, FlowKey4, FlowStats, Hook, HookSlot, SessionKey, SessionStats,
    FLOW_MAP_ENTRIES, MAX_CAPTURE_QUEUES, SESSION_MAP_ENTRIES,
};
use aya_ebpf::{
    bindings::{xdp_action, TC_ACT_PIPE},
    helpers::bpf_xdp_get_buff_len,
    macros::{classifier, map, xdp},
    maps::{LruPerCpuHashMap, PerCpuArray, PerCpuHashMap, ProgramArray, XskMap},
    programs::{TcContext, XdpContext},
};
use count::Path;
use direct::DirectReader;
use helper_reader::HelperReader;

/// One counter block per hook, with this CPU's working state on the hook (per-CPU: no
/// atomics on the hot path; one lookup per packet serves both, see [`HookSlot`]).
#[map]
static COUNTERS: PerCpuArray<HookSlot> = PerCpuArray::with_max_entries(Hook::COUNT as u32, 0);

/// IPv6 flows. An LRU map: a new flow is always admitted, pushing out the flow least
/// recently touched when the map is full, so no burst of spoofed 5-tuples can shut the
/// legitimate flows out (a full plain hash map refused every new flow until entries idled
/// out). What a push-out loses is seen from userspace (a held flow gone without the idle
/// timeout, or counts that restart) and counted; the agent still deletes idle flows so the
/// map has free entries in the common case. Userspace may resize it at load time.
#[map]
static FLOWS: LruPerCpuHashMap<FlowKey, FlowStats> =
    LruPerCpuHashMap::with_max_entries(FLOW_MAP_ENTRIES, 0);

/// IPv4 flows, as [`FLOWS`] under the 16-byte key (cheaper to hash on every packet).
#[map]
static FLOWS4: LruPerCpuHashMap<FlowKey4, FlowStats> =
    LruPerCpuHashMap::with_max_entries(FLOW_MAP_ENTRIES, 0);

/// The flows this host sends (tc egress), both families under the full key: a budget apart
/// from [`FLOWS`] and [`FLOWS4`], which an incoming flood of spoofed flows churns, so that
/// flood never pushes the host's own flows out ([`agent_common::MAP_FLOWS_OUT`]). Userspace
/// sizes it at load time.
#[map]
static FLOWS_OUT: LruPerCpuHashMap<FlowKey, FlowStats> =
    LruPerCpuHashMap::with_max_entries(FLOW_MAP_ENTRIES / 4, 0);

/// The per-CPU flow cache in front of the flow maps ([`agent_common::flow_cache`]; its code
/// is in `flow_cache.rs`).
#[map]
static FLOW_CACHE: PerCpuArray<CachedFlow> = PerCpuArray::with_max_entries(FLOW_CACHE_SLOTS, 0);

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

/// The XDP slow programs ([`Hook::slow_path`]: slot 0 XDP, slot 1 AF_XDP), filled by the loader.
#[map]
static XDP_SLOW: ProgramArray = ProgramArray::with_max_entries(2, 0);

/// The tc slow programs (slot 0 ingress, slot 1 egress).
#[map]
static TC_SLOW: ProgramArray = ProgramArray::with_max_entries(2, 0);

/// The fast view of an XDP frame. `frags`: multi-buffer aware, so jumbo RoCE frames (4 KiB
/// IB MTU) work in native mode; the wire length comes from `bpf_xdp_get_buff_len`.
#[inline(always)]
fn xdp_direct(ctx: &XdpContext, len: u64) -> Option<DirectReader> {
    DirectReader::new(ctx.data(), ctx.data_end(), len as usize)
}

#[inline(always)]
fn xdp_len(ctx: &XdpContext) -> u64 {
    // SAFETY: the helper only reads the context it is given.
    unsafe { bpf_xdp_get_buff_len(ctx.ctx) }
}

/// The XDP entry program. `#[inline(always)]` (on the inner function aya's macro wraps the
/// body in, as on the other entry programs): left to LLVM, the whole body of this program and
/// of tc ingress became a BPF-to-BPF subprogram behind a three-instruction entry, a call and
/// its frame per packet (`cargo xtask bench --ab`: 1-3 ns a frame).
#[xdp(frags)]
#[inline(always)]
pub fn rocemon_xdp(ctx: XdpContext) -> u32 {
    let len = xdp_len(&ctx);
    match count::fast(xdp_direct(&ctx, len), Hook::Xdp) {
        Fast::Record(st) => {
            count::counted_inline(st, Hook::Xdp, len, Path::Fast);
            return xdp_action::XDP_PASS;
        }
        Fast::Outcome(o) => {
            count::outcome(Hook::Xdp, o, len);
            return xdp_action::XDP_PASS;
        }
        Fast::Slow => {}
    }
    // SAFETY: a tail call with the program's own context; on return it failed.
    unsafe { XDP_SLOW.tail_call(&ctx, Hook::Xdp.slow_path().1) };
    count::unreachable(Hook::Xdp, len);
    xdp_action::XDP_PASS
}

/// The XDP hook's slow program: the general parser over `bpf_xdp_load_bytes`.
#[xdp(frags)]
pub fn rocemon_xdp_slow(ctx: XdpContext) -> u32 {
    let len = xdp_len(&ctx);
    if count::slow(&HelperReader::new(&ctx, len), Hook::Xdp, len).is_some() {
        count::counted(Hook::Xdp, len, Path::Slow);
    }
    xdp_action::XDP_PASS
}

#[classifier]
#[inline(always)]
pub fn rocemon_tc_ingress(ctx: TcContext) -> i32 {
    tc_fast(&ctx, Hook::TcIngress)
}

#[classifier]
#[inline(always)]
pub fn rocemon_tc_egress(ctx: TcContext) -> i32 {
    tc_fast(&ctx, Hook::TcEgress)
}

#[classifier]
pub fn rocemon_tc_ingress_slow(ctx: TcContext) -> i32 {
    tc_slow(&ctx, Hook::TcIngress)
}

#[classifier]
pub fn rocemon_tc_egress_slow(ctx: TcContext) -> i32 {
    tc_slow(&ctx, Hook::TcEgress)
}

#[inline(always)]
fn tc_fast(ctx: &TcContext, hook: Hook) -> i32 {
    let len = tc::wire_len(ctx);
    let r =
        DirectReader::new(ctx.data(), ctx.data_end(), ctx.len() as usize).or_else(|| tc::head(ctx));
    match count::fast(r, hook) {
        Fast::Record(st) => {
            tc::offloaded_tag(ctx, &mut st.record);
            count::counted_inline(st, hook, len, Path::Fast);
            return TC_ACT_PIPE;
        }
        Fast::Outcome(o) => {
            count::outcome(hook, o, len);
            return TC_ACT_PIPE;
        }
        Fast::Slow => {}
    }
    // SAFETY: as in rocemon_xdp; the slot is a constant per hook.
    unsafe { TC_SLOW.tail_call(ctx, hook.slow_path().1) };
    count::unreachable(hook, len);
    TC_ACT_PIPE
}

#[inline(always)]
fn tc_slow(ctx: &TcContext, hook: Hook) -> i32 {
    let len = tc::wire_len(ctx);
    if let Some(st) = count::slow(&HelperReader::new(ctx, ctx.len() as u64), hook, len) {
        tc::offloaded_tag(ctx, &mut st.record);
        count::counted(hook, len, Path::Slow);
    }
    TC_ACT_PIPE
}

/// AF_XDP capture mode (`rocemon run --capture afxdp`): a classifier. RoCE frames and broken
/// mirror encapsulations go to the socket of their receive queue, where userspace parses and
/// counts them with the same code; everything else is counted here and passed to the stack.
/// A frame whose queue has no socket is counted here too (and as a redirect failure), so
/// nothing is lost. `frags`: jumbo frames arrive as several descriptors on sockets bound with
/// XDP_USE_SG.
#[xdp(frags)]
#[inline(always)]
pub fn rocemon_xdp_afxdp(ctx: XdpContext) -> u32 {
    let len = xdp_len(&ctx);
    match count::fast(xdp_direct(&ctx, len), Hook::AfXdp) {
        Fast::Record(st) => return capture_or_count(&ctx, st, len, false),
        // Never a frame the classifier wants (`Fast::Outcome`: not IP, not UDP, another port).
        Fast::Outcome(o) => {
            count::outcome(Hook::AfXdp, o, len);
            return xdp_action::XDP_PASS;
        }
        Fast::Slow => {}
    }
    // SAFETY: as in rocemon_xdp.
    unsafe { XDP_SLOW.tail_call(&ctx, Hook::AfXdp.slow_path().1) };
    count::unreachable(Hook::AfXdp, len);
    xdp_action::XDP_PASS
}

/// The AF_XDP classifier's slow program: the general parser decides.
#[xdp(frags)]
pub fn rocemon_xdp_afxdp_slow(ctx: XdpContext) -> u32 {
    let len = xdp_len(&ctx);
    let Some(st) = count::slow(&HelperReader::new(&ctx, len), Hook::AfXdp, len) else {
        return xdp_action::XDP_PASS;
    };
    capture_or_count(&ctx, st, len, true)
}

/// Hands a frame the classifier wants (RoCE, a broken mirror encapsulation) to the socket of
/// its receive queue; counts any other frame, and a wanted one whose queue has no socket,
/// here (`slow`: parsed by the slow program).
#[inline(always)]
fn capture_or_count(ctx: &XdpContext, st: &mut HookSlot, len: u64, slow: bool) -> u32 {
    let wanted = st.record.captured();
    if wanted {
        if let Ok(action) = XSKS.redirect(rx_queue(ctx), 0) {
            count::ring_captured(st, len);
            return action;
        }
    }
    let path = match (wanted, slow) {
        (false, false) => Path::Fast,
        (false, true) => Path::Slow,
        (true, false) => Path::RedirectFailed,
        (true, true) => Path::SlowRedirectFailed,
    };
    count::counted(Hook::AfXdp, len, path);
    xdp_action::XDP_PASS
}

#[inline(always)]
fn rx_queue(ctx: &XdpContext) -> u32 {
    // SAFETY: reading a field of the context the program was given.
    unsafe { (*ctx.ctx).rx_queue_index }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

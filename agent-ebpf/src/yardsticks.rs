//! The benchmark's yardsticks (`cargo xtask bench`), never attached by the agent: what the
//! cheapest programs cost on the same hook, so that rocemon's cost is read as a ratio measured
//! in the same run.
//!
//! - the count-only program: one per-CPU counter bump, the least any program costs;
//! - the flow floor (XDP and tc): the least an exact per-flow counter costs, the shape of the
//!   simplest flow agents (look the flow up in a per-CPU hash map, insert it when new, add a
//!   packet and its bytes): the IPv4 RoCE key read at constant offsets, no parse beyond it. Where flows
//!   outnumber what the CPU's caches hold, this is the memory cost every exact per-flow count
//!   pays, whatever else it does. Its map is sized by the bench at load time (1 entry here, so
//!   the agent, which loads the same object, pays nothing for it).

use crate::direct::DirectReader;
use agent_common::{FlowKey4, PacketReader, ROCEV2_UDP_PORT};
use aya_ebpf::{
    bindings::{xdp_action, BPF_NOEXIST, TC_ACT_PIPE},
    helpers::bpf_xdp_get_buff_len,
    macros::{classifier, map, xdp},
    maps::{PerCpuArray, PerCpuHashMap},
    programs::{TcContext, XdpContext},
};

#[map]
static BASELINE: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// `frags` like rocemon's own XDP programs: attached the same way (jumbo MTU veths need it).
#[xdp(frags)]
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

/// The flow floor's flows: packets and bytes per IPv4 RoCE flow, keyed as rocemon's IPv4
/// flows are, in a plain per-CPU hash map as issue #49 defines the floor (rocemon's flow maps
/// are LRU per-CPU hashes, so that a flood of new flows pushes out old ones instead of being
/// refused: the floor does not pay for that). Its value is 16 bytes, rocemon's 256 (a packet
/// writes the first 64). Neither difference is what rocemon pays beyond it at 10,000 flows
/// taking turns (live, 64 B, 2026-12-05): this floor with a 256-byte value took 75-77 ns and
/// with an LRU map 63, against its own 66-68 and rocemon's 110-121 (DESIGN.md).
#[map]
static FLOW_FLOOR: PerCpuHashMap<FlowKey4, [u64; 2]> = PerCpuHashMap::with_max_entries(1, 0);

/// Ethernet, IPv4 without options, UDP, then the BTH's destination QP at bytes 5..8.
const HEADERS: usize = 14 + 20 + 8 + 8;

#[xdp(frags)]
pub fn rocemon_flow_floor_xdp(ctx: XdpContext) -> u32 {
    // SAFETY: the helper only reads the context it is given.
    let len = unsafe { bpf_xdp_get_buff_len(ctx.ctx) };
    if let Some(r) = DirectReader::new(ctx.data(), ctx.data_end(), len as usize) {
        if let Some(h) = r.read::<HEADERS>(0) {
            count_flow(&h, len);
        }
    }
    xdp_action::XDP_PASS
}

/// The same floor at tc (ingress as the agent attaches it): the headers read in place, or
/// with `bpf_skb_load_bytes` where the skb's linear part is too short for the reader's
/// rule (a raw socket's frame of a page or more carries only its Ethernet header there):
/// every IPv4 RoCE frame is counted, as rocemon counts it.
#[classifier]
pub fn rocemon_flow_floor_tc(ctx: TcContext) -> i32 {
    let len = ctx.len() as usize;
    let h = match DirectReader::new(ctx.data(), ctx.data_end(), len) {
        Some(r) => r.read::<HEADERS>(0),
        None => ctx.load::<[u8; HEADERS]>(0).ok(),
    };
    if let Some(h) = h {
        count_flow(&h, len as u64);
    }
    TC_ACT_PIPE
}

/// Adds the frame to its flow, if it is IPv4 RoCE (a new flow is inserted; another CPU may
/// insert it in between, then its element is used).
#[inline(always)]
fn count_flow(h: &[u8; HEADERS], len: u64) {
    if h[12] != 0x08 || h[13] != 0x00 || h[14] != 0x45 || h[23] != 17 {
        return;
    }
    if u16::from_be_bytes([h[36], h[37]]) != ROCEV2_UDP_PORT {
        return;
    }
    let key = FlowKey4 {
        src: [h[26], h[27], h[28], h[29]],
        dst: [h[30], h[31], h[32], h[33]],
        sport: u16::from_be_bytes([h[34], h[35]]),
        hook: 0,
        _pad: 0,
        dest_qp: u32::from_be_bytes([0, h[47], h[48], h[49]]),
    };
    for _ in 0..2 {
        if let Some(v) = FLOW_FLOOR.get_ptr_mut(key) {
            // SAFETY: this CPU's value of an element of the map.
            unsafe {
                (*v)[0] += 1;
                (*v)[1] += len;
            }
            return;
        }
        if FLOW_FLOOR.insert(key, [1, len], BPF_NOEXIST as u64).is_ok() {
            return;
        }
    }
}

//! tc's packet bytes for the slow program's [`HelperReader`](crate::helper_reader):
//! `bpf_skb_load_bytes`, which also reads non-linear skbs (GSO, paged data). A direct-access
//! fast path with this helper as fallback was measured faster, but gives every read two
//! paths, and together with the mirror/tunnel look-ahead the verifier then refuses the
//! program as too complex (E2BIG). And the frame's wire length and outer tag, which the
//! kernel keeps in the skb's metadata; and the fast path's view of a frame whose skb holds
//! its headers outside the linear part ([`head`]).

use crate::direct::DirectReader;
use crate::helper_reader::LoadBytes;
use agent_common::{fast::FAST_PATH_BYTES, record::PacketRecord};
use aya_ebpf::{
    helpers::generated::bpf_skb_load_bytes, macros::map, maps::PerCpuArray, programs::TcContext,
};

/// This CPU's copy of the first [`FAST_PATH_BYTES`] of a frame whose skb's linear part holds
/// fewer of them ([`head`]).
#[map]
static TC_HEAD: PerCpuArray<[u8; FAST_PATH_BYTES]> = PerCpuArray::with_max_entries(1, 0);

/// The fast path's reader over a copy of the frame's first [`FAST_PATH_BYTES`], for a frame
/// the direct view refuses because its skb's linear part is short: a raw socket's frame of a
/// page or more carries only its Ethernet header there, and a driver that splits headers
/// from data pulls no further than the UDP header (`eth_get_headlen`). One
/// helper copy (about 20 ns) where the slow program's tail call and general parse cost about
/// 100 ns more; every read then answers as over the whole frame (the fast path reads no
/// further). `None` for a frame shorter than that (rare when non-linear): the slow program.
#[inline(always)]
pub fn head(ctx: &TcContext) -> Option<DirectReader> {
    let len = ctx.len() as usize;
    if len < FAST_PATH_BYTES {
        return None;
    }
    let buf = TC_HEAD.get_ptr_mut(0)?;
    // SAFETY: the helper writes at most FAST_PATH_BYTES into this CPU's buffer, which is
    // that long, or fails (non-zero).
    let r = unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb as *const _,
            0,
            buf.cast(),
            FAST_PATH_BYTES as u32,
        )
    };
    if r != 0 {
        return None;
    }
    Some(DirectReader::over(buf as usize, FAST_PATH_BYTES, len))
}

impl LoadBytes for TcContext {
    #[inline(always)]
    fn load_bytes<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        self.load::<[u8; N]>(off).ok()
    }
}

/// The frame's length on the wire. On receive the kernel moves an outer VLAN tag into the skb's
/// metadata (`vlan_present`) before tc runs; it still crossed the wire, so it counts.
#[inline(always)]
pub fn wire_len(ctx: &TcContext) -> u64 {
    // SAFETY: reading a field of the context the program was given.
    let tagged = unsafe { (*ctx.skb.skb).vlan_present } != 0;
    ctx.len() as u64 + if tagged { 4 } else { 0 }
}

/// The priority of a tag the kernel moved into the skb's metadata (see [`wire_len`]): it was
/// the frame's outermost tag, so its priority is the packet's (a tag still in the frame is an
/// inner one).
#[inline(always)]
pub fn offloaded_tag(ctx: &TcContext, rec: &mut PacketRecord) {
    // SAFETY: reading fields of the context the program was given.
    let (present, tci) = unsafe { ((*ctx.skb.skb).vlan_present, (*ctx.skb.skb).vlan_tci) };
    if present != 0 {
        rec.outer_tag(tci as u16);
    }
}

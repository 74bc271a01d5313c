//! tc's packet bytes for the slow program's [`HelperReader`](crate::helper_reader):
//! `bpf_skb_load_bytes`, which also reads non-linear skbs (GSO, paged data). A direct-access
//! fast path with this helper as fallback was measured faster, but gives every read two
//! paths, and together with the mirror/tunnel look-ahead the verifier then refuses the
//! program as too complex (E2BIG). And the frame's wire length and outer tag, which the
//! kernel keeps in the skb's metadata.

use crate::helper_reader::LoadBytes;
use agent_common::record::PacketRecord;
use aya_ebpf::programs::TcContext;

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

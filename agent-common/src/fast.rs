//! The fast path: the frame shapes that carry almost all RoCE, parsed at constant offsets.
//!
//! Ethernet with no tag or one tag, then IPv4 with a 20-byte header (no options, not a
//! fragment) or IPv6 straight to UDP, then UDP to 4791 and the BTH with its extension headers.
//! Each shape is one instantiation of [`ip`] with its offsets as constants, so the kernel
//! reads every header with direct packet access at a fixed offset (Katran's
//! `process_packet(is_ipv6)`, Cilium's per-family programs) and the verifier sees a handful of
//! straight paths instead of the general parser's tree.
//!
//! [`parse_fast`] answers only when it is sure: `Some(result)` is exactly what [`parse`] says
//! for the frame (the host tests check that on every fixture and on random frames), and
//! `None` sends the frame to the general parser (the kernel's slow program, reached by a tail
//! call): QinQ, IPv4 options and fragments, IPv6 extension headers, mirror and tunnel
//! encapsulations, and every frame cut short or malformed. Common non-RoCE traffic (ARP, TCP,
//! UDP to other ports) is answered here too, so it costs next to nothing.
//!
//! [`parse`]: crate::parse::parse

use crate::headers::be16;
use crate::headers::bth::{self, Bth};
use crate::headers::encap::{Tunnel, PROTO_GRE, VXLAN_PORT};
use crate::headers::ethernet::{self, is_vlan};
use crate::headers::ext::{AETH_LEN, DETH_LEN, RETH_LEN};
use crate::headers::ipv4::{self, Ipv4Header};
use crate::headers::ipv6::{self, Ipv6Header};
use crate::headers::mac_control::{self, MacControl};
use crate::headers::udp::ROCEV2_UDP_PORT;
use crate::headers::udp::{self, UdpHeader};
use crate::headers::{be24, be32};
use crate::info::{Aeth, Deth, Parsed, L3, NO_PCP};
use crate::opcode::ext_layout;
use crate::outcome::Outcome;
use crate::reader::PacketReader;
use crate::record::PacketRecord;

/// The answer of the fast path: `None` means "ask the general parser".
pub type FastResult = Option<Parsed>;

/// The fast path's answer to [`parse_fast_with`], with a record only where one was written.
#[derive(Debug, PartialEq, Eq)]
pub enum Fast<S> {
    /// Not a common shape (or no record to be had): the general parser's.
    Slow,
    /// A frame counted under its outcome alone (not IP, not UDP, UDP to another port):
    /// nothing was written, no record was asked for. Never an outcome the AF_XDP classifier
    /// hands to userspace ([`Outcome::captured`]).
    Outcome(Outcome),
    /// A RoCE packet or a MAC control frame, written into the record the slot gave.
    Record(S),
}

/// Bytes of a frame the fast path may read (the deepest: one tag, IPv6, UDP, BTH and the
/// longest extension headers). A reader that can see this much of a frame (or the whole
/// frame) answers every read the same way as one over the whole frame, which is what the
/// kernel checks before it trusts its direct view of a multi-buffer or non-linear frame.
pub const FAST_PATH_BYTES: usize = 128;

/// IP protocol numbers the fast path knows are neither UDP nor a tunnel nor an IPv6
/// extension header: TCP and ICMPv6 (the frames a RoCE host sees next to RoCE).
const PROTO_TCP: u8 = 6;
const PROTO_ICMPV6: u8 = 58;

/// Parses an Ethernet frame of a common shape, or says it is not one (see the module doc).
#[inline(always)]
pub fn parse_fast<R: PacketReader>(r: &R) -> FastResult {
    let mut rec = PacketRecord::default();
    if parse_fast_into(r, &mut rec) {
        Some(rec.load())
    } else {
        None
    }
}

/// [`parse_fast`] writing its answer into `out` (an outcome alone as the record of it).
/// Returns whether it answered.
#[inline(always)]
pub fn parse_fast_into<R: PacketReader>(r: &R, out: &mut PacketRecord) -> bool {
    match parse_fast_with(r, || Some(&mut *out)) {
        Fast::Slow => false,
        Fast::Outcome(o) => {
            out.store(&Parsed::Other(o));
            true
        }
        Fast::Record(_) => true,
    }
}

/// The fast path asking for a record only when it has something to write: a RoCE packet (once
/// its UDP header says 4791) or a MAC control frame. The kernel's slot is the hook's per-CPU
/// value (its record next to the counter block), so the common non-RoCE frames (ARP, TCP,
/// UDP to other ports) are counted under their outcome alone: no record written and read
/// back, and the lookup made where the count is.
#[inline(always)]
pub fn parse_fast_with<R, S>(r: &R, slot: impl FnOnce() -> Option<S>) -> Fast<S>
where
    R: PacketReader,
    S: AsMut<PacketRecord>,
{
    let Some(ethertype) = r.read(ethernet::ETHERTYPE_OFFSET) else {
        return Fast::Slow;
    };
    match be16(ethertype) {
        ethernet::ETHERTYPE_IPV4 => ip::<R, S, { ethernet::LEN }, false>(r, 0, NO_PCP, slot),
        ethernet::ETHERTYPE_IPV6 => ip::<R, S, { ethernet::LEN }, true>(r, 0, NO_PCP, slot),
        t if is_vlan(t) => {
            let Some(tag) = r.read::<{ ethernet::VLAN_TAG_LEN }>(ethernet::LEN) else {
                return Fast::Slow;
            };
            const TAGGED: usize = ethernet::LEN + ethernet::VLAN_TAG_LEN;
            let pcp = tag[0] >> 5;
            match be16([tag[2], tag[3]]) {
                ethernet::ETHERTYPE_IPV4 => ip::<R, S, TAGGED, false>(r, 1, pcp, slot),
                ethernet::ETHERTYPE_IPV6 => ip::<R, S, TAGGED, true>(r, 1, pcp, slot),
                t if is_vlan(t) => Fast::Slow,
                // MAC control frames are never tagged on a wire; a tagged one is rare enough
                // for the general parser.
                mac_control::ETHERTYPE_MAC_CONTROL => Fast::Slow,
                _ => Fast::Outcome(Outcome::NotIp),
            }
        }
        // PFC and PAUSE: one compare on the EtherType already read, one constant-offset read.
        mac_control::ETHERTYPE_MAC_CONTROL => {
            let Some(mut s) = slot() else {
                return Fast::Slow;
            };
            if mac_control(r, s.as_mut()) {
                Fast::Record(s)
            } else {
                Fast::Slow
            }
        }
        _ => Fast::Outcome(Outcome::NotIp),
    }
}

/// An untagged MAC control frame (PFC, PAUSE): its payload at a constant offset. A frame too
/// short for a PFC payload goes to the general parser (which tells PAUSE from cut short).
#[inline(never)]
fn mac_control<R: PacketReader>(r: &R, out: &mut PacketRecord) -> bool {
    let Some(b) = r.read::<{ mac_control::PFC_LEN }>(ethernet::LEN) else {
        return false;
    };
    let m = match be16([b[0], b[1]]) {
        mac_control::OPCODE_PFC => MacControl::pfc(&b),
        mac_control::OPCODE_PAUSE => MacControl::pause(&[b[0], b[1], b[2], b[3]]),
        other => MacControl {
            opcode: other,
            ..MacControl::default()
        },
    };
    out.store(&Parsed::MacControl(m));
    true
}

/// One IP family at one L2 length: first whether the frame is RoCE ([`ip_class`], nothing
/// written), then, for a RoCE frame, its record ([`ip_fill`]).
///
/// Inlined into the entry program: a BPF-to-BPF call and its return cost more than the
/// shape's stack frame saves (measured: about 15-40 ns per packet on a host whose returns go
/// through the SRSO "safe RET" thunk).
#[inline(always)]
fn ip<R, S, const L3_OFF: usize, const V6: bool>(
    r: &R,
    vlan_tags: u8,
    pcp: u8,
    slot: impl FnOnce() -> Option<S>,
) -> Fast<S>
where
    R: PacketReader,
    S: AsMut<PacketRecord>,
{
    match ip_class::<R, L3_OFF, V6>(r) {
        Some(Ok(())) => {}
        Some(Err(o)) => return Fast::Outcome(o),
        None => return Fast::Slow,
    }
    let Some(mut s) = slot() else {
        return Fast::Slow;
    };
    match ip_fill::<R, L3_OFF, V6>(r, vlan_tags, pcp, s.as_mut()) {
        Some(Ok(())) => Fast::Record(s),
        Some(Err(o)) => {
            // A RoCE header cut short: in the record, like every answer once it is had (the
            // AF_XDP classifier hands some of these to userspace).
            s.as_mut().store(&Parsed::Other(o));
            Fast::Record(s)
        }
        None => Fast::Slow,
    }
}

/// Whether a frame of one shape is RoCE: `Some(Ok(()))` for UDP to 4791, `Some(Err(_))`
/// for the outcome of a frame that is not, `None` for the general parser's. Every offset is
/// a constant.
#[inline(always)]
fn ip_class<R: PacketReader, const L3_OFF: usize, const V6: bool>(
    r: &R,
) -> Option<Result<(), Outcome>> {
    let proto = if V6 {
        let h = Ipv6Header(r.read::<{ ipv6::LEN }>(L3_OFF)?);
        if h.version() != 6 {
            return None;
        }
        h.next_header()
    } else {
        let h = Ipv4Header(r.read::<{ ipv4::MIN_LEN }>(L3_OFF)?);
        // Version 4, IHL 5 (no options), a total length that holds the header, not a
        // fragment: anything else is the general parser's.
        if h.0[0] != 0x45 || h.total_len() < ipv4::MIN_LEN || h.fragment_offset() != 0 {
            return None;
        }
        h.protocol()
    };
    match proto {
        ipv4::PROTO_UDP => {}
        PROTO_GRE => return None,
        PROTO_TCP => return Some(Err(Outcome::NotUdp)),
        PROTO_ICMPV6 if V6 => return Some(Err(Outcome::NotUdp)),
        // IPv6 extension headers (or ESP/AH) and other protocols: IPv4 answers at once,
        // IPv6 lets the general parser walk the chain.
        _ if V6 => return None,
        _ => return Some(Err(Outcome::NotUdp)),
    }
    let u = UdpHeader(r.read::<{ udp::LEN }>(l4_of::<L3_OFF, V6>())?);
    match u.dst_port() {
        ROCEV2_UDP_PORT => Some(Ok(())),
        VXLAN_PORT => None,
        _ => Some(Err(Outcome::UdpOtherPort)),
    }
}

/// Where the UDP header of a shape starts (stated, not derived from the IHL: the offsets stay
/// compile-time constants).
const fn l4_of<const L3_OFF: usize, const V6: bool>() -> usize {
    L3_OFF + if V6 { ipv6::LEN } else { ipv4::MIN_LEN }
}

/// A frame [`ip_class`] found RoCE, written into `out`: the headers are read again (loads at
/// constant offsets, cheaper than holding their values across the record's lookup in the
/// kernel, where BPF has four callee-saved registers). Every field goes into the record as
/// soon as it is read. `Some(Err(_))`: the frame's outcome (a RoCE header cut short; `out`
/// holds partial fields, which the caller's store of the outcome disowns).
#[inline(always)]
fn ip_fill<R: PacketReader, const L3_OFF: usize, const V6: bool>(
    r: &R,
    vlan_tags: u8,
    pcp: u8,
    out: &mut PacketRecord,
) -> Option<Result<(), Outcome>> {
    let l4 = l4_of::<L3_OFF, V6>();
    let l3 = if V6 {
        let h = Ipv6Header(r.read::<{ ipv6::LEN }>(L3_OFF)?);
        out.key.src = h.src();
        out.key.dst = h.dst();
        L3 {
            l4,
            payload_len: h.payload_len(),
            ip_version: 6,
            ecn: h.ecn(),
            dscp: h.traffic_class() >> 2,
        }
    } else {
        let h = Ipv4Header(r.read::<{ ipv4::MIN_LEN }>(L3_OFF)?);
        let (s, d) = (h.src(), h.dst());
        // Built as integers: two word stores each instead of sixteen byte stores.
        out.key.src = (u32::from_le_bytes(s) as u128).to_le_bytes();
        out.key.dst = (u32::from_le_bytes(d) as u128).to_le_bytes();
        L3 {
            l4,
            // At least the header ([`ip_class`] checked the same bytes).
            payload_len: h.total_len().saturating_sub(ipv4::MIN_LEN),
            ip_version: 4,
            ecn: h.ecn(),
            dscp: h.tos() >> 2,
        }
    };
    let u = UdpHeader(r.read::<{ udp::LEN }>(l4)?);
    Some(roce_into(r, &l3, u, Tunnel::default(), vlan_tags, pcp, out))
}

/// The RoCEv2 part of a frame once its UDP header (to port 4791) is read: the BTH and the
/// extension headers its opcode has, written into `out` next to the addresses the caller
/// wrote. Shared by the fast path and the general parser
/// ([`parse_frame_into`](crate::parse::parse_frame_into)), so both end the same way.
#[inline(always)]
pub(crate) fn roce_into<R: PacketReader>(
    r: &R,
    l3: &L3,
    u: UdpHeader,
    tunnel: Tunnel,
    vlan_tags: u8,
    pcp: u8,
    out: &mut PacketRecord,
) -> Result<(), Outcome> {
    let mut udp_len = u.length();
    if udp_len < udp::LEN {
        return Err(Outcome::BadUdpLength);
    }
    // The datagram as far as this IP packet carries it (a first fragment, or a UDP length
    // that overstates the IP payload, is cut to what the IP header announces).
    if udp_len > l3.payload_len {
        udp_len = l3.payload_len;
    }
    if udp_len < udp::LEN + bth::LEN {
        return Err(Outcome::TruncatedBth);
    }
    let bth_off = l3.l4 + udp::LEN;
    let b = Bth::from_bytes(
        r.read::<{ bth::LEN }>(bth_off)
            .ok_or(Outcome::TruncatedBth)?,
    );
    out.begin_roce(l3.ip_version, l3.ecn, l3.dscp);
    out.set_l2(vlan_tags, if pcp < 8 { Some(pcp) } else { None });
    out.set_udp(u.src_port(), udp_len as u16);
    out.set_tunnel(tunnel);
    out.set_bth(&b);
    let layout = ext_layout(b.opcode);
    let ext_off = bth_off + bth::LEN;
    if udp_len < udp::LEN + bth::LEN + layout.len as usize
        || r.len() < ext_off + layout.len as usize
    {
        out.set_ext(Outcome::RoceExtTruncated, None, None, None);
        return Ok(());
    }
    let mut outcome = Outcome::Roce;
    let deth = ext_header::<R, DETH_LEN>(r, ext_off, layout.deth, &mut outcome).map(|d| Deth {
        qkey: be32([d[0], d[1], d[2], d[3]]),
        src_qp: be24([d[5], d[6], d[7]]),
    });
    let reth = ext_header::<R, RETH_LEN>(r, ext_off, layout.reth, &mut outcome)
        .map(|e| be32([e[12], e[13], e[14], e[15]]));
    let aeth = ext_header::<R, AETH_LEN>(r, ext_off, layout.aeth, &mut outcome).map(|a| Aeth {
        syndrome: a[0],
        msn: be24([a[1], a[2], a[3]]),
    });
    out.set_ext(outcome, reth, aeth, deth);
    Ok(())
}

/// The extension header the opcode has at `at` past the BTH's end, if it has one; one that
/// cannot be read makes the packet's `outcome` `RoceExtTruncated`.
#[inline(always)]
fn ext_header<R: PacketReader, const N: usize>(
    r: &R,
    ext_off: usize,
    at: Option<u8>,
    outcome: &mut Outcome,
) -> Option<[u8; N]> {
    let h = r.read::<N>(ext_off + at? as usize);
    if h.is_none() {
        *outcome = Outcome::RoceExtTruncated;
    }
    h
}

#[cfg(test)]
#[path = "fast_tests.rs"]
mod tests;

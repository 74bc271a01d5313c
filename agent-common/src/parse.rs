//! `parse(&reader, link) -> Result<RoceInfo, Outcome>`: the one RoCEv2 parser.
//!
//! Generic over [`PacketReader`] and free of loops that the verifier cannot bound: VLAN tags
//! and IPv6 extension headers are walked a fixed number of times. Every frame ends in exactly
//! one [`Outcome`], which is also the index of its counter.

use crate::headers::encap::{self, Tunnel};
use crate::headers::ethernet::{self, is_vlan};
use crate::headers::ipv4::{self, Ipv4Header};
use crate::headers::ipv6::{self, Ipv6Header};
use crate::headers::mac_control::{self, MacControl};
use crate::headers::udp::ROCEV2_UDP_PORT;
use crate::headers::udp::{self, UdpHeader};
use crate::headers::{be16, sll};
use crate::reader::PacketReader;

pub(crate) use crate::info::{Addrs, L3, NO_PCP};
pub use crate::info::{Aeth, Deth, Parsed, RoceInfo};
pub use crate::outcome::{Outcome, OutcomeKind};
use crate::record::PacketRecord;

/// What the first bytes of a frame are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    /// Ethernet II (XDP, tc, AF_XDP, pcap linktype 1).
    Ethernet,
    /// Linux cooked capture v1 (pcap linktype 113).
    LinuxSll,
    /// Linux cooked capture v2 (pcap linktype 276).
    LinuxSll2,
}

/// [`parse_frame_into`] as the kernel's slow programs call it. Not inlined: in BPF the general
/// parser is then a subprogram with its own stack frame, so the slow program's frame plus the
/// counting function's stays under the 512-byte limit.
///
/// Returns the outcome's discriminant, which the kernel caller checks: a subprogram whose
/// result is unused (or returns nothing) may leave a stack pointer in R0, which the verifier
/// refuses at its exit.
#[inline(never)]
pub fn parse_into<R: PacketReader>(r: &R, link: LinkType, out: &mut PacketRecord) -> u32 {
    parse_frame_into(r, link, out);
    // Read back as memory, not as the value just stored: LLVM then cannot prove the range
    // of the result, keeps it, and R0 is a scalar at the subprogram's exit.
    // SAFETY: a valid reference to a plain integer field.
    unsafe { core::ptr::read_volatile(&out.outcome) }
}

/// Parses one frame, RoCE view: a MAC control frame is `Err(Outcome::MacControl)` (see
/// [`parse_frame`] for its fields). Never panics, never reads outside the reader.
#[inline(always)]
pub fn parse<R: PacketReader>(r: &R, link: LinkType) -> Result<RoceInfo, Outcome> {
    parse_frame(r, link).roce()
}

/// Parses one frame. Never panics, never reads outside the reader.
#[inline(always)]
pub fn parse_frame<R: PacketReader>(r: &R, link: LinkType) -> Parsed {
    // The general parser alone: the fast path's tests hold it up against this.
    let mut rec = PacketRecord::default();
    parse_frame_into(r, link, &mut rec);
    rec.load()
}

/// Parses one frame into a new flat record, what counting reads: an Ethernet frame of a
/// common shape by the fast path (which answers exactly what the general parser would, as
/// the kernel relies on), anything else by [`parse_frame_into`].
#[inline(always)]
pub fn parse_record<R: PacketReader>(r: &R, link: LinkType) -> PacketRecord {
    let mut rec = PacketRecord::default();
    parse_record_into(r, link, &mut rec);
    rec
}

/// [`parse_record`] into a record where it is wanted, which must be a new (default) one
/// (`analyze` parses straight into the step it hands the flow thread, made with a default
/// record: a record returned and then copied reads back the parser's narrow stores with wide
/// loads, which stalled the parsing thread).
#[inline(always)]
pub fn parse_record_into<R: PacketReader>(r: &R, link: LinkType, rec: &mut PacketRecord) {
    debug_assert_eq!(
        *rec,
        PacketRecord::default(),
        "parse_record_into takes a new record"
    );
    if link != LinkType::Ethernet || !crate::fast::parse_fast_into(r, rec) {
        parse_frame_into(r, link, rec);
    }
}

/// Parses one frame into a flat record, the shape the kernel counts from (the fast path
/// writes the same record through the same setters). Never panics, never reads outside the
/// reader.
#[inline(always)]
pub fn parse_frame_into<R: PacketReader>(r: &R, link: LinkType, out: &mut PacketRecord) {
    // The look-ahead stays in this frame (filled in place, not moved through a result).
    let mut look = encap::Lookahead::default();
    let l2 = match parse_l2(r, link, &mut look) {
        Ok(l2) => l2,
        Err(o) => return out.store(&Parsed::Other(o)),
    };
    if l2.ethertype == mac_control::ETHERTYPE_MAC_CONTROL {
        return out.store(&mac_control_at(r, l2.off));
    }
    if let Err(o) = parse_l3(r, &l2, &look, out) {
        out.store(&Parsed::Other(o));
    }
}

/// A MAC control frame whose payload (opcode first) starts at `off`.
#[inline(always)]
pub(crate) fn mac_control_at<R: PacketReader>(r: &R, off: usize) -> Parsed {
    let Some(op) = r.read::<2>(off) else {
        return Parsed::Other(Outcome::TruncatedMacControl);
    };
    let m = match be16(op) {
        mac_control::OPCODE_PFC => match r.read::<{ mac_control::PFC_LEN }>(off) {
            Some(b) => MacControl::pfc(&b),
            None => return Parsed::Other(Outcome::TruncatedMacControl),
        },
        mac_control::OPCODE_PAUSE => match r.read::<{ mac_control::PAUSE_LEN }>(off) {
            Some(b) => MacControl::pause(&b),
            None => return Parsed::Other(Outcome::TruncatedMacControl),
        },
        other => MacControl {
            opcode: other,
            ..MacControl::default()
        },
    };
    Parsed::MacControl(m)
}

/// The link layer walked: the (inner) frame's EtherType after its tags and where its payload
/// starts.
struct L2 {
    ethertype: u16,
    off: usize,
    tunnel: Tunnel,
    vlan_tags: u8,
    /// PCP of the outermost tag, [`NO_PCP`] untagged.
    pcp: u8,
}

#[inline(always)]
fn parse_l2<R: PacketReader>(
    r: &R,
    link: LinkType,
    look: &mut encap::Lookahead,
) -> Result<L2, Outcome> {
    let (mut ethertype, mut off) = match link {
        LinkType::Ethernet => (
            be16(
                r.read(ethernet::ETHERTYPE_OFFSET)
                    .ok_or(Outcome::TruncatedL2)?,
            ),
            ethernet::LEN,
        ),
        LinkType::LinuxSll => (
            be16(
                r.read(sll::SLL_PROTOCOL_OFFSET)
                    .ok_or(Outcome::TruncatedL2)?,
            ),
            sll::SLL_LEN,
        ),
        LinkType::LinuxSll2 => {
            if r.len() < sll::SLL2_LEN {
                return Err(Outcome::TruncatedL2);
            }
            (
                be16(
                    r.read(sll::SLL2_PROTOCOL_OFFSET)
                        .ok_or(Outcome::TruncatedL2)?,
                ),
                sll::SLL2_LEN,
            )
        }
    };
    // Mirror sessions and tunnels: a cheap look at the outer headers finds where the inner
    // frame starts; the full parse below then runs once, on the inner frame.
    let mut tunnel = Tunnel::default();
    *look = encap::locate(r, ethertype, off)?;
    if let Some(inner) = look.inner.take() {
        tunnel = inner.tunnel;
        off = inner.inner_off;
        ethertype = match inner.inner_ethertype {
            Some(e) => e,
            None => {
                let e = be16(
                    r.read(off + ethernet::ETHERTYPE_OFFSET)
                        .ok_or(Outcome::TruncatedL2)?,
                );
                off += ethernet::LEN;
                e
            }
        };
    }
    let mut vlan_tags = 0u8;
    let mut pcp = NO_PCP;
    // A fixed bound: single tag and QinQ.
    let mut i = 0;
    while i < ethernet::MAX_VLAN_TAGS {
        if is_vlan(ethertype) {
            let tag = r
                .read::<{ ethernet::VLAN_TAG_LEN }>(off)
                .ok_or(Outcome::TruncatedL2)?;
            if vlan_tags == 0 {
                pcp = tag[0] >> 5;
            }
            ethertype = be16([tag[2], tag[3]]);
            off += ethernet::VLAN_TAG_LEN;
            vlan_tags += 1;
        }
        i += 1;
    }
    if is_vlan(ethertype) {
        return Err(Outcome::VlanDepthExceeded);
    }
    Ok(L2 {
        ethertype,
        off,
        tunnel,
        vlan_tags,
        pcp,
    })
}

#[inline(always)]
fn parse_l3<R: PacketReader>(
    r: &R,
    l2: &L2,
    look: &encap::Lookahead,
    out: &mut PacketRecord,
) -> Result<(), Outcome> {
    let (l3, addrs, u) = ip_udp(r, l2, look)?;
    if u.dst_port() != ROCEV2_UDP_PORT {
        return Err(Outcome::UdpOtherPort);
    }
    out.key.src = addrs.src;
    out.key.dst = addrs.dst;
    crate::fast::roce_into(r, &l3, u, l2.tunnel, l2.vlan_tags, l2.pcp, out)
}

/// The IP layer and the UDP header after the link layer.
#[inline(always)]
fn ip_udp<R: PacketReader>(
    r: &R,
    l2: &L2,
    look: &encap::Lookahead,
) -> Result<(L3, Addrs, UdpHeader), Outcome> {
    let (l3, addrs) = match l2.ethertype {
        ethernet::ETHERTYPE_IPV4 => parse_ipv4(r, l2.off, look.has_ipv4, &look.ipv4)?,
        ethernet::ETHERTYPE_IPV6 => parse_ipv6(r, l2.off)?,
        _ => return Err(Outcome::NotIp),
    };
    let u = if look.udp_off != 0 && look.udp_off == l3.l4 {
        UdpHeader(look.udp)
    } else {
        UdpHeader(r.read::<{ udp::LEN }>(l3.l4).ok_or(Outcome::TruncatedUdp)?)
    };
    Ok((l3, addrs, u))
}

/// Where a UDP datagram's payload sits in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpPayload {
    pub src: [u8; 16],
    pub ip_version: u8,
    pub dst_port: u16,
    /// Offset of the payload in the frame.
    pub offset: usize,
    /// Payload bytes the UDP length announces, cut to the IP payload and the captured bytes.
    pub len: usize,
}

/// The UDP payload of a frame (after the same link-layer, tunnel and IP walk as
/// [`parse_frame`]), for UDP telemetry carried in captures (sFlow datagrams). `None` for a
/// frame that is not UDP or is malformed.
pub fn udp_payload<R: PacketReader>(r: &R, link: LinkType) -> Option<UdpPayload> {
    let mut look = encap::Lookahead::default();
    let l2 = parse_l2(r, link, &mut look).ok()?;
    let (l3, addrs, u) = ip_udp(r, &l2, &look).ok()?;
    let offset = l3.l4 + udp::LEN;
    let len = u
        .length()
        .min(l3.payload_len)
        .saturating_sub(udp::LEN)
        .min(r.len().saturating_sub(offset));
    Some(UdpPayload {
        src: addrs.src,
        ip_version: l3.ip_version,
        dst_port: u.dst_port(),
        offset,
        len,
    })
}

#[inline(always)]
fn parse_ipv4<R: PacketReader>(
    r: &R,
    off: usize,
    read_ahead: bool,
    ahead: &[u8; ipv4::MIN_LEN],
) -> Result<(L3, Addrs), Outcome> {
    let h = Ipv4Header(if read_ahead {
        *ahead
    } else {
        r.read::<{ ipv4::MIN_LEN }>(off)
            .ok_or(Outcome::TruncatedIpv4)?
    });
    if h.version() != 4 {
        return Err(Outcome::BadIpVersion);
    }
    let hl = h.header_len();
    if hl < ipv4::MIN_LEN {
        return Err(Outcome::BadIhl);
    }
    if h.total_len() < hl {
        return Err(Outcome::BadIpv4TotalLength);
    }
    if r.len() < off + hl {
        // Options announced by the IHL are not all there.
        return Err(Outcome::TruncatedIpv4);
    }
    if h.fragment_offset() != 0 {
        return Err(Outcome::IpFragment);
    }
    if h.protocol() != ipv4::PROTO_UDP {
        return Err(Outcome::NotUdp);
    }
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    let (s, d) = (h.src(), h.dst());
    src[0] = s[0];
    src[1] = s[1];
    src[2] = s[2];
    src[3] = s[3];
    dst[0] = d[0];
    dst[1] = d[1];
    dst[2] = d[2];
    dst[3] = d[3];
    let l3 = L3 {
        l4: off + hl,
        payload_len: h.total_len() - hl,
        ip_version: 4,
        ecn: h.ecn(),
        dscp: h.tos() >> 2,
    };
    Ok((l3, Addrs { src, dst }))
}

#[inline(always)]
fn parse_ipv6<R: PacketReader>(r: &R, off: usize) -> Result<(L3, Addrs), Outcome> {
    let h = Ipv6Header(r.read::<{ ipv6::LEN }>(off).ok_or(Outcome::TruncatedIpv6)?);
    if h.version() != 6 {
        return Err(Outcome::BadIpVersion);
    }
    let mut next = h.next_header();
    let mut l4 = off + ipv6::LEN;
    let mut remaining = h.payload_len();
    // A fixed bound on the extension headers walked (see headers::ipv6).
    let mut i = 0;
    while i < ipv6::MAX_EXT_HEADERS {
        if ipv6::is_skippable_ext(next) {
            let e = r.read::<2>(l4).ok_or(Outcome::TruncatedIpv6Ext)?;
            let len = (e[1] as usize + 1) * 8;
            next = e[0];
            l4 += len;
            remaining = match remaining.checked_sub(len) {
                Some(v) => v,
                None => return Err(Outcome::BadIpv6PayloadLength),
            };
        } else if next == ipv6::NEXT_FRAGMENT {
            let f = r
                .read::<{ ipv6::FRAGMENT_LEN }>(l4)
                .ok_or(Outcome::TruncatedIpv6Ext)?;
            if be16([f[2], f[3]]) >> 3 != 0 {
                return Err(Outcome::IpFragment);
            }
            next = f[0];
            l4 += ipv6::FRAGMENT_LEN;
            remaining = match remaining.checked_sub(ipv6::FRAGMENT_LEN) {
                Some(v) => v,
                None => return Err(Outcome::BadIpv6PayloadLength),
            };
        }
        i += 1;
    }
    if next != ipv6::NEXT_UDP {
        if ipv6::is_skippable_ext(next) || next == ipv6::NEXT_FRAGMENT || next == 50 || next == 51 {
            return Err(Outcome::Ipv6ExtUnsupported);
        }
        return Err(Outcome::NotUdp);
    }
    let l3 = L3 {
        l4,
        payload_len: remaining,
        ip_version: 6,
        ecn: h.ecn(),
        dscp: h.traffic_class() >> 2,
    };
    Ok((
        l3,
        Addrs {
            src: h.src(),
            dst: h.dst(),
        },
    ))
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;

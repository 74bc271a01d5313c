//! The parse result: what a frame is ([`Parsed`]: RoCE, MAC control, or an outcome) and a
//! RoCE packet's fields ([`RoceInfo`]). Below the parsers (`fast`, `parse`), which fill it,
//! and the counting, which reads it.

use crate::flow_key::FlowKey;
use crate::headers::bth::Bth;
use crate::headers::encap::Tunnel;
use crate::headers::mac_control::MacControl;
use crate::hook::Hook;
use crate::opcode::OPCODE_CNP;
use crate::outcome::Outcome;

/// [`L2::pcp`] of an untagged frame.
pub(crate) const NO_PCP: u8 = 0xFF;

/// What one frame is: RoCE, a MAC control frame (PFC, PAUSE), or something else under its
/// outcome. What [`parse_frame`] answers and what counting reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    Roce(RoceInfo),
    MacControl(MacControl),
    Other(Outcome),
}

impl Parsed {
    /// The frame's outcome (its counter).
    #[inline(always)]
    pub fn outcome(&self) -> Outcome {
        match self {
            Parsed::Roce(i) => i.outcome,
            Parsed::MacControl(_) => Outcome::MacControl,
            Parsed::Other(o) => *o,
        }
    }

    /// The RoCE view: the packet, or the outcome of anything else.
    #[inline(always)]
    pub fn roce(self) -> Result<RoceInfo, Outcome> {
        match self {
            Parsed::Roce(i) => Ok(i),
            other => Err(other.outcome()),
        }
    }

    /// Whether the AF_XDP capture mode hands this frame to userspace: every RoCE frame, and
    /// the outcomes [`Outcome::captured`] names.
    #[inline(always)]
    pub fn captured(&self) -> bool {
        match self {
            Parsed::Roce(_) => true,
            other => other.outcome().captured(),
        }
    }
}

impl From<Result<RoceInfo, Outcome>> for Parsed {
    #[inline(always)]
    fn from(r: Result<RoceInfo, Outcome>) -> Parsed {
        match r {
            Ok(i) => Parsed::Roce(i),
            Err(o) => Parsed::Other(o),
        }
    }
}

/// The AETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// The DETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deth {
    pub qkey: u32,
    pub src_qp: u32,
}

/// A parsed RoCEv2 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceInfo {
    /// [`Outcome::Roce`] or [`Outcome::RoceExtTruncated`].
    pub outcome: Outcome,
    pub ip_version: u8,
    /// ECN codepoint: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    /// Source address; IPv4 in the first four bytes, the rest zero.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    /// UDP source port: the flow's ECMP entropy.
    pub sport: u16,
    /// UDP length (header + payload), clipped to the IP payload.
    pub udp_len: u16,
    /// VLAN tags walked (0, 1 or 2) of the (inner) frame.
    pub vlan_tags: u8,
    /// DSCP (the six high bits of the IPv4 TOS or IPv6 traffic class).
    pub dscp: u8,
    /// 802.1p priority (PCP) of the outermost tag of the (inner) frame; `None` untagged.
    pub pcp: Option<u8>,
    /// The mirror session or tunnel the packet arrived in, if any.
    pub tunnel: Tunnel,
    pub bth: Bth,
    /// RETH DMA length (RDMA WRITE FIRST/ONLY, READ REQUEST).
    pub reth_dma_len: Option<u32>,
    pub aeth: Option<Aeth>,
    pub deth: Option<Deth>,
}

impl RoceInfo {
    #[inline(always)]
    pub const fn is_cnp(&self) -> bool {
        self.bth.opcode == OPCODE_CNP
    }

    /// The flow this packet belongs to: (IP version, source, destination, UDP source port,
    /// destination QP), as seen by `hook`.
    #[inline(always)]
    pub const fn flow_key(&self, hook: Hook) -> FlowKey {
        FlowKey {
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            ip_version: self.ip_version,
            hook: hook as u8,
            dest_qp: self.bth.dest_qp,
        }
    }
}

/// Where the UDP header starts and what the IP layer said (its addresses go straight into
/// the record's flow key: [`Addrs`]).
pub(crate) struct L3 {
    pub(crate) l4: usize,
    /// Bytes of IP payload the IP header announces (for the UDP length check).
    pub(crate) payload_len: usize,
    pub(crate) ip_version: u8,
    pub(crate) ecn: u8,
    pub(crate) dscp: u8,
}

/// The IP addresses of a packet (IPv4 in the first four bytes, the rest zero).
pub(crate) struct Addrs {
    pub(crate) src: [u8; 16],
    pub(crate) dst: [u8; 16],
}

//! What counting reads of a RoCE packet, as a trait: the parser's [`RoceInfo`] and the flat
//! [`PacketRecord`] the kernel carries both implement it, so the one counting sequence
//! ([`crate::HookCounters::record_roce`], [`crate::FlowStats::record`],
//! [`crate::SessionKey::of`]) reads either without converting one into the other (in the
//! kernel's fast path, rebuilding a `RoceInfo` from the record cost a copy of every field).

use crate::flow_key::FlowKey;
use crate::headers::encap::TunnelKind;
use crate::hook::Hook;
use crate::info::RoceInfo;
use crate::opcode::OPCODE_CNP;
use crate::outcome::Outcome;
use crate::record::PacketRecord;

/// The fields of a RoCE packet that counting needs.
pub trait RocePacket {
    /// [`Outcome::Roce`] or [`Outcome::RoceExtTruncated`].
    fn outcome(&self) -> Outcome;
    fn opcode(&self) -> u8;
    /// ECN codepoint (two bits).
    fn ecn(&self) -> u8;
    /// DSCP (six bits).
    fn dscp(&self) -> u8;
    /// 802.1p priority of the outermost tag; `None` untagged.
    fn pcp(&self) -> Option<u8>;
    fn becn(&self) -> bool;
    fn fecn(&self) -> bool;
    fn psn(&self) -> u32;
    fn tunnel_kind(&self) -> TunnelKind;
    fn tunnel_id(&self) -> u32;
    /// The AETH syndrome, when the packet carries an AETH.
    fn aeth_syndrome(&self) -> Option<u8>;
    /// The RETH's DMA length, when the packet carries a RETH.
    fn reth_dma_len(&self) -> Option<u32>;
    /// The UDP length field (header included).
    fn udp_len(&self) -> u16;
    /// The BTH pad count.
    fn pad_count(&self) -> u8;
    /// The flow this packet belongs to, as seen by `hook`.
    fn flow_key(&self, hook: Hook) -> FlowKey;

    #[inline(always)]
    fn is_cnp(&self) -> bool {
        self.opcode() == OPCODE_CNP
    }
}

impl RocePacket for RoceInfo {
    #[inline(always)]
    fn outcome(&self) -> Outcome {
        self.outcome
    }
    #[inline(always)]
    fn opcode(&self) -> u8 {
        self.bth.opcode
    }
    #[inline(always)]
    fn ecn(&self) -> u8 {
        self.ecn
    }
    #[inline(always)]
    fn dscp(&self) -> u8 {
        self.dscp
    }
    #[inline(always)]
    fn pcp(&self) -> Option<u8> {
        self.pcp
    }
    #[inline(always)]
    fn becn(&self) -> bool {
        self.bth.becn
    }
    #[inline(always)]
    fn fecn(&self) -> bool {
        self.bth.fecn
    }
    #[inline(always)]
    fn psn(&self) -> u32 {
        self.bth.psn
    }
    #[inline(always)]
    fn tunnel_kind(&self) -> TunnelKind {
        self.tunnel.kind
    }
    #[inline(always)]
    fn tunnel_id(&self) -> u32 {
        self.tunnel.id
    }
    #[inline(always)]
    fn aeth_syndrome(&self) -> Option<u8> {
        self.aeth.map(|a| a.syndrome)
    }
    #[inline(always)]
    fn reth_dma_len(&self) -> Option<u32> {
        self.reth_dma_len
    }
    #[inline(always)]
    fn udp_len(&self) -> u16 {
        self.udp_len
    }
    #[inline(always)]
    fn pad_count(&self) -> u8 {
        self.bth.pad_count
    }
    #[inline(always)]
    fn flow_key(&self, hook: Hook) -> FlowKey {
        RoceInfo::flow_key(self, hook)
    }
}

impl RocePacket for PacketRecord {
    #[inline(always)]
    fn outcome(&self) -> Outcome {
        PacketRecord::outcome(self)
    }
    #[inline(always)]
    fn opcode(&self) -> u8 {
        self.opcode
    }
    #[inline(always)]
    fn ecn(&self) -> u8 {
        self.ecn
    }
    #[inline(always)]
    fn dscp(&self) -> u8 {
        self.dscp
    }
    #[inline(always)]
    fn pcp(&self) -> Option<u8> {
        PacketRecord::pcp(self)
    }
    #[inline(always)]
    fn becn(&self) -> bool {
        PacketRecord::becn(self)
    }
    #[inline(always)]
    fn fecn(&self) -> bool {
        PacketRecord::fecn(self)
    }
    #[inline(always)]
    fn psn(&self) -> u32 {
        self.psn
    }
    #[inline(always)]
    fn tunnel_kind(&self) -> TunnelKind {
        PacketRecord::tunnel_kind(self)
    }
    #[inline(always)]
    fn tunnel_id(&self) -> u32 {
        self.tunnel_id
    }
    #[inline(always)]
    fn aeth_syndrome(&self) -> Option<u8> {
        PacketRecord::aeth_syndrome(self)
    }
    #[inline(always)]
    fn reth_dma_len(&self) -> Option<u32> {
        PacketRecord::reth_dma_len(self)
    }
    #[inline(always)]
    fn udp_len(&self) -> u16 {
        self.udp_len
    }
    #[inline(always)]
    fn pad_count(&self) -> u8 {
        self.pad_count
    }
    #[inline(always)]
    fn flow_key(&self, hook: Hook) -> FlowKey {
        FlowKey {
            hook: hook as u8,
            ..self.key
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, LinkType, SliceReader};
    use rocemon_testkit::fixtures;

    /// The record answers every question as the parse result it holds.
    #[test]
    fn the_record_reads_as_the_parse_result_on_every_fixture_frame() {
        let mut n = 0;
        for fx in fixtures::all() {
            if fx.link != fixtures::Link::Ethernet {
                continue;
            }
            for (_, _, frame) in fx.records() {
                let Ok(info) = parse(&SliceReader(&frame), LinkType::Ethernet) else {
                    continue;
                };
                let mut r = PacketRecord::default();
                r.store(&crate::Parsed::Roce(info));
                assert_eq!(RocePacket::outcome(&r), RocePacket::outcome(&info));
                assert_eq!(RocePacket::opcode(&r), RocePacket::opcode(&info));
                assert_eq!(RocePacket::ecn(&r), RocePacket::ecn(&info));
                assert_eq!(RocePacket::dscp(&r), RocePacket::dscp(&info));
                assert_eq!(RocePacket::pcp(&r), RocePacket::pcp(&info));
                assert_eq!(RocePacket::becn(&r), RocePacket::becn(&info));
                assert_eq!(RocePacket::fecn(&r), RocePacket::fecn(&info));
                assert_eq!(RocePacket::psn(&r), RocePacket::psn(&info));
                assert_eq!(RocePacket::tunnel_kind(&r), RocePacket::tunnel_kind(&info));
                assert_eq!(RocePacket::tunnel_id(&r), RocePacket::tunnel_id(&info));
                assert_eq!(
                    RocePacket::aeth_syndrome(&r),
                    RocePacket::aeth_syndrome(&info)
                );
                for h in Hook::ALL {
                    assert_eq!(RocePacket::flow_key(&r, h), RocePacket::flow_key(&info, h));
                }
                n += 1;
            }
        }
        assert!(n > 1000, "{n} RoCE frames");
    }
}

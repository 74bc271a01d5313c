//! What a RoCE packet says, decided once for everything above the parse: whether it arrived
//! congestion-marked (ECN CE), whether it is a NAK and of which code, whether it travelled
//! outside the lossless class. The counter block and the flow step ([`crate::counters`],
//! [`crate::flow`]), the capture's timeline, slow-step trouble and CE/CNP pairing (the
//! agent's `pipeline` and `detect`) all ask here, so no rule is written twice (the agent's
//! layout test looks for a second copy). CNP is [`PacketRecord::is_cnp`], the opcode's.

use crate::classes::TrafficClasses;
use crate::psn::{ack_syndrome, is_rnr_nak, nak_slot};
use crate::record::PacketRecord;

/// A NAK: of a code (its counter slot, `psn::NAK_NAMES`), or receiver not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nak {
    Code(usize),
    Rnr,
}

/// The ECN codepoint Congestion Experienced.
pub const ECN_CE: u8 = 3;

impl PacketRecord {
    /// The packet arrived congestion-marked (ECN CE, codepoint 3).
    #[inline(always)]
    pub fn is_ce(&self) -> bool {
        self.ecn() & 3 == ECN_CE
    }

    /// The NAK this packet is (an ACKNOWLEDGE whose AETH syndrome says NAK or RNR NAK).
    #[inline(always)]
    pub fn nak(&self) -> Option<Nak> {
        let s = ack_syndrome(self)?;
        match nak_slot(s) {
            Some(slot) => Some(Nak::Code(slot)),
            None => is_rnr_nak(s).then_some(Nak::Rnr),
        }
    }

    /// RoCE data (not a CNP) outside the lossless class `classes` expects: PFC does not
    /// protect it, so congestion drops it.
    #[inline(always)]
    pub fn is_lossy(&self, classes: &TrafficClasses) -> bool {
        !self.is_cnp() && !classes.roce_in_class(self.dscp() & 63, self.pcp())
    }
}

#[cfg(test)]
mod tests {
    use crate::record::PacketRecord;
    use crate::{parse_record, LinkType, SliceReader, TrafficClasses};

    /// A frame's record through the parser (the facts read only what it wrote).
    fn record(frame: &[u8]) -> PacketRecord {
        parse_record(&SliceReader(frame), LinkType::Ethernet)
    }

    /// An IPv4 RoCE frame: `ecn`, DSCP `dscp`, opcode `op`, AETH syndrome `syn` (for ACKs).
    fn frame(ecn: u8, dscp: u8, op: u8, syn: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 12 + 4 + 4];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[1] = (dscp << 2) | ecn;
        let total = (20 + 8 + 12 + 4 + 4) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let udp = &mut f[34..42];
        udp[0..2].copy_from_slice(&0xC000u16.to_be_bytes());
        udp[2..4].copy_from_slice(&4791u16.to_be_bytes());
        udp[4..6].copy_from_slice(&((8 + 12 + 4 + 4) as u16).to_be_bytes());
        let bth = &mut f[42..54];
        bth[0] = op;
        bth[2..4].copy_from_slice(&0xFFFFu16.to_be_bytes());
        bth[7] = 0x11;
        f[54] = syn;
        f
    }

    #[test]
    fn ce_is_codepoint_3_only() {
        for (ecn, ce) in [(0, false), (1, false), (2, false), (3, true)] {
            assert_eq!(record(&frame(ecn, 26, 0x0A, 0)).is_ce(), ce, "ecn {ecn}");
        }
    }

    #[test]
    fn a_nak_has_its_code_and_an_ack_is_none() {
        use super::Nak;
        // ACKNOWLEDGE (0x11): syndrome 0x60 | code is a NAK, 0x20 | timer an RNR NAK,
        // 0x00 | credits an ACK.
        assert_eq!(record(&frame(0, 26, 0x11, 0x60)).nak(), Some(Nak::Code(0)));
        assert_eq!(record(&frame(0, 26, 0x11, 0x62)).nak(), Some(Nak::Code(2)));
        assert_eq!(record(&frame(0, 26, 0x11, 0x20)).nak(), Some(Nak::Rnr));
        assert_eq!(record(&frame(0, 26, 0x11, 0x1F)).nak(), None);
        // The same byte after a WRITE's BTH is payload, not an AETH.
        assert_eq!(record(&frame(0, 26, 0x0A, 0x60)).nak(), None);
    }

    #[test]
    fn lossy_is_roce_data_outside_the_class_and_never_a_cnp() {
        let c = TrafficClasses::DEFAULT;
        assert!(
            !record(&frame(0, 26, 0x0A, 0)).is_lossy(&c),
            "DSCP 26: the class"
        );
        assert!(record(&frame(0, 0, 0x0A, 0)).is_lossy(&c), "DSCP 0: lossy");
        assert!(
            !record(&frame(0, 0, 0x81, 0)).is_lossy(&c),
            "a CNP is judged by its own class"
        );
    }
}

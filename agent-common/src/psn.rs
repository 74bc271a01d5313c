//! PSN and NAK health: sequence gaps, retransmissions, NAKs by code, RNR NAKs.
//!
//! Where this is tracked: a gap or a repeated PSN can only be seen packet by packet, so the
//! kernel programs track it in the flow record ([`crate::FlowStats::record`]), and `analyze`
//! runs the same code. The flow map is per-CPU: each CPU keeps its own expected PSN for a flow.
//! On receive (XDP, tc ingress) RSS steers a flow to one queue, so one CPU sees its whole
//! sequence; a sender that migrates (tc egress, a veth) spreads it over CPUs, and each CPU
//! would see the others' packets as a gap: the kernel reconciles a gap with the other CPUs'
//! states of the flow before it counts ([`gap_covered`], `agent-ebpf/src/psn_cpus.rs`), so
//! gaps are judged per flow. Totals are summed over CPUs.
//!
//! Which packets carry the sequence: requests (SEND, WRITE, READ REQUEST, atomics) of RC, UC
//! and XRC, one PSN each. A READ REQUEST consumes one PSN per response packet, which depends
//! on the path MTU the packet does not carry, so the next request re-synchronises instead of
//! counting a gap. Responses (ACKs are coalesced, read responses follow the request's PSN) are
//! not sequence-checked; their AETH NAK codes are counted.

use crate::headers::ext::{aeth_kind, AethKind};
use crate::opcode::{class, transport, OpClass, Transport};
use crate::record::PacketRecord;

/// PSNs are 24 bits and wrap.
pub const PSN_MASK: u32 = 0x00FF_FFFF;
/// Half the PSN space: a PSN this far ahead or more is "behind" (a retransmission).
const PSN_HALF: u32 = 0x0080_0000;

/// NAK counter slots: the five defined codes, then one for reserved codes.
pub const NAK_SLOTS: usize = 6;
pub const NAK_NAMES: [&str; NAK_SLOTS] = [
    "psn_sequence_error",
    "invalid_request",
    "remote_access_error",
    "remote_operational_error",
    "invalid_rd_request",
    "reserved",
];

/// The sequence state of one flow (one direction, one CPU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PsnTrack {
    pub expected: u32,
    /// 1 once `expected` holds a value.
    pub valid: u8,
    pub pad: [u8; 3],
}

/// What one packet did to the sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PsnEvent {
    /// Packets missing before this one.
    pub gap: u32,
    /// The PSN was at or before one already seen.
    pub retransmit: bool,
}

/// Whether the opcode carries the flow's request sequence.
#[inline(always)]
pub fn is_sequenced(opcode: u8) -> bool {
    matches!(
        transport(opcode),
        Transport::Rc | Transport::Uc | Transport::Xrc
    ) && matches!(
        class(opcode),
        OpClass::Send | OpClass::Write | OpClass::ReadRequest | OpClass::Atomic
    )
}

impl PsnTrack {
    /// Advances the sequence with a packet's PSN (RC/UC/XRC requests only).
    #[inline(always)]
    pub fn observe(&mut self, opcode: u8, psn: u32) -> PsnEvent {
        let mut ev = PsnEvent::default();
        if !is_sequenced(opcode) {
            return ev;
        }
        let psn = psn & PSN_MASK;
        if self.valid != 0 {
            let delta = psn.wrapping_sub(self.expected) & PSN_MASK;
            if delta >= PSN_HALF {
                // Behind what was expected: go-back-N resends everything after the lost
                // packet, so every resent packet counts until the sequence catches up.
                ev.retransmit = true;
                return ev;
            }
            ev.gap = delta;
        }
        if class(opcode) as u8 == OpClass::ReadRequest as u8 {
            // The responses consume PSNs we cannot count: re-synchronise on the next request.
            self.valid = 0;
        } else {
            self.expected = (psn + 1) & PSN_MASK;
            self.valid = 1;
        }
        ev
    }
}

/// How much of a gap another CPU's sequence state covers. A packet with PSN `psn` found
/// `gap` packets missing after this CPU's expected PSN; another CPU whose state expects
/// `other` next saw the flow's packets up to `other - 1`: where that lies in the gap, those
/// packets were not lost, they were counted there (a sender that moved between CPUs, or
/// packets of one flow spread over CPUs). Returns the packets of the gap covered.
#[inline(always)]
pub fn gap_covered(psn: u32, gap: u32, other: u32) -> u32 {
    let expected = psn.wrapping_sub(gap) & PSN_MASK;
    let d = other.wrapping_sub(expected) & PSN_MASK;
    if d <= gap {
        d
    } else {
        0
    }
}

/// The NAK slot of an AETH syndrome, `None` for ACKs; RNR NAKs are reported separately.
#[inline(always)]
pub const fn nak_slot(syndrome: u8) -> Option<usize> {
    match aeth_kind(syndrome) {
        AethKind::Nak => {
            let code = (syndrome & 0x1F) as usize;
            Some(if code < NAK_SLOTS - 1 {
                code
            } else {
                NAK_SLOTS - 1
            })
        }
        _ => None,
    }
}

/// Whether an AETH syndrome is an RNR NAK.
#[inline(always)]
pub const fn is_rnr_nak(syndrome: u8) -> bool {
    matches!(aeth_kind(syndrome), AethKind::RnrNak)
}

/// The AETH syndrome of an ACKNOWLEDGE / ATOMIC ACKNOWLEDGE, if the packet is one.
#[inline(always)]
pub fn ack_syndrome(p: &PacketRecord) -> Option<u8> {
    match (class(p.opcode()), p.aeth_syndrome()) {
        (OpClass::Ack, Some(s)) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_cpus_state_covers_the_part_of_a_gap_it_saw() {
        // Expected 10, got 15: a gap of 5 (10..=14).
        assert_eq!(gap_covered(15, 5, 15), 5, "the other CPU saw 10..=14");
        assert_eq!(gap_covered(15, 5, 12), 2, "it saw 10 and 11");
        assert_eq!(gap_covered(15, 5, 10), 0, "it saw nothing of the gap");
        assert_eq!(gap_covered(15, 5, 16), 0, "ahead of this packet: no cover");
        assert_eq!(gap_covered(15, 5, 3), 0, "behind the gap");
        // Across the wrap.
        assert_eq!(
            gap_covered(2, 4, 1),
            3,
            "0xFFFFFE..=1, the other saw up to 0"
        );
    }

    fn run(seq: &[(u8, u32)]) -> (u32, u32) {
        let mut t = PsnTrack::default();
        let (mut gaps, mut rtx) = (0, 0);
        for &(op, psn) in seq {
            let e = t.observe(op, psn);
            gaps += e.gap;
            rtx += e.retransmit as u32;
        }
        (gaps, rtx)
    }

    #[test]
    fn in_order_gaps_and_retransmissions() {
        assert_eq!(run(&[(0x04, 1), (0x04, 2), (0x04, 3)]), (0, 0));
        // 3 and 4 missing
        assert_eq!(run(&[(0x04, 1), (0x04, 2), (0x04, 5)]), (2, 0));
        // go-back-N: 3 lost, 4 5 sent, then 3 4 5 resent: gap 1 then 2 retransmissions (4, 5
        // again) after 3 fills... 3 itself is behind expected (6) too.
        assert_eq!(
            run(&[
                (0x04, 1),
                (0x04, 2),
                (0x04, 4),
                (0x04, 5),
                (0x04, 3),
                (0x04, 4),
                (0x04, 5),
                (0x04, 6)
            ]),
            (1, 3)
        );
        // a duplicate
        assert_eq!(run(&[(0x0A, 9), (0x0A, 9)]), (0, 1));
    }

    #[test]
    fn wraps_at_2_pow_24() {
        assert_eq!(
            run(&[(0x06, 0xFF_FFFE), (0x07, 0xFF_FFFF), (0x07, 0), (0x08, 1)]),
            (0, 0)
        );
        assert_eq!(run(&[(0x06, 0xFF_FFFF), (0x07, 2)]), (2, 0));
        assert_eq!(run(&[(0x06, 1), (0x07, 0xFF_FFFF)]), (0, 1));
    }

    #[test]
    fn responses_are_not_sequenced_and_reads_resync() {
        // ACKs and read responses do not count
        assert_eq!(run(&[(0x04, 1), (0x11, 7), (0x10, 30), (0x04, 2)]), (0, 0));
        // after a read request, the next request re-synchronises (no gap for consumed PSNs)
        assert_eq!(run(&[(0x04, 1), (0x0C, 2), (0x04, 10), (0x04, 11)]), (0, 0));
        // UD and CNP are not sequenced
        assert_eq!(run(&[(0x64, 1), (0x64, 9), (0x81, 0)]), (0, 0));
    }

    #[test]
    fn nak_codes() {
        assert_eq!(nak_slot(0x1F), None);
        assert_eq!(nak_slot(0x60), Some(0));
        assert_eq!(nak_slot(0x64), Some(4));
        assert_eq!(nak_slot(0x6A), Some(5));
        assert_eq!(nak_slot(0x2E), None);
        assert!(is_rnr_nak(0x2E));
        assert!(!is_rnr_nak(0x60));
    }
}

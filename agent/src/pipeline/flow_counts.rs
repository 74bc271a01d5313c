//! What a flow record counts, and what the table remembers of the last record it gave.
//!
//! Flow records (IPFIX) carry deltas: what a flow did since its previous record. The table
//! keeps, per flow, the totals at that record ([`ExportMark`]) only while records are asked
//! for; the records themselves are built by [`super::flow_records`].

use agent_common::{FlowStats, OpClass};

/// Why a flow's record was sent: IPFIX `flowEndReason` (RFC 7012, IANA's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[repr(u8)]
pub enum EndReason {
    /// No packet for the idle timeout: the flow left the maps (live), or the records stopped
    /// (the agent, the capture's end) that long after its last packet.
    IdleTimeout = 1,
    /// The flow goes on: its counts since the previous record (every active timeout).
    ActiveTimeout = 2,
    /// The end of the flow was seen (IANA's value, for completeness: RoCE traffic carries no
    /// end of a connection that rocemon counts, so it gives none).
    EndOfFlow = 3,
    /// The agent stopped, the flow's interface went away, or the capture ended while the
    /// flow was still sending (`analyze`).
    ForcedEnd = 4,
    /// A full table pushed the flow out (`analyze --max-flows`).
    LackOfResources = 5,
}

/// The counters a flow record carries, all as deltas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCounts {
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
    /// Packets by [`OpClass`].
    pub class_packets: [u64; OpClass::COUNT],
    pub ecn_ce: u64,
    pub cnp: u64,
    pub becn: u64,
    pub psn_gaps: u64,
    pub retransmits: u64,
    /// NAKs of every code, RNR NAKs included.
    pub naks: u64,
}

impl FlowCounts {
    /// A flow's totals.
    pub fn of(s: &FlowStats) -> FlowCounts {
        FlowCounts {
            packets: s.packets,
            bytes: s.bytes,
            class_packets: s.class_packets(),
            ecn_ce: s.ecn_ce,
            cnp: s.cnp,
            becn: s.becn,
            psn_gaps: s.psn_gaps,
            retransmits: s.retransmits,
            naks: s.nak_total(),
        }
    }

    /// What these totals added to `earlier`. Totals below `earlier` mean the store deleted
    /// and re-created the flow in between: then everything counts as new.
    pub fn since(&self, earlier: &FlowCounts) -> FlowCounts {
        if self.packets < earlier.packets || self.bytes < earlier.bytes {
            return *self;
        }
        let mut class_packets = [0; OpClass::COUNT];
        for (d, (now, then)) in class_packets
            .iter_mut()
            .zip(self.class_packets.iter().zip(&earlier.class_packets))
        {
            *d = now.saturating_sub(*then);
        }
        FlowCounts {
            packets: self.packets - earlier.packets,
            bytes: self.bytes - earlier.bytes,
            class_packets,
            ecn_ce: self.ecn_ce.saturating_sub(earlier.ecn_ce),
            cnp: self.cnp.saturating_sub(earlier.cnp),
            becn: self.becn.saturating_sub(earlier.becn),
            psn_gaps: self.psn_gaps.saturating_sub(earlier.psn_gaps),
            retransmits: self.retransmits.saturating_sub(earlier.retransmits),
            naks: self.naks.saturating_sub(earlier.naks),
        }
    }
}

/// A flow's last record: its totals then and the time its counts reached (the record's end,
/// on the store's clock); `due_ns`, when its next active-timeout record is due (0: not yet
/// queued).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportMark {
    pub counts: FlowCounts,
    pub at_ns: u64,
    pub due_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(packets: u64, bytes: u64, ce: u64) -> FlowCounts {
        FlowCounts {
            packets,
            bytes,
            ecn_ce: ce,
            ..FlowCounts::default()
        }
    }

    #[test]
    fn a_delta_is_what_was_added_since() {
        let d = counts(10, 1000, 3).since(&counts(4, 400, 1));
        assert_eq!(d, counts(6, 600, 2));
    }

    #[test]
    fn totals_that_went_back_are_a_new_flow_counted_whole() {
        let d = counts(2, 200, 0).since(&counts(4, 400, 1));
        assert_eq!(d, counts(2, 200, 0));
    }

    #[test]
    fn naks_of_every_code_and_rnr_naks_are_one_count() {
        let s = FlowStats {
            packets: 5,
            naks: [1, 2, 0, 0, 0, 0],
            rnr_naks: 4,
            ..FlowStats::default()
        };
        assert_eq!(FlowCounts::of(&s).naks, 7);
    }

    #[test]
    fn end_reasons_are_ianas_values() {
        assert_eq!(EndReason::IdleTimeout as u8, 1);
        assert_eq!(EndReason::ActiveTimeout as u8, 2);
        assert_eq!(EndReason::EndOfFlow as u8, 3);
        assert_eq!(EndReason::ForcedEnd as u8, 4);
        assert_eq!(EndReason::LackOfResources as u8, 5);
    }
}

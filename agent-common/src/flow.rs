//! Flow keys and per-flow statistics, and the one function that updates them.

use crate::facts::Nak;
pub use crate::flow_key::FlowKey;
use crate::message::{self, Message, MsgOp, SendProgress};
use crate::opcode::{class, OpClass};
use crate::psn::{PsnEvent, PsnTrack, NAK_SLOTS};
use crate::record::PacketRecord;
use crate::sum::add_all;

/// What one packet did to its flow, for the hook's counters: the PSN sequence and a completed
/// RDMA message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowEvent {
    pub psn: PsnEvent,
    pub message: Message,
}

/// What a flow did. `#[repr(C)]`, 256 bytes, no implicit padding (BPF map value).
///
/// Ordered by how often a packet writes a field, so that a packet touches as few cache lines
/// as it can (where many flows take turns, each packet's flow state is a cache miss per line):
/// the first 64 bytes hold what every packet writes (counts, time, the PSN sequence, the SEND
/// in progress); then the class counts (one per packet), the completed messages (one per
/// message), and last what only rare packets write (NAKs, gaps, retransmissions, BECN).
/// Moving a field changes what pinned maps hold: bump [`FLOW_STATS_ORDER`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlowStats {
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
    /// Clock of the recording side (kernel monotonic ns, or capture timestamp ns).
    pub last_seen_ns: u64,
    pub first_seen_ns: u64,
    pub psn: PsnTrack,
    /// PSN of the last packet seen.
    pub last_psn: u32,
    pub last_opcode: u8,
    /// DSCP of the last packet (a flow's class of service: IPFIX `ipDiffServCodePoint`).
    pub dscp: u8,
    pub pad: [u8; 2],
    /// The SEND message in progress (this record's CPU only).
    pub send_progress: SendProgress,
    /// Packets that arrived with ECN CE.
    pub ecn_ce: u64,
    /// Packets by [`OpClass`].
    pub class_packets: [u64; OpClass::COUNT],
    /// CNPs addressed to this flow's destination QP.
    pub cnp: u64,
    /// RDMA messages by [`MsgOp`] (see [`crate::message`]) and their bytes.
    pub messages: [u64; MsgOp::COUNT],
    pub message_bytes: [u64; MsgOp::COUNT],
    /// Packets with BECN set.
    pub becn: u64,
    /// Packets missing from the request sequence (see [`crate::psn`]).
    pub psn_gaps: u64,
    /// Requests whose PSN was at or before one already seen.
    pub retransmits: u64,
    /// NAKs received on this flow by code ([`crate::psn::NAK_NAMES`]).
    pub naks: [u64; NAK_SLOTS],
    pub rnr_naks: u64,
}

/// The order of [`FlowStats`]' fields, in the pinned maps' layout name (1: the order before
/// the hot fields came first; 2: this one).
pub const FLOW_STATS_ORDER: u64 = 2;

impl FlowStats {
    /// Counts one RoCE packet of `frame_len` wire bytes seen at `now_ns`, and returns what it
    /// did to the PSN sequence (for the global counters).
    #[inline(always)]
    pub fn record(&mut self, p: &PacketRecord, frame_len: u64, now_ns: u64) -> FlowEvent {
        self.record_with(p, frame_len, now_ns, true)
    }

    /// [`FlowStats::record`], with PSN tracking on or off (a load-time switch of the kernel
    /// programs: hosts that do not want PSN health skip its per-packet work).
    #[inline(always)]
    pub fn record_with(
        &mut self,
        p: &PacketRecord,
        frame_len: u64,
        now_ns: u64,
        track_psn: bool,
    ) -> FlowEvent {
        if self.packets == 0 {
            self.first_seen_ns = now_ns;
        }
        self.packets += 1;
        self.bytes += frame_len;
        let (opcode, psn) = (p.opcode(), p.psn());
        if p.is_ce() {
            self.ecn_ce += 1;
        }
        if p.is_cnp() {
            self.cnp += 1;
        }
        if p.becn() {
            self.becn += 1;
        }
        self.class_packets[(class(opcode) as usize) % OpClass::COUNT] += 1;
        self.last_seen_ns = now_ns;
        self.last_psn = psn;
        self.last_opcode = opcode;
        self.dscp = p.dscp();
        match p.nak() {
            Some(Nak::Code(slot)) => self.naks[slot % NAK_SLOTS] += 1,
            Some(Nak::Rnr) => self.rnr_naks += 1,
            None => {}
        }
        let m = message::observe(p, &mut self.send_progress);
        if m.op != 0 {
            let i = ((m.op - 1) as usize) % MsgOp::COUNT;
            self.messages[i] += 1;
            self.message_bytes[i] += m.bytes;
        }
        if !track_psn {
            return FlowEvent {
                psn: PsnEvent::default(),
                message: m,
            };
        }
        let ev = self.psn.observe(opcode, psn);
        self.psn_gaps += ev.gap as u64;
        if ev.retransmit {
            self.retransmits += 1;
        }
        FlowEvent {
            psn: ev,
            message: m,
        }
    }

    /// Zeroes what [`FlowStats::merge`] adds (every count, and the first-seen time that
    /// the next packet sets), keeping the flow's sequence state (its PSNs, the message in
    /// progress, the last packet's fields): a flow cache slot after its write-back holds
    /// only what comes next, so a write-back adds and never overwrites.
    #[inline(always)]
    pub fn clear_counts(&mut self) {
        self.packets = 0;
        self.bytes = 0;
        self.first_seen_ns = 0;
        self.ecn_ce = 0;
        self.cnp = 0;
        self.becn = 0;
        self.class_packets = [0; OpClass::COUNT];
        self.psn_gaps = 0;
        self.retransmits = 0;
        self.naks = [0; NAK_SLOTS];
        self.rnr_naks = 0;
        self.messages = [0; MsgOp::COUNT];
        self.message_bytes = [0; MsgOp::COUNT];
    }

    /// Merges another partial record of the same flow (per-CPU values; a flow cache slot's
    /// counts since its last write-back into the map's value).
    #[inline(always)]
    pub fn merge(&mut self, o: &FlowStats) {
        if o.packets == 0 {
            return;
        }
        // Userspace reads a CPU's value while that CPU may be counting into it: a value can
        // hold a flow's first packet before its time (torn). A zero time is no time: the
        // value's last seen stands in, and a zero never lowers the earliest time.
        let first = if o.first_seen_ns != 0 {
            o.first_seen_ns
        } else {
            o.last_seen_ns
        };
        if first != 0
            && (self.packets == 0 || self.first_seen_ns == 0 || first < self.first_seen_ns)
        {
            self.first_seen_ns = first;
        }
        if self.packets == 0 || o.last_seen_ns >= self.last_seen_ns {
            self.last_seen_ns = o.last_seen_ns;
            self.last_psn = o.last_psn;
            self.last_opcode = o.last_opcode;
            self.dscp = o.dscp;
            self.psn = o.psn;
            self.send_progress = o.send_progress;
        }
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.ecn_ce += o.ecn_ce;
        self.cnp += o.cnp;
        self.becn += o.becn;
        add_all(&mut self.class_packets, &o.class_packets);
        self.psn_gaps += o.psn_gaps;
        self.retransmits += o.retransmits;
        add_all(&mut self.naks, &o.naks);
        self.rnr_naks += o.rnr_naks;
        add_all(&mut self.messages, &o.messages);
        add_all(&mut self.message_bytes, &o.message_bytes);
    }
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, explicit padding fields, plain integers: every bit pattern is valid.
unsafe impl aya::Pod for FlowStats {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::bth::Bth;
    use crate::info::RoceInfo;
    use crate::outcome::Outcome;

    fn info(opcode: u8, ecn: u8, psn: u32) -> RoceInfo {
        RoceInfo {
            outcome: Outcome::Roce,
            ip_version: 4,
            ecn,
            src: [0; 16],
            dst: [0; 16],
            sport: 1,
            udp_len: 40,
            vlan_tags: 0,
            dscp: 26,
            pcp: None,
            tunnel: Default::default(),
            bth: Bth {
                opcode,
                psn,
                becn: opcode == 0x81,
                ..Bth::default()
            },
            reth_dma_len: None,
            aeth: None,
            deth: None,
        }
    }

    #[test]
    fn a_packets_writes_land_in_the_first_line() {
        let hot = core::mem::offset_of!(FlowStats, class_packets);
        assert_eq!(
            hot, 64,
            "the fields every packet writes fill the first 64 bytes"
        );
        assert_eq!(core::mem::offset_of!(FlowStats, send_progress), 48);
        assert_eq!(core::mem::offset_of!(FlowStats, ecn_ce), 56);
    }

    #[test]
    fn layout() {
        assert_eq!(core::mem::size_of::<FlowKey>(), 40);
        assert_eq!(
            core::mem::size_of::<FlowStats>(),
            8 * (7 + OpClass::COUNT + 2 + NAK_SLOTS + 1) + 8 + 8 + 8 * (2 * MsgOp::COUNT + 1)
        );
    }

    #[test]
    fn record_and_merge() {
        let mut a = FlowStats::default();
        a.record(&info(0x04, 3, 7).into(), 100, 10);
        a.record(&info(0x81, 2, 0).into(), 60, 20);
        assert_eq!(
            (a.packets, a.bytes, a.ecn_ce, a.cnp, a.becn),
            (2, 160, 1, 1, 1)
        );
        assert_eq!((a.first_seen_ns, a.last_seen_ns, a.last_psn), (10, 20, 0));
        assert_eq!(a.class_packets[OpClass::Send as usize], 1);
        assert_eq!(a.class_packets[OpClass::Other as usize], 1);
        let mut b = FlowStats::default();
        b.record(&info(0x0A, 0, 9).into(), 1000, 5);
        b.record(&info(0x0A, 0, 10).into(), 1000, 30);
        let mut m = FlowStats::default();
        m.merge(&a);
        m.merge(&b);
        assert_eq!((m.packets, m.bytes), (4, 2160));
        assert_eq!((m.first_seen_ns, m.last_seen_ns, m.last_psn), (5, 30, 10));

        assert_eq!(m.class_packets[OpClass::Write as usize], 2);
    }

    /// The flow cache's write-back: a slot counts from its flow's state, its counts go into
    /// the map's value (merged) and are cleared, and it counts on. The map's value ends equal
    /// to one record of every packet, counts, times and sequence state alike.
    #[test]
    fn counts_cleared_and_merged_back_equal_one_record() {
        let packets = [
            info(0x06, 0, 1),
            info(0x07, 3, 2),
            info(0x08, 0, 3),
            info(0x0A, 0, 5),
            info(0x81, 0, 0),
            info(0x0A, 3, 6),
        ];
        let mut whole = FlowStats::default();
        let (mut map, mut slot) = (FlowStats::default(), FlowStats::default());
        for (i, p) in packets.iter().enumerate() {
            let t = 100 + i as u64 * 10;
            whole.record(&(*p).into(), 90, t);
            slot.record(&(*p).into(), 90, t);
            if i % 2 == 1 {
                map.merge(&slot);
                slot.clear_counts();
            }
        }
        assert_eq!(slot.packets, 0);
        assert_eq!(slot.psn, whole.psn, "the slot keeps the sequence state");
        assert_eq!(map, whole);
    }

    #[test]
    fn a_torn_value_without_its_first_time_never_makes_a_flow_older() {
        let mut m = FlowStats::default();
        let a = FlowStats {
            packets: 1,
            first_seen_ns: 0,
            last_seen_ns: 0,
            ..FlowStats::default()
        };
        let b = FlowStats {
            packets: 2,
            first_seen_ns: 7,
            last_seen_ns: 9,
            ..FlowStats::default()
        };
        m.merge(&a);
        m.merge(&b);
        assert_eq!(m.first_seen_ns, 7);
        let mut n = FlowStats::default();
        n.merge(&FlowStats {
            first_seen_ns: 0,
            ..b
        });
        assert_eq!(n.first_seen_ns, 9, "its last seen stands in");
    }
}

//! Flow keys and per-flow statistics, and the one function that updates them.

use crate::facts::Nak;
pub use crate::flow_key::FlowKey;
use crate::message::{self, Message, MsgOp, SendProgress};
use crate::opcode::{class, OpClass};
use crate::psn::{PsnEvent, PsnTrack, NAK_SLOTS};
use crate::record::PacketRecord;

/// What one packet did to its flow, for the hook's counters: the PSN sequence and a completed
/// RDMA message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowEvent {
    pub psn: PsnEvent,
    pub message: Message,
}

/// What a flow did. `#[repr(C)]`, 256 bytes (four cache lines), no implicit padding (BPF map value).
///
/// The first 64 bytes hold everything a common packet writes, so that where many flows take
/// turns (each packet's flow state a cache miss per line it touches) a packet costs one line,
/// as the simplest exact per-flow counter's does: counts, time, the PSN sequence, the SEND in
/// progress, and the packets and messages of the value's *main* class and message operation
/// (its first packet's and first message's). A flow's packets are nearly always of one class
/// and its messages of one operation; the other classes and operations, and what only rare
/// packets write (CE, CNPs, NAKs, gaps, retransmissions, BECN), are counted further out.
/// Read the per-class and per-operation counts through [`FlowStats::class_packets`],
/// [`FlowStats::messages`] and [`FlowStats::message_bytes`]; equality is of what they say
/// (two values that merged the same packets in another order are equal).
/// Moving a field changes what pinned maps hold: bump [`FLOW_STATS_ORDER`].
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct FlowStats {
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
    /// Clock of the recording side (kernel monotonic ns, or capture timestamp ns).
    pub last_seen_ns: u64,
    pub psn: PsnTrack,
    /// PSN of the last packet seen.
    pub last_psn: u32,
    pub last_opcode: u8,
    /// DSCP of the last packet (a flow's class of service: IPFIX `ipDiffServCodePoint`).
    pub dscp: u8,
    /// The [`OpClass`] of the value's first packet: its packets are `packets` less those in
    /// `other_class_packets`.
    pub main_class: u8,
    /// The [`Message::op`] (1 + [`MsgOp`]) of the value's first message, 0 before one: its
    /// messages and their bytes are `main_messages` and `main_message_bytes`.
    pub main_msg: u8,
    /// The SEND message in progress (this record's CPU only).
    pub send_progress: SendProgress,
    pub main_messages: u64,
    pub main_message_bytes: u64,
    // -- 64 bytes: what rare packets (or a flow's first) write from here on.
    pub first_seen_ns: u64,
    /// Packets that arrived with ECN CE.
    pub ecn_ce: u64,
    /// CNPs addressed to this flow's destination QP.
    pub cnp: u64,
    /// Packets with BECN set.
    pub becn: u64,
    /// Packets of the classes other than `main_class`, by class (`main_class`'s slot stays
    /// zero: the verifier bounds a class index as is, not a rotated one).
    pub other_class_packets: [u64; OpClass::COUNT],
    /// Messages of the operations other than `main_msg`'s, and their bytes, by [`MsgOp`]
    /// (`main_msg`'s slots stay zero).
    pub other_messages: [u64; MsgOp::COUNT],
    pub other_message_bytes: [u64; MsgOp::COUNT],
    /// Packets missing from the request sequence (see [`crate::psn`]).
    pub psn_gaps: u64,
    /// Requests whose PSN was at or before one already seen.
    pub retransmits: u64,
    /// NAKs received on this flow by code ([`crate::psn::NAK_NAMES`]), per CPU and
    /// saturating (a receiver NAKs once per sequence error, not per packet: 4 billion on one
    /// flow and CPU is far past any real trouble; 32 bits keep the value in four lines).
    pub naks: [u32; NAK_SLOTS],
    pub rnr_naks: u64,
    /// Unused: the value's size to four cache lines (the hot line at a line's start wherever
    /// values sit side by side).
    pub reserved: u64,
}

/// The order of [`FlowStats`]' fields, in the pinned maps' layout name (1: the order before
/// the hot fields came first; 2: hot fields first, every class in its own counter; 3: the
/// main class and message operation in the first line).
pub const FLOW_STATS_ORDER: u64 = 3;

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
        let (opcode, psn) = (p.opcode(), p.psn());
        let c = (class(opcode) as usize) % OpClass::COUNT;
        if self.packets == 0 {
            self.first_seen_ns = now_ns;
            self.main_class = c as u8;
        }
        self.packets += 1;
        self.bytes += frame_len;
        if c != self.main_class as usize {
            self.add_other_class(c, 1);
        }
        if p.is_ce() {
            self.ecn_ce += 1;
        }
        if p.is_cnp() {
            self.cnp += 1;
        }
        if p.becn() {
            self.becn += 1;
        }
        self.last_seen_ns = now_ns;
        self.last_psn = psn;
        self.last_opcode = opcode;
        self.dscp = p.dscp();
        match p.nak() {
            Some(Nak::Code(slot)) => {
                let n = &mut self.naks[slot % NAK_SLOTS];
                *n = n.saturating_add(1);
            }
            Some(Nak::Rnr) => self.rnr_naks += 1,
            None => {}
        }
        let m = message::observe(p, &mut self.send_progress);
        if m.op != 0 {
            self.add_messages(m.op, 1, m.bytes);
        }
        if !track_psn {
            return FlowEvent {
                psn: PsnEvent::default(),
                message: m,
            };
        }
        let ev = self.psn.observe(opcode, psn);
        // Only a gap writes its counter: `psn_gaps` is in a cold line, and a store of the
        // same value still takes the line (where many flows take turns, a cache miss a
        // packet: 20-40 ns live at 10,000 flows).
        if ev.gap != 0 {
            self.psn_gaps += ev.gap as u64;
        }
        if ev.retransmit {
            self.retransmits += 1;
        }
        FlowEvent {
            psn: ev,
            message: m,
        }
    }

    /// Adds `n` packets of class `c` (not the main class) to their counter.
    #[inline(always)]
    fn add_other_class(&mut self, c: usize, n: u64) {
        self.other_class_packets[c % OpClass::COUNT] += n;
    }

    /// Adds `n` messages of `op` ([`Message::op`], 1-based) and their bytes: the main
    /// operation's in the first line (the first operation seen becomes the main one).
    #[inline(always)]
    fn add_messages(&mut self, op: u8, n: u64, bytes: u64) {
        if self.main_msg == 0 {
            self.main_msg = op;
        }
        if op == self.main_msg {
            self.main_messages += n;
            self.main_message_bytes += bytes;
            return;
        }
        let i = ((op as usize).wrapping_sub(1)) % MsgOp::COUNT;
        self.other_messages[i] += n;
        self.other_message_bytes[i] += bytes;
    }

    /// Adds `n` messages of `op` and their `bytes` (what a packet completing a message
    /// adds; for values built by hand, as tests and synthetic flows do).
    pub fn count_messages(&mut self, op: MsgOp, n: u64, bytes: u64) {
        self.add_messages(op as u8 + 1, n, bytes);
    }

    /// Packets by [`OpClass`]. (Indices constant, unrolled: the verifier accepts no
    /// variable offset into the stack, nor bounds a remainder by seven.)
    #[inline(always)]
    pub fn class_packets(&self) -> [u64; OpClass::COUNT] {
        let main = self.main_class as usize;
        let mut out = [0; OpClass::COUNT];
        let mut others = 0u64;
        for (c, (x, n)) in out.iter_mut().zip(&self.other_class_packets).enumerate() {
            if c != main {
                *x = *n;
                others += *n;
            }
        }
        for (c, x) in out.iter_mut().enumerate() {
            if c == main {
                // A value read while its CPU counts into it may be torn: never below zero.
                *x = self.packets.saturating_sub(others);
            }
        }
        out
    }

    /// RDMA messages by [`MsgOp`] (see [`crate::message`]) and their bytes.
    #[inline(always)]
    fn messages_and_bytes(&self) -> ([u64; MsgOp::COUNT], [u64; MsgOp::COUNT]) {
        let main = (self.main_msg as usize).wrapping_sub(1);
        let (mut n, mut b) = ([0; MsgOp::COUNT], [0; MsgOp::COUNT]);
        for op in 0..MsgOp::COUNT {
            (n[op], b[op]) = if op == main {
                (self.main_messages, self.main_message_bytes)
            } else {
                (self.other_messages[op], self.other_message_bytes[op])
            };
        }
        (n, b)
    }

    /// NAKs by code ([`crate::psn::NAK_NAMES`]).
    pub fn naks(&self) -> [u64; NAK_SLOTS] {
        self.naks.map(u64::from)
    }

    /// Every NAK, RNR NAKs included.
    pub fn nak_total(&self) -> u64 {
        self.naks.iter().map(|n| u64::from(*n)).sum::<u64>() + self.rnr_naks
    }

    /// RDMA messages by [`MsgOp`] (see [`crate::message`]).
    pub fn messages(&self) -> [u64; MsgOp::COUNT] {
        self.messages_and_bytes().0
    }

    /// The bytes of the RDMA messages by [`MsgOp`].
    pub fn message_bytes(&self) -> [u64; MsgOp::COUNT] {
        self.messages_and_bytes().1
    }

    /// Zeroes what [`FlowStats::merge`] adds (every count, and the first-seen time that
    /// the next packet sets), keeping the flow's sequence state (its PSNs, the message in
    /// progress, the last packet's fields): a flow cache slot after its write-back holds
    /// only what comes next, so a write-back adds and never overwrites. The main class and
    /// operation go with the counts (the next packet and message set them again).
    #[inline(always)]
    pub fn clear_counts(&mut self) {
        self.packets = 0;
        self.bytes = 0;
        self.first_seen_ns = 0;
        self.ecn_ce = 0;
        self.cnp = 0;
        self.becn = 0;
        self.main_msg = 0;
        self.main_messages = 0;
        self.main_message_bytes = 0;
        self.other_class_packets = [0; OpClass::COUNT];
        self.other_messages = [0; MsgOp::COUNT];
        self.other_message_bytes = [0; MsgOp::COUNT];
        self.psn_gaps = 0;
        self.retransmits = 0;
        self.naks = [0; NAK_SLOTS];
        self.rnr_naks = 0;
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
        if self.packets == 0 {
            self.main_class = o.main_class;
        }
        let classes = o.class_packets();
        self.packets += o.packets;
        let main = self.main_class as usize;
        for (c, n) in classes.iter().enumerate() {
            if c != main && *n != 0 {
                self.add_other_class(c, *n);
            }
        }
        let (messages, bytes) = o.messages_and_bytes();
        for op in 0..MsgOp::COUNT {
            if messages[op] != 0 || bytes[op] != 0 {
                self.add_messages(op as u8 + 1, messages[op], bytes[op]);
            }
        }
        self.bytes += o.bytes;
        self.ecn_ce += o.ecn_ce;
        self.cnp += o.cnp;
        self.becn += o.becn;
        self.psn_gaps += o.psn_gaps;
        self.retransmits += o.retransmits;
        for (n, m) in self.naks.iter_mut().zip(&o.naks) {
            *n = n.saturating_add(*m);
        }
        self.rnr_naks += o.rnr_naks;
    }

    /// What equality compares: every count as the accessors read it, and the sequence state.
    #[allow(clippy::type_complexity)]
    fn said(
        &self,
    ) -> (
        [u64; 6],
        [u64; 3],
        (PsnTrack, u32, u8, u8, SendProgress),
        [u64; OpClass::COUNT],
        ([u64; MsgOp::COUNT], [u64; MsgOp::COUNT]),
        ([u32; NAK_SLOTS], u64),
    ) {
        let naks = (self.naks, self.rnr_naks);
        (
            [
                self.packets,
                self.bytes,
                self.last_seen_ns,
                self.first_seen_ns,
                self.ecn_ce,
                self.cnp,
            ],
            [self.becn, self.psn_gaps, self.retransmits],
            (
                self.psn,
                self.last_psn,
                self.last_opcode,
                self.dscp,
                self.send_progress,
            ),
            self.class_packets(),
            self.messages_and_bytes(),
            naks,
        )
    }
}

impl PartialEq for FlowStats {
    fn eq(&self, o: &FlowStats) -> bool {
        self.said() == o.said()
    }
}

impl Eq for FlowStats {}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, explicit padding fields, plain integers: every bit pattern is valid.
unsafe impl aya::Pod for FlowStats {}

#[cfg(test)]
#[path = "flow_tests.rs"]
mod tests;

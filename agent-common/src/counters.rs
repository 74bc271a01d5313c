//! The per-hook counter block: what every hook counts for every frame, and how.
//!
//! The kernel keeps one block per hook in a per-CPU array (one map lookup per packet, no
//! atomics); `analyze` keeps one block for a capture. Both call [`HookCounters::record`], so a
//! frame is counted the same way wherever it is seen.

use crate::cache_mode::CacheUse;
use crate::classes::TrafficClasses;
use crate::clock::ClockCache;
use crate::facts::Nak;
use crate::flow::FlowEvent;
use crate::headers::mac_control::{MacControl, OPCODE_PAUSE, OPCODE_PFC, PRIORITIES};
pub use crate::hook::Hook;
use crate::message::{bucket, MsgOp, MSG_BUCKET_SLOTS};
use crate::outcome::Outcome;
use crate::psn::NAK_SLOTS;
use crate::record::PacketRecord;

/// Slots reserved for outcomes (more than [`Outcome::COUNT`], so the index can be masked).
pub const OUTCOME_SLOTS: usize = 32;
const _: () = assert!(Outcome::COUNT <= OUTCOME_SLOTS);

/// Counters of one hook on one interface. `#[repr(C)]`, only `u64`s: no padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct HookCounters {
    // What a common RoCE packet writes, side by side (its counts, ECN, tunnel, message and
    // outcome), so that a packet takes few of the block's lines; the arrays by opcode and
    // DSCP follow. Moving a field changes what pinned maps hold: bump `COUNTERS_ORDER`.
    /// All frames seen, RoCE or not.
    pub frames: u64,
    /// Wire bytes of all frames seen.
    pub frame_bytes: u64,
    /// RoCE packets by ECN codepoint (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub ecn_packets: [u64; 4],
    /// RoCEv2 CNPs (opcode 0x81).
    pub cnp_packets: u64,
    /// RoCE packets with BECN set.
    pub becn_packets: u64,
    /// RoCE packets with FECN set.
    pub fecn_packets: u64,
    /// RoCE packets by the encapsulation they arrived in ([`crate::headers::encap::TunnelKind`] discriminant; 0 is
    /// none), padded to a power of two for masking.
    pub tunnel_packets: [u64; 8],
    /// RDMA messages ([`crate::message`]): per [`MsgOp`], the count, the summed bytes, and a
    /// histogram ([`MSG_BUCKET_SLOTS`] slots per operation, [`crate::message::MSG_BUCKETS`]
    /// used: `le` 1 KiB .. 1 GiB, then +Inf; not cumulative).
    pub messages: [u64; MsgOp::COUNT],
    pub message_bytes: [u64; MsgOp::COUNT],
    /// Every frame by parse outcome ([`Outcome`] discriminant).
    pub outcomes: [u64; OUTCOME_SLOTS],
    /// RoCE packets by BTH opcode.
    pub opcode_packets: [u64; 256],
    /// RoCE frame bytes (wire length) by BTH opcode.
    pub opcode_bytes: [u64; 256],
    /// Flow-map updates that failed (map full or busy).
    pub flow_update_errors: u64,
    /// Packets missing from request sequences (see [`crate::psn`]).
    pub psn_gaps: u64,
    /// Requests whose PSN was seen again.
    pub retransmits: u64,
    /// NAKs by code ([`crate::psn::NAK_NAMES`]).
    pub naks: [u64; NAK_SLOTS],
    pub rnr_naks: u64,
    /// Flow records created. Minus the flows still in the map, that is how many the LRU map
    /// evicted (nothing else deletes them).
    pub flows_created: u64,
    /// RoCE packets from a mirror session or tunnel that found the session map full (so they
    /// are in every other counter but in no per-session series).
    pub session_overflow: u64,
    /// AF_XDP capture only: frames meant for a socket that found none bound on their receive
    /// queue. The kernel program counts them itself and passes them on, so nothing is lost.
    pub capture_redirect_failures: u64,
    /// Kernel only: frames the fast path handed to the general parser (the slow program,
    /// through a tail call): tunnels, QinQ, IP options and fragments, extension headers,
    /// frames cut short. Every other frame was counted by the fast path alone.
    pub slow_path_frames: u64,
    /// Kernel only: frames whose tail call to the slow program failed (its program array
    /// slot empty). Counted in `frames` and `frame_bytes` but under no outcome; never expected.
    pub slow_path_unreachable: u64,
    /// RoCE packets (CNPs included) and frame bytes by DSCP.
    pub roce_dscp_packets: [u64; 64],
    pub roce_dscp_bytes: [u64; 64],
    /// CNPs and their frame bytes by DSCP.
    pub cnp_dscp_packets: [u64; 64],
    pub cnp_dscp_bytes: [u64; 64],
    /// Tagged RoCE packets (CNPs included) and bytes by the outermost tag's 802.1p priority.
    pub roce_pcp_packets: [u64; 8],
    pub roce_pcp_bytes: [u64; 8],
    /// Tagged CNPs and bytes by 802.1p priority.
    pub cnp_pcp_packets: [u64; 8],
    pub cnp_pcp_bytes: [u64; 8],
    /// RoCE packets (not CNPs) outside the expected class ([`TrafficClasses`]): lossy RoCE.
    pub lossy_roce_packets: u64,
    pub lossy_roce_bytes: u64,
    /// CNPs outside the expected CNP class.
    pub cnp_out_of_class: u64,
    /// PFC frames (MAC control opcode 0x0101).
    pub pfc_frames: u64,
    /// Per priority: PFC XOFF (class enabled, time above 0), XON (enabled, time 0), and the
    /// summed pause quanta (512 bit times each) the XOFFs request.
    pub pfc_xoff: [u64; PRIORITIES],
    pub pfc_xon: [u64; PRIORITIES],
    pub pfc_quanta: [u64; PRIORITIES],
    /// 802.3x PAUSE frames (opcode 0x0001), those with time 0 (XON), and their summed quanta.
    pub pause_frames: u64,
    pub pause_xon: u64,
    pub pause_quanta: u64,
    /// MAC control frames of other opcodes.
    pub mac_control_other: u64,
    pub message_buckets: [u64; MsgOp::COUNT * MSG_BUCKET_SLOTS],
}

impl Default for HookCounters {
    fn default() -> Self {
        Self::ZERO
    }
}

impl HookCounters {
    pub const ZERO: HookCounters = HookCounters {
        frames: 0,
        frame_bytes: 0,
        ecn_packets: [0; 4],
        cnp_packets: 0,
        becn_packets: 0,
        fecn_packets: 0,
        tunnel_packets: [0; 8],
        messages: [0; MsgOp::COUNT],
        message_bytes: [0; MsgOp::COUNT],
        outcomes: [0; OUTCOME_SLOTS],
        opcode_packets: [0; 256],
        opcode_bytes: [0; 256],
        flow_update_errors: 0,
        psn_gaps: 0,
        retransmits: 0,
        naks: [0; NAK_SLOTS],
        rnr_naks: 0,
        flows_created: 0,
        session_overflow: 0,
        capture_redirect_failures: 0,
        slow_path_frames: 0,
        slow_path_unreachable: 0,
        roce_dscp_packets: [0; 64],
        roce_dscp_bytes: [0; 64],
        cnp_dscp_packets: [0; 64],
        cnp_dscp_bytes: [0; 64],
        roce_pcp_packets: [0; 8],
        roce_pcp_bytes: [0; 8],
        cnp_pcp_packets: [0; 8],
        cnp_pcp_bytes: [0; 8],
        lossy_roce_packets: 0,
        lossy_roce_bytes: 0,
        cnp_out_of_class: 0,
        pfc_frames: 0,
        pfc_xoff: [0; PRIORITIES],
        pfc_xon: [0; PRIORITIES],
        pfc_quanta: [0; PRIORITIES],
        pause_frames: 0,
        pause_xon: 0,
        pause_quanta: 0,
        mac_control_other: 0,
        message_buckets: [0; MsgOp::COUNT * MSG_BUCKET_SLOTS],
    };

    /// Counts one parsed frame of `frame_len` wire bytes: a RoCE packet, a MAC control
    /// frame, or another frame under its outcome.
    #[inline(always)]
    pub fn record(&mut self, rec: &PacketRecord, frame_len: u64, classes: &TrafficClasses) {
        if rec.is_roce() {
            self.record_roce(rec, frame_len, classes);
            return;
        }
        match rec.mac_control() {
            Some(m) => self.record_mac_control(&m, frame_len),
            None => self.record_other(rec.outcome(), frame_len),
        }
    }

    /// Counts a MAC control frame: PFC per priority, PAUSE, or another opcode. A time whose
    /// class-enable bit is clear is ignored (802.1Qbb).
    #[inline(always)]
    pub fn record_mac_control(&mut self, m: &MacControl, frame_len: u64) {
        self.record_other(Outcome::MacControl, frame_len);
        match m.opcode {
            OPCODE_PFC => {
                self.pfc_frames += 1;
                let mut p = 0;
                while p < PRIORITIES {
                    if m.class_enable & (1 << p) != 0 {
                        let t = m.times[p];
                        if t == 0 {
                            self.pfc_xon[p] += 1;
                        } else {
                            self.pfc_xoff[p] += 1;
                            self.pfc_quanta[p] += t as u64;
                        }
                    }
                    p += 1;
                }
            }
            OPCODE_PAUSE => {
                self.pause_frames += 1;
                let t = m.times[0];
                if t == 0 {
                    self.pause_xon += 1;
                }
                self.pause_quanta += t as u64;
            }
            _ => self.mac_control_other += 1,
        }
    }

    /// Counts a frame that is not RoCE (or is malformed) under its outcome.
    #[inline(always)]
    pub fn record_other(&mut self, outcome: Outcome, frame_len: u64) {
        self.frames += 1;
        self.frame_bytes += frame_len;
        self.outcomes[(outcome as usize) & (OUTCOME_SLOTS - 1)] += 1;
    }

    /// Counts a RoCE packet.
    #[inline(always)]
    pub fn record_roce(&mut self, p: &PacketRecord, frame_len: u64, classes: &TrafficClasses) {
        self.frames += 1;
        self.frame_bytes += frame_len;
        self.outcomes[(p.outcome() as usize) & (OUTCOME_SLOTS - 1)] += 1;
        let op = p.opcode() as usize;
        self.opcode_packets[op] += 1;
        self.opcode_bytes[op] += frame_len;
        self.ecn_packets[(p.ecn() & 0x03) as usize] += 1;
        let dscp = (p.dscp() & 63) as usize;
        self.roce_dscp_packets[dscp] += 1;
        self.roce_dscp_bytes[dscp] += frame_len;
        let pcp = p.pcp();
        if let Some(q) = pcp {
            let q = (q & 7) as usize;
            self.roce_pcp_packets[q] += 1;
            self.roce_pcp_bytes[q] += frame_len;
        }
        if p.is_cnp() {
            self.cnp_packets += 1;
            self.cnp_dscp_packets[dscp] += 1;
            self.cnp_dscp_bytes[dscp] += frame_len;
            if let Some(q) = pcp {
                let q = (q & 7) as usize;
                self.cnp_pcp_packets[q] += 1;
                self.cnp_pcp_bytes[q] += frame_len;
            }
            if !classes.cnp_in_class(dscp as u8) {
                self.cnp_out_of_class += 1;
            }
        } else if p.is_lossy(classes) {
            self.lossy_roce_packets += 1;
            self.lossy_roce_bytes += frame_len;
        }
        self.tunnel_packets[(p.tunnel_kind() as usize) & 7] += 1;
        if p.becn() {
            self.becn_packets += 1;
        }
        if p.fecn() {
            self.fecn_packets += 1;
        }
        match p.nak() {
            Some(Nak::Code(slot)) => self.naks[slot % NAK_SLOTS] += 1,
            Some(Nak::Rnr) => self.rnr_naks += 1,
            None => {}
        }
    }

    /// Adds what a packet did to its flow's PSN sequence.
    #[inline(always)]
    pub fn record_flow(&mut self, ev: &FlowEvent) {
        if ev.psn.gap != 0 {
            self.psn_gaps += ev.psn.gap as u64;
        }
        if ev.psn.retransmit {
            self.retransmits += 1;
        }
        let m = &ev.message;
        if m.op != 0 {
            let op = ((m.op - 1) as usize) % MsgOp::COUNT;
            self.messages[op] += 1;
            self.message_bytes[op] += m.bytes;
            // The bucket goes through memory so that LLVM keeps the mask: it knows `bucket`'s
            // range and would drop it, and the BPF verifier, which does not, needs it.
            let b = bucket(m.bytes);
            // SAFETY: a valid reference to a local.
            let b = unsafe { core::ptr::read_volatile(&b) } & (MSG_BUCKET_SLOTS - 1);
            self.message_buckets
                [(op * MSG_BUCKET_SLOTS + b) % (MsgOp::COUNT * MSG_BUCKET_SLOTS)] += 1;
        }
    }

    /// Adds another block (per-CPU values, several captures).
    pub fn add(&mut self, o: &HookCounters) {
        for ((_, a), (_, b)) in self.fields_mut().into_iter().zip(o.fields()) {
            crate::sum::add_all(a, b);
        }
    }

    /// RoCE packets (complete BTH), whatever their extension headers.
    pub fn roce_packets(&self) -> u64 {
        self.outcomes[Outcome::Roce as usize] + self.outcomes[Outcome::RoceExtTruncated as usize]
    }

    /// RoCE frame bytes.
    pub fn roce_bytes(&self) -> u64 {
        self.opcode_bytes.iter().sum()
    }
}

/// Declares [`HookCounters::fields`] and [`HookCounters::fields_mut`] from one list, so that
/// every whole-block operation (sums, comparisons, reports) follows the struct: a field added
/// to the struct and not here fails to compile (the list is checked against the size).
macro_rules! counter_fields {
    ($($field:ident: $kind:ident),* $(,)?) => {
        impl HookCounters {
            /// Every counter, by field name, as a slice (one element for a scalar).
            pub fn fields(&self) -> [(&'static str, &[u64]); counter_fields!(@count $($field)*)] {
                [$((stringify!($field), counter_fields!(@ref $kind self.$field))),*]
            }
            /// [`HookCounters::fields`], mutable.
            pub fn fields_mut(&mut self) -> [(&'static str, &mut [u64]); counter_fields!(@count $($field)*)] {
                [$((stringify!($field), counter_fields!(@mut $kind self.$field))),*]
            }
        }
        const _: () = assert!(
            0 $(+ counter_fields!(@len $kind ZERO_BLOCK.$field))* == core::mem::size_of::<HookCounters>() / 8
        );
    };
    (@count) => { 0 };
    (@count $head:ident $($rest:ident)*) => { 1 + counter_fields!(@count $($rest)*) };
    (@ref array $e:expr) => { &$e[..] };
    (@ref scalar $e:expr) => { core::slice::from_ref(&$e) };
    (@mut array $e:expr) => { &mut $e[..] };
    (@mut scalar $e:expr) => { core::slice::from_mut(&mut $e) };
    (@len array $e:expr) => { $e.len() };
    (@len scalar $e:expr) => { 1 };
}

const ZERO_BLOCK: HookCounters = HookCounters::ZERO;

counter_fields! {
    frames: scalar,
    frame_bytes: scalar,
    ecn_packets: array,
    cnp_packets: scalar,
    becn_packets: scalar,
    fecn_packets: scalar,
    tunnel_packets: array,
    messages: array,
    message_bytes: array,
    outcomes: array,
    opcode_packets: array,
    opcode_bytes: array,
    flow_update_errors: scalar,
    psn_gaps: scalar,
    retransmits: scalar,
    naks: array,
    rnr_naks: scalar,
    flows_created: scalar,
    session_overflow: scalar,
    capture_redirect_failures: scalar,
    slow_path_frames: scalar,
    slow_path_unreachable: scalar,
    roce_dscp_packets: array,
    roce_dscp_bytes: array,
    cnp_dscp_packets: array,
    cnp_dscp_bytes: array,
    roce_pcp_packets: array,
    roce_pcp_bytes: array,
    cnp_pcp_packets: array,
    cnp_pcp_bytes: array,
    lossy_roce_packets: scalar,
    lossy_roce_bytes: scalar,
    cnp_out_of_class: scalar,
    pfc_frames: scalar,
    pfc_xoff: array,
    pfc_xon: array,
    pfc_quanta: array,
    pause_frames: scalar,
    pause_xon: scalar,
    pause_quanta: scalar,
    mac_control_other: scalar,
    message_buckets: array,
}

/// The counters where two blocks differ: `(field[index], a, b)`.
#[cfg(feature = "std")]
pub fn differences(a: &HookCounters, b: &HookCounters) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for ((name, x), (_, y)) in a.fields().into_iter().zip(b.fields()) {
        for (i, (p, q)) in x.iter().zip(y).enumerate() {
            if p != q {
                let n = if x.len() == 1 {
                    name.to_string()
                } else {
                    format!("{name}[{i}]")
                };
                out.push((n, *p, *q));
            }
        }
    }
    out
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, only u64 fields and arrays of u64: every bit pattern is valid.
unsafe impl aya::Pod for HookCounters {}

/// The kernel's per-CPU value of one hook (the `COUNTERS` map): the hook's counter block, and
/// this CPU's working state on that hook, so that one map lookup per packet serves both (each
/// per-CPU lookup costs a few ns on the fast path: the key goes through the stack, then the
/// value's per-CPU pointer and this CPU's offset are loaded one after the other). Userspace
/// reads only [`HookSlot::counters`].
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct HookSlot {
    /// The parse result of the frame being counted, handed from a parse path to the
    /// counting function (a BPF global function takes only scalars) as a flat record.
    pub record: PacketRecord,
    /// The cached readings of the fine and the coarse clock ([`crate::clock`]).
    pub fine_clock: ClockCache,
    pub coarse_clock: ClockCache,
    /// This CPU's flow cache as the hook sees it ([`crate::cache_mode`]).
    pub cache: CacheUse,
    /// What userspace reads and sums over CPUs. After the working state every packet
    /// writes, its own common fields first: the lines a packet touches lie together.
    pub counters: HookCounters,
}

/// The order of [`HookSlot`]'s and [`HookCounters`]' fields, in the pinned maps' layout name
/// (1: the counter block first, by kind; 2: the working state first, then the block with
/// what a common RoCE packet writes at its start).
pub const COUNTERS_ORDER: u64 = 2;

/// No implicit padding: the kernel and userspace agree on the value's size.
const _: () = assert!(
    core::mem::size_of::<HookSlot>()
        == core::mem::size_of::<HookCounters>()
            + core::mem::size_of::<PacketRecord>()
            + 2 * core::mem::size_of::<ClockCache>()
            + core::mem::size_of::<CacheUse>()
);

/// The fast path writes its record into the slot it asks for.
impl AsMut<PacketRecord> for HookSlot {
    #[inline(always)]
    fn as_mut(&mut self) -> &mut PacketRecord {
        &mut self.record
    }
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, no padding (asserted above), only integers: every bit pattern is
// valid.
unsafe impl aya::Pod for HookSlot {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::Parsed;
    use crate::{LinkType, SliceReader};

    #[test]
    fn no_padding() {
        assert_eq!(
            core::mem::size_of::<HookCounters>(),
            8 * (256 + 256 + 4 + OUTCOME_SLOTS + 6 + 2 + NAK_SLOTS + 2 + 8 + 4)
                + 8 * (4 * 64 + 4 * 8 + 3 + 1 + 3 * 8 + 4)
                + 8 * MsgOp::COUNT * (2 + MSG_BUCKET_SLOTS)
        );
    }

    /// What a common RoCE packet writes outside the arrays by opcode, DSCP and message size
    /// (frames, bytes, ECN, tunnel kind, messages, the RoCE outcome) lies in the block's first
    /// three lines, and the slot's working state before the block.
    #[test]
    fn a_common_packets_counts_lie_together() {
        use core::mem::offset_of;
        assert_eq!(offset_of!(HookCounters, frames), 0);
        assert!(offset_of!(HookCounters, outcomes) + 8 * (Outcome::Roce as usize + 1) <= 3 * 64);
        assert!(offset_of!(HookCounters, message_bytes) + 8 * MsgOp::COUNT <= 3 * 64);
        assert_eq!(offset_of!(HookSlot, record), 0);
        assert_eq!(
            offset_of!(HookSlot, counters),
            core::mem::size_of::<HookSlot>() - core::mem::size_of::<HookCounters>()
        );
    }

    #[test]
    fn counts_outcomes_and_totals() {
        let mut c = HookCounters::ZERO;
        let cl = TrafficClasses::DEFAULT;
        c.record(&(&Parsed::Other(Outcome::NotIp)).into(), 60, &cl);
        c.record(&(&Parsed::Other(Outcome::TruncatedBth)).into(), 50, &cl);
        assert_eq!(c.frames, 2);
        assert_eq!(c.frame_bytes, 110);
        assert_eq!(c.outcomes[Outcome::NotIp as usize], 1);
        assert_eq!(c.outcomes[Outcome::TruncatedBth as usize], 1);
        assert_eq!(c.roce_packets(), 0);
        let mut d = HookCounters::ZERO;
        d.add(&c);
        d.add(&c);
        assert_eq!(d.frames, 4);
        // a frame that is not Ethernet-long enough
        let p = crate::parse_record(&SliceReader(&[0u8; 5]), LinkType::Ethernet);
        c.record(&p, 5, &cl);
        assert_eq!(c.outcomes[Outcome::TruncatedL2 as usize], 1);
    }
}

#[cfg(test)]
mod mac_control_tests {
    use super::*;
    use crate::headers::mac_control::MacControl;

    #[test]
    fn xoff_xon_and_disabled_times_per_priority() {
        let mut c = HookCounters::ZERO;
        let m = MacControl {
            opcode: OPCODE_PFC,
            class_enable: 0b0000_1011,
            times: [100, 0, 7, 65535, 0, 0, 0, 9],
        };
        c.record_mac_control(&m, 60);
        assert_eq!(c.pfc_frames, 1);
        assert_eq!(c.pfc_xoff, [1, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(c.pfc_xon, [0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(c.pfc_quanta, [100, 0, 0, 65535, 0, 0, 0, 0]);
        assert_eq!((c.frames, c.outcomes[Outcome::MacControl as usize]), (1, 1));
    }

    #[test]
    fn pause_and_other_opcodes() {
        let mut c = HookCounters::ZERO;
        let pause = |t: u16| MacControl::pause(&[0, 1, (t >> 8) as u8, t as u8]);
        c.record_mac_control(&pause(500), 60);
        c.record_mac_control(&pause(0), 60);
        c.record_mac_control(
            &MacControl {
                opcode: 2,
                ..MacControl::default()
            },
            60,
        );
        assert_eq!((c.pause_frames, c.pause_xon, c.pause_quanta), (2, 1, 500));
        assert_eq!((c.mac_control_other, c.pfc_frames), (1, 0));
    }
}

#[cfg(all(test, feature = "std"))]
mod field_tests {
    use super::*;

    #[test]
    fn fields_cover_the_block_and_differences_name_each_counter() {
        let mut a = HookCounters::ZERO;
        let n: usize = a.fields().iter().map(|(_, f)| f.len()).sum();
        assert_eq!(n * 8, core::mem::size_of::<HookCounters>());
        let b = HookCounters::ZERO;
        a.outcomes[3] = 2;
        a.capture_redirect_failures = 1;
        assert_eq!(
            differences(&a, &b),
            [
                ("outcomes[3]".to_string(), 2, 0),
                ("capture_redirect_failures".to_string(), 1, 0)
            ]
        );
        let mut c = a;
        c.add(&a);
        assert_eq!(c.outcomes[3], 4);
        assert_eq!(c.capture_redirect_failures, 2);
    }
}

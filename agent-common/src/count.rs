//! The one counting sequence: what every source does with a parsed frame, in one order. The
//! kernel programs (`agent-ebpf`'s `count.rs`), the AF_XDP capture (`rocemon::sources::tally`)
//! and `rocemon analyze` (`rocemon::pipeline::analysis`) all call [`count`]; they differ only
//! in their [`Store`]: where the mirror sessions and the flows live, and what a full store
//! does (its stated policy).
//!
//! The sequence, for a frame whose parse result is `rec`:
//! 1. a frame that is not RoCE: the hook's counter block ([`HookCounters::record`]: frames,
//!    outcomes, MAC control), and a MAC control frame to the store's pause ring; done;
//! 2. for RoCE: its flow ([`flow_step`] on the store's state of the flow; a flow the store
//!    cannot hold: `flow_update_errors`), and the flow's PSN and message events into the
//!    counter block;
//! 3. the counter block's RoCE counts ([`HookCounters::record_roce`]: opcodes, ECN, DSCP and
//!    priority classes, CNPs, NAKs);
//! 4. its mirror session or tunnel, when the store counts sessions (a full store:
//!    `session_overflow`).
//!
//! The flow comes before the counter block because it is the one step whose memory is not
//! hot when many flows take turns (a cache miss a packet on the flow's state), and nothing
//! after it waits for it: the counter block's increments run while the flow's line is
//! fetched, where before they had all retired by the time the miss began. Every step only
//! adds, so the order changes no count. Measured live (XDP, 64 B, medians of nine rounds
//! interleaved with the order before): one flow 73 to 68 ns, 10,000 flows 125 to 120; tc
//! ingress at 10,000 flows 135 to 132.
//!
//! Everything is `#[inline(always)]` and generic over the store, so the kernel's copy is the
//! same code as the host's, monomorphised for its maps (no call, no indirection on the hot
//! path).

use crate::headers::mac_control::MacControl;
use crate::{
    flow::FlowEvent, FlowStats, Hook, HookCounters, Outcome, PacketRecord, SessionKey,
    TrafficClasses,
};

/// Where a source keeps what it counts, and what it does when full.
pub trait Store {
    /// The classes RoCE and CNPs are expected in (lossy RoCE).
    fn classes(&self) -> TrafficClasses;
    /// Whether mirror sessions and tunnels are counted (a load-time switch in the kernel:
    /// read where the code it guards starts).
    fn sessions_on(&self) -> bool;
    /// Whether flows track PSNs (gaps, retransmissions; a load-time switch in the kernel).
    fn psn_on(&self) -> bool;
    /// The time of a RoCE packet of `frame_len` bytes, nanoseconds: read only for RoCE (the
    /// kernel reads its clock here and adds the packet to the rhythm's ring, in the lane of
    /// `rec`'s source).
    fn now(&mut self, rec: &PacketRecord, frame_len: u64) -> u64;
    /// Adds a RoCE packet to its session; false when the store is full (the sequence counts
    /// it in `session_overflow`).
    fn session(&mut self, key: SessionKey, rec: &PacketRecord, frame_len: u64) -> bool;
    /// Counts a RoCE packet in its flow (the flow of `rec` seen at `hook`): finds or creates
    /// the flow's state (a new one adds to `flows_created`) and runs [`flow_step`] on it, or
    /// hands it to where that happens. When the store cannot hold the flow it applies its
    /// policy (counts it in `flow_update_errors`, or evicts another) and returns true.
    fn flow(
        &mut self,
        rec: &PacketRecord,
        hook: Hook,
        c: &mut HookCounters,
        frame_len: u64,
        now: u64,
        psn: bool,
    ) -> bool;
    /// A MAC control frame (PFC, PAUSE or another opcode), after the counter block counted
    /// it: the kernel keeps it with its time in the pause ring
    /// ([`crate::pause_ring`]); a store whose pause time is worked out elsewhere (a capture
    /// feeds its frames to its pause tracker with their timestamps) does nothing.
    #[inline(always)]
    fn pause_frame(&mut self, _m: &MacControl) {}
}

/// Counts one parsed frame of `frame_len` wire bytes seen at `hook` into the counter block
/// `c` and the store. Returns true when the store refused the packet's flow.
#[inline(always)]
pub fn count<S: Store>(
    store: &mut S,
    c: &mut HookCounters,
    rec: &PacketRecord,
    hook: Hook,
    frame_len: u64,
) -> bool {
    if !rec.is_roce() {
        c.record(rec, frame_len, &store.classes());
        if let Some(m) = rec.mac_control() {
            store.pause_frame(&m);
        }
        return false;
    }
    let now = store.now(rec, frame_len);
    let psn = store.psn_on();
    let refused = store.flow(rec, hook, c, frame_len, now, psn);
    c.record_roce(rec, frame_len, &store.classes());
    if store.sessions_on() {
        if let Some(sk) = SessionKey::of(rec, hook) {
            if !store.session(sk, rec, frame_len) {
                c.session_overflow += 1;
            }
        }
    }
    refused
}

/// A frame the kernel's fast path answered with an outcome alone (no record written): the
/// counter block as [`count`] counts a record of that outcome.
#[inline(always)]
pub fn count_outcome(c: &mut HookCounters, outcome: Outcome, frame_len: u64) {
    c.record_other(outcome, frame_len);
}

/// The flow step every store runs once it holds the flow's state `s`: the packet into the
/// flow, the flow's PSN and message events into the counter block.
#[inline(always)]
pub fn flow_step(
    s: &mut FlowStats,
    rec: &PacketRecord,
    c: &mut HookCounters,
    frame_len: u64,
    now: u64,
    psn: bool,
) -> FlowEvent {
    let ev = s.record_with(rec, frame_len, now, psn);
    c.record_flow(&ev);
    ev
}

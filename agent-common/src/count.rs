//! The one counting sequence: what every source does with a parsed frame, in one order. The
//! kernel programs (`agent-ebpf`'s `count.rs`), the AF_XDP capture (`rocemon::sources::tally`)
//! and `rocemon analyze` (`rocemon::pipeline::analysis`) all call [`count`]; they differ only
//! in their [`Store`]: where the mirror sessions and the flows live, and what a full store
//! does (its stated policy).
//!
//! The sequence, for a frame whose parse result is `rec`:
//! 1. the hook's counter block ([`HookCounters::record`]): frames, outcomes, opcodes, ECN,
//!    DSCP and priority classes, MAC control;
//! 2. for RoCE only: its mirror session or tunnel, when the store counts sessions (a full
//!    store: `session_overflow`);
//! 3. for RoCE only: its flow ([`flow_step`] on the store's state of the flow; a flow the
//!    store cannot hold: `flow_update_errors`), and the flow's PSN and message events into
//!    the counter block.
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
    c.record(rec, frame_len, &store.classes());
    if !rec.is_roce() {
        if let Some(m) = rec.mac_control() {
            store.pause_frame(&m);
        }
        return false;
    }
    if store.sessions_on() {
        if let Some(sk) = SessionKey::of(rec, hook) {
            if !store.session(sk, rec, frame_len) {
                c.session_overflow += 1;
            }
        }
    }
    let now = store.now(rec, frame_len);
    let psn = store.psn_on();
    store.flow(rec, hook, c, frame_len, now, psn)
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

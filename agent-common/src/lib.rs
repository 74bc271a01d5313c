//! The one RoCEv2 parser and the one flow/counter update logic of rocemon.
//!
//! This crate is `no_std` for the BPF target and plain `std` on the host (feature `std`),
//! so the XDP program, the tc programs, AF_XDP/capture sources and the tests all parse and
//! count a packet the same way.
//!
//! Modules import each other one way (tested: `tests/layers.rs`), from the leaves up:
//! - leaves: [`outcome`], [`hook`], [`flow_key`], [`classes`], [`ring`], [`clock`], [`cache_mode`],
//!   [`headers`], [`reader`]; [`pause_ring`] (over [`headers`]); then [`opcode`]; [`info`] (the parse result); [`record`]; the parsers
//!   [`fast`] and [`parse`]; [`psn`], [`message`]; [`flow`], [`session`]; [`flow_cache`];
//!   [`counters`] on top.
//!
//! - [`reader`]: the packet-reader trait (bounds-checked constant-size reads) and the
//!   byte-slice implementation; the XDP and tc implementations live in `agent-ebpf`.
//! - [`headers`]: one module per header (Ethernet/VLAN, Linux cooked capture, IPv4, IPv6,
//!   UDP, BTH, extension headers) with offsets, lengths and big-endian getters.
//! - [`opcode`]: the BTH opcode table (names, transport, operation class, extension headers).
//! - [`outcome`]: how a frame ended ([`Outcome`], its counter index; a leaf module).
//! - [`hook`]: where a frame was seen ([`Hook`]); [`flow_key`]: the flow's key ([`FlowKey`]).
//! - [`info`]: the parse result ([`Parsed`], [`RoceInfo`]).
//! - [`parse`]: `parse_frame(&reader, link) -> Parsed` (RoCE, MAC control, or an outcome).
//! - [`fast`]: the common shapes at constant offsets (the kernel's fast path); answers only
//!   what [`parse`] would, or hands the frame on.
//! - [`record`]: the parse result as one flat record, what every counting path reads (the
//!   parsers write it; [`parse_frame`] rebuilds the rich [`Parsed`] from it).
//! - [`classes`]: the traffic classes RoCE and CNPs are expected in (lossy RoCE).
//! - [`counters`]: the per-hook counter block and its update function; the kernel's per-CPU
//!   value around it ([`HookSlot`]: the block, the parse record, the clock caches, the flow
//!   cache's mode).
//! - [`flow`]: `FlowKey`, `FlowStats` and `FlowStats::record`.
//! - [`flow_cache`]: the kernel's per-CPU direct-mapped flow cache in front of the flow maps
//!   (slot layout, hash, states of the write-back protocol).
//! - [`cache_mode`]: when the flow cache steps aside (flows outnumber its slots): its modes,
//!   the flush's judgement of them, the hook slots' view of them.
//! - [`ring`]: RoCE packets and bytes per millisecond, the kernel's ring (training rhythm).
//! - [`pause_ring`]: every PFC and PAUSE frame with its time, the kernel's per-CPU ring (the
//!   live pause time is the union of the pause intervals, as `analyze`'s).
//! - [`clock`]: the kernel's per-CPU cache of a clock reading (a packet reads the clock only
//!   now and then).
//! - [`session`]: per mirror session / tunnel id counters (a bounded label set).
//! - [`message`]: RDMA message sizes (RETH DMA lengths, SEND payloads) and their histogram.
//! - [`psn`]: PSN gaps, retransmissions and NAKs (tracked per packet, so in the kernel).
//! - [`count`]: the one counting sequence over a parsed frame (counter block, session, flow)
//!   that every source runs, each with its own [`count::Store`] (kernel maps, the AF_XDP
//!   tally, `analyze`'s flow table).
#![cfg_attr(not(feature = "std"), no_std)]

pub mod cache_mode;
pub mod classes;
pub mod clock;
pub mod count;
pub mod counters;
pub mod fast;
pub mod flow;
pub mod flow_cache;
pub mod flow_key;
pub mod headers;
pub mod hook;
pub mod info;
pub mod message;
pub mod opcode;
pub mod outcome;
pub mod parse;
pub mod pause_ring;
pub mod psn;
pub mod reader;
pub mod record;
pub mod ring;
pub mod session;
pub mod sum;

pub use classes::TrafficClasses;
pub use counters::{Hook, HookCounters, HookSlot};
pub use flow::{FlowKey, FlowStats};
pub use flow_key::FlowKey4;
pub use headers::mac_control::MacControl;
pub use opcode::OpClass;
pub use parse::{
    parse, parse_frame, parse_record, parse_record_into, LinkType, Outcome, OutcomeKind, Parsed,
    RoceInfo,
};
pub use reader::{PacketReader, PrefixReader, SliceReader};
pub use record::PacketRecord;
pub use session::{SessionKey, SessionStats, SESSION_MAP_ENTRIES};

/// The IANA-assigned UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Name of the per-CPU array of [`HookCounters`], indexed by [`Hook`].
pub const MAP_COUNTERS: &str = "COUNTERS";
/// Name of the LRU per-CPU hash of [`FlowKey`] -> [`FlowStats`]: the IPv6 flows.
pub const MAP_FLOWS: &str = "FLOWS";
/// Name of the LRU per-CPU hash of [`FlowKey4`] -> [`FlowStats`]: the IPv4 flows, under a key
/// of 16 bytes instead of 40 (cheaper to hash on every packet).
pub const MAP_FLOWS4: &str = "FLOWS4";
/// Name of the LRU per-CPU hash of [`FlowKey`] -> [`FlowStats`] for the flows the host sends
/// (tc egress), both families: a budget of their own, so no flood that comes in can push
/// them out (an incoming flood churns only the other two maps).
pub const MAP_FLOWS_OUT: &str = "FLOWS_OUT";
/// What a flow map holds, in words for a person: `IPv4`, `IPv6` (flows that come in) or
/// `sent` (the flows the host sends).
pub fn flow_map_holds(map: &str) -> &'static str {
    match map {
        MAP_FLOWS4 => "IPv4",
        MAP_FLOWS_OUT => "sent",
        _ => "IPv6",
    }
}

/// The `map` label of failures that concern both flow maps at once (the kernel counts a
/// failed flow update without its family; a read or a delete covers both maps).
pub const MAP_LABEL_FLOWS: &str = "flows";
/// Default number of flows each kernel flow map (IPv4, IPv6) holds (per interface).
pub const FLOW_MAP_ENTRIES: u32 = 16_384;
/// Program names in the object.
pub const PROG_XDP: &str = "rocemon_xdp";
pub const PROG_TC_INGRESS: &str = "rocemon_tc_ingress";
pub const PROG_TC_EGRESS: &str = "rocemon_tc_egress";
/// The AF_XDP capture mode's XDP program (redirects RoCE and mirror frames to sockets).
pub const PROG_AFXDP: &str = "rocemon_xdp_afxdp";
/// Name of the XSKMAP (receive queue -> AF_XDP socket) of the capture mode.
pub const MAP_XSKS: &str = "XSKS";
/// Receive queues the capture mode can serve (the XSKMAP's size).
pub const MAX_CAPTURE_QUEUES: u32 = 64;
/// Name of the per-CPU hash of [`SessionKey`] -> [`SessionStats`].
pub const MAP_SESSIONS: &str = "SESSIONS";
/// The slow programs: the general parser, reached by a tail call when the fast path hands a
/// frame on (see [`fast`]). Each lives in a program array of its program type.
pub const PROG_XDP_SLOW: &str = "rocemon_xdp_slow";
pub const PROG_TC_INGRESS_SLOW: &str = "rocemon_tc_ingress_slow";
pub const PROG_TC_EGRESS_SLOW: &str = "rocemon_tc_egress_slow";
pub const PROG_AFXDP_SLOW: &str = "rocemon_xdp_afxdp_slow";
/// Program array of the XDP slow programs (XDP and AF_XDP hooks).
pub const MAP_XDP_SLOW: &str = "XDP_SLOW";
/// Program array of the tc slow programs (ingress and egress).
pub const MAP_TC_SLOW: &str = "TC_SLOW";
/// Load-time switches of the kernel programs (globals the loader sets; 1 on, 0 off).
pub const SWITCH_TRACK_PSN: &str = "ROCEMON_TRACK_PSN";
pub const SWITCH_SESSIONS: &str = "ROCEMON_SESSIONS";
/// The hooks whose RoCE packets feed the per-millisecond ring ([`ring`]): a bit per [`Hook`]
/// discriminant, 0 off. One ingress hook and egress, so that no packet is added twice.
pub const SWITCH_RING_HOOKS: &str = "ROCEMON_RING_HOOKS";
/// 1: the ring takes the coarse clock (the time of the last tick) instead of the fine one.
/// The loader sets it where a tick is at most a millisecond (HZ >= 1000): the fine clock reads
/// the TSC, serialised, on every RoCE packet, its largest single cost.
pub const SWITCH_RING_COARSE: &str = "ROCEMON_RING_COARSE";
/// Load-time traffic class expectation ([`TrafficClasses`]): RoCE DSCP bit set (u64), RoCE
/// priority (u8), CNP DSCP bit set (u64).
pub const GLOBAL_ROCE_DSCP: &str = "ROCEMON_ROCE_DSCP";
pub const GLOBAL_ROCE_PRIORITY: &str = "ROCEMON_ROCE_PRIORITY";
pub const GLOBAL_CNP_DSCP: &str = "ROCEMON_CNP_DSCP";
/// The possible CPUs, set by the loader: how many CPUs' states a PSN gap is reconciled with.
pub const GLOBAL_NR_CPUS: &str = "ROCEMON_NR_CPUS";
/// Benchmark baselines: one per-CPU counter bump.
pub const PROG_BASELINE_XDP: &str = "rocemon_baseline_xdp";
pub const PROG_BASELINE_TC: &str = "rocemon_baseline_tc";
/// Benchmark yardstick: the least an exact per-flow counter costs (IPv4 RoCE flows in a
/// per-CPU hash map, [`MAP_FLOW_FLOOR`], sized by the bench at load time).
pub const PROG_FLOW_FLOOR_XDP: &str = "rocemon_flow_floor_xdp";
pub const MAP_FLOW_FLOOR: &str = "FLOW_FLOOR";

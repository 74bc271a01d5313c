//! The one RoCEv2 parser and the one flow/counter update logic of rocemon.
//!
//! This crate is `no_std` for the BPF target and plain `std` on the host (feature `std`),
//! so the XDP program, the tc programs, AF_XDP/capture sources and the tests all parse and
//! count a packet the same way.
//!
//! Modules import each other one way (tested: `tests/layers.rs`), from the leaves up:
//! - leaves: [`contract`] (the kernel object's map, program and switch names), [`outcome`], [`hook`], [`flow_key`], [`classes`], [`ring`], [`clock`], [`cache_mode`],
//!   [`headers`], [`reader`]; [`pause_ring`] (over [`headers`]); then [`opcode`]; [`info`] (the parse result); [`record`]; the parsers
//!   [`fast`] and [`parse`]; [`psn`], [`message`]; [`facts`] (what a packet says: CE, NAK,
//!   lossy; decided once); [`flow`], [`session`]; [`flow_cache`];
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
pub mod contract;
pub mod count;
pub mod counters;
pub mod facts;
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

pub use contract::maps::*;
pub use contract::programs::*;
pub use contract::switches::*;
pub use headers::udp::ROCEV2_UDP_PORT;

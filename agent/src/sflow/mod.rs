//! The switches' view: an sFlow v5 collector (`rocemon run --sflow-listen`, and `analyze` for
//! sFlow datagrams found in a capture).
//!
//! - [`decode`]: the datagram decoder (bounded, every malformed part counted by reason).
//! - [`collector`]: samples through the shared parser; raw and estimated RoCE per opcode,
//!   ECN, CNP, flow and switch port; lost datagrams per agent.
//! - [`fabric`]: ECMP groups of switch uplinks; elephants and collisions on estimated rates.
//! - [`report`]: the JSON shape (`analyze --format json`'s `"sflow"`, `/api/v1/sflow`).
//! - [`receiver`]: the live UDP receiver.
//! - [`sequence`]: lost datagrams per agent (reordering, restarts, discontinuities).
//! - [`table`]: the bounded, aged tables the collector holds its state in.

pub mod collector;
pub mod decode;
pub mod fabric;
pub mod receiver;
pub mod report;
pub mod sequence;
pub mod table;

pub use crate::config::sflow::SFLOW_PORT;

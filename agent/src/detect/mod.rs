//! Detectors over the flow table: elephants, ECMP (observed, predicted, entropy), and the
//! switch hash models the predicted view uses. PSN/NAK health is counted per packet in
//! `agent-common::psn` (kernel and analyze alike) and only reported from here. [`rhythm`]: the
//! training job's step rhythm from RoCE bytes over time; [`jobs`]: the jobs among several
//! sources' rhythms (a capture's source hosts; live, the ring's source lanes: [`live_jobs`]).
pub mod cnp_response;
pub mod ecmp;
pub mod elephant;
pub mod engine;
pub mod findings;
pub mod hash;
pub mod incidents;
pub mod jobs;
pub mod latency_sample;
pub mod live_findings;
pub mod live_flows;
pub mod live_jobs;
pub mod live_pause;
pub mod live_reaction;
pub mod live_sample;
pub mod live_totals;
pub mod pause;
pub mod pause_index;
pub mod recovery;
pub mod rhythm;
pub mod slow_steps;
pub mod steps;

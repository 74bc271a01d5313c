//! rocemon: RoCEv2 telemetry from XDP and tc, served to Prometheus.
//!
//! The agent is a pipeline with clear rooms (see `shared/DESIGN.md`):
//!
//! ```text
//! sources ------------------> flow table ----> exporters
//!   loader + sources::maps     flows.rs          metrics.rs (the one catalog) + http.rs (/metrics)
//!   sources::capture           (rates, top-K)    report.rs (analyze: table and JSON)
//! ```
//!
//! - [`cli`]: raw flags; [`config`]: one validated [`config::Config`]; [`error`]: errors users
//!   can fix (exit status 2).
//! - [`loader`]: load the object, attach XDP/tc per interface, fall back, detach on drop; read
//!   the kernel maps. [`testrun`]: BPF_PROG_TEST_RUN for tests and benchmarks.
//! - [`sources::capture`]: pcap/pcapng frames; [`analyze`]: frames through `agent-common`'s
//!   parser and update functions (the same ones the kernel runs).
//! - [`flows`]: the flow table; [`metrics`]: the metric catalog; [`http`]: the endpoint.
//! - [`run`]: wires the live pipeline; it takes its shutdown as a future so tests drive it.

pub mod analyze;
pub mod cli;
pub mod config;
pub mod error;
pub mod flows;
pub mod http;
pub mod loader;
pub mod metrics;
pub mod report;
pub mod run;
pub mod sources;
pub mod testrun;

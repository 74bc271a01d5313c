//! rocemon: RoCEv2 telemetry from XDP and tc, served to Prometheus.
//!
//! The agent is a pipeline with clear rooms (see `docs/DESIGN.md`):
//!
//! ```text
//! sources ------------------> flow table ----> detectors ----> exporters
//!   loader (kernel maps)       flows.rs          detect/         metrics/ (the one catalog),
//!   sources::capture           (rates, top-K)    elephant, ecmp, http.rs + api.rs, report.rs, top.rs
//!   sources::maps (the ring)                     rhythm, steps
//! ```
//!
//! - [`cli`]: raw flags; [`config`]: one validated [`config::Config`] ([`classes`]: its
//!   `[classes]` section); [`error`]: errors users can fix (exit status 2).
//! - [`loader`]: load the object, attach XDP/tc per interface, fall back, detach on drop; read
//!   the kernel maps. [`testrun`]: BPF_PROG_TEST_RUN for tests and benchmarks.
//! - [`sources::capture`]: pcap/pcapng frames; [`analyze`]: frames through `agent-common`'s
//!   parser and update functions (the same ones the kernel runs).
//! - [`flows`]: the flow table (rates, ticks); [`detect`]: elephants, ECMP (observed,
//!   predicted, entropy), switch hash models, and the training rhythm (`rhythm`, `steps`).
//! - [`training`]: the rhythm and RDMA message sizes of a capture; [`run_rhythm`]: the live
//!   rhythm (kernel rings drained every second, sFlow ports).
//! - [`metrics`]: the metric catalog; [`api`] + [`http`]: `/metrics` and `/api/v1/*`;
//!   [`top`]: `rocemon top`, a terminal view over the API.
//! - [`sflow`]: the sFlow v5 collector (switches' view), live and in `analyze`.
//! - [`run`]: wires the live pipeline; it takes its shutdown as a future so tests drive it;
//!   [`run_reload`] applies a reloaded configuration.

pub mod analyze;
pub mod api;
pub mod batch;
pub mod classes;
pub mod cli;
pub mod config;
pub mod detect;
pub mod error;
pub mod flows;
pub mod http;
pub mod loader;
pub mod logging;
pub mod metrics;
pub mod pins;
pub mod report;
pub mod report_html;
pub mod report_html_views;
pub mod report_lossless;
pub mod run;
pub mod run_reload;
pub mod run_rhythm;
pub mod sflow;
pub mod sources;
pub mod testrun;
pub mod timeline;
pub mod top;
pub mod training;
pub mod web;

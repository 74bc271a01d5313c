//! rocemon: RoCEv2 telemetry from XDP and tc, served to Prometheus.
//!
//! The agent is a pipeline with clear rooms (see `docs/DESIGN.md`), one folder each:
//!
//! ```text
//! kernel/ + sources/ --------> pipeline/ -------> detect/ ---------> export/
//!   loader, attach, pins,       stages (the       elephant, ecmp,     metrics/ (the one catalog),
//!   liveness (programs)           Pipeline run    hash, rhythm,       http + conns + api,
//!   sources::maps (counters,      and analyze     steps, pause,       report/ (build,
//!     flows, the ring),           drive), flows,  cnp_response,       findings, html*),
//!     prog_run (the flush)        flow_records    findings,           ipfix/ (flow records)
//!   sources::capture, input     analysis +        engine/ (window,    (sinks: they read
//!                                 flow_side,        judge, held),     the judgement)
//!                                 timeline,       live_findings
//!                                 training(_view),
//!                                 findings
//!   sources::afxdp, tally
//!   sflow/ (switches' view: decode, table, sequence, collector, fabric)
//!          cmd/: start + run/ (links, rhythm, reload, flows, findings, ipfix),
//!                analyze,
//!                top/ (rows, tui, plain), rdma, admin (detach, reload,
//!                check-config) wire them; main.rs only parses and dispatches
//! ```
//!
//! Imports run one way, left to right; `cmd/` sits on top, `config/` beside it.
//!
//! - [`config`]: every setting in one place: raw flags ([`config::cli`]; [`config::units`]:
//!   rates as people write them), the file and one validated [`config::Config`]
//!   ([`config::classes`]: its `[classes]` section; [`config::web`]: TLS and basic auth;
//!   [`config::logging`]: where logs go); [`error`]: errors users can fix (exit status 2);
//!   [`bpf_sys`]: bpf(2) for the commands aya does not wrap.
//! - [`kernel`]: load the object ([`kernel::loader`]), attach XDP/tc per interface, fall
//!   back, clean up a refused start ([`kernel::attach`]), detach on drop; whether the links
//!   still run on their device ([`kernel::liveness`]); pins ([`kernel::pins`]).
//! - [`sources`]: the kernel maps and ring ([`sources::maps`]; the flow cache flushed into
//!   the flow maps first, by a program run on each CPU: [`sources::prog_run`]), captures
//!   ([`sources::capture`], [`sources::input`]), AF_XDP sockets and their userspace counting
//!   ([`sources::afxdp`], [`sources::tally`]), NIC pause counters, RDMA connections; [`sflow`]:
//!   the sFlow v5 collector (switches' view), live and in `analyze`.
//! - [`pipeline`]: the one [`pipeline::stages::Pipeline`] that `run` and `analyze` both drive
//!   (ingest a store's flows or a capture's packets, tick rates and elephants and the sFlow
//!   fabric view, detect the ECMP views); the flow table under it ([`pipeline::flows`]); a
//!   capture through it ([`pipeline::analysis`], its time-ordered half
//!   [`pipeline::flow_side`]), the flow records it gives ([`pipeline::flow_records`]) and
//!   its views over time ([`pipeline::timeline`], [`pipeline::training`]: the rhythm and
//!   message sizes; [`pipeline::training_view`]: the jobs and their slow steps explained), and
//!   the capture's findings ([`pipeline::findings`]: the capture as one window of the engine).
//! - [`detect`]: elephants, ECMP (observed, predicted, entropy), switch hash models, the
//!   training rhythm (`rhythm`, `steps`) and the jobs in it (`jobs`, `live_jobs`), pause time ([`detect::pause`]), CE/CNP pairing and
//!   the senders' answer ([`detect::cnp_response`]; live: [`detect::live_reaction`]), why a
//!   step was slow ([`detect::slow_steps`]), and the findings that say what it all means:
//!   their builders ([`detect::findings`]) and the one engine that raises, holds and ranks
//!   them over windows ([`detect::engine`]), which the live agent fills at each poll
//!   ([`detect::live_findings`]) and `analyze` once per capture ([`pipeline::findings`]).
//! - [`export`]: the metric catalog ([`export::metrics`]), `/metrics` and `/api/v1/*`
//!   ([`export::http`], [`export::api`]), the `analyze` reports, and flow records for flow
//!   collectors ([`export::ipfix`]: IPFIX over UDP, TCP or into a file, on a thread of its
//!   own; the records themselves come from the pipeline's stage
//!   [`pipeline::flow_records`]).
//! - [`cmd`]: `rocemon run` ([`cmd::run`]: it takes its shutdown as a future so tests drive
//!   it; [`cmd::run::links`], [`cmd::run::rhythm`], [`cmd::run::reload`], [`cmd::run::findings`],
//!   [`cmd::run::ipfix`]),
//!   started as a process by [`cmd::start`] (signals, runtime, logging), `rocemon analyze`
//!   ([`cmd::analyze`]), `rocemon top` ([`cmd::top`]), `rocemon rdma` ([`cmd::rdma`]),
//!   `detach`, `reload` and `check-config` ([`cmd::admin`]).

pub mod bpf_sys;
pub mod cmd;
pub mod config;
pub mod detect;
pub mod error;
pub mod export;
pub mod kernel;
pub mod pipeline;
pub mod sflow;
pub mod sources;

//! The commands that wire the pipeline: `rocemon run` ([`run`], [`run_links`], [`run_reload`], [`run_rhythm`]), `rocemon analyze` ([`analyze`]) and `rocemon top` ([`top`]: [`top_rows`] read from the API, drawn by [`top_tui`] or
//! [`top_plain`]).

pub mod admin;
pub mod analyze;
pub mod rdma;
pub mod run;
pub mod run_findings;
pub mod run_flows;
pub mod run_ipfix;
pub mod run_links;
pub mod run_reload;
pub mod run_rhythm;
pub mod start;
pub mod top;
pub mod top_plain;
pub mod top_rows;
pub mod top_tui;

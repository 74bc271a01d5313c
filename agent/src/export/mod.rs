//! What leaves the agent: the metric catalog ([`metrics`]), flow records for flow collectors
//! ([`ipfix`]), the HTTP endpoint and JSON API ([`http`], [`api`]), and the `analyze` reports
//! ([`report`]: the model, built from an analysis, written as JSON, a table or a page; [`named`]).

pub mod api;
pub mod conns;
pub mod http;
pub mod ipfix;
pub mod metrics;
pub mod named;
pub mod report;

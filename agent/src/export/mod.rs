//! What leaves the agent: the metric catalog ([`metrics`]), flow records for flow collectors
//! ([`ipfix`]), the HTTP endpoint and JSON API ([`http`], [`api`]), and the `analyze` reports ([`report`], [`named`], [`report_html`], [`report_html_views`], [`report_lossless`]).

pub mod api;
pub mod conns;
pub mod http;
pub mod ipfix;
pub mod metrics;
pub mod named;
pub mod report;
pub mod report_build;
pub mod report_findings;
pub mod report_html;
pub mod report_html_charts;
pub mod report_html_findings;
pub mod report_html_views;
pub mod report_lossless;
pub mod report_table;
pub mod report_training;

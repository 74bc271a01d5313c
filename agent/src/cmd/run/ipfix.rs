//! The live agent's flow records (IPFIX): the exporter started with the agent and handed to
//! the pipeline's flow-record stage, a round after every poll, the flows of an interface
//! that went away ended, and every flow's last record before the agent stops. All on the
//! kernel's monotonic clock, as the flow maps keep time.

use crate::config::Config;
use crate::export::http::Shared;
use crate::export::ipfix::Exporter;
use crate::pipeline::flow_counts::EndReason;
use crate::pipeline::flow_records::RecordSettings;
use crate::pipeline::stages::{Pipeline, Settings};
use crate::sources::maps::{monotonic_ns, monotonic_to_unix_ns};
use anyhow::Result;

/// The exporter, when a collector is configured: its thread started, each interface's
/// index known, its sink in the pipeline's `settings`, its counts in the metrics.
pub fn start(
    config: &Config,
    shared: &Shared,
    settings: &mut Settings,
) -> Result<Option<Exporter>> {
    let Some(s) = &config.ipfix else {
        return Ok(None);
    };
    let ifindex = config
        .ifaces
        .iter()
        .map(|i| crate::kernel::loader::ifindex(i).unwrap_or(0))
        .collect();
    let x = Exporter::start(s, ifindex).map_err(|e| {
        crate::error::UsageError::BadConfig(format!(
            "{e:#}; check the address given to --ipfix (or [ipfix] collectors): a route to it, and a port to send from"
        ))
    })?;
    settings.records = Some(RecordSettings {
        active_timeout_ns: s.active_timeout.as_nanos() as u64,
        idle_timeout_ns: config.flow_idle_timeout.as_nanos() as u64,
        sink: x.sink(),
    });
    if let Ok(mut m) = shared.metrics.lock() {
        m.attach_ipfix(x.collectors.clone());
    }
    log::info!(
        "exporting flow records (IPFIX) to {}",
        x.collectors
            .iter()
            .map(|(c, _)| c.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Some(x))
}

/// The records of this poll (nothing without an exporter).
pub fn records(pipeline: &mut Pipeline) {
    pipeline.records(monotonic_ns(), monotonic_to_unix_ns());
}

/// The flows of an interface that went away give their last records.
pub fn end_iface(pipeline: &mut Pipeline, iface: usize) {
    pipeline.end_iface_records(iface, monotonic_ns(), monotonic_to_unix_ns());
}

/// Every flow's last record, sent before the agent goes; then the exporter's thread ends.
pub fn finish(pipeline: &mut Pipeline, exporter: Option<Exporter>) {
    if let Some(x) = exporter {
        pipeline.finish_records(monotonic_ns(), monotonic_to_unix_ns(), EndReason::ForcedEnd);
        x.finish();
    }
}

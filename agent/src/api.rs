//! The JSON API's documents: `/api/v1/flows` and `/api/v1/ecmp`, rebuilt at every poll.

use crate::config::Config;
use crate::detect::ecmp::{self, EcmpReport};
use crate::flows::FlowTable;
use crate::report::Flow;
use agent_common::Hook;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct ApiFlow {
    pub iface: String,
    pub direction: &'static str,
    pub hook: &'static str,
    #[serde(flatten)]
    pub flow: Flow,
    pub rate_packets_per_second: f64,
    /// The ECMP group whose uplink carries the flow (observed), if any.
    pub group: Option<String>,
    /// The path the hash model predicts, if a model is configured.
    pub predicted_path: Option<u32>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FlowsDoc {
    pub flows_total: usize,
    pub elephants_total: usize,
    /// Flows by smoothed rate, highest first (elephants included).
    pub flows: Vec<ApiFlow>,
}

/// What the API serves; replaced after every poll.
#[derive(Clone, Debug, Default)]
pub struct ApiView {
    pub flows: FlowsDoc,
    pub ecmp: EcmpReport,
}

/// Builds the API view from the flow table and the ECMP report (at most `limit` flows).
pub fn build(
    table: &FlowTable,
    ecmp_report: &EcmpReport,
    config: &Config,
    limit: usize,
) -> ApiView {
    let model = config.ecmp.hash.as_ref();
    let top = table.top_k(limit);
    let flows = top
        .into_iter()
        .map(|e| {
            let hook = Hook::ALL
                .get(e.key.hook as usize)
                .copied()
                .unwrap_or(Hook::Xdp);
            let iface = table.ifaces.get(e.iface).cloned().unwrap_or_default();
            let group = config
                .ecmp
                .groups
                .iter()
                .find(|g| g.interfaces.contains(&iface))
                .map(|g| g.name.clone());
            ApiFlow {
                iface,
                direction: hook.direction(),
                hook: hook.name(),
                flow: Flow::from_entry(e),
                rate_packets_per_second: e.rate_packets,
                group,
                predicted_path: model.map(|m| m.path(&ecmp::fields(&e.key))),
            }
        })
        .collect();
    ApiView {
        flows: FlowsDoc {
            flows_total: table.len(),
            elephants_total: (0..table.ifaces.len())
                .map(|i| table.elephants_for(i))
                .sum(),
            flows,
        },
        ecmp: ecmp_report.clone(),
    }
}

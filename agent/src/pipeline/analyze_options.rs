//! What `analyze` runs with besides the frames (the flags and configuration file, validated):
//! shared by the parsing side ([`super::analysis`]) and the flow side ([`super::flow_side`]).

use crate::config::ecmp::EcmpConfig;
use crate::config::elephant::ElephantConfig;
use agent_common::TrafficClasses;

pub use crate::config::analyze::defaults;

/// What `analyze` runs besides counting.
#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    pub elephant: ElephantConfig,
    pub ecmp: EcmpConfig,
    /// Capture-time interval between rate/detector ticks, seconds.
    pub tick_s: f64,
    /// Time constant of the smoothed rates, seconds.
    pub rate_window_s: f64,
    /// Flows held at most.
    pub max_flows: usize,
    /// The classes RoCE and CNPs are expected in (lossy RoCE).
    pub classes: TrafficClasses,
    /// The captured link's speed, bits per second: pause quanta to seconds.
    pub link_speed_bps: u64,
    /// A priority paused without a break for longer than this is a PFC storm.
    pub pfc_storm_ns: u64,
    /// ECMP groups of switch uplinks, for the sFlow fabric view.
    pub sflow_groups: Vec<crate::sflow::fabric::UplinkGroup>,
    /// The sFlow collector's bounds, allow-list and protected groups.
    pub sflow_limits: crate::sflow::collector::Limits,
    /// The flow table on a second thread when the machine has a second core (the result is
    /// the same either way; see [`crate::pipeline::flow_side`]).
    pub parallel: bool,
    /// Flow records (`--ipfix`, `--ipfix-file`), on capture time.
    pub records: Option<crate::pipeline::flow_records::RecordSettings>,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            elephant: ElephantConfig::default(),
            ecmp: EcmpConfig::default(),
            tick_s: 1.0,
            rate_window_s: crate::config::thresholds::RATE_TAU_SECONDS,
            max_flows: defaults::MAX_FLOWS,
            classes: TrafficClasses::DEFAULT,
            link_speed_bps: defaults::LINK_SPEED_BPS,
            pfc_storm_ns: crate::config::thresholds::DEFAULT_PFC_STORM_NS,
            sflow_groups: Vec::new(),
            sflow_limits: Default::default(),
            parallel: true,
            records: None,
        }
    }
}

impl AnalyzeOptions {
    /// The pipeline's settings for a capture: one interface, every elephant period kept.
    pub fn pipeline(&self) -> crate::pipeline::stages::Settings {
        crate::pipeline::stages::Settings {
            elephant: self.elephant.clone(),
            ecmp: self.ecmp.clone(),
            rate_window_s: self.rate_window_s,
            max_flows: Some(self.max_flows),
            // A capture's flows are counted from its packets: nothing pushes them out.
            hold_pushed_out: 0,
            sflow_groups: self.sflow_groups.clone(),
            history: crate::pipeline::stages::History::All,
            records: self.records.clone(),
        }
    }
}

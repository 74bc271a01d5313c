//! A capture through the pipeline: frames through `agent-common`'s parser, counter block and
//! flow update (exactly what the kernel programs do for live traffic), and the same flow table,
//! rates and detectors as live mode, clocked by capture timestamps. The command that feeds it
//! from files and pipes is `cmd::analyze`.

use crate::detect::ecmp::{EcmpConfig, EcmpReport};
use crate::detect::elephant::ElephantConfig;
use crate::pipeline::flow_side::{FlowSide, Runner, Step};
use crate::pipeline::flows::FlowTable;
use crate::sources::capture::{CaptureSummary, Frame};
use agent_common::{
    parse_record_into, FlowKey, Hook, HookCounters, PacketRecord, SessionKey, SessionStats,
    SliceReader, TrafficClasses,
};
use std::collections::BTreeMap;

/// Defaults of `analyze`'s options (the flags show them).
pub mod defaults {
    /// `analyze --max-flows`: about 120 MB of flow table.
    pub const MAX_FLOWS: usize = 262_144;
    /// `analyze --link-speed`: 100 Gb/s, the common RoCE back-end port.
    pub const LINK_SPEED_GBPS: f64 = 100.0;
    pub const LINK_SPEED_BPS: u64 = 100_000_000_000;
}

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
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            elephant: ElephantConfig::default(),
            ecmp: EcmpConfig::default(),
            tick_s: 1.0,
            rate_window_s: crate::pipeline::flows::RATE_TAU_SECONDS,
            max_flows: defaults::MAX_FLOWS,
            classes: TrafficClasses::DEFAULT,
            link_speed_bps: defaults::LINK_SPEED_BPS,
            pfc_storm_ns: crate::detect::pause::DEFAULT_STORM_NS,
            sflow_groups: Vec::new(),
            sflow_limits: Default::default(),
            parallel: true,
        }
    }
}

/// One elephant period of a flow, in seconds from the start of the capture.
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct ElephantPeriod {
    pub started_s: f64,
    /// `None` when the flow was still an elephant at the end of the capture.
    pub ended_s: Option<f64>,
    pub peak_bytes_per_second: f64,
}

/// The result of analysing one capture.
pub struct Analysis {
    pub counters: HookCounters,
    /// RoCE packets by mirror session / tunnel id (the kernel's SESSIONS map, same update).
    pub sessions: BTreeMap<SessionKey, SessionStats>,
    pub flows: FlowTable,
    pub summary: CaptureSummary,
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: u64,
    pub elephants: BTreeMap<FlowKey, Vec<ElephantPeriod>>,
    /// Elephants ever seen, by flow, at their peak (for the ECMP views).
    pub ecmp: EcmpReport,
    /// RoCE traffic over capture time (the HTML report's charts).
    pub timeline: crate::pipeline::timeline::Timeline,
    /// sFlow datagrams found in the capture (UDP 6343), as the live collector counts them.
    pub sflow: crate::sflow::collector::Collector,
    /// The step rhythm and RDMA message sizes.
    pub training: crate::pipeline::training::Training,
    /// The sFlow fabric view, ticked with the flow table.
    pub fabric: crate::sflow::fabric::Fabric,
    /// Pause intervals per priority: the wall time paused, and the storms.
    pub pause: crate::detect::pause::PauseTracker,
    /// CE-marked packets paired with their CNPs.
    pub cnp: crate::detect::cnp_response::CnpResponse,
    opts: AnalyzeOptions,
    /// The flow side until [`Analysis::finish`] takes its results.
    runner: Option<Runner>,
}

impl Analysis {
    pub fn new(opts: AnalyzeOptions) -> Self {
        let side = FlowSide::new(opts.clone());
        let parallel =
            opts.parallel && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        Analysis {
            counters: HookCounters::ZERO,
            sessions: BTreeMap::new(),
            flows: FlowTable::new(vec!["capture".into()]),
            summary: CaptureSummary::default(),
            first_ts_ns: None,
            last_ts_ns: 0,
            elephants: BTreeMap::new(),
            ecmp: EcmpReport::default(),
            timeline: crate::pipeline::timeline::Timeline::new(),
            sflow: Default::default(),
            fabric: Default::default(),
            pause: crate::detect::pause::PauseTracker::new(opts.link_speed_bps, opts.pfc_storm_ns),
            cnp: Default::default(),
            training: Default::default(),
            opts,
            runner: Some(Runner::new(side, parallel)),
        }
    }

    /// Counts one frame. The record is parsed in place, in the step handed to the flow side.
    pub fn frame(&mut self, f: Frame<'_>) {
        let Analysis {
            counters,
            sessions,
            opts,
            runner,
            ..
        } = self;
        let Some(runner) = runner.as_mut() else {
            return;
        };
        let (ts_ns, len) = (f.ts_ns, f.orig_len as u64);
        runner.push_with(|step| {
            *step = Step::Roce {
                ts_ns,
                info: PacketRecord::default(),
                len,
            };
            let Step::Roce { info: rec, .. } = step else {
                return;
            };
            parse_record_into(&SliceReader(f.data), f.link, rec);
            counters.record(rec, len, &opts.classes);
            if rec.is_roce() {
                if let Some(sk) = SessionKey::of(rec, Hook::Xdp) {
                    // Unbounded here (a file, not a kernel map); the report lists them all.
                    sessions.entry(sk).or_default().record(rec, len);
                }
                return;
            }
            if let Some(control) = rec.mac_control() {
                let mac: [u8; 6] = f
                    .data
                    .get(6..12)
                    .and_then(|m| m.try_into().ok())
                    .unwrap_or_default();
                *step = Step::Pause {
                    ts_ns,
                    control,
                    mac,
                };
                return;
            }
            *step = match rec.outcome() {
                agent_common::Outcome::UdpOtherPort => match sflow_datagram(&f) {
                    Some(d) => Step::Sflow {
                        ts_ns,
                        datagram: d.to_vec(),
                    },
                    None => Step::At(ts_ns),
                },
                _ => Step::At(ts_ns),
            };
        });
        self.first_ts_ns.get_or_insert(f.ts_ns);
        self.last_ts_ns = f.ts_ns;
    }

    /// Hands over the last steps and takes the flow side's results: the flow table, the
    /// elephants, the ECMP views, the sFlow collector and fabric view; the flow updates'
    /// counts join the counter block.
    pub fn finish(&mut self) {
        let Some(runner) = self.runner.take() else {
            return;
        };
        let mut side = runner.finish();
        side.finish(self.first_ts_ns, self.last_ts_ns);
        self.counters.add(&side.counters);
        self.flows = side.flows;
        self.sflow = side.sflow;
        self.fabric = side.fabric;
        self.elephants = side.elephants;
        self.ecmp = side.ecmp;
        self.timeline = side.timeline;
        self.training = side.training;
        side.pause.finish();
        self.pause = side.pause;
        self.cnp = side.cnp;
    }

    /// Capture span in seconds.
    pub fn duration_seconds(&self) -> f64 {
        self.first_ts_ns
            .map(|t| self.last_ts_ns.saturating_sub(t) as f64 / 1e9)
            .unwrap_or(0.0)
    }

    /// The options it runs with.
    pub fn options(&self) -> &AnalyzeOptions {
        &self.opts
    }
}

/// The sFlow datagram a UDP frame carries, if it goes to the sFlow port.
fn sflow_datagram<'a>(f: &Frame<'a>) -> Option<&'a [u8]> {
    let u = agent_common::parse::udp_payload(&SliceReader(f.data), f.link)?;
    if u.dst_port != crate::sflow::SFLOW_PORT {
        return None;
    }
    f.data.get(u.offset..u.offset + u.len)
}

//! A capture through the pipeline: frames through `agent-common`'s parser, counter block and
//! flow update (exactly what the kernel programs do for live traffic), and the same flow table,
//! rates and detectors as live mode, clocked by capture timestamps. The command that feeds it
//! from files and pipes is `cmd::analyze`.

use crate::detect::ecmp::{self, EcmpConfig, EcmpReport};
use crate::detect::elephant::{ElephantConfig, Transition};
use crate::pipeline::flows::{ElephantEvent, FlowTable};
use crate::sources::capture::{CaptureSummary, Frame};
use agent_common::{
    parse_frame, FlowKey, Hook, HookCounters, Parsed, SessionKey, SessionStats, SliceReader,
    TrafficClasses,
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

/// Ticks run one by one across a silence in the capture; a longer silence is one tick.
const MAX_TICKS_PER_GAP: u32 = 64;

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
    /// ECMP groups of switch uplinks, for the sFlow fabric view.
    pub sflow_groups: Vec<crate::sflow::fabric::UplinkGroup>,
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
            sflow_groups: Vec::new(),
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
    opts: AnalyzeOptions,
    next_tick_ns: u64,
    peaks: BTreeMap<FlowKey, f64>,
}

impl Analysis {
    pub fn new(opts: AnalyzeOptions) -> Self {
        let mut flows = FlowTable::new(vec!["capture".into()]);
        flows.tau_s = opts.rate_window_s;
        flows.max_flows = Some(opts.max_flows);
        Analysis {
            counters: HookCounters::ZERO,
            sessions: BTreeMap::new(),
            flows,
            summary: CaptureSummary::default(),
            first_ts_ns: None,
            last_ts_ns: 0,
            elephants: BTreeMap::new(),
            ecmp: EcmpReport::default(),
            timeline: crate::pipeline::timeline::Timeline::new(),
            sflow: Default::default(),
            fabric: Default::default(),
            training: Default::default(),
            opts,
            next_tick_ns: 0,
            peaks: BTreeMap::new(),
        }
    }

    fn tick_ns(&self) -> u64 {
        ((self.opts.tick_s * 1e9) as u64).max(1_000_000)
    }

    fn apply(&mut self, events: Vec<ElephantEvent>) {
        for e in events {
            match e.transition {
                Transition::Started => {
                    self.elephants
                        .entry(e.key)
                        .or_default()
                        .push(ElephantPeriod {
                            started_s: e.at_s,
                            ended_s: None,
                            peak_bytes_per_second: e.rate_bytes,
                        })
                }
                Transition::Ended => {
                    if let Some(p) = self.elephants.get_mut(&e.key).and_then(|v| v.last_mut()) {
                        p.ended_s = Some(e.at_s);
                    }
                }
            }
        }
        for v in self.flows.elephant_views() {
            {
                let peak = self.peaks.entry(v.key).or_default();
                *peak = peak.max(v.rate_bytes);
                if let Some(p) = self.elephants.get_mut(&v.key).and_then(|p| p.last_mut()) {
                    p.peak_bytes_per_second = p.peak_bytes_per_second.max(v.rate_bytes);
                }
            }
        }
    }

    /// Ticks the flow table up to capture time `ts_ns` (one tick per interval).
    fn advance(&mut self, ts_ns: u64) {
        let step = self.tick_ns();
        if self.next_tick_ns == 0 {
            self.next_tick_ns = ts_ns + step;
            return;
        }
        let enter = [self.opts.elephant.enter_bps(None)];
        let mut n = 0;
        while ts_ns >= self.next_tick_ns {
            n += 1;
            if n > MAX_TICKS_PER_GAP {
                // A long silence (or a timestamp jump): one tick covers the rest, so a capture
                // with a gap of days costs no more than one with a gap of a minute.
                let dt = (ts_ns - self.next_tick_ns) as f64 / 1e9 + step as f64 / 1e9;
                let ev = self.flows.tick(dt, &self.opts.elephant, &enter);
                self.apply(ev);
                self.tick_fabric(dt);
                self.next_tick_ns = ts_ns + step;
                break;
            }
            let ev = self
                .flows
                .tick(step as f64 / 1e9, &self.opts.elephant, &enter);
            self.apply(ev);
            self.tick_fabric(step as f64 / 1e9);
            self.next_tick_ns += step;
        }
    }

    /// Counts one frame.
    pub fn frame(&mut self, f: Frame<'_>) {
        self.advance(f.ts_ns);
        let parsed = parse_frame(&SliceReader(f.data), f.link);
        let len = f.orig_len as u64;
        self.counters.record(&parsed, len, &self.opts.classes);
        if parsed == Parsed::Other(agent_common::Outcome::UdpOtherPort) {
            self.sflow_datagram(&f);
        }
        if let Parsed::Roce(info) = &parsed {
            if let Some(sk) = SessionKey::of(info, Hook::Xdp) {
                // Unbounded here (a file, not a kernel map); the report lists them all.
                self.sessions.entry(sk).or_default().record(info, len);
            }
            self.timeline.record(info, len, f.ts_ns);
            // Captures carry no hook; flows are keyed as if seen at XDP.
            let key = info.flow_key(Hook::Xdp);
            self.training.record(&key, len, f.ts_ns);
            let (ev, created) = self.flows.record(0, key, info, len, f.ts_ns);
            if created {
                self.counters.flows_created += 1;
            }
            self.counters.record_flow(&ev);
        }
        self.first_ts_ns.get_or_insert(f.ts_ns);
        self.last_ts_ns = f.ts_ns;
    }

    /// The sFlow fabric view at the flow table's clock (only with groups configured).
    fn tick_fabric(&mut self, dt: f64) {
        if !self.opts.sflow_groups.is_empty() {
            self.fabric.tick(
                &self.sflow,
                &self.opts.sflow_groups,
                &self.opts.elephant,
                self.opts.rate_window_s,
                dt,
            );
        }
    }

    /// A UDP frame to the sFlow port: its datagram into the collector.
    fn sflow_datagram(&mut self, f: &Frame<'_>) {
        let r = SliceReader(f.data);
        if let Some(u) = agent_common::parse::udp_payload(&r, f.link) {
            if u.dst_port == crate::sflow::SFLOW_PORT {
                if let Some(d) = f.data.get(u.offset..u.offset + u.len) {
                    self.sflow.datagram(d);
                }
            }
        }
    }

    /// Closes the last interval and runs the ECMP views (elephants = flows that were
    /// elephants at any time, at their peak rate).
    pub fn finish(&mut self) {
        if self.first_ts_ns.is_some() {
            // The part of the last interval the capture covered.
            let start = self.next_tick_ns.saturating_sub(self.tick_ns());
            let dt = self.last_ts_ns.saturating_sub(start) as f64 / 1e9;
            if dt > 0.0 {
                let enter = [self.opts.elephant.enter_bps(None)];
                let ev = self.flows.tick(dt, &self.opts.elephant, &enter);
                self.apply(ev);
                self.tick_fabric(dt);
            }
        }
        self.short_capture_elephants();
        for t in self.sflow.rhythms.values_mut() {
            t.detect();
        }
        self.flows.settle();
        let mut views = self.flows.views();
        for v in views.iter_mut() {
            if let Some(p) = self.peaks.get(&v.key) {
                v.elephant = true;
                v.rate_bytes = *p;
            }
        }
        self.ecmp = ecmp::analyze(&views, &self.flows.ifaces, &self.opts.ecmp);
    }

    /// A capture shorter than the elephant minimum duration cannot show a rate sustained that
    /// long, so none would ever qualify. Its elephants are the flows whose mean rate over the
    /// whole capture reaches the entry threshold: an elephant period from its first to its last
    /// packet. Longer captures use the detector as live mode does.
    fn short_capture_elephants(&mut self) {
        let span = self.duration_seconds();
        if span <= 0.0 || span >= self.opts.elephant.min_duration_seconds {
            return;
        }
        let enter = self.opts.elephant.enter_bps(None);
        let first = self.first_ts_ns.unwrap_or(0);
        for e in self.flows.iter() {
            let mean = e.stats.bytes as f64 / span;
            if mean < enter || self.elephants.contains_key(&e.key) {
                continue;
            }
            let at = |ns: u64| ns.saturating_sub(first) as f64 / 1e9;
            self.elephants.insert(
                e.key,
                vec![ElephantPeriod {
                    started_s: at(e.stats.first_seen_ns),
                    ended_s: Some(at(e.stats.last_seen_ns)),
                    peak_bytes_per_second: mean,
                }],
            );
            self.peaks.insert(e.key, mean);
        }
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

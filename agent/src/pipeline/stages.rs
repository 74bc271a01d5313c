//! The one pipeline that `rocemon run` and `rocemon analyze` both drive:
//!
//! ```text
//! ingest ------------------------> tick ---------------------> detect ----------> the state
//!  run: a store's flows each poll   rates, elephants (events    ECMP views        exporters read
//!   (`begin_poll`, `flow`,           and their periods), the    (observed,        (`flows`,
//!   `end_poll`)                      sFlow fabric view          predicted)        `elephants`,
//!  analyze: a capture's packets                                                   `ecmp`, `fabric`)
//!   (`packet`: the flow step)
//! ```
//!
//! The sources differ only in how flows arrive: a live agent reads the kernel's (or the AF_XDP
//! tally's) cumulative per-flow totals every poll; `analyze` runs the counting sequence's flow
//! step on the table's own entry per packet. From there both run the same ticks, the same
//! elephant detector, the same ECMP analysis on the same table type. What each caller adds is
//! its clock (poll intervals, capture time) and its source-specific views (a capture's
//! timeline and pause frames; a host's counter blocks and rings).

use crate::config::ecmp::EcmpConfig;
use crate::config::elephant::ElephantConfig;
use crate::detect::ecmp::{self, EcmpReport, FlowView};
use crate::detect::elephant::Transition;
use crate::pipeline::flow_counts::EndReason;
use crate::pipeline::flow_records::{RecordSettings, Recorder};
use crate::pipeline::flows::{ElephantEvent, FlowTable};
use crate::sflow::collector::Collector;
use crate::sflow::fabric::{Fabric, UplinkGroup};
use agent_common::flow::FlowEvent;
use agent_common::{FlowKey, FlowStats, HookCounters, PacketRecord};
use std::collections::BTreeMap;

/// A capture shorter than the elephant minimum duration: a flow needs this many packets,
/// and this share of the capture's RoCE bytes, to be an elephant.
pub const SHORT_CAPTURE_MIN_PACKETS: u64 = 32;
pub const SHORT_CAPTURE_MIN_SHARE: f64 = 0.05;

/// One elephant period of a flow, in seconds of the pipeline's clock (from the start of the
/// capture, or of the agent).
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct ElephantPeriod {
    pub started_s: f64,
    /// `None` when the flow was still an elephant at the end of the capture.
    pub ended_s: Option<f64>,
    pub peak_bytes_per_second: f64,
}

/// Whether the pipeline keeps every flow's elephant periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum History {
    /// Every period of every flow (a capture's report lists them all; a file ends).
    All,
    /// None: a live agent logs each start and end and exports the current elephants, and
    /// runs for months (a history would grow with every flow that was ever large).
    Off,
}

/// The rates the ECMP views judge flows by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rates {
    /// Now: the live view (which path is crowded at this poll).
    Now,
    /// Each flow at its peak, and every flow that was ever an elephant counted as one: a
    /// capture's view (which elephants shared a path at any time).
    Peak,
}

/// What the pipeline runs with (from the live configuration or `analyze`'s options).
#[derive(Clone, Debug)]
pub struct Settings {
    pub elephant: ElephantConfig,
    pub ecmp: EcmpConfig,
    /// Time constant of the smoothed rates, seconds.
    pub rate_window_s: f64,
    /// Flows held at most (`None`: as many as the source holds: the kernel maps bound them).
    pub max_flows: Option<usize>,
    /// Flows the full kernel maps pushed out that the table holds at their totals, at most,
    /// per interface (live mode: the maps' size; see [`FlowTable::end_poll`]).
    pub hold_pushed_out: usize,
    /// ECMP groups of switch uplinks, for the sFlow fabric view.
    pub sflow_groups: Vec<UplinkGroup>,
    pub history: History,
    /// Flow records for a flow collector (IPFIX), when asked for: taken by
    /// [`Pipeline::new`] into the stage.
    pub records: Option<RecordSettings>,
}

impl Settings {
    /// The pipeline's settings for a live agent: flows bounded by the stores (the kernel
    /// maps), no elephant history (the journal has each start and end).
    pub fn live(config: &crate::config::Config) -> Settings {
        Settings {
            elephant: config.elephant.clone(),
            ecmp: config.ecmp.clone(),
            rate_window_s: config.rate_window_s,
            max_flows: None,
            hold_pushed_out: (config.flow_maps.ipv4 as usize) + (config.flow_maps.ipv6 as usize),
            sflow_groups: config.sflow_groups.clone(),
            history: History::Off,
            // The exporter's sink exists once the agent runs: `run` sets it.
            records: None,
        }
    }
}

/// The pipeline's state: what the exporters read after each round.
pub struct Pipeline {
    settings: Settings,
    /// Every flow with its totals, rates and elephant state.
    pub flows: FlowTable,
    /// Elephant periods by flow ([`History::All`] only).
    pub elephants: BTreeMap<FlowKey, Vec<ElephantPeriod>>,
    /// Each elephant's highest smoothed rate ([`History::All`] only; [`Rates::Peak`] reads it).
    peaks: BTreeMap<FlowKey, f64>,
    /// The ECMP views of the last [`Pipeline::detect`].
    pub ecmp: EcmpReport,
    /// The sFlow fabric view (with groups configured and a collector ticked in).
    pub fabric: Fabric,
    /// The flow records' stage (with [`Settings::records`]).
    recorder: Option<Recorder>,
}

impl Pipeline {
    /// A pipeline over the flows of `ifaces` (a capture is one interface).
    pub fn new(ifaces: Vec<String>, mut settings: Settings) -> Self {
        let mut flows = FlowTable::new(ifaces);
        flows.tau_s = settings.rate_window_s;
        flows.max_flows = settings.max_flows;
        flows.hold_pushed_out = settings.hold_pushed_out;
        // The stage keeps its settings (and the exporter's sink) for the pipeline's life.
        let recorder = settings.records.take().map(Recorder::new);
        flows.record_ends = recorder.is_some();
        Pipeline {
            recorder,
            settings,
            flows,
            elephants: BTreeMap::new(),
            peaks: BTreeMap::new(),
            ecmp: EcmpReport::default(),
            fabric: Fabric::default(),
        }
    }

    /// New settings (a live reload): they apply from the next tick. The flow records' stage
    /// stays as it started (its sink is the exporter the agent started with); a reload's
    /// `records` is not read.
    pub fn set(&mut self, settings: Settings) {
        self.flows.tau_s = settings.rate_window_s;
        self.flows.max_flows = settings.max_flows;
        self.flows.hold_pushed_out = settings.hold_pushed_out;
        self.settings = settings;
    }

    // ---- flow records ----

    /// The flow records' round at `now_ns` on the store's clock (`unix_offset_ns` turns it
    /// into Unix time): after a poll's or a capture tick's flows. Nothing without records.
    pub fn records(&mut self, now_ns: u64, unix_offset_ns: u64) {
        if let Some(r) = &mut self.recorder {
            r.round(
                &mut self.flows,
                now_ns,
                unix_offset_ns,
                self.settings.ecmp.hash.as_ref(),
            );
        }
    }

    /// Interface `iface` went away: its flows' last records (see [`Recorder::end_iface`]).
    pub fn end_iface_records(&mut self, iface: usize, now_ns: u64, unix_offset_ns: u64) {
        if let Some(r) = &mut self.recorder {
            r.end_iface(
                &mut self.flows,
                iface,
                now_ns,
                unix_offset_ns,
                self.settings.ecmp.hash.as_ref(),
            );
        }
    }

    /// The records stop (the agent stops, the capture ends): every flow's last record.
    pub fn finish_records(&mut self, now_ns: u64, unix_offset_ns: u64, reason: EndReason) {
        if let Some(r) = &mut self.recorder {
            r.finish(
                &mut self.flows,
                now_ns,
                unix_offset_ns,
                self.settings.ecmp.hash.as_ref(),
                reason,
            );
        }
    }

    // ---- ingest: a store's flows (live) ----

    /// Starts a round of flow snapshots.
    pub fn begin_poll(&mut self) {
        self.flows.begin_poll();
    }

    /// One flow's cumulative totals as the store holds them.
    pub fn flow(&mut self, iface: usize, key: FlowKey, stats: FlowStats) {
        self.flows.update(iface, key, stats);
    }

    /// Ends the round: flows the `polled` interfaces' stores no longer hold leave the table,
    /// unless heard since the interface's idle cut-off ([`FlowTable::end_poll`]).
    pub fn end_poll(&mut self, polled: &[(usize, u64)]) {
        self.flows.end_poll(polled);
    }

    // ---- ingest: a capture's packets ----

    /// One RoCE packet of flow `key` (whose [`FlowTable::hash`] is `hash`): the counting
    /// sequence's flow step on the table's entry. Returns what the step saw and whether the
    /// packet created the flow (counted in `counters.flows_created`).
    pub fn packet(
        &mut self,
        hash: u64,
        key: FlowKey,
        rec: &PacketRecord,
        counters: &mut HookCounters,
        len: u64,
        ts_ns: u64,
    ) -> (FlowEvent, bool) {
        let (stats, created) = self.flows.stats_hashed(hash, 0, key);
        let ev = agent_common::count::flow_step(stats, rec, counters, len, ts_ns, true);
        if created {
            counters.flows_created += 1;
        }
        (ev, created)
    }

    // ---- tick ----

    /// Advances the clock by `dt` seconds: rates and the elephant detector against each
    /// interface's entry threshold (`enter_bps[iface]`), the elephant history, and the sFlow
    /// fabric view over `sflow`'s flows when groups are configured. Returns the elephants that
    /// started or ended (a live agent logs them).
    pub fn tick(
        &mut self,
        dt: f64,
        enter_bps: &[f64],
        sflow: Option<&Collector>,
    ) -> Vec<ElephantEvent> {
        let events = self.flows.tick(dt, &self.settings.elephant, enter_bps);
        if self.settings.history == History::All {
            self.record(&events);
        }
        if let Some(c) = sflow.filter(|_| !self.settings.sflow_groups.is_empty()) {
            self.fabric.tick(
                c,
                &self.settings.sflow_groups,
                &self.settings.elephant,
                self.settings.rate_window_s,
                dt,
            );
        }
        events
    }

    /// Elephant periods from the tick's transitions, and each elephant's peak.
    fn record(&mut self, events: &[ElephantEvent]) {
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
            let peak = self.peaks.entry(v.key).or_default();
            *peak = peak.max(v.rate_bytes);
            if let Some(p) = self.elephants.get_mut(&v.key).and_then(|p| p.last_mut()) {
                p.peak_bytes_per_second = p.peak_bytes_per_second.max(v.rate_bytes);
            }
        }
    }

    /// A capture shorter than the elephant minimum duration cannot show a rate sustained that
    /// long, so none would ever qualify. Its elephants are the flows whose mean rate over the
    /// whole capture (`first` to `last`, ns) reaches the entry threshold and that are large in
    /// it: at least [`SHORT_CAPTURE_MIN_PACKETS`] packets and [`SHORT_CAPTURE_MIN_SHARE`] of its
    /// bytes (in a capture of a millisecond any flow has a high mean rate; 25 packets are no
    /// elephant). An elephant period runs from its first to its last packet. Longer spans use
    /// the detector as live mode does.
    pub fn short_span_elephants(&mut self, first: u64, last: u64) {
        let span = last.saturating_sub(first) as f64 / 1e9;
        if span <= 0.0 || span >= self.settings.elephant.min_duration_seconds {
            return;
        }
        let enter = self.settings.elephant.enter_bps(None);
        let total: u64 = self.flows.iter().map(|e| e.stats.bytes).sum();
        for e in self.flows.iter() {
            let mean = e.stats.bytes as f64 / span;
            let large = e.stats.packets >= SHORT_CAPTURE_MIN_PACKETS
                && e.stats.bytes as f64 >= SHORT_CAPTURE_MIN_SHARE * total as f64;
            if mean < enter || !large || self.elephants.contains_key(&e.key) {
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

    // ---- detect ----

    /// Brings every flow's rates to the clock and runs the ECMP views over the table's flows
    /// and `extra` ones (a host's RC connections, which no hook sees). Returns the flows as
    /// the views saw them (the findings read them too).
    pub fn detect(
        &mut self,
        extra: impl IntoIterator<Item = FlowView>,
        rates: Rates,
    ) -> Vec<FlowView> {
        self.flows.settle();
        let mut views = self.flows.views();
        if rates == Rates::Peak {
            for v in views.iter_mut() {
                if let Some(p) = self.peaks.get(&v.key) {
                    v.elephant = true;
                    v.rate_bytes = *p;
                }
            }
        }
        views.extend(extra);
        self.ecmp = ecmp::analyze(&views, &self.flows.ifaces, &self.settings.ecmp);
        views
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_common::{FlowKey, FlowStats};

    fn settings(history: History) -> Settings {
        Settings {
            elephant: ElephantConfig {
                threshold_bytes_per_second: 1000.0,
                min_duration_seconds: 1.0,
                release_seconds: 1.0,
                ..ElephantConfig::default()
            },
            ecmp: EcmpConfig::default(),
            rate_window_s: 1.0,
            max_flows: None,
            hold_pushed_out: 0,
            sflow_groups: Vec::new(),
            history,
            records: None,
        }
    }

    fn key(qp: u32) -> FlowKey {
        FlowKey {
            dest_qp: qp,
            ..FlowKey::default()
        }
    }

    fn totals(bytes: u64) -> FlowStats {
        FlowStats {
            packets: bytes / 1000,
            bytes,
            first_seen_ns: 1,
            last_seen_ns: 2,
            ..FlowStats::default()
        }
    }

    /// Feeds 10 kB/s for `seconds` polls of one second, then nothing for as long.
    fn drive(p: &mut Pipeline, seconds: u64) -> Vec<ElephantEvent> {
        let mut events = Vec::new();
        for s in 0..=2 * seconds {
            p.begin_poll();
            p.flow(0, key(7), totals(10_000 * s.min(seconds)));
            p.end_poll(&[(0, u64::MAX)]);
            events.extend(p.tick(1.0, &[], None));
        }
        events
    }

    #[test]
    fn a_live_round_detects_an_elephant_and_its_end() {
        let mut p = Pipeline::new(vec!["eth0".into()], settings(History::Off));
        let events = drive(&mut p, 10);
        let kinds: Vec<_> = events.iter().map(|e| e.transition).collect();
        assert_eq!(
            kinds,
            [Transition::Started, Transition::Ended],
            "{events:?}"
        );
        assert!(p.elephants.is_empty(), "no history when it is off");
    }

    #[test]
    fn the_history_keeps_the_period_with_its_peak() {
        let mut p = Pipeline::new(vec!["capture".into()], settings(History::All));
        drive(&mut p, 10);
        let periods = &p.elephants[&key(7)];
        assert_eq!(periods.len(), 1, "{periods:?}");
        assert!(periods[0].ended_s.is_some(), "{periods:?}");
        assert!(
            (periods[0].peak_bytes_per_second - 10_000.0).abs() < 1.0,
            "{periods:?}"
        );
    }

    #[test]
    fn peak_rates_make_a_past_elephant_count_in_the_ecmp_views() {
        let mut p = Pipeline::new(vec!["capture".into()], settings(History::All));
        drive(&mut p, 10);
        let now = p.detect([], Rates::Now);
        assert!(!now[0].elephant, "ended: not an elephant now");
        let peak = p.detect([], Rates::Peak);
        assert!(peak[0].elephant, "was one: counted at its peak");
        assert!((peak[0].rate_bytes - 10_000.0).abs() < 1.0, "{peak:?}");
    }

    #[test]
    fn a_flow_the_store_no_longer_holds_leaves_the_table() {
        let mut p = Pipeline::new(vec!["eth0".into()], settings(History::Off));
        p.begin_poll();
        p.flow(0, key(1), totals(1000));
        p.flow(0, key(2), totals(1000));
        p.end_poll(&[(0, u64::MAX)]);
        p.begin_poll();
        p.flow(0, key(2), totals(2000));
        p.end_poll(&[(0, u64::MAX)]);
        let held: Vec<u32> = p.flows.iter().map(|e| e.key.dest_qp).collect();
        assert_eq!(held, [2]);
    }
}

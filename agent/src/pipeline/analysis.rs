//! A capture through the pipeline: frames through `agent-common`'s parser and the one
//! counting sequence ([`agent_common::count`], as the kernel programs count live traffic,
//! with [`CaptureStore`] as its store), and the same flow table, rates and detectors as live
//! mode, clocked by capture timestamps. The command that feeds it
//! from files and pipes is `cmd::analyze`.

use crate::pipeline::flow_runner::Runner;
use crate::pipeline::flow_side::{FlowSide, Step};
use crate::pipeline::stages::Pipeline;
use crate::pipeline::views_side::Views;
use crate::sources::capture::{CaptureSummary, Frame};
use agent_common::count::{count, Store};
use agent_common::{
    parse_record_into, Hook, HookCounters, PacketRecord, SessionKey, SessionStats, SliceReader,
    TrafficClasses,
};
use std::collections::BTreeMap;

pub use super::analyze_options::{defaults, AnalyzeOptions};
pub use super::stages::ElephantPeriod;

/// The result of analysing one capture.
pub struct Analysis {
    pub counters: HookCounters,
    /// RoCE packets by mirror session / tunnel id (the kernel's SESSIONS map, same update).
    pub sessions: BTreeMap<SessionKey, SessionStats>,
    /// Flows, elephants, the ECMP views and the sFlow fabric view: the [`Pipeline`] the flow
    /// side drove (a live agent drives the same), taken at [`Analysis::finish`].
    pub pipeline: Pipeline,
    pub summary: CaptureSummary,
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: u64,
    /// RoCE traffic over capture time (the HTML report's charts).
    pub timeline: crate::pipeline::timeline::Timeline,
    /// sFlow datagrams found in the capture (UDP 6343), as the live collector counts them.
    pub sflow: crate::sflow::collector::Collector,
    /// The step rhythm and RDMA message sizes.
    pub training: crate::pipeline::training::Training,
    /// Pause intervals per priority: the wall time paused, and the storms.
    pub pause: crate::detect::pause::PauseTracker,
    /// CE-marked packets paired with their CNPs.
    pub cnp: crate::detect::cnp_response::CnpResponse,
    /// Capture time as the pipeline takes it (steps back and jumps, see
    /// [`crate::pipeline::capture_clock`]).
    pub clock: crate::pipeline::capture_clock::CaptureClock,
    opts: AnalyzeOptions,
    /// The flow side until [`Analysis::finish`] takes its results.
    runner: Option<Runner>,
}

impl Analysis {
    pub fn new(opts: AnalyzeOptions) -> Self {
        let side = FlowSide::new(opts.clone());
        let views = Views::new(&opts);
        let parallel =
            opts.parallel && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        Analysis {
            counters: HookCounters::ZERO,
            sessions: BTreeMap::new(),
            pipeline: Pipeline::new(vec!["capture".into()], opts.pipeline()),
            summary: CaptureSummary::default(),
            first_ts_ns: None,
            last_ts_ns: 0,
            timeline: crate::pipeline::timeline::Timeline::new(),
            sflow: Default::default(),
            pause: crate::detect::pause::PauseTracker::new(opts.link_speed_bps, opts.pfc_storm_ns),
            cnp: crate::detect::cnp_response::CnpResponse::bounded(opts.max_flows),
            training: Default::default(),
            clock: Default::default(),
            opts,
            runner: Some(Runner::new(side, views, parallel)),
        }
    }

    /// Counts one frame. The record is parsed in place, in the step handed to the flow side.
    pub fn frame(&mut self, f: Frame<'_>) {
        let Analysis {
            counters,
            sessions,
            opts,
            runner,
            clock,
            ..
        } = self;
        let Some(runner) = runner.as_mut() else {
            return;
        };
        let (ts_ns, len) = (clock.at(f.ts_ns), f.orig_len as u64);
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
            // Captures carry no hook: counted as if seen at XDP.
            let mut store = CaptureStore {
                sessions,
                classes: opts.classes,
                ts_ns,
            };
            count(&mut store, counters, rec, Hook::Xdp, len);
            if rec.is_roce() {
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
        self.first_ts_ns.get_or_insert(ts_ns);
        self.last_ts_ns = ts_ns;
    }

    /// Hands over the last steps and takes the flow side's results: the flow table, the
    /// elephants, the ECMP views, the sFlow collector and fabric view; the flow updates'
    /// counts join the counter block.
    pub fn finish(&mut self) {
        let Some(runner) = self.runner.take() else {
            return;
        };
        let (mut side, mut views) = runner.finish();
        side.finish(self.first_ts_ns, self.last_ts_ns);
        self.counters.add(&side.counters);
        self.pipeline = side.pipeline;
        self.sflow = side.sflow;
        self.timeline = views.timeline;
        self.training = views.training;
        views.pause.finish();
        self.pause = views.pause;
        self.cnp = views.cnp;
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

/// `analyze`'s [`Store`]: sessions in a map without bound (a file, not a kernel map: the
/// report lists them all); the flow part handed to the flow side with the packet's step
/// (its flow table runs the flow step, on a second thread where there is one; a full table
/// evicts the flow quiet the longest, its totals kept under `flows_evicted`: nothing is
/// refused). The time is the frame's capture timestamp.
struct CaptureStore<'a> {
    sessions: &'a mut BTreeMap<SessionKey, SessionStats>,
    classes: TrafficClasses,
    ts_ns: u64,
}

impl Store for CaptureStore<'_> {
    fn classes(&self) -> TrafficClasses {
        self.classes
    }

    fn sessions_on(&self) -> bool {
        true
    }

    fn psn_on(&self) -> bool {
        true
    }

    fn now(&mut self, _rec: &PacketRecord, _frame_len: u64) -> u64 {
        self.ts_ns
    }

    fn session(&mut self, key: SessionKey, rec: &PacketRecord, frame_len: u64) -> bool {
        self.sessions.entry(key).or_default().record(rec, frame_len);
        true
    }

    /// Handed over: the packet's step (already `Step::Roce`) goes to the flow side.
    fn flow(
        &mut self,
        _: &PacketRecord,
        _: Hook,
        _: &mut HookCounters,
        _: u64,
        _: u64,
        _: bool,
    ) -> bool {
        false
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

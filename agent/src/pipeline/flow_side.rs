//! The flow table's part of a capture's analysis: the [`Pipeline`] (the flow table with its
//! ticks, rates and elephants, the sFlow fabric view, the ECMP views at the end: the same
//! stages a live agent drives) clocked by capture time, with the sFlow collector fed from the
//! frames. [`Analysis`](crate::pipeline::analysis::Analysis) parses and counts each frame and
//! hands one [`Step`] per frame through the [`crate::pipeline::flow_runner`]: here, then to the
//! capture's views ([`crate::pipeline::views_side`]) with what the flow table said of each
//! RoCE packet ([`Told`]).

use crate::pipeline::analyze_options::AnalyzeOptions;
use crate::pipeline::stages::{Pipeline, Rates};
use crate::pipeline::training::Trouble;
use agent_common::{Hook, HookCounters, PacketRecord};

/// Ticks run one by one across a silence in the capture; a longer silence is one tick.
const MAX_TICKS_PER_GAP: u32 = 64;

/// What the flow side and the views need of one frame.
pub enum Step {
    /// A frame that is neither RoCE nor sFlow: its time still runs the ticks.
    At(u64),
    /// A RoCE packet (`len`: wire bytes).
    Roce {
        ts_ns: u64,
        info: PacketRecord,
        len: u64,
    },
    /// An sFlow datagram (UDP 6343), copied out of the frame.
    Sflow { ts_ns: u64, datagram: Vec<u8> },
    /// A PFC or PAUSE frame from the MAC address `mac`.
    Pause {
        ts_ns: u64,
        control: agent_common::headers::mac_control::MacControl,
        mac: [u8; 6],
    },
}

/// The flow side's state.
pub struct FlowSide {
    opts: AnalyzeOptions,
    /// Flows, elephants, the fabric view and the ECMP views.
    pub pipeline: Pipeline,
    pub sflow: crate::sflow::collector::Collector,
    /// What the flow updates add to the counter block (flows created, PSN events, messages):
    /// added to the parsing side's block at the end.
    pub counters: HookCounters,
    next_tick_ns: u64,
}

/// What the flow table said of a RoCE packet, for the views after it: whether the packet
/// began its flow, and the trouble it tells of (its PSN events are the flow's). Eight bytes:
/// the views read one per packet from the flow thread's core, so it holds a packet's own
/// counts, not a [`Trouble`]'s running totals (four 64-bit counts: 40 bytes a packet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Told {
    pub created: bool,
    /// A CE mark (0 or 1).
    ce: u8,
    /// Outside the lossless class (0 or 1).
    lossy: u8,
    /// Loss recovery: the PSNs a gap skipped (under 2^24), a retransmission, a NAK.
    recoveries: u32,
}

impl Told {
    /// The packet's trouble, for the views' running totals.
    pub fn trouble(&self) -> Trouble {
        Trouble {
            packets: 1,
            ce: u64::from(self.ce),
            recoveries: u64::from(self.recoveries),
            lossy: u64::from(self.lossy),
        }
    }
}

impl FlowSide {
    pub fn new(opts: AnalyzeOptions) -> Self {
        let pipeline = Pipeline::new(vec!["capture".into()], opts.pipeline());
        FlowSide {
            sflow: crate::sflow::collector::Collector::new(opts.sflow_limits.clone()),
            opts,
            pipeline,
            counters: HookCounters::ZERO,
            next_tick_ns: 0,
        }
    }

    fn tick_ns(&self) -> u64 {
        ((self.opts.tick_s * 1e9) as u64).max(1_000_000)
    }

    /// One frame's step; what the flow table said of a RoCE packet.
    pub fn step(&mut self, s: &Step) -> Told {
        let hash = self.hash(s);
        self.step_hashed(s, hash)
    }

    /// [`FlowSide::step`] with the step's [`FlowSide::hash`].
    fn step_hashed(&mut self, s: &Step, hash: Option<u64>) -> Told {
        match s {
            Step::At(ts_ns) | Step::Pause { ts_ns, .. } => self.advance(*ts_ns),
            Step::Roce { ts_ns, info, len } => {
                self.advance(*ts_ns);
                // Captures carry no hook; flows are keyed as if seen at XDP.
                let key = info.flow_key(Hook::Xdp);
                // The counting sequence's flow part for `analyze` (its store hands RoCE
                // packets here): the flow table's state, the one flow step.
                let hash = hash.unwrap_or_else(|| self.pipeline.flows.hash(0, &key));
                let (ev, created) =
                    self.pipeline
                        .packet(hash, key, info, &mut self.counters, *len, *ts_ns);
                return told(created, info, &ev, &self.opts.classes);
            }
            Step::Sflow { ts_ns, datagram } => {
                self.advance(*ts_ns);
                self.sflow.datagram(datagram, *ts_ns);
            }
        }
        Told::default()
    }

    /// The flow-table hash of a step's flow (`None`: the step updates no flow).
    fn hash(&self, s: &Step) -> Option<u64> {
        match s {
            Step::Roce { info, .. } => Some(self.pipeline.flows.hash(0, &info.flow_key(Hook::Xdp))),
            _ => None,
        }
    }

    /// Runs a batch of steps in order, asking for each one's flow memory ahead of its update,
    /// in two stages because the second reads what the first asks for: the slot in the
    /// table's index [`SLOT_AHEAD`] steps ahead, the entry's lines [`ENTRY_AHEAD`] ahead.
    /// Each key is hashed once, at the first stage.
    pub fn run_batch(&mut self, batch: &[Step], told: &mut Vec<Told>) {
        told.clear();
        let mut hashes = [None; RING];
        let n = batch.len();
        for (i, s) in batch.iter().enumerate().take(SLOT_AHEAD) {
            hashes[i % RING] = self.hash(s);
            if let Some(h) = hashes[i % RING] {
                self.pipeline.flows.prefetch_slot(h);
            }
        }
        for h in hashes.iter().take(ENTRY_AHEAD.min(n)).flatten() {
            self.pipeline.flows.prefetch_hashed(*h);
        }
        for (i, s) in batch.iter().enumerate() {
            let ahead = &batch[i + 1..];
            if let Some(far) = ahead.get(SLOT_AHEAD - 1) {
                let h = self.hash(far);
                hashes[(i + SLOT_AHEAD) % RING] = h;
                if let Some(h) = h {
                    self.pipeline.flows.prefetch_slot(h);
                }
            }
            if let Some(h) = hashes[(i + ENTRY_AHEAD) % RING].filter(|_| ahead.len() >= ENTRY_AHEAD)
            {
                self.pipeline.flows.prefetch_hashed(h);
            }
            told.push(self.step_hashed(s, hashes[i % RING]));
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
                self.pipeline.tick(dt, &enter, Some(&self.sflow));
                self.next_tick_ns = ts_ns + step;
                break;
            }
            self.pipeline
                .tick(step as f64 / 1e9, &enter, Some(&self.sflow));
            self.next_tick_ns += step;
        }
        if n > 0 {
            // Capture time is Unix time already.
            self.pipeline.records(ts_ns, 0);
        }
    }

    /// Closes the last interval (the capture ran from `first_ts_ns` to `last_ts_ns`; `None`:
    /// no frame) and runs the ECMP views (elephants = flows that were elephants at any time,
    /// at their peak rate).
    pub fn finish(&mut self, first_ts_ns: Option<u64>, last_ts_ns: u64) {
        if first_ts_ns.is_some() {
            // The part of the last interval the capture covered.
            let start = self.next_tick_ns.saturating_sub(self.tick_ns());
            let dt = last_ts_ns.saturating_sub(start) as f64 / 1e9;
            if dt > 0.0 {
                let enter = [self.opts.elephant.enter_bps(None)];
                self.pipeline.tick(dt, &enter, Some(&self.sflow));
            }
        }
        if let Some(first) = first_ts_ns {
            self.pipeline.short_span_elephants(first, last_ts_ns);
        }
        self.pipeline.finish_records(
            last_ts_ns,
            0,
            crate::pipeline::flow_counts::EndReason::ForcedEnd,
        );
        for t in self.sflow.rhythms.values_mut() {
            t.detect();
        }
        self.pipeline.detect([], Rates::Peak);
    }
}

/// Steps ahead whose flow entries are prefetched: enough to overlap the memory latency of a
/// few flows, few enough that the lines are still cached when their step comes.
const ENTRY_AHEAD: usize = 8;
/// Steps ahead whose index slots are prefetched (before their entries).
const SLOT_AHEAD: usize = 16;
/// The hashes kept between the stages (a power of two above [`SLOT_AHEAD`]).
const RING: usize = 32;

/// What one RoCE packet tells about a slow step: a CE mark, loss recovery (a PSN gap, a
/// retransmission, a NAK), a packet outside the lossless class.
fn told(
    created: bool,
    info: &agent_common::PacketRecord,
    ev: &agent_common::flow::FlowEvent,
    classes: &agent_common::TrafficClasses,
) -> Told {
    let nak = info.nak().is_some();
    Told {
        created,
        ce: u8::from(info.is_ce()),
        recoveries: ev
            .psn
            .gap
            .saturating_add(u32::from(ev.psn.retransmit) + u32::from(nak)),
        lossy: u8::from(info.is_lossy(classes)),
    }
}

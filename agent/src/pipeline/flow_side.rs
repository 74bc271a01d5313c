//! The time-ordered half of a capture's analysis: the [`Pipeline`] (the flow table with its
//! ticks, rates and elephants, the sFlow fabric view, the ECMP views at the end: the same
//! stages a live agent drives) clocked by capture time, with what only a capture has beside
//! it: the sFlow collector fed from the frames, the RoCE timeline and training rhythm, pause
//! frames and the CE/CNP pairing. [`Analysis`](crate::pipeline::analysis::Analysis) parses and counts each frame and
//! hands this half one [`Step`] per frame, on a thread of its own when the machine has a
//! second core: the flow table was about half of the time per frame, and it sees the same
//! steps in the same order either way, so the result is the same to the bit.

use crate::pipeline::analyze_options::AnalyzeOptions;
use crate::pipeline::stages::{Pipeline, Rates};
use agent_common::{Hook, HookCounters, PacketRecord};
use std::sync::mpsc::{sync_channel, Receiver, RecvError, SyncSender};
use std::thread::JoinHandle;

/// Ticks run one by one across a silence in the capture; a longer silence is one tick.
const MAX_TICKS_PER_GAP: u32 = 64;

/// Steps handed to the flow thread at a time (one channel message).
const BATCH: usize = 1024;

/// Batches in flight between the parsing thread and the flow thread: enough to ride out a
/// burst of ticks, few enough to keep memory small.
const BATCHES_IN_FLIGHT: usize = 8;

/// What the flow side needs of one frame.
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
    /// RoCE traffic over capture time, and the step rhythm and message sizes: here rather
    /// than on the parsing side, which is the busier one.
    pub timeline: crate::pipeline::timeline::Timeline,
    pub training: crate::pipeline::training::Training,
    /// What the flow updates add to the counter block (flows created, PSN events, messages):
    /// added to the parsing side's block at the end.
    pub counters: HookCounters,
    next_tick_ns: u64,
    /// Pause intervals per priority (the union at the link's speed).
    pub pause: crate::detect::pause::PauseTracker,
    /// CE-marked packets paired with their CNPs.
    pub cnp: crate::detect::cnp_response::CnpResponse,
}

impl FlowSide {
    pub fn new(opts: AnalyzeOptions) -> Self {
        let pipeline = Pipeline::new(vec!["capture".into()], opts.pipeline());
        let pause = crate::detect::pause::PauseTracker::new(opts.link_speed_bps, opts.pfc_storm_ns);
        let max_conns = opts.max_flows;
        FlowSide {
            sflow: crate::sflow::collector::Collector::new(opts.sflow_limits.clone()),
            opts,
            pipeline,
            timeline: crate::pipeline::timeline::Timeline::new(),
            training: Default::default(),
            counters: HookCounters::ZERO,
            next_tick_ns: 0,
            pause,
            cnp: crate::detect::cnp_response::CnpResponse::bounded(max_conns),
        }
    }

    fn tick_ns(&self) -> u64 {
        ((self.opts.tick_s * 1e9) as u64).max(1_000_000)
    }

    /// One frame's step.
    pub fn step(&mut self, s: Step) {
        let hash = self.hash(&s);
        self.step_hashed(s, hash);
    }

    /// [`FlowSide::step`] with the step's [`FlowSide::hash`].
    fn step_hashed(&mut self, s: Step, hash: Option<u64>) {
        match s {
            Step::At(ts_ns) => self.advance(ts_ns),
            Step::Roce { ts_ns, info, len } => {
                self.advance(ts_ns);
                // Captures carry no hook; flows are keyed as if seen at XDP.
                let key = info.flow_key(Hook::Xdp);
                self.timeline.record(&info, len, ts_ns);
                self.training.record(&key, len, ts_ns);
                // The counting sequence's flow part for `analyze` (its store hands RoCE
                // packets here): the flow table's state, the one flow step.
                let hash = hash.unwrap_or_else(|| self.pipeline.flows.hash(0, &key));
                let (ev, created) =
                    self.pipeline
                        .packet(hash, key, &info, &mut self.counters, len, ts_ns);
                self.cnp.packet(&info, &key, len, ts_ns, created);
                self.training
                    .note(ts_ns, &key, trouble(&info, &ev, &self.opts.classes));
            }
            Step::Sflow { ts_ns, datagram } => {
                self.advance(ts_ns);
                self.sflow.datagram(&datagram, ts_ns);
            }
            Step::Pause {
                ts_ns,
                control,
                mac,
            } => {
                self.advance(ts_ns);
                self.pause.frame(ts_ns, &control, mac);
            }
        }
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
    fn run_batch(&mut self, batch: &mut Vec<Step>) {
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
        let mut steps = batch.drain(..);
        let mut i = 0;
        while let Some(s) = steps.next() {
            let ahead = steps.as_slice();
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
            self.step_hashed(s, hashes[i % RING]);
            i += 1;
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

/// Where the flow side runs: here, or on its own thread behind a channel of step batches.
pub enum Runner {
    Here(Box<FlowSide>),
    Thread {
        batch: Vec<Step>,
        tx: SyncSender<Vec<Step>>,
        /// Emptied batches coming back for reuse: no allocation (and no page faults of fresh
        /// memory) per batch.
        spare: Receiver<Vec<Step>>,
        handle: JoinHandle<Result<FlowSide, RecvError>>,
    },
}

impl Runner {
    /// On a thread when `parallel` and the thread can be started, else here.
    pub fn new(side: FlowSide, parallel: bool) -> Runner {
        if !parallel {
            return Runner::Here(Box::new(side));
        }
        let (tx, rx) = sync_channel::<Vec<Step>>(BATCHES_IN_FLIGHT);
        let (spare_tx, spare) = sync_channel::<Vec<Step>>(BATCHES_IN_FLIGHT + 2);
        // The side goes to the thread once it runs, so a thread that cannot be started (or
        // ends at once) leaves it here, and the analysis runs on this thread instead.
        let (side_tx, side_rx) = sync_channel::<FlowSide>(1);
        let spawned = std::thread::Builder::new()
            .name("analyze-flows".into())
            .spawn(move || side_rx.recv().map(|side| run(side, rx, spare_tx)));
        let Ok(handle) = spawned else {
            return Runner::Here(Box::new(side));
        };
        match side_tx.send(side) {
            Ok(()) => Runner::Thread {
                batch: Vec::with_capacity(BATCH),
                tx,
                spare,
                handle,
            },
            Err(back) => Runner::Here(Box::new(back.0)),
        }
    }

    /// Hands over one frame's step, which `fill` writes in place (in the batch on its way to
    /// the flow thread: the step is never copied on this side).
    pub fn push_with(&mut self, fill: impl FnOnce(&mut Step)) {
        match self {
            Runner::Here(side) => {
                let mut s = Step::At(0);
                fill(&mut s);
                side.step(s);
            }
            Runner::Thread {
                batch, tx, spare, ..
            } => {
                batch.push(Step::At(0));
                if let Some(s) = batch.last_mut() {
                    fill(s);
                }
                if batch.len() == BATCH {
                    let next = spare
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(BATCH));
                    let full = std::mem::replace(batch, next);
                    // A send fails only if the thread is gone (it panicked): `finish`
                    // reports that.
                    let _ = tx.send(full);
                }
            }
        }
    }

    /// Every step handed over, the flow side back.
    pub fn finish(self) -> FlowSide {
        match self {
            Runner::Here(side) => *side,
            Runner::Thread {
                batch, tx, handle, ..
            } => {
                let _ = tx.send(batch);
                drop(tx);
                match handle.join() {
                    Ok(Ok(side)) => side,
                    // The side was sent before this variant was built, so the thread received
                    // it; only a panic on the thread ends it otherwise, and is passed on.
                    Ok(Err(RecvError)) => unreachable!("the flow thread always gets its side"),
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
        }
    }
}

/// Steps ahead whose flow entries are prefetched: enough to overlap the memory latency of a
/// few flows, few enough that the lines are still cached when their step comes.
const ENTRY_AHEAD: usize = 8;
/// Steps ahead whose index slots are prefetched (before their entries).
const SLOT_AHEAD: usize = 16;
/// The hashes kept between the stages (a power of two above [`SLOT_AHEAD`]).
const RING: usize = 32;

fn run(mut side: FlowSide, rx: Receiver<Vec<Step>>, spare: SyncSender<Vec<Step>>) -> FlowSide {
    while let Ok(mut batch) = rx.recv() {
        side.run_batch(&mut batch);
        // Back to the parsing side (dropped when it holds enough spares).
        let _ = spare.try_send(batch);
    }
    side
}

/// What one RoCE packet tells about a slow step: a CE mark, loss recovery (a PSN gap, a
/// retransmission, a NAK), a packet outside the lossless class.
fn trouble(
    info: &agent_common::PacketRecord,
    ev: &agent_common::flow::FlowEvent,
    classes: &agent_common::TrafficClasses,
) -> crate::pipeline::training::Trouble {
    let nak = info.nak().is_some();
    let recovery = u64::from(ev.psn.gap) + u64::from(ev.psn.retransmit) + u64::from(nak);
    crate::pipeline::training::Trouble {
        packets: 1,
        ce: u64::from(info.is_ce()),
        recoveries: recovery,
        lossy: u64::from(info.is_lossy(classes)),
    }
}

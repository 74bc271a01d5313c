//! What a training job's traffic looks like in a capture: the step rhythm (RoCE bytes in 1 ms
//! buckets through [`crate::detect::rhythm`]) and the RDMA message sizes: the DMA length of
//! RDMA WRITE and READ requests (RETH), and SEND messages (the payloads of FIRST..LAST, or
//! ONLY).

use crate::detect::rhythm::{self, Rhythm, Series};
use agent_common::message::{bucket_le, MsgOp, MSG_BUCKETS, MSG_BUCKET_SLOTS};
use agent_common::{FlowKey, HookCounters};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::VecDeque;

/// The series kept: ten minutes of 1 ms buckets (80 KB per minute).
const SERIES_BUCKETS: usize = 600_000;
/// The rhythm is looked for in the last minute of it (autocorrelation cost).
const RHYTHM_WINDOW: usize = 60_000;
/// Source hosts whose own rhythm is followed (the first seen; a minute each, 480 KB), and how
/// many of them (by bytes) the report shows.
const MAX_SOURCES: usize = 64;
const REPORTED_SOURCES: usize = 8;

/// A source host: its IP version and address.
type SourceHost = super::pair_trouble::Host;

/// The training view of a capture: the series of all RoCE, and one per source host (two jobs
/// interleaved on one link each keep their own rhythm).
#[derive(Clone, Debug)]
pub struct Training {
    pub series: Series,
    /// Per followed source host: its series, bytes and packets.
    sources: FxHashMap<SourceHost, (Series, u64, u64)>,
    /// Per millisecond of the last minute (where steps are looked at), what can explain a
    /// slow step: the packets, CE marks, loss recovery and lossy-class packets.
    trouble: VecDeque<(u64, Trouble)>,
    /// The same trouble per host pair (only milliseconds with trouble): a job's own.
    pub pairs: super::pair_trouble::PairTrouble,
}

impl Default for Training {
    fn default() -> Self {
        Training {
            series: Series::new(SERIES_BUCKETS),
            sources: FxHashMap::default(),
            trouble: VecDeque::new(),
            pairs: Default::default(),
        }
    }
}

pub use crate::detect::slow_steps::{BurstEdges, Trouble};

/// The rhythm of one source host.
#[derive(Clone, Debug, Serialize)]
pub struct SourceRhythm {
    pub src: String,
    pub bytes: u64,
    #[serde(flatten)]
    pub rhythm: Rhythm,
}

/// A training job found in the traffic ([`crate::detect::jobs`]): its hosts, and the rhythm
/// of their traffic together.
#[derive(Clone, Debug, Serialize)]
pub struct JobRhythm {
    /// Stable while the job runs: its lowest source host.
    pub id: String,
    /// The source hosts whose bursts keep the job's step (sorted).
    pub sources: Vec<String>,
    /// Every host the job's flows touch, sources and their destinations (sorted).
    pub hosts: Vec<String>,
    /// The RoCE flows sent by its sources.
    pub flows: usize,
    /// RoCE bytes its sources sent.
    pub bytes: u64,
    /// RoCE packets its sources sent.
    pub packets: u64,
    /// The RDMA messages of its flows, by operation (filled with `hosts`).
    pub messages: Vec<crate::detect::jobs::OpMessages>,
    #[serde(skip)]
    pub source_keys: Vec<SourceHost>,
    /// Sources and their destinations (filled with `hosts`).
    #[serde(skip)]
    pub host_keys: Vec<SourceHost>,
    #[serde(flatten)]
    pub rhythm: Rhythm,
}

/// The training view: the rhythm of the largest job (the link's where no job is found)
/// and every job found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TrainingView {
    #[serde(flatten)]
    pub rhythm: Rhythm,
    /// Jobs, most bytes first.
    pub jobs: Vec<JobRhythm>,
}

impl std::ops::Deref for TrainingView {
    type Target = Rhythm;
    fn deref(&self) -> &Rhythm {
        &self.rhythm
    }
}

impl std::ops::DerefMut for TrainingView {
    fn deref_mut(&mut self) -> &mut Rhythm {
        &mut self.rhythm
    }
}

/// The last minute of a series.
fn tail(s: &Series) -> Series {
    let b = &s.buckets;
    let from = b.len().saturating_sub(RHYTHM_WINDOW);
    Series {
        start_ns: s.start_ns + from as u64 * rhythm::BUCKET_NS,
        buckets: b[from..].to_vec(),
        ..Series::default()
    }
}

/// The rhythm of the last minute of a series.
fn tail_rhythm(s: &Series) -> Rhythm {
    rhythm::detect(&tail(s))
}

impl Training {
    /// Adds one RoCE packet of `len` wire bytes at `ts_ns`, of the flow `key` (its source host
    /// has a series of its own while there is room).
    pub fn record(&mut self, key: &FlowKey, len: u64, ts_ns: u64) {
        self.series.add(ts_ns, len);
        let src = (key.ip_version, key.src);
        // One lookup per packet (a capture may have thousands of sources beyond the kept ones).
        let held = if self.sources.len() < MAX_SOURCES {
            self.sources
                .entry(src)
                .or_insert_with(|| (Series::new(RHYTHM_WINDOW), 0, 0))
        } else {
            match self.sources.get_mut(&src) {
                Some(held) => held,
                None => return,
            }
        };
        held.0.add(ts_ns, len);
        held.1 += len;
        held.2 += 1;
    }

    /// Notes one RoCE packet's trouble at `ts_ns`, of the flow `key` (kept for the last
    /// minute, for the link and for the flow's host pair).
    pub fn note(&mut self, ts_ns: u64, key: &FlowKey, t: Trouble) {
        let ms = ts_ns / rhythm::BUCKET_NS;
        self.pairs.note(
            ms,
            (key.ip_version, key.src),
            (key.ip_version, key.dst),
            &t,
            RHYTHM_WINDOW as u64,
        );
        let add = |a: &mut Trouble| a.add(&t);
        match self.trouble.back_mut() {
            Some((last, acc)) if *last == ms => add(acc),
            Some((last, _)) if *last > ms => {
                // Out of order (a capture's timestamps may step back): its own millisecond.
                let i = self.trouble.partition_point(|(m, _)| *m < ms);
                match self.trouble.get_mut(i) {
                    Some((m, acc)) if *m == ms => add(acc),
                    _ => self.trouble.insert(i, (ms, t)),
                }
            }
            _ => self.trouble.push_back((ms, t)),
        }
        let newest = self.trouble.back().map_or(ms, |(m, _)| *m);
        while self
            .trouble
            .front()
            .is_some_and(|(m, _)| *m + (RHYTHM_WINDOW as u64) < newest)
        {
            self.trouble.pop_front();
        }
    }

    /// The trouble within `[from_ns, to_ns)` (of the last minute).
    pub fn trouble_within(&self, from_ns: u64, to_ns: u64) -> Trouble {
        let (a, b) = (
            from_ns / rhythm::BUCKET_NS,
            to_ns.div_ceil(rhythm::BUCKET_NS),
        );
        let i = self.trouble.partition_point(|(m, _)| *m < a);
        let mut out = Trouble::default();
        for (_, t) in self.trouble.range(i..).take_while(|(m, _)| *m < b) {
            out.add(t);
        }
        out
    }

    /// Each followed source host's burst within `[from_ns, to_ns)`: its first and last
    /// millisecond with traffic (hosts without traffic there are left out).
    pub fn bursts_within(&self, from_ns: u64, to_ns: u64) -> Vec<BurstEdges> {
        let mut out = Vec::new();
        for ((ipv, src), (s, _, _)) in &self.sources {
            let at = |i: usize| s.start_ns + i as u64 * rhythm::BUCKET_NS;
            // Only the buckets of the window (a walk from the series' start made explaining
            // thousands of slow steps quadratic).
            let first = (from_ns.saturating_sub(s.start_ns) / rhythm::BUCKET_NS) as usize;
            let mut edges: Option<(u64, u64)> = None;
            for (i, &v) in s.buckets.iter().enumerate().skip(first) {
                let t = at(i);
                if t + rhythm::BUCKET_NS <= from_ns || v == 0 {
                    continue;
                }
                if t >= to_ns {
                    break;
                }
                edges = Some((edges.map_or(t, |e| e.0), t));
            }
            if let Some((first_ns, last_ns)) = edges {
                out.push(BurstEdges {
                    src: agent_common::flow_key::addr(*ipv, src).to_string(),
                    first_ns,
                    last_ns,
                });
            }
        }
        out.sort_by(|a, b| a.src.cmp(&b.src));
        out
    }

    /// The rhythm over the last minute of the series.
    pub fn rhythm(&self) -> Rhythm {
        tail_rhythm(&self.series)
    }

    /// The rhythm over the last minute of the series, where a silence while a priority of
    /// `mask` was paused does not end a burst (the job waited on the network).
    pub fn rhythm_paused(&self, pause: &crate::detect::pause::PauseTracker, mask: u8) -> Rhythm {
        let t = tail(&self.series);
        let paused = pause.paused_buckets(mask, t.start_ns, rhythm::BUCKET_NS, t.buckets.len());
        rhythm::detect_paused(&t, &paused)
    }

    /// The training jobs among the followed source hosts ([`crate::detect::jobs`]), most
    /// bytes first, each with the rhythm of its hosts' traffic together (a silence while a
    /// priority of `mask` was paused does not end a burst). `hosts` and `flows` are left for
    /// the caller, who holds the flows.
    pub fn jobs(&self, pause: &crate::detect::pause::PauseTracker, mask: u8) -> Vec<JobRhythm> {
        let held: Vec<(&SourceHost, Series, u64, u64)> = self
            .sources
            .iter()
            .map(|(k, (s, bytes, packets))| (k, tail(s), *bytes, *packets))
            .collect();
        let series: Vec<&Series> = held.iter().map(|h| &h.1).collect();
        let paused =
            |t: &Series| pause.paused_buckets(mask, t.start_ns, rhythm::BUCKET_NS, t.buckets.len());
        let mut out: Vec<JobRhythm> = crate::detect::jobs::find(&series, paused)
            .into_iter()
            .map(|f| {
                let g = &f.members;
                let mut keys: Vec<&SourceHost> = g.iter().map(|&i| held[i].0).collect();
                keys.sort();
                let sources: Vec<String> = keys
                    .iter()
                    .map(|(v, a)| agent_common::flow_key::addr(*v, a).to_string())
                    .collect();
                JobRhythm {
                    id: format!("job-{}", sources[0]),
                    sources,
                    hosts: Vec::new(),
                    flows: 0,
                    bytes: g.iter().map(|&i| held[i].2).sum(),
                    packets: g.iter().map(|&i| held[i].3).sum(),
                    messages: Vec::new(),
                    source_keys: keys.iter().map(|k| **k).collect(),
                    host_keys: Vec::new(),
                    rhythm: f.rhythm,
                }
            })
            .collect();
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.id.cmp(&b.id)));
        out
    }

    /// The rhythms of the source hosts with the most bytes (only when there are several: one
    /// source's rhythm is the capture's).
    pub fn sources(&self) -> Vec<SourceRhythm> {
        if self.sources.len() < 2 {
            return Vec::new();
        }
        let mut v: Vec<_> = self.sources.iter().collect();
        v.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
        v.into_iter()
            .take(REPORTED_SOURCES)
            .map(|((ipv, src), (s, bytes, _))| SourceRhythm {
                src: agent_common::flow_key::addr(*ipv, src).to_string(),
                bytes: *bytes,
                rhythm: tail_rhythm(s),
            })
            .collect()
    }
}

/// The messages of a counter block as reported: `[{op, messages, bytes, buckets}]`.
pub fn messages(c: &HookCounters) -> Vec<MessageReport> {
    MsgOp::ALL
        .into_iter()
        .map(|op| {
            let i = op as usize;
            let at = i * MSG_BUCKET_SLOTS;
            MessageReport {
                op: op.name(),
                messages: c.messages[i],
                bytes: c.message_bytes[i],
                buckets: (0..MSG_BUCKETS)
                    .filter(|b| c.message_buckets[at + b] > 0)
                    .map(|b| MessageBucket {
                        le: bucket_le(b),
                        messages: c.message_buckets[at + b],
                    })
                    .collect(),
            }
        })
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct MessageReport {
    pub op: &'static str,
    pub messages: u64,
    pub bytes: u64,
    /// Messages per size bucket (not cumulative; `le` null is above 1 GiB); empty buckets left
    /// out.
    pub buckets: Vec<MessageBucket>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MessageBucket {
    pub le: Option<u64>,
    pub messages: u64,
}

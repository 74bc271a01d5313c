//! What a training job's traffic looks like in a capture: the step rhythm (RoCE bytes in 1 ms
//! buckets through [`crate::detect::rhythm`]) and the RDMA message sizes: the DMA length of
//! RDMA WRITE and READ requests (RETH), and SEND messages (the payloads of FIRST..LAST, or
//! ONLY).

use crate::detect::rhythm::{self, Rhythm, Series};
use agent_common::message::{bucket_le, MsgOp, MSG_BUCKETS, MSG_BUCKET_SLOTS};
use agent_common::{FlowKey, HookCounters};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// The series kept: ten minutes of 1 ms buckets (80 KB per minute).
const SERIES_BUCKETS: usize = 600_000;
/// The rhythm is looked for in the last minute of it (autocorrelation cost).
const RHYTHM_WINDOW: usize = 60_000;
/// Source hosts whose own rhythm is followed (the first seen; a minute each, 480 KB), and how
/// many of them (by bytes) the report shows.
const MAX_SOURCES: usize = 64;
const REPORTED_SOURCES: usize = 8;

/// The training view of a capture: the series of all RoCE, and one per source host (two jobs
/// interleaved on one link each keep their own rhythm).
#[derive(Clone, Debug)]
pub struct Training {
    pub series: Series,
    sources: FxHashMap<(u8, [u8; 16]), (Series, u64)>,
}

impl Default for Training {
    fn default() -> Self {
        Training {
            series: Series::new(SERIES_BUCKETS),
            sources: FxHashMap::default(),
        }
    }
}

/// The rhythm of one source host.
#[derive(Clone, Debug, Serialize)]
pub struct SourceRhythm {
    pub src: String,
    pub bytes: u64,
    #[serde(flatten)]
    pub rhythm: Rhythm,
}

/// The rhythm of the last minute of a series.
fn tail_rhythm(s: &Series) -> Rhythm {
    let b = &s.buckets;
    let from = b.len().saturating_sub(RHYTHM_WINDOW);
    let tail = Series {
        start_ns: s.start_ns + from as u64 * rhythm::BUCKET_NS,
        buckets: b[from..].to_vec(),
        ..Series::default()
    };
    rhythm::detect(&tail)
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
                .or_insert_with(|| (Series::new(RHYTHM_WINDOW), 0))
        } else {
            match self.sources.get_mut(&src) {
                Some(held) => held,
                None => return,
            }
        };
        held.0.add(ts_ns, len);
        held.1 += len;
    }

    /// The rhythm over the last minute of the series.
    pub fn rhythm(&self) -> Rhythm {
        tail_rhythm(&self.series)
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
            .map(|((ipv, src), (s, bytes))| SourceRhythm {
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

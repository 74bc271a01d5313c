//! The training jobs of a live interface: the kernel's ring splits each millisecond's RoCE
//! bytes into source lanes ([`agent_common::ring::lane_of`]), a series per lane is kept here,
//! and the jobs are found in the lanes by the same code as in a capture's source hosts
//! ([`super::jobs::find`]). Which hosts a job holds comes from the flow table: the sources of
//! the recent flows whose lane is one of the job's, and their destinations.
//!
//! A lane holds every source that hashes to it: a steady tenant sharing a lane with a job's
//! host is listed with the job (its steady bytes do not hide the rhythm); two jobs' hosts in
//! one lane make that lane follow the stronger job. With 16 lanes, a link that carries a few
//! dozen sources keeps most of them apart.

use super::jobs;
use super::rhythm::{Rhythm, Series, Step, BUCKET_NS};
use super::steps::{end_of, new_slow_steps, recent_step_bytes, recent_steps, StepCursor};
use agent_common::ring::{lane_of, LANES, LANE_UNIT};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// The lanes' series: the last minute, as the interface's ([`super::steps`]).
const WINDOW_BUCKETS: usize = 60_000;
/// Jobs no longer found are forgotten (their slow-step count with them) after this long.
const FORGET_NS: u64 = 120_000_000_000;

/// A flow as the job finder needs it: its source and destination (version and address bytes,
/// as in `FlowKey`), when it was last seen (the ring's clock, ns) and its messages.
#[derive(Clone, Copy, Debug)]
pub struct FlowEnds<'a> {
    pub ip_version: u8,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub last_seen_ns: u64,
    pub stats: &'a agent_common::FlowStats,
}

/// One job found live on an interface.
#[derive(Clone, Debug, Serialize)]
pub struct LiveJob {
    /// Stable while the job runs: its lowest source host (as offline), or its lowest lane
    /// where the flow table holds none of its sources yet.
    pub id: String,
    /// The source hosts of its lanes with recent flows (sorted).
    pub sources: Vec<String>,
    /// Its sources and their destinations (sorted).
    pub hosts: Vec<String>,
    /// Recent RoCE flows from its sources.
    pub flows: usize,
    /// The RDMA messages of those flows (since each was first seen).
    pub messages: Vec<jobs::OpMessages>,
    /// The ring's lanes it was found in.
    pub lanes: Vec<usize>,
    pub period_seconds: Option<f64>,
    pub duty_ratio: Option<f64>,
    /// Mean bytes of its recent steps (lane units turned back into bytes: rounded up per
    /// packet, so a little above the wire's).
    pub step_bytes: Option<f64>,
    /// Slow steps counted while it ran (each once).
    pub slow_steps: u64,
    /// Its newest steps (at most 16), on the ring's clock.
    pub steps: Vec<Step>,
}

/// What is remembered of a job between detections: the last step start counted, the slow
/// steps counted, when it was last found.
#[derive(Clone, Copy, Debug, Default)]
struct Counted {
    cursor: StepCursor,
    slow_steps: u64,
    seen_ns: u64,
}

/// The lanes of one interface and the jobs last found in them.
#[derive(Clone, Debug)]
pub struct LiveJobs {
    lanes: Vec<Series>,
    pub jobs: Vec<LiveJob>,
    counted: FxHashMap<String, Counted>,
}

impl Default for LiveJobs {
    fn default() -> Self {
        LiveJobs {
            lanes: (0..LANES).map(|_| Series::new(WINDOW_BUCKETS)).collect(),
            jobs: Vec::new(),
            counted: FxHashMap::default(),
        }
    }
}

/// A slow step of a job found live: the job, its number among the job's steps (from 1, see
/// [`StepCursor`]), the step.
#[derive(Clone, Debug)]
pub struct JobSlowStep {
    pub job: String,
    pub index: u64,
    pub step: Step,
}

impl LiveJobs {
    /// Adds one millisecond's lanes (in lane units) at `ms`; an empty lane adds nothing (its
    /// series fills the gap with zeros when it next has bytes).
    pub fn push(&mut self, ms: u64, lanes: &[u64; LANES]) {
        for (s, &units) in self.lanes.iter_mut().zip(lanes.iter()) {
            if units > 0 {
                s.add(ms * BUCKET_NS, units * LANE_UNIT);
            }
        }
    }

    /// Finds the jobs in the lanes, names them from `flows` (this interface's), and returns
    /// the slow steps not counted before (as [`super::steps::StepTracker::detect`]: of the
    /// last 20 s, of a training step's size, the newest 20).
    pub fn detect(&mut self, flows: &[FlowEnds<'_>]) -> Vec<JobSlowStep> {
        let held: Vec<usize> = (0..LANES)
            .filter(|&l| !self.lanes[l].buckets.is_empty())
            .collect();
        let series: Vec<&Series> = held.iter().map(|&l| &self.lanes[l]).collect();
        let found = jobs::find(&series, |_| Vec::new());
        let now_ns = found.iter().map(|f| end_of(&f.rhythm)).max().unwrap_or(0);
        let mut out = Vec::new();
        self.jobs = found
            .into_iter()
            .map(|f| {
                let lanes: Vec<usize> = f.members.iter().map(|&i| held[i]).collect();
                let since = f.rhythm.steps.first().map_or(0, |s| s.start_ns);
                let mut job = describe(&lanes, &f.rhythm, flows, since);
                let c = self.counted.entry(job.id.clone()).or_default();
                c.seen_ns = now_ns;
                for n in new_slow_steps(&f.rhythm, &mut c.cursor) {
                    c.slow_steps += 1;
                    out.push(JobSlowStep {
                        job: job.id.clone(),
                        index: n.index,
                        step: n.step,
                    });
                }
                job.slow_steps = c.slow_steps;
                job
            })
            .collect();
        self.counted.retain(|_, c| c.seen_ns + FORGET_NS >= now_ns);
        out
    }
}

/// A job from its lanes and rhythm: the sources of the flows in its lanes seen since its
/// first step, and their destinations.
fn describe(lanes: &[usize], r: &Rhythm, flows: &[FlowEnds<'_>], since_ns: u64) -> LiveJob {
    let addr = |v: u8, a: &[u8; 16]| agent_common::flow_key::addr(v, a);
    let mut sources: BTreeSet<IpAddr> = BTreeSet::new();
    let mut hosts: BTreeSet<IpAddr> = BTreeSet::new();
    let mut n = 0;
    let mut messages = jobs::MessageSum::default();
    for f in flows {
        if f.last_seen_ns < since_ns || !lanes.contains(&lane_of(&f.src)) {
            continue;
        }
        n += 1;
        messages.add(f.stats);
        sources.insert(addr(f.ip_version, &f.src));
        hosts.insert(addr(f.ip_version, &f.src));
        hosts.insert(addr(f.ip_version, &f.dst));
    }
    let id = match sources.first() {
        Some(a) => format!("job-{a}"),
        None => format!("job-lane-{}", lanes.first().copied().unwrap_or(0)),
    };
    LiveJob {
        id,
        sources: sources.iter().map(|a| a.to_string()).collect(),
        hosts: hosts.iter().map(|a| a.to_string()).collect(),
        flows: n,
        messages: messages.report(),
        lanes: lanes.to_vec(),
        period_seconds: r.period_seconds,
        duty_ratio: r.duty_ratio,
        step_bytes: r.period_seconds.and(recent_step_bytes(r)),
        slow_steps: 0,
        steps: recent_steps(r).to_vec(),
    }
}

#[cfg(test)]
#[path = "live_jobs_tests.rs"]
mod tests;

//! The live training rhythm of `rocemon run`: the kernel rings drained into a step tracker per
//! interface every second, the rhythm looked for every 2 s (interfaces and sFlow switch
//! ports), slow steps logged once, and the series set.

use crate::detect::live_jobs::{FlowEnds, LiveJobs};
use crate::detect::steps::StepTracker;
use crate::export::metrics::Metrics;
use crate::kernel::loader::Attachment;
use crate::pipeline::flows::FlowTable;
use rustc_hash::FxHashMap;
use std::time::Instant;

/// How often the kernel rings are read (they hold 4.096 s).
pub const RING_READ_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// How often the rhythm is looked for (a few ms of autocorrelation per source).
const RHYTHM_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The live sources' rhythms: per interface (its kernel ring), the jobs in each interface's
/// source lanes, and when they were last looked for.
#[derive(Default)]
pub struct LiveRhythm {
    pub ifaces: FxHashMap<String, StepTracker>,
    pub jobs: FxHashMap<String, LiveJobs>,
    detected_at: Option<Instant>,
}

impl LiveRhythm {
    /// Whether the rhythm is to be looked for now (and from now on, not before RHYTHM_EVERY).
    pub fn due(&mut self) -> bool {
        let now = Instant::now();
        if self
            .detected_at
            .is_some_and(|t| now.duration_since(t) < RHYTHM_EVERY)
        {
            return false;
        }
        self.detected_at = Some(now);
        true
    }
}

/// Reads every probe's ring since its last read into its step tracker (the ring holds 4.096 s;
/// milliseconds it no longer holds are counted as lost). Milliseconds up to two ago: the one
/// in progress may still be counted on another CPU. Returns the interfaces whose ring could
/// not be read (for `rocemon_map_read_errors_total`; no lock is needed to read).
pub fn drain_rings(probes: &[Option<Attachment>], rhythm: &mut LiveRhythm) -> Vec<String> {
    let mut failed = Vec::new();
    let to = crate::sources::maps::monotonic_ms().saturating_sub(2);
    let depth = u64::from(agent_common::ring::RING_SLOTS) - 1;
    for p in probes.iter().flatten() {
        let t = rhythm.ifaces.entry(p.iface.clone()).or_default();
        let jobs = rhythm.jobs.entry(p.iface.clone()).or_default();
        let earliest = to.saturating_sub(depth);
        let from = match t.next_ms {
            Some(n) if n < earliest => {
                t.lost_ms += earliest - n;
                earliest
            }
            Some(n) => n,
            None => earliest,
        };
        if from > to {
            continue;
        }
        match p.read_ring(from, to) {
            Ok(v) => {
                for (ms, m) in (from..).zip(v.iter()) {
                    jobs.push(ms, &m.lanes);
                }
                t.push(from, v.into_iter().map(|m| m.bytes));
            }
            Err(e) => {
                log::warn!(
                    "read {} on {}: {e:#}",
                    agent_common::ring::MAP_RING,
                    p.iface
                );
                failed.push(p.iface.clone());
            }
        }
    }
    failed
}

/// Finds the jobs in every interface's lanes, named from the flow table as of the last poll
/// (a second old at most: a job's hosts do not change faster), and returns the slow steps
/// to judge: on an interface with several jobs each job's own (the link's total has no
/// rhythm of one job, as `analyze` judges each job of a capture), elsewhere the link's
/// (`link_slow`). Done before the metrics lock, as the rhythm.
pub fn detect_jobs(
    rhythm: &mut LiveRhythm,
    table: &FlowTable,
    link_slow: Vec<NewSlowStep>,
) -> Vec<NewSlowStep> {
    let mut jobs_slow = Vec::new();
    for (iface, jobs) in &mut rhythm.jobs {
        let Some(at) = table.ifaces.iter().position(|i| i == iface) else {
            continue;
        };
        let flows: Vec<FlowEnds> = table
            .iter()
            .filter(|e| e.iface == at)
            .map(|e| FlowEnds {
                ip_version: e.key.ip_version,
                src: e.key.src,
                dst: e.key.dst,
                last_seen_ns: e.stats.last_seen_ns,
                stats: &e.stats,
            })
            .collect();
        for s in jobs.detect(&flows) {
            log::warn!(
                "slow training step of {} on {iface}: {:.3} s",
                s.job,
                s.step.seconds
            );
            jobs_slow.push((iface.clone(), s));
        }
    }
    let several = |iface: &str| rhythm.jobs.get(iface).is_some_and(|j| j.jobs.len() > 1);
    let mut out: Vec<NewSlowStep> = link_slow
        .into_iter()
        .filter(|s| !several(&s.source))
        .collect();
    for (iface, s) in jobs_slow {
        if !several(&iface) {
            continue;
        }
        let period_s = rhythm
            .jobs
            .get(&iface)
            .and_then(|j| j.jobs.iter().find(|x| x.id == s.job))
            .and_then(|j| j.period_seconds)
            .unwrap_or(0.0);
        out.push(NewSlowStep {
            source: iface,
            index: s.index,
            step: s.step,
            period_s,
            job: Some(s.job),
        });
    }
    out
}

/// The rhythm's and the jobs' series of every interface.
pub fn set_metrics(rhythm: &LiveRhythm, m: &mut Metrics) {
    for (i, t) in &rhythm.ifaces {
        m.set_training(crate::export::metrics::RhythmSource::Iface(i), t);
    }
    for (i, j) in &rhythm.jobs {
        m.set_training_jobs(i, &j.jobs);
    }
}

/// `/api/v1/training`: every interface's rhythm and jobs, by name.
pub fn training_doc(rhythm: &LiveRhythm) -> crate::export::api::TrainingDoc {
    let mut doc = crate::export::api::TrainingDoc::default();
    let mut ifaces: Vec<_> = rhythm.ifaces.iter().collect();
    ifaces.sort_by(|a, b| a.0.cmp(b.0));
    for (iface, t) in ifaces {
        let jobs = rhythm.jobs.get(iface).map_or(&[][..], |j| &j.jobs);
        doc.add(iface, t, jobs);
    }
    doc
}

/// Counts ring reads that failed.
pub fn ring_read_errors(failed: &[String], m: &Metrics) {
    for iface in failed {
        m.map_read_error(iface, agent_common::ring::MAP_RING, 1);
    }
}

/// A slow step found live: its source, its number there (from 1), the step (times on the
/// source's clock), the typical period.
pub struct NewSlowStep {
    pub source: String,
    pub index: u64,
    pub step: crate::detect::rhythm::Step,
    pub period_s: f64,
    /// The job whose step it is, where the source carries several jobs.
    pub job: Option<String>,
}

/// Finds the rhythm of every tracked source, logs its new slow steps and returns them (a few
/// milliseconds of autocorrelation each: done before the metrics lock is taken, so scrapes do
/// not wait).
pub fn detect_rhythms<'a>(
    steps: impl Iterator<
        Item = (
            crate::export::metrics::RhythmSource<'a>,
            &'a mut StepTracker,
        ),
    >,
) -> Vec<NewSlowStep> {
    let mut out = Vec::new();
    for (src, t) in steps {
        let new = t.detect();
        if new.len() > 3 {
            log::warn!(
                "{} slow training steps on {src}: the longest {:.3} s against a period of {:.3} s",
                new.len(),
                new.iter().map(|n| n.step.seconds).fold(0.0, f64::max),
                t.rhythm.period_seconds.unwrap_or(0.0)
            );
        }
        for (k, n) in new.into_iter().enumerate() {
            let period = t.rhythm.period_seconds.unwrap_or(0.0);
            if k < 3 {
                log::warn!(
                    "slow training step {} on {src}: {:.3} s against a period of {period:.3} s ({} bytes)",
                    n.index,
                    n.step.seconds,
                    n.step.bytes
                );
            }
            out.push(NewSlowStep {
                source: src.to_string(),
                index: n.index,
                step: n.step,
                period_s: period,
                job: None,
            });
        }
    }
    out
}

//! The training rhythm and the RDMA message sizes (declared in the catalog, `mod.rs`).

use super::{counter, follow, gauge, int_gauge, Metrics, Reg};
use crate::detect::live_jobs::LiveJob;
use crate::detect::steps::StepTracker;
use agent_common::message::{MsgOp, MSG_BUCKETS, MSG_BUCKET_SLOTS};
use agent_common::{Hook, HookCounters};
use anyhow::Result;
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec};
use std::collections::{BTreeSet, HashMap};

/// Where a rhythm was seen: an interface, or a switch port (agent, ifIndex) of the sFlow
/// collector. The labels of the other kind are empty (absent, to Prometheus).
#[derive(Clone, Copy, Debug)]
pub enum RhythmSource<'a> {
    Iface(&'a str),
    SflowPort { agent: &'a str, ifindex: &'a str },
}

impl std::fmt::Display for RhythmSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RhythmSource::Iface(i) => write!(f, "{i}"),
            RhythmSource::SflowPort { agent, ifindex } => {
                write!(f, "switch {agent} port {ifindex}")
            }
        }
    }
}

impl RhythmSource<'_> {
    fn labels(&self) -> [&str; 3] {
        match *self {
            RhythmSource::Iface(i) => [i, "", ""],
            RhythmSource::SflowPort { agent, ifindex } => ["", agent, ifindex],
        }
    }
}

/// The series of the jobs found live, by interface and job id. Bounded: a job is found in
/// the kernel ring's source lanes, so an interface has at most 16; the series of a job no
/// longer found are removed.
pub(super) struct JobSeries {
    jobs: IntGaugeVec,
    period: GaugeVec,
    duty: GaugeVec,
    hosts: IntGaugeVec,
    slow_steps: IntCounterVec,
    /// The job ids exported per interface at the last poll.
    exported: HashMap<String, BTreeSet<String>>,
}

impl JobSeries {
    pub(super) fn new(r: &Reg) -> Result<JobSeries> {
        const JOB: &[&str] = &["iface", "job"];
        Ok(JobSeries {
            jobs: int_gauge(r, "rocemon_training_jobs", "Training jobs found on the interface: groups of source hosts whose RoCE bursts keep one step (period and phase); steady tenants are in none.", &["iface"])?,
            period: gauge(r, "rocemon_training_job_step_period_seconds", "Period of a training job's steps, by interface and job (job-<its lowest source host>).", JOB)?,
            duty: gauge(r, "rocemon_training_job_comm_duty_ratio", "Share of a training job's steps with its RoCE traffic (communication).", JOB)?,
            hosts: int_gauge(r, "rocemon_training_job_hosts", "Hosts a training job's flows touch on the interface (its sources and their destinations).", JOB)?,
            slow_steps: counter(r, "rocemon_training_job_slow_steps_total", "A training job's steps that ran more than 1.5 times the median of its recent steps.", JOB)?,
            exported: HashMap::new(),
        })
    }
}

impl Metrics {
    /// The jobs found on an interface: their series set, those of jobs gone removed.
    pub fn set_training_jobs(&mut self, iface: &str, jobs: &[LiveJob]) {
        let s = &mut self.training_jobs;
        s.jobs.with_label_values(&[iface]).set(jobs.len() as i64);
        let now: BTreeSet<String> = jobs.iter().map(|j| j.id.clone()).collect();
        let before = s.exported.insert(iface.to_string(), now.clone());
        for gone in before.unwrap_or_default().difference(&now) {
            let l = [iface, gone.as_str()];
            let _ = s.period.remove_label_values(&l);
            let _ = s.duty.remove_label_values(&l);
            let _ = s.hosts.remove_label_values(&l);
            let _ = s.slow_steps.remove_label_values(&l);
        }
        for j in jobs {
            let l = [iface, j.id.as_str()];
            if let (Some(p), Some(d)) = (j.period_seconds, j.duty_ratio) {
                s.period.with_label_values(&l).set(p);
                s.duty.with_label_values(&l).set(d);
            }
            s.hosts.with_label_values(&l).set(j.hosts.len() as i64);
            follow(&s.slow_steps.with_label_values(&l), j.slow_steps);
        }
    }

    /// A source's rhythm: the gauges while it has one (removed when it has none: no rhythm,
    /// no period), and its slow steps and lost milliseconds.
    pub fn set_training(&self, src: RhythmSource<'_>, t: &StepTracker) {
        let l = src.labels();
        match t.summary() {
            Some(s) => {
                self.training_period
                    .with_label_values(&l)
                    .set(s.period_seconds);
                self.training_duty.with_label_values(&l).set(s.duty_ratio);
                self.training_step_bytes
                    .with_label_values(&l)
                    .set(s.step_bytes);
            }
            None => {
                for g in [
                    &self.training_period,
                    &self.training_duty,
                    &self.training_step_bytes,
                ] {
                    let _ = g.remove_label_values(&l);
                }
            }
        }
        follow(
            &self.training_slow_steps.with_label_values(&l),
            t.slow_steps,
        );
        if let RhythmSource::Iface(iface) = src {
            follow(
                &self.training_lost.with_label_values(&[iface]),
                t.lost_ms as f64 / 1e3,
            );
        }
    }

    /// The messages a counter block gained since `prev`, into the histogram.
    pub(super) fn observe_messages(
        &self,
        iface: &str,
        hook: Hook,
        cur: &HookCounters,
        prev: &HookCounters,
    ) {
        let d = super::delta;
        for op in MsgOp::ALL {
            let i = op as usize;
            let n = d(cur.messages[i], prev.messages[i]);
            if n == 0 {
                continue;
            }
            let at = i * MSG_BUCKET_SLOTS;
            let counts: Vec<u64> = (at..at + MSG_BUCKETS)
                .map(|b| d(cur.message_buckets[b], prev.message_buckets[b]))
                .collect();
            let sum = d(cur.message_bytes[i], prev.message_bytes[i]) as f64;
            self.message_bytes.add(
                &[iface, hook.direction(), hook.name(), op.name()],
                &counts,
                sum,
            );
        }
    }
}

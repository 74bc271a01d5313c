//! The findings of a capture: the analysis' evidence as one window of the findings engine
//! ([`crate::detect::engine`]), the same judgement the live agent runs at every poll. A
//! capture's window spans it whole and has what only a whole capture can show: every
//! packet's time (the pause intervals, CE/CNP pairing, the flows' first and last packets),
//! and the slow steps explained from the per-millisecond series. Times are seconds from the
//! capture's first frame.

use super::analysis::Analysis;
use super::training::TrainingView;
use crate::detect::cnp_response::{CnpConnection, CnpReport};
use crate::detect::engine::trouble::{FlowTotals, Trouble};
use crate::detect::engine::window::{self as w, Window};
use crate::detect::engine::{judge, rank, Held, Ranked};
use crate::detect::findings::flow_name;
use std::collections::HashMap;
use std::net::IpAddr;

/// What the analysis' judgement gives the report: the training view with its slow steps
/// explained, the CE/CNP pairing's view, and the findings ranked under their verdict.
#[derive(Clone, Debug)]
pub struct Judged {
    pub training: TrainingView,
    pub cnp: CnpReport,
    pub ranked: Ranked,
}

/// Judges an analysis (the capture's one window).
pub fn judge_analysis(a: &Analysis) -> Judged {
    // The jobs' rhythms and slow steps, and every connection paired (not only those the
    // report lists): independent, so side by side where a second core is free (the run after
    // the last frame is one thread's otherwise).
    let cnp = &a.cnp;
    let (training, (cnp, all)) = std::thread::scope(|s| {
        let paired = std::thread::Builder::new()
            .name("analyze-judge".into())
            .spawn_scoped(s, || cnp.report_and_all());
        let training = super::training_view::explained(a);
        let paired = match paired {
            Ok(p) => p.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(_) => cnp.report_and_all(),
        };
        (training, paired)
    });
    let ranked = findings(a, &training, &all);
    Judged {
        training,
        cnp,
        ranked,
    }
}

/// The findings of an analysis, bounded per kind, ranked and merged into incidents, and
/// the verdict over them.
fn findings(a: &Analysis, training: &TrainingView, connections: &[CnpConnection]) -> Ranked {
    let origin = a.first_ts_ns.unwrap_or(0);
    let at = |ns: u64| ns.saturating_sub(origin) as f64 / 1e9;
    let whole = (0.0, a.duration_seconds());
    let flows = &a.pipeline.flows;
    let mut trouble = Trouble::default();
    trouble.add(|| {
        flows.iter().map(|e| {
            let t = FlowTotals::of(e.key, &e.stats);
            (t, at(e.stats.first_seen_ns), at(e.stats.last_seen_ns))
        })
    });
    // The CNPs each receiver sent, paired with the CE packets they answered.
    for c in connections {
        if let Ok(host) = c.dst.parse::<IpAddr>() {
            trouble.answers(host, c.cnps, c.ce_packets - c.unanswered_ce);
        }
    }
    let c = &a.counters;
    let mut win = Window {
        span: whole,
        storm_s: a.options().pfc_storm_ns as f64 / 1e9,
        storms: a
            .pause
            .storms
            .iter()
            .map(|s| w::Storm {
                priority: s.priority,
                span: (at(s.start_ns), at(s.end_ns)),
                xoff_frames: s.xoff_frames,
                mac: Some(s.mac.clone()),
                place: None,
            })
            .collect(),
        reactions: reactions(a, connections, &at),
        lossy: vec![w::Lossy {
            lossy: c.lossy_roce_packets,
            roce: c.roce_packets(),
            expected: crate::config::classes::summary(&a.options().classes)
                .trim_start_matches("classes: ")
                .to_string(),
            place: None,
        }],
        elephants: elephants(a, whole.1),
        shared_5tuples: (
            a.pipeline.ecmp.shared_5tuple_groups,
            a.pipeline.ecmp.shared_5tuples.first().map(|t| t.describe()),
        ),
        slow_steps: slow_steps(training, origin),
        ..Window::default()
    };
    let ecmp = &a.pipeline.ecmp;
    win.collisions = crate::detect::ecmp::GroupView::colliding(
        ecmp.groups
            .iter()
            .chain(&ecmp.predicted)
            .chain(&a.pipeline.fabric.groups),
    );
    win.trouble = Some(&trouble);
    let judged = judge(&win);
    let steps = training
        .period_seconds
        .is_some()
        .then_some(training.steps.len());
    rank(Held::default().bounded(judged), steps)
}

/// The senders judged for their answer to CNPs, each over its flow's life.
fn reactions(
    a: &Analysis,
    connections: &[CnpConnection],
    at: &dyn Fn(u64) -> f64,
) -> Vec<w::Reaction> {
    type Conn = (String, String, u16, u32);
    let judged: HashMap<Conn, usize> = connections
        .iter()
        .enumerate()
        .filter(|(_, c)| c.cnp_bursts > 0)
        .map(|(i, c)| ((c.src.clone(), c.dst.clone(), c.sport, c.dest_qp), i))
        .collect();
    let mut spans: HashMap<usize, (f64, f64)> = HashMap::new();
    if !judged.is_empty() {
        for e in a.pipeline.flows.iter() {
            let k = (
                e.src().to_string(),
                e.dst().to_string(),
                e.key.sport,
                e.key.dest_qp,
            );
            if let Some(i) = judged.get(&k) {
                spans.insert(*i, (at(e.stats.first_seen_ns), at(e.stats.last_seen_ns)));
            }
        }
    }
    let whole = (0.0, a.duration_seconds());
    connections
        .iter()
        .enumerate()
        .filter(|(_, c)| c.cnp_bursts > 0)
        .map(|(i, c)| w::Reaction {
            src: c.src.clone(),
            dst: c.dst.clone(),
            sport: c.sport,
            dest_qp: c.dest_qp,
            bursts: c.cnp_bursts,
            ignored: c.cnp_bursts_ignored,
            ratio: c.rate_after_cnps_ratio.unwrap_or(0.0),
            rate_before_bytes_per_second: c.rate_before_cnps_bits_per_second.unwrap_or(0.0) / 8.0,
            span: spans.get(&i).copied().unwrap_or(whole),
        })
        .collect()
}

/// Each elephant over its periods: its peak rate and its flow's bytes.
fn elephants(a: &Analysis, duration_s: f64) -> Vec<w::Elephant> {
    let bytes: HashMap<_, u64> = a
        .pipeline
        .flows
        .iter()
        .filter(|e| a.pipeline.elephants.contains_key(&e.key))
        .map(|e| (e.key, e.stats.bytes))
        .collect();
    a.pipeline
        .elephants
        .iter()
        .map(|(k, periods)| {
            let (src, dst) = (
                agent_common::flow_key::addr(k.ip_version, &k.src).to_string(),
                agent_common::flow_key::addr(k.ip_version, &k.dst).to_string(),
            );
            let start = periods.first().map_or(0.0, |p| p.started_s);
            let end = periods.last().and_then(|p| p.ended_s).unwrap_or(duration_s);
            let peak = periods
                .iter()
                .map(|p| p.peak_bytes_per_second)
                .fold(0.0, f64::max);
            w::Elephant {
                flow: flow_name(&src, &dst, k.sport, k.dest_qp),
                bytes_per_second: peak,
                over: Some((bytes.get(k).copied().unwrap_or(0), (start, end))),
            }
        })
        .collect()
}

/// The training view's slow steps, as explained: each job's, named by its job, where the
/// capture holds several jobs; else the leading rhythm's (the one job's, or the link's).
fn slow_steps(t: &TrainingView, origin_ns: u64) -> Vec<w::SlowStep> {
    if t.jobs.len() > 1 {
        return t
            .jobs
            .iter()
            .flat_map(|j| rhythm_slow_steps(&j.rhythm, origin_ns, Some(&j.id)))
            .collect();
    }
    rhythm_slow_steps(t, origin_ns, None)
}

/// A rhythm's slow steps (numbered by their place among its steps).
fn rhythm_slow_steps(
    r: &crate::detect::rhythm::Rhythm,
    origin_ns: u64,
    job: Option<&str>,
) -> Vec<w::SlowStep> {
    let Some(period) = r.period_seconds else {
        return Vec::new();
    };
    r.steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.slow)
        .map(|(i, s)| {
            let start = s.start_ns.saturating_sub(origin_ns) as f64 / 1e9;
            w::SlowStep {
                index: i + 1,
                span: (start, start + s.seconds),
                seconds: s.seconds,
                typical_seconds: period,
                causes: s.causes.iter().map(|c| (c.kind, c.share)).collect(),
                straggler: s
                    .straggler
                    .as_ref()
                    .map(|x| (x.host.clone(), x.started_late_seconds, x.ended_late_seconds)),
                job: job.map(str::to_string),
                place: None,
            }
        })
        .collect()
}

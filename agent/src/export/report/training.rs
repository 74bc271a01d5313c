//! The training section of `analyze`'s table: the rhythm (or that there is none) and the RDMA
//! message sizes.

use crate::detect::rhythm::Rhythm;
use crate::pipeline::training::{MessageReport, TrainingView};

/// The table's lines: the rhythm (or that there is none), each job when there are several,
/// and the message sizes.
pub fn table(s: &mut String, t: &TrainingView, messages: &[MessageReport]) {
    use std::fmt::Write as _;
    let r: &Rhythm = t;
    match (r.period_seconds, r.duty_ratio) {
        (Some(p), Some(d)) => {
            let _ = writeln!(
                s,
                "Training    period {:.1} ms, communication {:.0}% of a step, {} steps ({} slow)",
                p * 1e3,
                d * 100.0,
                r.steps.len(),
                r.slow_steps
            );
        }
        _ => {
            let _ = writeln!(s, "Training    no step rhythm");
        }
    }
    if t.jobs.len() > 1 {
        for j in &t.jobs {
            let _ = writeln!(
                s,
                "  {}  {} hosts, {} flows, period {:.1} ms, {} steps ({} slow)",
                j.id,
                j.hosts.len(),
                j.flows,
                j.rhythm.period_seconds.unwrap_or(0.0) * 1e3,
                j.rhythm.steps.len(),
                j.rhythm.slow_steps
            );
        }
    }
    let parts: Vec<String> = messages
        .iter()
        .filter(|m| m.messages > 0)
        .map(|m| {
            format!(
                "{} {} (mean {})",
                m.op,
                m.messages,
                crate::export::report::human_bytes(m.bytes as f64 / m.messages as f64)
            )
        })
        .collect();
    if !parts.is_empty() {
        let _ = writeln!(s, "Messages    {}", parts.join("  "));
    }
}

/// Explains each slow step of the report's rhythm and of every job
/// ([`crate::detect::slow_steps`]) from the job's own evidence: the pause intervals of the
/// job's priority within the step, the trouble between the job's hosts in it (another
/// tenant's CE marks, NAKs or lossy packets at the same time are no cause of the job's
/// step), the job's flows on a colliding predicted path; the straggler where nothing
/// explains it. Without a job found (no host with a rhythm of its own), the link's trouble.
pub fn explain_slow_steps(a: &crate::pipeline::analysis::Analysis, t: &mut TrainingView) {
    for j in &mut t.jobs {
        let e = Evidence {
            sources: &j.source_keys,
            names: &j.sources,
            hosts: &j.host_keys,
            bytes_per_packet: j.bytes as f64 / j.packets.max(1) as f64,
        };
        explain(a, &mut j.rhythm, Some(&e));
    }
    // The section's rhythm is the largest job's (explained above), else the link's.
    match t.jobs.first() {
        Some(j) => t.rhythm = j.rhythm.clone(),
        None => explain(a, &mut t.rhythm, None),
    }
}

/// Whose trouble a job's step is judged by.
struct Evidence<'a> {
    sources: &'a [(u8, [u8; 16])],
    /// The sources as written (a straggler is one of them).
    names: &'a [String],
    hosts: &'a [(u8, [u8; 16])],
    /// The job's bytes per packet (its packets in a step are its bytes there over this).
    bytes_per_packet: f64,
}

fn explain(a: &crate::pipeline::analysis::Analysis, r: &mut Rhythm, job: Option<&Evidence<'_>>) {
    use crate::detect::slow_steps as why;
    let Some(period) = r.period_seconds else {
        return;
    };
    let mask = why::job_priorities(&a.options().classes);
    let pauses = a.pause.index();
    let on_colliding = OnColliding::new(a, job.map(|j| j.sources));
    let among = job.map(|j| a.training.pairs.pairs_among(j.hosts));
    const MS: u64 = crate::detect::rhythm::BUCKET_NS;
    for step in r.steps.iter_mut().filter(|s| s.slow) {
        let extra = step.seconds - period;
        let end = step.start_ns + (step.seconds * 1e9) as u64;
        let (paused_ns, _) = pauses.paused_within(mask, step.start_ns, end);
        let t = match (job, &among) {
            (Some(j), Some(among)) => {
                let mut t = a
                    .training
                    .pairs
                    .within(step.start_ns / MS, end.div_ceil(MS), among);
                t.packets = (step.bytes as f64 / j.bytes_per_packet.max(1.0)).round() as u64;
                t
            }
            _ => a.training.trouble_within(step.start_ns, end),
        };
        let on_path = on_colliding.during(step.start_ns);
        let causes = why::causes(extra, paused_ns as f64 / 1e9, why::evidence(&t, on_path));
        if causes.first().is_some_and(|c| c.kind == "unexplained") {
            let mut bursts = a.training.bursts_within(step.start_ns, end);
            if let Some(j) = job {
                bursts.retain(|b| j.names.contains(&b.src));
            }
            step.straggler = why::straggler(&bursts, extra);
        }
        step.causes = causes;
    }
}

/// The predicted paths where elephants collide (by the configured hash model).
fn colliding_paths(a: &crate::pipeline::analysis::Analysis) -> Vec<u32> {
    a.pipeline
        .ecmp
        .predicted
        .iter()
        .flat_map(|g| g.members.iter())
        .filter(|m| m.colliding)
        .filter_map(|m| m.member.parse().ok())
        .collect()
}

/// The job's flows on a colliding predicted path (by the configured hash model), as
/// intervals of their life sorted by their first packet with the latest end so far: whether
/// one was there before a step and still in it is a binary search, not a walk over every
/// flow per slow step. Flows that are elephants themselves are left out (those are what it
/// shares the path with); two of the job's own elephants on one path are the
/// `ecmp_collision` finding, not a cause of one step.
struct OnColliding {
    /// (first seen, latest last seen among the flows first seen up to here).
    lives: Vec<(u64, u64)>,
}

impl OnColliding {
    fn new(
        a: &crate::pipeline::analysis::Analysis,
        job_sources: Option<&[(u8, [u8; 16])]>,
    ) -> OnColliding {
        let colliding = colliding_paths(a);
        let mut lives: Vec<(u64, u64)> = match &a.options().ecmp.hash {
            Some(model) if !colliding.is_empty() => a
                .pipeline
                .flows
                .iter()
                .filter(|e| {
                    !a.pipeline.elephants.contains_key(&e.key)
                        && job_sources.is_none_or(|j| j.contains(&(e.key.ip_version, e.key.src)))
                        && colliding.contains(&model.path(&crate::detect::ecmp::fields(&e.key)))
                })
                .map(|e| (e.stats.first_seen_ns, e.stats.last_seen_ns))
                .collect(),
            _ => Vec::new(),
        };
        lives.sort_unstable();
        let mut latest = 0;
        for l in &mut lives {
            latest = latest.max(l.1);
            l.1 = latest;
        }
        OnColliding { lives }
    }

    /// Whether such a flow was seen before `from_ns` and was still there at it.
    fn during(&self, from_ns: u64) -> bool {
        let before = self.lives.partition_point(|(first, _)| *first < from_ns);
        before > 0 && self.lives[before - 1].1 >= from_ns
    }
}

/// One finding per slow step, with its causes.
pub fn slow_step_findings(
    r: &super::Report,
    origin_ns: u64,
) -> Vec<crate::detect::findings::Finding> {
    let Some(period) = r.training.period_seconds else {
        return Vec::new();
    };
    r.training
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.slow)
        .map(|(i, s)| {
            let start = s.start_ns.saturating_sub(origin_ns) as f64 / 1e9;
            let causes: Vec<(&'static str, f64)> =
                s.causes.iter().map(|c| (c.kind, c.share)).collect();
            crate::detect::findings::slow_step(&crate::detect::findings::SlowStep {
                index: i + 1,
                span: (start, start + s.seconds),
                seconds: s.seconds,
                typical_seconds: period,
                causes: &causes,
                straggler: s.straggler.as_ref().map(|x| {
                    (
                        x.host.as_str(),
                        x.started_late_seconds,
                        x.ended_late_seconds,
                    )
                }),
            })
        })
        .collect()
}

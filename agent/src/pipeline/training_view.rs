//! The training view of an analysis: the jobs found in the traffic (each with its hosts,
//! flows and RDMA messages), the leading rhythm, and each slow step explained from the job's
//! own evidence ([`crate::detect::slow_steps`]).

use super::analysis::Analysis;
use super::training::TrainingView;
use crate::detect::rhythm::Rhythm;

/// The training view, its slow steps explained.
pub fn explained(a: &Analysis) -> TrainingView {
    let mut t = training_view(a);
    explain_slow_steps(a, &mut t);
    t
}

/// The jobs found in the traffic, each with its hosts and flows; the largest job's rhythm
/// leads (the link's where there is no job).
fn training_view(a: &Analysis) -> TrainingView {
    let mask = crate::detect::slow_steps::job_priorities(&a.options().classes);
    let mut jobs = a.training.jobs(&a.pause, mask);
    for j in &mut jobs {
        let mut hosts: std::collections::BTreeSet<(u8, [u8; 16])> =
            j.source_keys.iter().copied().collect();
        let mut messages = crate::detect::jobs::MessageSum::default();
        for e in a.pipeline.flows.iter() {
            if j.source_keys.contains(&(e.key.ip_version, e.key.src)) {
                j.flows += 1;
                messages.add(&e.stats);
                hosts.insert((e.key.ip_version, e.key.dst));
            }
        }
        j.messages = messages.report();
        j.host_keys = hosts.into_iter().collect();
        let mut names: Vec<String> = j
            .host_keys
            .iter()
            .map(|(v, a)| agent_common::flow_key::addr(*v, a).to_string())
            .collect();
        names.sort();
        j.hosts = names;
    }
    let rhythm = match jobs.first() {
        Some(j) => j.rhythm.clone(),
        None => a.training.rhythm_paused(&a.pause, mask),
    };
    TrainingView { rhythm, jobs }
}

/// Explains each slow step of the report's rhythm and of every job
/// ([`crate::detect::slow_steps`]) from the job's own evidence: the pause intervals of the
/// job's priority within the step, the trouble between the job's hosts in it (another
/// tenant's CE marks, NAKs or lossy packets at the same time are no cause of the job's
/// step), the job's flows on a colliding predicted path; the straggler where nothing
/// explains it. Without a job found (no host with a rhythm of its own), the link's trouble.
fn explain_slow_steps(a: &Analysis, t: &mut TrainingView) {
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

fn explain(a: &Analysis, r: &mut Rhythm, job: Option<&Evidence<'_>>) {
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
fn colliding_paths(a: &Analysis) -> Vec<u32> {
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
    fn new(a: &Analysis, job_sources: Option<&[(u8, [u8; 16])]>) -> OnColliding {
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

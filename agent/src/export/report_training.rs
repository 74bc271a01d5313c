//! The training section of `analyze`'s table: the rhythm (or that there is none) and the RDMA
//! message sizes.

use crate::detect::rhythm::Rhythm;
use crate::pipeline::training::MessageReport;

/// The table's lines: the rhythm (or that there is none) and the message sizes.
pub fn table(s: &mut String, r: &Rhythm, messages: &[MessageReport]) {
    use std::fmt::Write as _;
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

/// Explains each slow step of the report's rhythm. The time the job's priority was paused
/// within the step (measured: pause intervals at the link speed) explains that much of its
/// extra time over the typical step (the median period). The rest goes in equal shares to the
/// other causes the step shows (they are evidence, not measured time): `congestion` (CE marks
/// on 1% of its packets and at least 10), `retransmission` (a PSN gap, a retransmitted
/// packet or a NAK), `lossy_class` (RoCE outside the lossless class, on 1% of its packets
/// and at least 10), `ecmp_collision` (a flow of the step on a path where elephants collide,
/// by the configured hash model: a job's flow that shares its path with colliding
/// elephants). What no cause takes is `unexplained`; then the host whose
/// burst started or ended last is named (the straggler), when it stands out.
pub fn explain_slow_steps(
    a: &crate::pipeline::analysis::Analysis,
    r: &mut crate::detect::rhythm::Rhythm,
) {
    use crate::detect::findings::{CONGESTION_CE_SHARE, MIN_CE_PACKETS};
    use crate::detect::rhythm::Cause;
    let Some(period) = r.period_seconds else {
        return;
    };
    let mask = job_priorities(&a.options().classes);
    let colliding = colliding_paths(a);
    for step in r.steps.iter_mut().filter(|s| s.slow) {
        let extra = (step.seconds - period).max(1e-9);
        let end = step.start_ns + (step.seconds * 1e9) as u64;
        let (paused_ns, _) = a.pause.paused_within(mask, step.start_ns, end);
        let pause = (paused_ns as f64 / 1e9 / extra).min(1.0);
        let t = a.training.trouble_within(step.start_ns, end);
        let share_of =
            |n: u64| n >= MIN_CE_PACKETS && n as f64 >= CONGESTION_CE_SHARE * t.packets as f64;
        let mut seen: Vec<&'static str> = Vec::new();
        if share_of(t.ce) {
            seen.push("congestion");
        }
        if t.recoveries > 0 {
            seen.push("retransmission");
        }
        if share_of(t.lossy) {
            seen.push("lossy_class");
        }
        if step_on_colliding_path(a, &colliding, step.start_ns, end) {
            seen.push("ecmp_collision");
        }
        let rest = 1.0 - pause;
        let mut causes: Vec<Cause> = vec![Cause {
            kind: "pfc_pause",
            share: pause,
        }];
        if seen.is_empty() {
            causes.push(Cause {
                kind: "unexplained",
                share: rest,
            });
        } else {
            let each = rest / seen.len() as f64;
            causes.extend(seen.into_iter().map(|kind| Cause { kind, share: each }));
        }
        causes.retain(|c| c.share > 1e-6);
        causes.sort_by(|x, y| y.share.total_cmp(&x.share));
        if causes.first().is_some_and(|c| c.kind == "unexplained") {
            step.straggler = straggler(&a.training.bursts_within(step.start_ns, end), extra);
        }
        step.causes = causes;
    }
}

/// The priorities that carry the job (bit p: priority p): the configured RoCE priority, or
/// every priority on a DSCP-only fabric.
pub fn job_priorities(c: &agent_common::TrafficClasses) -> u8 {
    if c.roce_priority == agent_common::classes::ANY_PRIORITY {
        0xFF
    } else {
        1u8.checked_shl(u32::from(c.roce_priority)).unwrap_or(0xFF)
    }
}

/// The predicted paths where elephants collide (by the configured hash model).
fn colliding_paths(a: &crate::pipeline::analysis::Analysis) -> Vec<u32> {
    a.ecmp
        .predicted
        .iter()
        .flat_map(|g| g.members.iter())
        .filter(|m| m.colliding)
        .filter_map(|m| m.member.parse().ok())
        .collect()
}

/// Whether a flow of the job hashes onto a colliding path: a flow seen before the step
/// (in the steps before it) and still in it, and not one of the elephants (those are what
/// it shares the path with). Two of the job's own elephants on one path are the
/// `ecmp_collision` finding, not a cause of one step.
fn step_on_colliding_path(
    a: &crate::pipeline::analysis::Analysis,
    colliding: &[u32],
    from_ns: u64,
    to_ns: u64,
) -> bool {
    let Some(model) = &a.options().ecmp.hash else {
        return false;
    };
    if colliding.is_empty() {
        return false;
    }
    a.flows.iter().any(|e| {
        e.stats.first_seen_ns < from_ns
            && e.stats.last_seen_ns >= from_ns
            && e.stats.first_seen_ns < to_ns
            && !a.elephants.contains_key(&e.key)
            && colliding.contains(&model.path(&crate::detect::ecmp::fields(&e.key)))
    })
}

/// The host whose burst ended (or started) last, if it was later than the others by a tenth
/// of the step's extra time (and at least 2 ms, two buckets): with one host, or hosts that
/// kept together, nobody is named.
pub fn straggler(
    bursts: &[crate::pipeline::training::BurstEdges],
    extra_s: f64,
) -> Option<crate::detect::rhythm::Straggler> {
    if bursts.len() < 2 {
        return None;
    }
    let late = |i: usize, f: fn(&crate::pipeline::training::BurstEdges) -> u64| {
        let others = bursts
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, b)| f(b))
            .max()
            .unwrap_or(0);
        f(&bursts[i]).saturating_sub(others) as f64 / 1e9
    };
    let (i, end_late, start_late) = (0..bursts.len())
        .map(|i| (i, late(i, |b| b.last_ns), late(i, |b| b.first_ns)))
        .max_by(|x, y| x.1.total_cmp(&y.1).then(x.2.total_cmp(&y.2)))?;
    let bar = (0.1 * extra_s).max(0.002);
    (end_late >= bar || start_late >= bar).then(|| crate::detect::rhythm::Straggler {
        host: bursts[i].src.clone(),
        started_late_seconds: start_late,
        ended_late_seconds: end_late,
    })
}

/// One finding per slow step, with its causes.
pub fn slow_step_findings(
    r: &super::report::Report,
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

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

/// Explains each slow step of the report's rhythm: the time a priority was paused within the
/// step (measured: pause intervals at the link speed) explains that much of its extra time
/// over the typical step (the median period); CE marks on the RoCE of the step (1% of its
/// packets or more) take the rest as congestion; what is left is unexplained.
pub fn explain_slow_steps(
    a: &crate::pipeline::analysis::Analysis,
    r: &mut crate::detect::rhythm::Rhythm,
) {
    use crate::detect::rhythm::Cause;
    let Some(period) = r.period_seconds else {
        return;
    };
    for step in r.steps.iter_mut().filter(|s| s.slow) {
        let extra = (step.seconds - period).max(1e-9);
        let end = step.start_ns + (step.seconds * 1e9) as u64;
        let (paused_ns, _) = a.pause.paused_within(step.start_ns, end);
        let pause = (paused_ns as f64 / 1e9 / extra).min(1.0);
        let (packets, ce) = a.timeline.packets_and_ce(step.start_ns, end);
        let congested = ce >= crate::detect::findings::MIN_CE_PACKETS
            && ce as f64 >= crate::detect::findings::CONGESTION_CE_SHARE * packets as f64;
        let congestion = if congested { 1.0 - pause } else { 0.0 };
        let mut causes: Vec<Cause> = [
            ("pfc_pause", pause),
            ("congestion", congestion),
            ("unexplained", 1.0 - pause - congestion),
        ]
        .into_iter()
        .filter(|(_, share)| *share > 1e-6)
        .map(|(kind, share)| Cause { kind, share })
        .collect();
        causes.sort_by(|x, y| y.share.total_cmp(&x.share));
        step.causes = causes;
    }
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
            })
        })
        .collect()
}

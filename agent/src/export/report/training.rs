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

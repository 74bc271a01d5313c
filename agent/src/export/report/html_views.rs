//! The HTML report's sections for the lossless fabric, the training rhythm and RDMA message
//! sizes, and the switches' view (sFlow): only what the capture has.

use crate::export::report::html_charts::{count, line_chart, table};
use crate::export::report::{human_bytes, Report};
use std::fmt::Write as _;

fn kpi(k: &str, v: String) -> Vec<String> {
    vec![k.to_string(), v]
}

/// Appends the sections to the page.
pub fn sections(r: &Report<'_>, s: &mut String) {
    training(r, s);
    lossless(r, s);
    sflow(r, s);
}

fn training(r: &Report<'_>, s: &mut String) {
    s.push_str("<h2>Training rhythm and RDMA messages</h2>");
    let t = &r.training;
    match (t.period_seconds, t.duty_ratio) {
        (Some(p), Some(d)) => {
            s.push_str(&table(
                &["", "value"],
                &[
                    kpi("step period", format!("{:.1} ms", p * 1e3)),
                    kpi(
                        "communication share of a step",
                        format!("{:.0}%", d * 100.0),
                    ),
                    kpi("steps", t.steps.len().to_string()),
                    kpi("slow steps", t.slow_steps.to_string()),
                ],
            ));
            let secs: Vec<f64> = t.steps.iter().map(|x| x.seconds * 1e3).collect();
            // One point per step, a period apart on the time axis.
            let first = t.steps.first().map_or(0.0, |x| {
                x.start_ns.saturating_sub(r.first_ts_ns) as f64 / 1e9
            });
            s.push_str(&line_chart(
                &super::html_charts::Axes {
                    title: "Step durations",
                    unit: "ms",
                    dt: p,
                    t0: first,
                    empty: "no steps",
                },
                &[("step", "#4472c4", secs)],
            ));
        }
        _ => s.push_str("<p>No step rhythm in this capture.</p>"),
    }
    jobs(r, s);
    let rows: Vec<Vec<String>> = r
        .roce
        .messages
        .iter()
        .filter(|m| m.messages > 0)
        .map(|m| {
            vec![
                m.op.to_string(),
                m.messages.to_string(),
                human_bytes(m.bytes as f64),
                human_bytes(m.bytes as f64 / m.messages as f64),
            ]
        })
        .collect();
    if !rows.is_empty() {
        s.push_str(&table(
            &["operation", "messages", "bytes", "mean size"],
            &rows,
        ));
        // The size distribution: messages per power-of-four bucket.
        let hist: Vec<Vec<String>> = r
            .roce
            .messages
            .iter()
            .flat_map(|m| {
                m.buckets.iter().map(move |b| {
                    vec![
                        m.op.to_string(),
                        match b.le {
                            Some(le) => format!("up to {}", binary_size(le)),
                            None => "above 1 GiB".to_string(),
                        },
                        b.messages.to_string(),
                    ]
                })
            })
            .collect();
        s.push_str(&table(&["operation", "size", "messages"], &hist));
    }
    if !r.training_sources.is_empty() {
        let rows: Vec<Vec<String>> = r
            .training_sources
            .iter()
            .map(|x| {
                vec![
                    x.src.clone(),
                    human_bytes(x.bytes as f64),
                    x.rhythm
                        .period_seconds
                        .map(|p| format!("{:.1} ms", p * 1e3))
                        .unwrap_or_else(|| "none".into()),
                    x.rhythm.slow_steps.to_string(),
                ]
            })
            .collect();
        s.push_str("<p>Per source host (several jobs may share the link):</p>");
        s.push_str(&table(
            &["source", "bytes", "step period", "slow steps"],
            &rows,
        ));
    }
}

/// The training jobs found in the traffic (sources whose bursts share a period and a phase),
/// largest first: the section's rhythm above is the first one's.
fn jobs(r: &Report<'_>, s: &mut String) {
    let jobs = &r.training.jobs;
    if jobs.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.sources.join(", "),
                count(j.hosts.len() as u64),
                count(j.flows as u64),
                human_bytes(j.bytes as f64),
                j.rhythm
                    .period_seconds
                    .map(|p| format!("{:.1} ms", p * 1e3))
                    .unwrap_or_else(|| "none".into()),
                format!("{} of {}", j.rhythm.slow_steps, j.rhythm.steps.len()),
            ]
        })
        .collect();
    let _ = write!(
        s,
        "<p>{} training job{} found in the traffic:</p>",
        jobs.len(),
        if jobs.len() == 1 { "" } else { "s" }
    );
    s.push_str(&table(
        &[
            "job",
            "sources",
            "hosts",
            "flows",
            "bytes",
            "step period",
            "slow steps",
        ],
        &rows,
    ));
}

/// A bucket bound (a power of two from 1 KiB) in binary units.
fn binary_size(b: u64) -> String {
    match b {
        0..=0xFFFFF => format!("{} KiB", b >> 10),
        0x100000..=0x3FFFFFFF => format!("{} MiB", b >> 20),
        _ => format!("{} GiB", b >> 30),
    }
}

#[cfg(test)]
#[test]
fn bucket_bounds_read_in_binary_units() {
    let names: Vec<String> = (0..11)
        .filter_map(agent_common::message::bucket_le)
        .map(binary_size)
        .collect();
    assert_eq!(
        names,
        [
            "1 KiB", "4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB", "4 MiB", "16 MiB", "64 MiB",
            "256 MiB", "1 GiB"
        ]
    );
}

fn lossless(r: &Report<'_>, s: &mut String) {
    s.push_str("<h2>Lossless fabric</h2>");
    if r.pfc.frames + r.pause.frames + r.pause.other_mac_control > 0 {
        let rows: Vec<Vec<String>> = r
            .pfc
            .priorities
            .iter()
            .filter(|p| p.xoff + p.xon > 0)
            .map(|p| {
                // Seconds, not quanta: the union of the pause intervals (what the priority
                // stood still), and what the frames asked for at the link speed.
                let speed = r.pfc.link_speed_bps as f64;
                vec![
                    p.priority.to_string(),
                    count(p.xoff),
                    count(p.xon),
                    p.paused_seconds
                        .map(crate::detect::findings::duration)
                        .unwrap_or_else(|| "unknown".into()),
                    if speed > 0.0 {
                        crate::detect::findings::duration(p.quanta as f64 * 512.0 / speed)
                    } else {
                        format!("{} quanta", count(p.quanta))
                    },
                ]
            })
            .collect();
        let _ = write!(
            s,
            "<p>{} PFC frames, {} PAUSE frames ({} XON), {} other MAC control frames.</p>",
            r.pfc.frames, r.pause.frames, r.pause.xon, r.pause.other_mac_control
        );
        s.push_str(&table(
            &["priority", "XOFF", "XON", "paused", "pause asked for"],
            &rows,
        ));
    } else {
        s.push_str("<p>No PFC or PAUSE frames.</p>");
    }
    let rows: Vec<Vec<String>> = r
        .roce
        .dscp
        .iter()
        .map(|c| {
            vec![
                c.dscp.unwrap_or(0).to_string(),
                c.packets.to_string(),
                human_bytes(c.bytes as f64),
            ]
        })
        .collect();
    if !rows.is_empty() {
        s.push_str(&table(&["RoCE DSCP", "packets", "bytes"], &rows));
    }
    let l = &r.roce.lossy;
    let _ = write!(
        s,
        "<p>Lossy RoCE (outside {}): {} packets, {}; CNPs out of class: {}.</p>",
        crate::export::report::html_charts::esc(&l.expected),
        l.packets,
        human_bytes(l.bytes as f64),
        l.cnp_out_of_class
    );
}

fn sflow(r: &Report<'_>, s: &mut String) {
    let Some(f) = &r.sflow else {
        return;
    };
    s.push_str("<h2>Switches (sFlow)</h2>");
    s.push_str(&table(
        &["", "value"],
        &[
            kpi("datagrams", f.datagrams.to_string()),
            kpi("lost datagrams", f.lost_datagrams.to_string()),
            kpi("agents", f.agents.len().to_string()),
            kpi("flow samples", f.flow_samples.to_string()),
            kpi("counter samples", f.counter_samples.to_string()),
            kpi("RoCE samples", f.samples.packets.to_string()),
            kpi("RoCE packets, estimated", f.estimated.packets.to_string()),
            kpi(
                "RoCE bytes, estimated",
                human_bytes(f.estimated.bytes as f64),
            ),
            kpi("CNPs, estimated", f.estimated.cnp.to_string()),
        ],
    ));
    let mut ports: Vec<&crate::sflow::report::Port> =
        f.ports.iter().filter(|p| p.roce_samples > 0).collect();
    ports.sort_by_key(|p| std::cmp::Reverse(p.estimated_bytes));
    let rows: Vec<Vec<String>> = ports
        .iter()
        .take(20)
        .map(|p| {
            vec![
                format!("{}/{} {}", p.agent, p.ifindex, p.direction),
                p.roce_samples.to_string(),
                human_bytes(p.estimated_bytes as f64),
                if p.few_samples { "few samples" } else { "" }.to_string(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        s.push_str(&table(
            &["port", "RoCE samples", "estimated bytes", ""],
            &rows,
        ));
    }
    if let Some(fab) = &f.fabric {
        for g in &fab.groups {
            let rows = crate::export::report::html_charts::member_rows(&g.members);
            let _ = write!(
                s,
                "<p>Switch group {}: {}</p>",
                crate::export::report::html_charts::esc(&g.name),
                if g.collision { "COLLISION" } else { "balanced" }
            );
            s.push_str(&table(&["uplink", "flows", "elephants", ""], &rows));
        }
    }
}

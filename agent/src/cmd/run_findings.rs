//! The live agent's findings at each poll: the counters of every watched interface, the
//! elephants and the ECMP views through [`crate::detect::live_findings`]; a line in the log
//! when one opens or closes, and the metrics and API view of what is active.

use crate::config::Config;
use crate::detect::ecmp::{EcmpReport, FlowView};
use crate::detect::live_findings::{FindingsView, LiveFindings, LiveSlowStep, Poll, Sample};
use crate::export::metrics::Metrics;
use crate::sources::flow_pressure::MapFill;
use agent_common::{Hook, HookCounters};

/// One interface's counters as the findings' window takes them (XDP and tc ingress count
/// what the host receives, tc egress what it sends), and the NIC's own pause time where its
/// driver counts it.
pub fn sample(
    hooks: &[Hook],
    blocks: &[HookCounters; Hook::COUNT],
    nic: &crate::sources::nic_pause::NicPause,
) -> Sample {
    let mut s = Sample::default();
    for h in hooks {
        if *h == Hook::AfXdp {
            continue;
        }
        s.add(*h != Hook::TcEgress, &blocks[*h as usize]);
    }
    s.nic_paused_us = std::array::from_fn(|p| nic.rx_paused_micros(p));
    s
}

/// Runs the findings over this poll; logs what opened and closed; sets their metrics.
pub fn update(
    findings: &mut LiveFindings,
    samples: Vec<(String, Sample, u64)>,
    slow: Vec<super::run_rhythm::NewSlowStep>,
    flow_maps: &[(String, [MapFill; 2])],
    config: &Config,
    (table, views, report): (&crate::pipeline::flows::FlowTable, &[FlowView], &EcmpReport),
    m: &Metrics,
) -> FindingsView {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut ifaces: Vec<(&str, Option<Sample>, u64)> = Vec::new();
    for iface in &config.ifaces {
        let s = samples.iter().find(|(i, _, _)| i == iface);
        ifaces.push((
            iface.as_str(),
            s.map(|(_, s, _)| *s),
            s.map_or(0, |(_, _, b)| *b),
        ));
    }
    let elephants = views
        .iter()
        .filter(|v| v.elephant)
        .map(|v| {
            let (src, dst) = (
                agent_common::flow_key::addr(v.key.ip_version, &v.key.src),
                agent_common::flow_key::addr(v.key.ip_version, &v.key.dst),
            );
            (
                crate::export::report_findings::flow_name(
                    &src.to_string(),
                    &dst.to_string(),
                    v.key.sport,
                    v.key.dest_qp,
                ),
                v.rate_bytes,
            )
        })
        .collect();
    let collisions = report
        .groups
        .iter()
        .chain(report.predicted.iter())
        .flat_map(|g| {
            g.members
                .iter()
                .filter(|m| m.colliding)
                .map(|m| (g.name.clone(), m.member.clone(), m.elephants))
        })
        .collect();
    // The rings' times are the kernel's monotonic clock: to Unix time by the offset now.
    let mono_s = crate::sources::maps::monotonic_ms() as f64 / 1e3;
    let slow_steps = slow
        .into_iter()
        .map(|n| LiveSlowStep {
            iface: n.source,
            index: n.index,
            start_s: now_s - (mono_s - n.step.start_ns as f64 / 1e9),
            seconds: n.step.seconds,
            period_s: n.period_s,
        })
        .collect();
    let (opened, closed) = findings.poll(&Poll {
        now_s,
        ifaces,
        elephants,
        collisions,
        storm_s: crate::detect::pause::DEFAULT_STORM_NS as f64 / 1e9,
        shared_5tuples: (
            report.shared_5tuple_groups,
            report.shared_5tuples.first().map(|t| t.describe()),
        ),
        slow_steps,
        flows: table
            .iter()
            .map(|e| crate::detect::live_reaction::FlowTotals {
                key: e.key,
                packets: e.stats.packets,
                bytes: e.stats.bytes,
                cnps: e.stats.cnp,
            })
            .collect(),
        job_priorities: crate::detect::slow_steps::job_priorities(&config.switches.classes),
        flow_maps: flow_maps
            .iter()
            .map(|(iface, fill)| {
                (
                    iface.as_str(),
                    fill.map(|f| crate::detect::live_findings::MapFigures {
                        map: f.map,
                        entries: f.entries,
                        capacity: f.capacity,
                        pushed_out: f.pushed_out,
                    }),
                )
            })
            .collect(),
    });
    for x in &opened {
        let line = format!(
            "finding opened: [{}] {} on {}: {}",
            x.severity.name(),
            x.kind,
            x.subject,
            x.summary
        );
        match x.severity {
            crate::detect::findings::Severity::Info => log::info!("{line}"),
            _ => log::warn!("{line}"),
        }
    }
    for x in &closed {
        log::info!(
            "finding closed: {} on {} after {:.1} s",
            x.kind,
            x.subject,
            (x.end_s - x.start_s).max(0.0)
        );
    }
    m.set_findings(findings);
    findings.view(now_s)
}

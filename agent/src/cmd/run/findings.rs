//! The live agent's findings at each poll: the counters of every watched interface, the
//! elephants and the ECMP views through [`crate::detect::live_findings`]; a line in the log
//! when one opens or closes, and the metrics and API view of what is active.

use crate::config::Config;
use crate::detect::ecmp::{EcmpReport, FlowView};
use crate::detect::findings::{Finding, Severity};
use crate::detect::live_findings::{FindingsView, LiveFindings, LiveSlowStep, Poll, Sample};
use crate::export::metrics::Metrics;
use crate::sources::flow_pressure::Fill;
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

/// The union pause time of `p`'s priorities so far (ns; see [`crate::detect::live_pause`]):
/// the pause ring read and fed to the interface's tracker; frames the ring lost count as
/// read errors of `PAUSE_RING` (that poll takes the quanta's bound). None while the link's
/// speed is unknown, or when the ring could not be read.
pub fn union_paused(
    findings: &mut LiveFindings,
    p: &mut crate::kernel::loader::Attachment,
    s: &Sample,
    speed: u64,
    (now_ns, dt_ns): (u64, u64),
    storm_s: f64,
    m: &Metrics,
) -> [Option<u64>; agent_common::headers::mac_control::PRIORITIES] {
    use agent_common::pause_ring::MAP_PAUSE_RING;
    let read = match p.pause_ring.read(&p.ebpf) {
        Ok(r) => r,
        Err(e) => {
            log::debug!("read {MAP_PAUSE_RING} on {}: {e:#}", p.iface);
            m.map_read_error(&p.iface, MAP_PAUSE_RING, 1);
            return [None; agent_common::headers::mac_control::PRIORITIES];
        }
    };
    if read.lost > 0 {
        m.map_read_error(&p.iface, MAP_PAUSE_RING, read.lost);
    }
    let got = findings.pause.entry(p.iface.clone()).or_default().poll(
        &crate::detect::live_pause::PausePoll {
            events: &read.events,
            lost: read.lost,
            quanta: s.pfc_quanta,
            speed,
            now_ns,
            dt_ns,
            storm_ns: (storm_s * 1e9) as u64,
        },
    );
    got.map_or(
        [None; agent_common::headers::mac_control::PRIORITIES],
        |a| a.map(Some),
    )
}

/// Runs the findings over this poll; logs what opened and closed; sets their metrics.
pub fn update(
    findings: &mut LiveFindings,
    samples: Vec<(String, Sample, u64)>,
    slow: Vec<super::rhythm::NewSlowStep>,
    flow_maps: &[(String, Fill)],
    config: &Config,
    (table, views, report, fabric): (
        &crate::pipeline::flows::FlowTable,
        &[FlowView],
        &EcmpReport,
        &[crate::detect::ecmp::GroupView],
    ),
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
    // Where a collision can slow a job's step: only worked out when there is a slow step.
    let colliding_ifaces = if slow.is_empty() {
        Vec::new()
    } else {
        colliding_ifaces(config, views, report)
    };
    let (opened, closed) = findings.poll(&Poll {
        now_s,
        ifaces,
        elephants: elephants(views),
        collisions: crate::detect::ecmp::GroupView::colliding(
            report.groups.iter().chain(&report.predicted).chain(fabric),
        ),
        colliding_ifaces,
        storm_s: config.pfc_storm_s,
        shared_5tuples: (
            report.shared_5tuple_groups,
            report.shared_5tuples.first().map(|t| t.describe()),
        ),
        slow_steps: slow_steps(slow, now_s),
        flows: flow_totals(table),
        job_priorities: crate::detect::slow_steps::job_priorities(&config.switches.classes),
        flow_maps: map_figures(flow_maps),
    });
    log_opened(&opened);
    log_closed(&closed);
    m.set_findings(findings);
    findings.view(now_s)
}

/// The elephants by their flow's name, with their rates.
fn elephants(views: &[FlowView]) -> Vec<(String, f64)> {
    views
        .iter()
        .filter(|v| v.elephant)
        .map(|v| {
            let (src, dst) = (
                agent_common::flow_key::addr(v.key.ip_version, &v.key.src),
                agent_common::flow_key::addr(v.key.ip_version, &v.key.dst),
            );
            (
                crate::detect::findings::flow_name(
                    &src.to_string(),
                    &dst.to_string(),
                    v.key.sport,
                    v.key.dest_qp,
                ),
                v.rate_bytes,
            )
        })
        .collect()
}

/// The interfaces where a collision can slow a job's step: its own link's colliding members
/// (observed groups name interfaces) or predicted paths its flows share with that link's
/// elephants.
fn colliding_ifaces(config: &Config, views: &[FlowView], report: &EcmpReport) -> Vec<String> {
    config
        .ifaces
        .iter()
        .enumerate()
        .filter(|(i, name)| {
            report
                .groups
                .iter()
                .any(|g| g.members.iter().any(|m| m.colliding && m.member == **name))
                || config.ecmp.hash.as_ref().is_some_and(|model| {
                    crate::detect::ecmp::job_shares_a_colliding_path(views, *i, model)
                })
        })
        .map(|(_, name)| name.clone())
        .collect()
}

/// The new slow steps in Unix time (the rings' times are the kernel's monotonic clock: to
/// Unix time by the offset now).
fn slow_steps(slow: Vec<super::rhythm::NewSlowStep>, now_s: f64) -> Vec<LiveSlowStep> {
    let mono_s = crate::sources::maps::monotonic_ms() as f64 / 1e3;
    slow.into_iter()
        .map(|n| LiveSlowStep {
            iface: n.source,
            index: n.index,
            start_s: now_s - (mono_s - n.step.start_ns as f64 / 1e9),
            seconds: n.step.seconds,
            period_s: n.period_s,
            job: n.job,
        })
        .collect()
}

/// Every flow's totals, for the per-receiver and per-flow findings.
fn flow_totals(
    table: &crate::pipeline::flows::FlowTable,
) -> Vec<crate::detect::live_flows::FlowTotals> {
    table
        .iter()
        .map(|e| crate::detect::live_flows::FlowTotals {
            key: e.key,
            packets: e.stats.packets,
            bytes: e.stats.bytes,
            cnps: e.stats.cnp,
            ce: e.stats.ecn_ce,
            psn_gaps: e.stats.psn_gaps,
            retransmits: e.stats.retransmits,
            naks: e.stats.nak_total(),
        })
        .collect()
}

/// Each interface's flow maps as the flow-pressure finding reads them.
fn map_figures(
    flow_maps: &[(String, Fill)],
) -> Vec<(&str, Vec<crate::detect::live_findings::MapFigures>)> {
    flow_maps
        .iter()
        .map(|(iface, fill)| {
            (
                iface.as_str(),
                fill.iter()
                    .map(|f| crate::detect::live_findings::MapFigures {
                        map: f.map,
                        entries: f.entries,
                        capacity: f.capacity,
                        pushed_out: f.pushed_out,
                    })
                    .collect(),
            )
        })
        .collect()
}

/// A kind with more findings than this opening (or closing) in one poll gets one log line
/// for all of them: one line per incident, not per flow.
const LOG_PER_KIND: usize = 3;

/// The findings of `xs` by kind, in their order.
fn by_kind(xs: &[Finding]) -> Vec<(&'static str, Vec<&Finding>)> {
    let mut out: Vec<(&'static str, Vec<&Finding>)> = Vec::new();
    for x in xs {
        match out.iter_mut().find(|(k, _)| *k == x.kind) {
            Some((_, v)) => v.push(x),
            None => out.push((x.kind, vec![x])),
        }
    }
    out
}

/// One line per opened finding, or one per kind where many opened at once.
fn log_opened(opened: &[Finding]) {
    for (kind, xs) in by_kind(opened) {
        let lines: Vec<String> = if xs.len() <= LOG_PER_KIND {
            xs.iter()
                .map(|x| {
                    format!(
                        "finding opened: [{}] {} on {}: {}",
                        x.severity.name(),
                        x.kind,
                        x.subject,
                        x.summary
                    )
                })
                .collect()
        } else {
            let worst = xs
                .iter()
                .map(|x| x.severity)
                .max()
                .unwrap_or(Severity::Info);
            vec![format!(
                "findings opened: {} x {kind} (worst {}), first on {}: {}",
                xs.len(),
                worst.name(),
                xs[0].subject,
                xs[0].summary
            )]
        };
        let quiet = xs.iter().all(|x| x.severity == Severity::Info);
        for line in lines {
            if quiet {
                log::info!("{line}");
            } else {
                log::warn!("{line}");
            }
        }
    }
}

/// One line per closed finding, or one per kind where many closed at once.
fn log_closed(closed: &[Finding]) {
    for (kind, xs) in by_kind(closed) {
        if xs.len() <= LOG_PER_KIND {
            for x in xs {
                log::info!(
                    "finding closed: {} on {} after {:.1} s",
                    x.kind,
                    x.subject,
                    (x.end_s - x.start_s).max(0.0)
                );
            }
        } else {
            log::info!(
                "findings closed: {} x {kind}, first on {}",
                xs.len(),
                xs[0].subject
            );
        }
    }
}

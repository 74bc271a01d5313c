//! The findings of a capture: the report's figures (and the analysis' pause intervals and
//! CE/CNP pairing) through the detectors of [`crate::detect::findings`]. Times are seconds
//! from the capture's first frame.

use super::Report;
use crate::detect::findings::{self as f, Finding};
use crate::detect::recovery;
use crate::pipeline::analysis::Analysis;
use std::collections::BTreeMap;

/// Elephants listed as findings at most (the report lists them all).
const MAX_ELEPHANTS: usize = 20;
/// Flows with retransmissions listed at most, most affected first.
const MAX_RECOVERIES: usize = 20;

pub fn findings(a: &Analysis, r: &Report) -> Vec<Finding> {
    let origin = a.first_ts_ns.unwrap_or(0);
    let at = |ns: u64| ns.saturating_sub(origin) as f64 / 1e9;
    let whole = (0.0, r.duration_seconds);
    let mut out = Vec::new();

    let threshold_s = a.options().pfc_storm_ns as f64 / 1e9;
    for s in &a.pause.storms {
        out.push(f::pfc_storm(&f::Storm {
            priority: s.priority,
            span: (at(s.start_ns), at(s.end_ns)),
            xoff_frames: s.xoff_frames,
            mac: Some(&s.mac),
            threshold_s,
        }));
    }

    // Per receiver: RoCE packets, CE marks and senders from the flows; CNPs answered from
    // the pairing.
    struct Rx {
        packets: u64,
        ce: u64,
        senders: std::collections::BTreeSet<String>,
        first_ns: u64,
        last_ns: u64,
        cnps_back: u64,
        answered: u64,
    }
    let mut rx: BTreeMap<&str, Rx> = BTreeMap::new();
    for fl in &r.flows {
        if fl.cnp == fl.packets {
            continue; // a flow of CNPs only: the answers, not data
        }
        let e = rx.entry(fl.dst.as_str()).or_insert(Rx {
            packets: 0,
            ce: 0,
            senders: Default::default(),
            first_ns: u64::MAX,
            last_ns: 0,
            cnps_back: 0,
            answered: 0,
        });
        e.packets += fl.packets - fl.cnp;
        e.ce += fl.ecn_ce;
        if fl.ecn_ce > 0 {
            e.senders.insert(fl.src.clone());
            e.first_ns = e.first_ns.min(fl.first_seen_ns);
            e.last_ns = e.last_ns.max(fl.last_seen_ns);
        }
    }
    for c in &r.roce.cnp_response.connections {
        if let Some(e) = rx.get_mut(c.dst.as_str()) {
            e.cnps_back += c.cnps;
            e.answered += c.ce_packets - c.unanswered_ce;
        }
    }
    for (host, e) in &rx {
        if e.ce == 0 {
            continue;
        }
        let span = (at(e.first_ns), at(e.last_ns));
        out.extend(f::congestion(&f::Congested {
            host,
            packets: e.packets,
            ce_packets: e.ce,
            cnps: e.cnps_back,
            senders: e.senders.len(),
            span,
        }));
        out.extend(f::cnp_missing(&f::Receiver {
            host,
            senders: e.senders.len(),
            ce_packets: e.ce,
            answered_ce: e.answered,
            cnps: e.cnps_back,
            span,
        }));
    }

    // The flows' spans by connection, for the senders judged (one pass, not one search per
    // connection: a capture may hold tens of thousands of both).
    let judged: std::collections::HashSet<(&str, &str, u16, u32)> = r
        .roce
        .cnp_response
        .connections
        .iter()
        .filter(|c| c.cnp_bursts > 0)
        .map(|c| (c.src.as_str(), c.dst.as_str(), c.sport, c.dest_qp))
        .collect();
    let spans: std::collections::HashMap<(&str, &str, u16, u32), (f64, f64)> = r
        .flows
        .iter()
        .map(|fl| ((fl.src.as_str(), fl.dst.as_str(), fl.sport, fl.dest_qp), fl))
        .filter(|(k, _)| judged.contains(k))
        .map(|(k, fl)| (k, (at(fl.first_seen_ns), at(fl.last_seen_ns))))
        .collect();
    for c in &r.roce.cnp_response.connections {
        if c.cnp_bursts == 0 {
            continue; // no burst judged: nothing to say about the sender
        }
        let name = flow_name(&c.src, &c.dst, c.sport, c.dest_qp);
        let span = spans
            .get(&(c.src.as_str(), c.dst.as_str(), c.sport, c.dest_qp))
            .copied()
            .unwrap_or(whole);
        out.extend(f::cnp_ignored(&f::Unreacting {
            flow: &format!("Flow {name}"),
            sender: &c.src,
            bursts: c.cnp_bursts,
            ignored: c.cnp_bursts_ignored,
            ratio: c.rate_after_cnps_ratio.unwrap_or(0.0),
            rate_before_bytes_per_second: c.rate_before_cnps_bits_per_second.unwrap_or(0.0) / 8.0,
            span,
        }));
    }

    // One incident per loss: a data flow's gap and go-back with the NAKs its receiver sent
    // back (on the reverse flow), not one finding per direction.
    let losses: Vec<recovery::Loss<'_>> = r
        .flows
        .iter()
        .map(|fl| recovery::Loss {
            src: &fl.src,
            dst: &fl.dst,
            psn_gaps: fl.psn_gaps,
            retransmits: fl.retransmits,
            naks: naks(fl),
        })
        .collect();
    for inc in recovery::incidents(&losses)
        .into_iter()
        .take(MAX_RECOVERIES)
    {
        let fl = &r.flows[inc.flow];
        let name = flow_name(&fl.src, &fl.dst, fl.sport, fl.dest_qp);
        let last = inc
            .folded
            .iter()
            .map(|&i| r.flows[i].last_seen_ns)
            .fold(fl.last_seen_ns, u64::max);
        out.extend(f::retransmissions(&f::Recovery {
            flow: &format!("Flow {name}"),
            psn_gaps: fl.psn_gaps,
            retransmits: fl.retransmits,
            naks: naks(fl),
            naks_back: inc.naks_back,
            packets: fl.packets,
            span: (at(fl.first_seen_ns), at(last)),
        }));
    }

    out.extend(f::lossy_roce(
        r.roce.lossy.packets,
        r.roce.packets,
        &r.roce.lossy.expected,
        whole,
    ));

    for e in r.elephants.iter().take(MAX_ELEPHANTS) {
        let name = flow_name(&e.src, &e.dst, e.sport, e.dest_qp);
        let start = e.periods.first().map_or(0.0, |p| p.started_s);
        let end = e
            .periods
            .last()
            .and_then(|p| p.ended_s)
            .unwrap_or(r.duration_seconds);
        let peak = e
            .periods
            .iter()
            .map(|p| p.peak_bytes_per_second)
            .fold(0.0, f64::max);
        let bytes = r
            .flows
            .iter()
            .find(|fl| {
                fl.src == e.src && fl.dst == e.dst && fl.sport == e.sport && fl.dest_qp == e.dest_qp
            })
            .map_or(0, |fl| fl.bytes);
        out.push(f::elephant(&name, peak, bytes, (start, end)));
    }

    let groups = r.ecmp.groups.iter().chain(r.ecmp.predicted.iter());
    for g in groups {
        for m in g.members.iter().filter(|m| m.colliding) {
            out.push(f::ecmp_collision(&g.name, &m.member, m.elephants, whole));
        }
    }
    let example = r.ecmp.shared_5tuples.first().map(|t| t.describe());
    out.extend(f::shared_5tuple(
        r.ecmp.shared_5tuple_groups,
        example.as_deref(),
        whole,
    ));

    out.extend(super::training::slow_step_findings(r, origin));
    crate::detect::incidents::incidents(out)
}

fn naks(fl: &super::Flow) -> u64 {
    fl.naks.values().sum::<u64>() + fl.rnr_naks
}

pub use crate::detect::findings::flow_name;

/// The table's FINDINGS section, first: one line per finding, most serious first.
pub fn table(s: &mut String, findings: &[Finding]) {
    use std::fmt::Write as _;
    if findings.is_empty() {
        let _ = writeln!(
            s,
            "FINDINGS    none: no storm, congestion, loss or collision found\n"
        );
        return;
    }
    let _ = writeln!(s, "FINDINGS    {}", findings.len());
    for x in findings {
        let _ = writeln!(
            s,
            "  {:<8} {:<15} {:>8.3}-{:<8.3} s  {}",
            x.severity.name().to_uppercase(),
            x.kind,
            x.start_s,
            x.end_s,
            x.summary
        );
    }
    let _ = writeln!(
        s,
        "  (what each means and what to check next: docs/runbook.md)\n"
    );
}

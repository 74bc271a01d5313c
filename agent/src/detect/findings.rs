//! Findings: what the counts mean, for a person. Each one says what it is about (`subject`),
//! in one plain sentence with numbers and units (`summary`), on which figures it rests
//! (`evidence`), when (`start_s`..`end_s`: seconds from the capture's first frame) and where
//! to read on (`runbook`, an entry of `docs/runbook.md` per kind). The detectors here take
//! plain figures, so that every source that has them (a capture, the live agent) finds the
//! same things the same way.

use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// Every kind of finding, each with its runbook entry.
pub const KINDS: [&str; 12] = [
    "slow_step",
    "pfc_storm",
    "congestion",
    "cnp_missing",
    "retransmissions",
    "ecmp_collision",
    "shared_5tuple",
    "elephant",
    "lossy_roce",
    "cnp_ignored",
    "link_down",
    "flow_table_full",
];

/// The runbook's default home (the HTML report's links and the alert rules' default base):
/// the project's repository.
pub const RUNBOOK_URL: &str = crate::config::cli::RUNBOOK_URL;

/// The runbook entry of a kind (relative to the repository).
pub fn runbook(kind: &str) -> String {
    format!("docs/runbook.md#{kind}")
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub kind: &'static str,
    pub severity: Severity,
    pub start_s: f64,
    pub end_s: f64,
    pub subject: String,
    pub summary: String,
    pub evidence: BTreeMap<&'static str, Value>,
    pub runbook: String,
}

impl Finding {
    fn new(kind: &'static str, severity: Severity, span: (f64, f64), subject: String) -> Self {
        Finding {
            kind,
            severity,
            start_s: span.0,
            end_s: span.1,
            subject,
            summary: String::new(),
            evidence: BTreeMap::new(),
            runbook: runbook(kind),
        }
    }

    fn say(mut self, summary: String) -> Self {
        self.summary = summary;
        self
    }

    fn with(mut self, key: &'static str, v: Value) -> Self {
        self.evidence.insert(key, v);
        self
    }

    /// The same finding about another subject.
    pub fn retitle(mut self, subject: String) -> Self {
        self.subject = subject;
        self
    }
}

/// Most serious first, then earliest.
pub fn sort(f: &mut [Finding]) {
    f.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.start_s.total_cmp(&b.start_s))
            .then(a.kind.cmp(b.kind))
            .then(a.subject.cmp(&b.subject))
    });
}

/// A flow as a person names it: `src -> dst port S QP 0xQ`.
pub fn flow_name(src: &str, dst: &str, sport: u16, qp: u32) -> String {
    format!("{src} -> {dst} port {sport} QP {qp:#x}")
}

/// A rate in bits per second as a person reads it.
pub fn bits_per_second(bytes_per_second: f64) -> String {
    let b = bytes_per_second * 8.0;
    let (v, unit) = if b >= 1e9 {
        (b / 1e9, "Gb/s")
    } else if b >= 1e6 {
        (b / 1e6, "Mb/s")
    } else if b >= 1e3 {
        (b / 1e3, "kb/s")
    } else {
        (b, "b/s")
    };
    format!("{v:.1} {unit}")
}

/// A count as a person reads it: thousands separated (13,382,400).
pub fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration as a person reads it.
pub fn duration(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// A continuous pause longer than the storm threshold.
pub struct Storm<'a> {
    pub priority: u8,
    pub span: (f64, f64),
    pub xoff_frames: u64,
    /// The sender of the pauses (None live: the NIC's counters and the kernel's pause ring do
    /// not keep it).
    pub mac: Option<&'a str>,
    pub threshold_s: f64,
}

pub fn pfc_storm(s: &Storm<'_>) -> Finding {
    let secs = s.span.1 - s.span.0;
    Finding::new(
        "pfc_storm",
        Severity::Critical,
        s.span,
        format!("priority {}", s.priority),
    )
    .say(format!(
        "Priority {} was paused for {} without a break ({}), longer than the {} storm threshold: traffic of that class stood still.",
        s.priority,
        duration(secs),
        match s.mac {
            Some(mac) => format!("{} XOFF frames from {mac}", s.xoff_frames),
            None => "by the live pause time: the NIC's pause counter, or the PFC frames seen with their times".into(),
        },
        duration(s.threshold_s)
    ))
    .with("priority", json!(s.priority))
    .with("paused_seconds", json!(secs))
    .with("xoff_frames", json!(s.xoff_frames))
    .with("pausing_mac", json!(s.mac))
    .with("threshold_seconds", json!(s.threshold_s))
}

/// One receiver's CE packets and the CNPs it sent back.
pub struct Receiver<'a> {
    pub host: &'a str,
    pub senders: usize,
    pub ce_packets: u64,
    pub answered_ce: u64,
    pub cnps: u64,
    pub span: (f64, f64),
}

/// ", from N sender(s)" where the senders are known (a capture; the live counters are not
/// per sender).
fn senders(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(", from {n} sender(s)")
    }
}

/// Fewer CE packets than this say nothing about a receiver.
pub const MIN_CE_PACKETS: u64 = 10;

/// A receiver that got CE-marked packets and never answered one with a CNP.
pub fn cnp_missing(r: &Receiver<'_>) -> Option<Finding> {
    (r.ce_packets >= MIN_CE_PACKETS && r.answered_ce == 0 && r.cnps == 0).then(|| {
        Finding::new("cnp_missing", Severity::Warning, r.span, format!("receiver {}", r.host))
            .say(format!(
                "{} received {} CE-marked RoCE packets{} and sent no CNP back: its NIC's DCQCN notification point looks off or misconfigured, so the senders never slow down.",
                r.host, r.ce_packets, senders(r.senders)
            ))
            .with("ce_packets", json!(r.ce_packets))
            .with("cnps", json!(r.cnps))
            .with("senders", json!(r.senders))
    })
}

/// A sender that kept its rate while CNPs arrived (DCQCN's reaction point).
pub struct Unreacting<'a> {
    /// The data flow: `src -> dst port S QP Q`.
    pub flow: &'a str,
    pub sender: &'a str,
    pub bursts: u64,
    pub ignored: u64,
    /// The mean after/before rate ratio over the bursts.
    pub ratio: f64,
    pub rate_before_bytes_per_second: f64,
    pub span: (f64, f64),
}

/// The rate a sender must have had before the CNPs for `cnp_ignored` (5 Mb/s): below it
/// a sender congests no RoCE link, whatever its NIC does with CNPs, and a flood of spoofed
/// slow "senders" raises nothing.
pub const CNP_IGNORED_MIN_BYTES_PER_SECOND: f64 = 625_000.0;

/// A sender that kept its rate after every burst of CNPs judged, from
/// [`CNP_IGNORED_MIN_BYTES_PER_SECOND`] up.
pub fn cnp_ignored(u: &Unreacting<'_>) -> Option<Finding> {
    (u.bursts > 0
        && u.ignored == u.bursts
        && u.rate_before_bytes_per_second >= CNP_IGNORED_MIN_BYTES_PER_SECOND)
        .then(|| {
        Finding::new("cnp_ignored", Severity::Warning, u.span, format!("sender {}", u.sender))
            .say(format!(
                "{} kept sending at {:.0}% of its rate ({} before) after CNPs began to arrive, in {} burst(s) of CNPs: its NIC's DCQCN reaction point looks off, so the congestion it feeds goes on.",
                u.flow,
                u.ratio * 100.0,
                bits_per_second(u.rate_before_bytes_per_second),
                u.bursts
            ))
            .with("cnp_bursts", json!(u.bursts))
            .with("cnp_bursts_ignored", json!(u.ignored))
            .with("rate_after_cnps_ratio", json!(u.ratio))
            .with("rate_before_bits_per_second", json!(u.rate_before_bytes_per_second * 8.0))
    })
}

/// CE share of the RoCE packets to one receiver, above which it is congestion.
pub const CONGESTION_CE_SHARE: f64 = 0.01;

/// RoCE to one receiver with a share of CE marks.
pub struct Congested<'a> {
    pub host: &'a str,
    pub packets: u64,
    pub ce_packets: u64,
    pub cnps: u64,
    pub senders: usize,
    pub span: (f64, f64),
}

pub fn congestion(c: &Congested<'_>) -> Option<Finding> {
    let share = c.ce_packets as f64 / c.packets.max(1) as f64;
    (c.ce_packets >= MIN_CE_PACKETS && share >= CONGESTION_CE_SHARE).then(|| {
        Finding::new("congestion", Severity::Warning, c.span, format!("receiver {}", c.host))
            .say(format!(
                "{:.1}% of the RoCE packets to {} ({} of {}{}) were CE-marked by the switches, and {} CNPs went back: the path to it is congested (incast or a hot link).",
                share * 100.0,
                c.host,
                c.ce_packets,
                c.packets,
                senders(c.senders),
                c.cnps
            ))
            .with("ce_packets", json!(c.ce_packets))
            .with("packets", json!(c.packets))
            .with("ce_share", json!(share))
            .with("cnps", json!(c.cnps))
    })
}

/// One flow's loss recovery.
pub struct Recovery<'a> {
    pub flow: &'a str,
    pub psn_gaps: u64,
    pub retransmits: u64,
    pub naks: u64,
    /// NAKs its receiver sent back on the reverse flow (folded into this incident).
    pub naks_back: u64,
    pub packets: u64,
    pub span: (f64, f64),
}

pub fn retransmissions(r: &Recovery<'_>) -> Option<Finding> {
    (r.psn_gaps + r.retransmits + r.naks + r.naks_back > 0).then(|| {
        let back = if r.naks_back > 0 {
            format!(
                ", and its receiver sent {} NAK{} back asking for them again",
                r.naks_back,
                if r.naks_back == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        };
        Finding::new("retransmissions", Severity::Warning, r.span, r.flow.to_lowercase())
            .say(format!(
                "{} lost packets and recovered: {} PSN gaps, {} retransmitted packets, {} NAKs among {} packets{back}. On a lossless fabric that means drops (a misconfigured class, buffer overflow, a bad link).",
                r.flow, r.psn_gaps, r.retransmits, r.naks, r.packets
            ))
            .with("psn_gaps", json!(r.psn_gaps))
            .with("retransmitted_packets", json!(r.retransmits))
            .with("naks", json!(r.naks))
            .with("naks_returned", json!(r.naks_back))
            .with("packets", json!(r.packets))
    })
}

/// Share of RoCE packets outside the lossless class above which it is a finding (and at
/// least [`LOSSY_MIN_PACKETS`]: one stray packet is no finding).
pub const LOSSY_SHARE: f64 = 0.01;
pub const LOSSY_MIN_PACKETS: u64 = 100;

pub fn lossy_roce(lossy: u64, roce: u64, expected: &str, span: (f64, f64)) -> Option<Finding> {
    let share = lossy as f64 / roce.max(1) as f64;
    (lossy >= LOSSY_MIN_PACKETS && share >= LOSSY_SHARE).then(|| {
        Finding::new("lossy_roce", Severity::Warning, span, "traffic classes".into())
            .say(format!(
                "{:.1}% of the RoCE packets ({lossy} of {roce}) were outside the lossless class ({expected}): PFC does not protect them, so congestion drops them instead of pausing.",
                share * 100.0
            ))
            .with("lossy_packets", json!(lossy))
            .with("roce_packets", json!(roce))
            .with("share", json!(share))
            .with("expected", json!(expected))
    })
}

pub fn elephant(flow: &str, peak_bytes_per_second: f64, bytes: u64, span: (f64, f64)) -> Finding {
    elephant_saying(
        flow,
        peak_bytes_per_second,
        bytes,
        span,
        format!(
            "Flow {flow} ran as an elephant from {:.2} s to {:.2} s, at up to {}.",
            span.0,
            span.1,
            bits_per_second(peak_bytes_per_second)
        ),
    )
}

/// An elephant now (live): its rate at this poll.
pub fn elephant_now(flow: &str, bytes_per_second: f64, t: f64) -> Finding {
    elephant_saying(
        flow,
        bytes_per_second,
        0,
        (t, t),
        format!(
            "Flow {flow} is an elephant, at {}.",
            bits_per_second(bytes_per_second)
        ),
    )
}

fn elephant_saying(
    flow: &str,
    peak_bytes_per_second: f64,
    bytes: u64,
    span: (f64, f64),
    summary: String,
) -> Finding {
    Finding::new("elephant", Severity::Info, span, format!("flow {flow}"))
        .say(summary)
        .with("peak_bits_per_second", json!(peak_bytes_per_second * 8.0))
        .with("bytes", json!(bytes))
}

pub fn ecmp_collision(group: &str, member: &str, elephants: usize, span: (f64, f64)) -> Finding {
    Finding::new("ecmp_collision", Severity::Warning, span, format!("path {member} of {group}"))
        .say(format!(
            "{elephants} elephants share path {member} of {group} while another path of the group carries none: they split its bandwidth (an ECMP hash collision)."
        ))
        .with("group", json!(group))
        .with("path", json!(member))
        .with("elephants", json!(elephants))
}

pub fn shared_5tuple(groups: usize, example: Option<&str>, span: (f64, f64)) -> Option<Finding> {
    (groups > 0).then(|| {
        Finding::new("shared_5tuple", Severity::Info, span, "UDP source ports".into())
            .say(format!(
                "{groups} group(s) of RDMA connections share one UDP 5-tuple{}: switches that hash the 5-tuple put each group on one path, whatever its load.",
                example.map(|e| format!(" (for example {e})")).unwrap_or_default()
            ))
            .with("groups", json!(groups))
    })
}

/// A watched interface that is down or gone (live).
pub fn link_down(iface: &str, t: f64) -> Finding {
    Finding::new("link_down", Severity::Critical, (t, t), format!("interface {iface}"))
        .say(format!(
            "Interface {iface} is down or gone: nothing on it is counted until it comes back (rocemon attaches again by name)."
        ))
        .with("iface", json!(iface))
}

/// Open findings per kind at most (live); the rest of a kind shows as one finding, "N more"
/// ([`more`]), whose subject is [`MORE_SUBJECT`]. Spoofed traffic can make thousands of
/// subjects (fake connections, fake senders): the list stays readable and the real findings
/// stay in it.
pub const OPEN_PER_KIND: usize = 20;
/// The subject of a kind's "N more" finding.
pub const MORE_SUBJECT: &str = "more subjects";

/// The findings of one kind beyond the open list's bound, as one: how many, the most
/// serious of them, and the first few subjects (`xs` in the order they were ranked).
pub fn more(kind: &'static str, xs: &[Finding]) -> Finding {
    let severity = xs
        .iter()
        .map(|x| x.severity)
        .max()
        .unwrap_or(Severity::Info);
    let start = xs.iter().map(|x| x.start_s).fold(f64::INFINITY, f64::min);
    let end = xs.iter().map(|x| x.end_s).fold(f64::NEG_INFINITY, f64::max);
    let first: Vec<&str> = xs.iter().take(5).map(|x| x.subject.as_str()).collect();
    Finding::new(
        kind,
        severity,
        (start.min(end), end),
        MORE_SUBJECT.to_string(),
    )
    .say(format!(
        "{} more {kind} findings like the ones listed (first: {}{}): so many at once is often one cause seen from many flows, or spoofed traffic; the agent's log and /api/v1/findings list the first {} of the kind.",
        xs.len(),
        first.join("; "),
        if xs.len() > first.len() { "; ..." } else { "" },
        OPEN_PER_KIND
    ))
    .with("more", json!(xs.len()))
    .with("first_subjects", json!(first))
}

/// A watched interface's flow maps pushed flows out to admit new ones (live): per-flow
/// figures miss what those flows counted. `maps`: (map, entries, capacity).
pub fn flow_table_full(
    iface: &str,
    pushed_out: u64,
    maps: &[(&str, u64, u64)],
    span: (f64, f64),
) -> Option<Finding> {
    (pushed_out > 0).then(|| {
        let fill: Vec<String> = maps
            .iter()
            .filter(|(_, _, cap)| *cap > 0)
            .map(|(m, n, cap)| {
                let family = agent_common::flow_map_holds(m);
                format!("{n} of {cap} {family} flows ({:.0}%)", 100.0 * *n as f64 / *cap as f64)
            })
            .collect();
        Finding::new(
            "flow_table_full",
            Severity::Warning,
            span,
            format!("flow maps of {iface}"),
        )
        .say(format!(
            "The flow maps of {iface} are full ({}): {pushed_out} flows were pushed out in the last {} s to admit new ones, so the per-flow figures (top flows, elephants, ECMP collisions, PSN health) miss part of what those flows sent; the global counters stay exact. Many short-lived flows (a flood of spoofed 5-tuples, a scan) or maps too small for the fabric: compare rocemon_flow_map_entries with rocemon_flow_map_max_entries, and raise flow_map_entries if the flows are real.",
            fill.join(", "),
            span.1 - span.0
        ))
        .with("iface", json!(iface))
        .with("pushed_out", json!(pushed_out))
        .with(
            "maps",
            json!(maps
                .iter()
                .map(|(m, n, cap)| json!({"map": m, "entries": n, "capacity": cap}))
                .collect::<Vec<_>>()),
        )
    })
}

/// A slow training step and what explains its extra time.
pub struct SlowStep<'a> {
    pub index: usize,
    pub span: (f64, f64),
    pub seconds: f64,
    pub typical_seconds: f64,
    pub causes: &'a [(&'static str, f64)],
    /// The host that started or ended its burst last, when nothing in the network explains
    /// the step: (host, started late by, ended late by), seconds.
    pub straggler: Option<(&'a str, f64, f64)>,
}

pub fn slow_step(s: &SlowStep<'_>) -> Finding {
    let why = match (s.causes.first(), s.straggler) {
        (Some((kind, share)), _) if *kind != "unexplained" => format!(
            "; mostly {} ({:.0}% of the extra time)",
            kind.replace('_', " "),
            share * 100.0
        ),
        (_, Some((host, started, ended))) => format!(
            "; nothing in the network explains it, and host {host} ended its burst {} after the others (started {} after): look at that host (a straggler)",
            duration(ended),
            duration(started)
        ),
        _ => "; nothing in the network explains it (look at the hosts)".into(),
    };
    Finding::new(
        "slow_step",
        Severity::Warning,
        s.span,
        format!("step {}", s.index),
    )
    .say(format!(
        "Training step {} took {} against a typical {}{why}.",
        s.index,
        duration(s.seconds),
        duration(s.typical_seconds)
    ))
    .with("seconds", json!(s.seconds))
    .with("typical_seconds", json!(s.typical_seconds))
    .with(
        "straggler",
        json!(s.straggler.map(|(host, started, ended)| json!({
            "host": host,
            "started_late_seconds": started,
            "ended_late_seconds": ended,
        }))),
    )
    .with(
        "causes",
        json!(s
            .causes
            .iter()
            .map(|(k, sh)| json!({"kind": k, "share": sh}))
            .collect::<Vec<_>>()),
    )
}

#[cfg(test)]
#[path = "findings_tests.rs"]
mod tests;

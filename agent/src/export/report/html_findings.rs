//! The HTML report's first screen: the summary cards under the verdict, and the findings
//! grouped by severity (critical and warning open, information folded), each with its
//! evidence written as text with units and an absolute link to its runbook entry.

use crate::detect::findings::{bits_per_second, Finding, Severity};
use crate::export::report::html_charts::{count, esc};
use crate::export::report::Report;
use serde_json::Value;
use std::fmt::Write as _;

/// The headline numbers, each a card: RoCE rate, CE share, pause time, slow steps, findings
/// by severity.
pub fn cards(r: &Report<'_>, s: &mut String) {
    let mut cards: Vec<(String, String, bool)> = Vec::new();
    let mut card = |value: String, label: &str, alarm: bool| {
        cards.push((value, label.to_string(), alarm));
    };
    let secs = r.duration_seconds.max(1e-9);
    card(
        bits_per_second(r.roce.bytes as f64 / secs),
        "RoCE, mean over the capture",
        false,
    );
    let ce = if r.roce.packets == 0 {
        0.0
    } else {
        r.roce.ecn.ce as f64 / r.roce.packets as f64
    };
    card(
        format!("{:.1}%", ce * 100.0),
        "RoCE packets CE-marked",
        ce >= 0.01,
    );
    let worst = r
        .pfc
        .priorities
        .iter()
        .filter_map(|p| p.paused_seconds.map(|x| (p.priority, x)))
        .fold(None, |m: Option<(u8, f64)>, (p, x)| match m {
            Some((_, y)) if y >= x => m,
            _ => Some((p, x)),
        });
    match worst {
        Some((p, x)) if x > 0.0 => card(
            crate::detect::findings::duration(x),
            &format!("priority {p} paused (PFC)"),
            x / secs >= 0.05,
        ),
        _ => card("0 s".into(), "paused by PFC", false),
    }
    let t = &r.training;
    card(
        format!("{} of {}", t.slow_steps, t.steps.len()),
        "training steps slow",
        t.slow_steps > 0,
    );
    let by = |sev: Severity| r.findings.iter().filter(|f| f.severity == sev).count();
    let (c, w, i) = (
        by(Severity::Critical),
        by(Severity::Warning),
        by(Severity::Info),
    );
    card(
        format!("{c} / {w} / {i}"),
        "findings: critical / warning / info",
        c > 0,
    );
    s.push_str("<div class=\"cards\">");
    for (value, label, alarm) in cards {
        let _ = write!(
            s,
            "<div class=\"card{}\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
            if alarm { " alarm" } else { "" },
            esc(&value),
            esc(&label)
        );
    }
    s.push_str("</div>");
}

/// The findings, grouped by severity, most serious first (critical and warning open).
pub fn findings(s: &mut String, findings: &[Finding], runbook_base: &str) {
    let _ = write!(s, "<h2 id=\"findings\">Findings ({})</h2>", findings.len());
    if findings.is_empty() {
        s.push_str("<p>None: no storm, congestion, loss or collision found.</p>");
        return;
    }
    for sev in [Severity::Critical, Severity::Warning, Severity::Info] {
        let group: Vec<&Finding> = findings.iter().filter(|f| f.severity == sev).collect();
        if group.is_empty() {
            continue;
        }
        let _ = write!(
            s,
            "<details class=\"findings-group {0}\"{1}><summary>{2} {0}</summary><table class=\"findings\"><tr><th>kind</th><th>when</th><th>what happened</th><th>evidence</th></tr>",
            sev.name(),
            if sev == Severity::Info { "" } else { " open" },
            group.len()
        );
        for f in group {
            let _ = write!(
                s,
                "<tr><td><a href=\"{}#{}\">{}</a></td><td class=\"when\">{:.3}&#8211;{:.3} s</td><td>{}</td><td class=\"evidence\">{}</td></tr>",
                esc(runbook_base),
                esc(f.kind),
                esc(f.kind),
                f.start_s,
                f.end_s,
                esc(&f.summary),
                esc(&evidence(f))
            );
        }
        s.push_str("</table></details>");
    }
}

/// A finding's evidence as text: each figure with its unit, lists and records as words (no
/// JSON for a person to decode).
pub fn evidence(f: &Finding) -> String {
    f.evidence
        .iter()
        .map(|(k, v)| format!("{}: {}", words(k), value(k, v)))
        .collect::<Vec<_>>()
        .join("; ")
}

fn words(key: &str) -> String {
    key.replace('_', " ")
}

/// One figure by what its key says it is.
fn value(key: &str, v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::String(s) => s.replace('_', " "),
        Value::Number(n) => number(key, n.as_f64().unwrap_or(0.0), n.is_f64()),
        Value::Array(a) if key == "causes" => a.iter().map(cause).collect::<Vec<_>>().join(", "),
        Value::Array(a) => a
            .iter()
            .map(|x| value(key, x))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Object(o) => o
            .iter()
            .map(|(k, x)| format!("{} {}", words(k), value(k, x)))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A slow step's cause: `pfc pause 83% (measured)`.
fn cause(c: &Value) -> String {
    let kind = c["kind"].as_str().unwrap_or("?").replace('_', " ");
    match c["share"].as_f64() {
        Some(x) => match c["basis"].as_str().filter(|b| !b.is_empty()) {
            Some(b) => format!("{kind} {:.0}% ({b})", x * 100.0),
            None => format!("{kind} {:.0}%", x * 100.0),
        },
        None => kind,
    }
}

fn number(key: &str, x: f64, float: bool) -> String {
    if key.ends_with("bits_per_second") {
        bits_per_second(x / 8.0)
    } else if key.ends_with("bytes_per_second") {
        bits_per_second(x)
    } else if key.ends_with("seconds") {
        crate::detect::findings::duration(x)
    } else if key == "share" || key.ends_with("_share") || key.ends_with("ratio") {
        format!("{:.1}%", x * 100.0)
    } else if float && x.fract() != 0.0 {
        format!("{x:.3}")
    } else if x >= 0.0 {
        count(x as u64)
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn finding(evidence: &[(&'static str, Value)]) -> Finding {
        let mut f = crate::detect::findings::link_down("eth0", 0.0);
        f.evidence = evidence.iter().cloned().collect();
        f
    }

    #[test]
    fn evidence_reads_as_text_with_units() {
        let f = finding(&[
            ("paused_seconds", json!(0.8271637655825008)),
            ("rate_before_bits_per_second", json!(2.5e9)),
            ("share", json!(0.0342)),
            ("ce_packets", json!(1234567)),
            (
                "causes",
                json!([{"kind": "pfc_pause", "share": 0.827, "basis": "measured"},
                       {"kind": "congestion", "share": 0.173, "basis": "shared"}]),
            ),
            (
                "straggler",
                json!({"host": "10.0.0.3", "started_late_seconds": 0.012}),
            ),
        ]);
        let e = evidence(&f);
        assert!(e.contains("paused seconds: 827.2 ms"), "{e}");
        assert!(e.contains("rate before bits per second: 2.5 Gb/s"), "{e}");
        assert!(e.contains("share: 3.4%"), "{e}");
        assert!(e.contains("ce packets: 1,234,567"), "{e}");
        assert!(
            e.contains("causes: pfc pause 83% (measured), congestion 17% (shared)"),
            "{e}"
        );
        assert!(
            e.contains("straggler: host 10.0.0.3, started late seconds 12.0 ms"),
            "{e}"
        );
        for raw in ['{', '[', '"'] {
            assert!(!e.contains(raw), "raw JSON in {e}");
        }
    }

    #[test]
    fn groups_fold_information_and_link_the_runbook_absolutely() {
        let mut info = finding(&[]);
        info.severity = Severity::Info;
        let crit = finding(&[]);
        let mut s = String::new();
        findings(&mut s, &[crit, info], "https://wiki.example.org/rb");
        assert!(
            s.contains(
                "<details class=\"findings-group critical\" open><summary>1 critical</summary>"
            ),
            "{s}"
        );
        assert!(
            s.contains("<details class=\"findings-group info\"><summary>1 info</summary>"),
            "{s}"
        );
        assert!(
            s.contains("href=\"https://wiki.example.org/rb#link_down\""),
            "{s}"
        );
    }
}

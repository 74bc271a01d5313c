//! Findings as incidents, ranked, under a verdict. Per receiver or per flow, one cause reads as
//! a wall of rows (a capture with three incidents gave 28 findings). Here the findings of one
//! kind whose spans overlap become one incident that lists what it touched (how many, the
//! first few by weight, the totals), the findings are ordered by impact (slow steps, the
//! answer, before the evidence behind them), and one sentence sums them up.

use super::findings::{Finding, Severity};
use serde_json::{json, Value};

/// Kinds raised per receiver, sender or flow, that merge into one incident per span: the
/// noun for what they touched, and the evidence that weighs a member.
const MERGED: [(&str, &str, &[&str]); 4] = [
    ("congestion", "receivers", &["ce_packets"]),
    ("cnp_missing", "receivers", &["ce_packets"]),
    (
        "retransmissions",
        "flows",
        &["psn_gaps", "retransmitted_packets", "naks", "naks_returned"],
    ),
    ("cnp_ignored", "senders", &["bursts_ignored"]),
];

/// Members an incident lists by name.
const LISTED: usize = 5;
/// Spans this close (seconds) are one incident.
const JOIN_S: f64 = 1.0;

fn weight(f: &Finding, keys: &[&str]) -> u64 {
    keys.iter()
        .filter_map(|k| f.evidence.get(k).and_then(Value::as_u64))
        .sum()
}

/// The findings with each merged kind's overlapping findings as one incident, ordered by
/// [`rank`].
pub fn incidents(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    let mut by_kind: Vec<Vec<Finding>> = vec![Vec::new(); MERGED.len()];
    for f in findings {
        match MERGED.iter().position(|(k, _, _)| *k == f.kind) {
            Some(i) => by_kind[i].push(f),
            None => out.push(f),
        }
    }
    for (i, mut group) in by_kind.into_iter().enumerate() {
        let (_, noun, keys) = MERGED[i];
        group.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        let mut run: Vec<Finding> = Vec::new();
        let mut run_end = f64::MIN;
        for f in group {
            if !run.is_empty() && f.start_s > run_end + JOIN_S {
                out.push(merge(std::mem::take(&mut run), noun, keys));
                run_end = f64::MIN;
            }
            run_end = run_end.max(f.end_s);
            run.push(f);
        }
        if !run.is_empty() {
            out.push(merge(run, noun, keys));
        }
    }
    rank(&mut out);
    out
}

/// One incident of several findings of one kind (one finding stays as it is).
fn merge(mut run: Vec<Finding>, noun: &str, keys: &[&str]) -> Finding {
    if run.len() == 1 {
        return run.remove(0);
    }
    run.sort_by_key(|f| std::cmp::Reverse(weight(f, keys)));
    let n = run.len();
    let start = run.iter().map(|f| f.start_s).fold(f64::MAX, f64::min);
    let end = run.iter().map(|f| f.end_s).fold(f64::MIN, f64::max);
    let severity = run
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::Info);
    let names: Vec<&str> = run
        .iter()
        .take(LISTED)
        .map(|f| f.subject.as_str())
        .collect();
    let more = if n > LISTED {
        format!(" and {} more", n - LISTED)
    } else {
        String::new()
    };
    let mut totals = serde_json::Map::new();
    for (k, v) in &run[0].evidence {
        if v.is_u64()
            && run
                .iter()
                .all(|f| f.evidence.get(k).is_some_and(Value::is_u64))
        {
            let sum: u64 = run
                .iter()
                .filter_map(|f| f.evidence.get(k).and_then(Value::as_u64))
                .sum();
            totals.insert((*k).to_string(), json!(sum));
        }
    }
    let worst = &run[0];
    let mut f = worst.clone();
    f.severity = severity;
    f.start_s = start;
    f.end_s = end;
    f.subject = format!("{n} {noun}");
    f.summary = format!(
        "{n} {noun} at once ({}{more}). The worst: {}",
        names.join(", "),
        worst.summary
    );
    f.evidence.clear();
    f.evidence.insert("members", json!(n));
    f.evidence.insert("listed", json!(names));
    f.evidence.insert("totals", Value::Object(totals));
    f.evidence.insert(
        "worst",
        json!({"subject": worst.subject, "evidence": worst.evidence}),
    );
    f
}

/// Impact first: by severity; within it, slow steps (the answer) before the evidence behind
/// them; then the earliest.
pub fn rank(f: &mut [Finding]) {
    f.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then((b.kind == "slow_step").cmp(&(a.kind == "slow_step")))
            .then(a.start_s.total_cmp(&b.start_s))
            .then(a.kind.cmp(b.kind))
            .then(a.subject.cmp(&b.subject))
    });
}

/// How many things a finding touched (an incident's members, else one).
fn members(f: &Finding) -> u64 {
    f.evidence
        .get("members")
        .and_then(Value::as_u64)
        .unwrap_or(1)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("one {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What one finding says in a verdict's few words.
fn phrase(f: &Finding) -> String {
    let n = members(f);
    match f.kind {
        "congestion" => format!("CE on {}", plural(n, "receiver", "receivers")),
        "cnp_missing" => plural(n, "receiver never sends a CNP", "receivers never send CNPs"),
        "retransmissions" => format!("drops on {}", plural(n, "flow", "flows")),
        "cnp_ignored" => plural(n, "sender ignores CNPs", "senders ignore CNPs"),
        "pfc_storm" => format!("a PFC storm ({})", f.subject),
        "lossy_roce" => "RoCE outside the lossless class".into(),
        "ecmp_collision" => "elephants colliding on an ECMP path".into(),
        "shared_5tuple" => "connections sharing a UDP 5-tuple".into(),
        "elephant" => "an elephant".into(),
        "link_down" => format!("a link down ({})", f.subject),
        "flow_table_full" => "a full flow table".into(),
        other => other.replace('_', " "),
    }
}

/// One sentence that sums the findings up: the slow steps and their causes first, then what
/// is behind them, most serious first. `steps`: the steps seen, when there is a rhythm.
pub fn verdict(findings: &[Finding], steps: Option<usize>) -> String {
    let slow: Vec<&Finding> = findings.iter().filter(|f| f.kind == "slow_step").collect();
    let mut rest: Vec<String> = Vec::new();
    let mut elephants = 0;
    for f in findings.iter().filter(|f| f.kind != "slow_step") {
        if f.kind == "elephant" {
            elephants += 1;
            continue;
        }
        let p = phrase(f);
        if !rest.contains(&p) {
            rest.push(p);
        }
    }
    if elephants > 0 {
        rest.push(plural(elephants, "elephant", "elephants"));
    }
    if slow.is_empty() {
        if rest.is_empty() {
            return match steps {
                Some(n) => {
                    format!("{n} training steps, none slow; nothing in the network got in the way.")
                }
                None => "Nothing in the network got in the way.".into(),
            };
        }
        return format!("{}.", capitalise(&rest.join(", ")));
    }
    let mut causes: Vec<(String, usize)> = Vec::new();
    for f in &slow {
        let first = f
            .evidence
            .get("causes")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .and_then(|c| c["kind"].as_str())
            .unwrap_or("unexplained");
        let name = match first {
            "pfc_pause" => "PFC pause".to_string(),
            "ecmp_collision" => "ECMP collision".to_string(),
            k => k.replace('_', " "),
        };
        match causes.iter_mut().find(|(c, _)| *c == name) {
            Some((_, n)) => *n += 1,
            None => causes.push((name, 1)),
        }
    }
    let causes: Vec<String> = causes
        .into_iter()
        .map(|(c, n)| if n > 1 { format!("{c} x{n}") } else { c })
        .collect();
    let of = steps.map_or(String::new(), |n| format!(" in {n}"));
    let head = format!(
        "{}{of} ({})",
        plural(slow.len() as u64, "slow step", "slow steps"),
        causes.join(", ")
    );
    let head = capitalise(&head);
    if rest.is_empty() {
        format!("{head}.")
    } else {
        format!("{head}; behind them: {}.", rest.join(", "))
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
#[path = "incidents_tests.rs"]
mod tests;

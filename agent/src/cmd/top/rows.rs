//! What `rocemon top` shows, read once from the agent's API documents, for both of its
//! outputs (the plain text of `--once` and pipes, [`super::plain`]; the terminal UI,
//! [`super::tui`]): the header's totals, the flow rows and their sort orders.

use crate::detect::findings::bits_per_second;
use serde_json::Value;

/// The agent's API documents one screen shows (Null: the agent has no such document: an
/// older agent, or no sFlow collector).
#[derive(Clone, Debug, Default)]
pub struct Docs {
    pub flows: Value,
    pub ecmp: Value,
    pub lossless: Value,
    pub sflow: Value,
    pub training: Value,
    pub summary: Value,
    pub findings: Value,
    /// When the documents were read (Unix seconds): the findings' ages are counted from it.
    pub now_s: f64,
}

/// A JSON document with every string (and object key) made safe for a terminal: control
/// characters (C0, DEL, C1: escape sequences, bells, carriage returns) and bidirectional
/// overrides become U+FFFD. The documents come over the network, from whatever answers at
/// the address: nothing in them may move the cursor, retitle the window or clear the screen.
pub fn sanitized(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(clean(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(sanitized).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (clean(&k), sanitized(v)))
                .collect(),
        ),
        other => other,
    }
}

/// `s` with what a terminal would act on replaced (see [`sanitized`]).
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            let bidi = matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
            if c.is_control() || bidi {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect()
}

/// A number of a JSON document (0 where absent).
pub fn n(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// What the agent holds: flows, elephants, active findings, and flow maps that are full.
pub fn counts_line(d: &Docs) -> String {
    let findings = match d.summary["findings_active"].as_f64() {
        Some(f) => format!(", {f} findings"),
        None => String::new(),
    };
    let full = full_maps(d);
    let maps = if full.is_empty() {
        String::new()
    } else {
        format!(", FLOW MAPS FULL: {}", full.join(", "))
    };
    format!(
        "{} flows, {} elephants{findings}{maps}",
        n(&d.flows["flows_total"]),
        n(&d.flows["elephants_total"])
    )
}

/// The flow maps at 90% or more of their size, or that pushed flows out: `eth1 IPv4 256/256
/// (40 pushed out)`: per-flow rows miss what those flows counted.
pub fn full_maps(d: &Docs) -> Vec<String> {
    let Some(maps) = d.summary["flow_maps"].as_array() else {
        return Vec::new();
    };
    maps.iter()
        .filter(|m| n(&m["fill_ratio"]) >= 0.9 || n(&m["pushed_out_total"]) > 0.0)
        .map(|m| {
            let family = agent_common::flow_map_holds(m["map"].as_str().unwrap_or_default());
            let pushed = n(&m["pushed_out_total"]);
            format!(
                "{} {family} {}/{}{}",
                m["iface"].as_str().unwrap_or("?"),
                n(&m["entries"]),
                n(&m["max_entries"]),
                if pushed > 0.0 {
                    format!(" ({pushed} pushed out)")
                } else {
                    String::new()
                }
            )
        })
        .collect()
}

/// The agent's verdict over its active findings (`/api/v1/summary`), the answer first;
/// nothing from an agent that gives none.
pub fn verdict_line(d: &Docs) -> Option<String> {
    d.summary["verdict"]
        .as_str()
        .map(|v| format!("Verdict: {v}"))
}

/// How long since `start_s` (Unix seconds), as a person reads it: `40 s`, `3 min`, `2 h 5 min`.
pub fn age(now_s: f64, start_s: f64) -> String {
    let s = (now_s - start_s).max(0.0).round() as u64;
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// The `max` most severe active findings (the agent lists them most serious first), one line
/// each with how long it has been active; the last says how many more there are. One line
/// `No active findings.` when there are none; nothing from an agent without the document.
pub fn finding_lines(d: &Docs, max: usize) -> Vec<String> {
    let Some(active) = d.findings["active"].as_array() else {
        return Vec::new();
    };
    if active.is_empty() {
        return vec!["No active findings.".into()];
    }
    let mut out: Vec<String> = active
        .iter()
        .take(max)
        .map(|x| {
            // The age before the sentence: a narrow terminal cuts the end of the line.
            format!(
                "{} {} for {}: {}: {}",
                x["severity"].as_str().unwrap_or("?"),
                x["kind"].as_str().unwrap_or("?"),
                age(d.now_s, n(&x["start_s"])),
                x["subject"].as_str().unwrap_or("?"),
                x["summary"].as_str().unwrap_or("")
            )
        })
        .collect();
    if active.len() > max {
        if let Some(last) = out.last_mut() {
            last.push_str(&format!(" (+{} more: view 2)", active.len() - max));
        }
    }
    out
}

/// A count per second in few characters (the header fits 80 columns): `310`, `12.3k`, `4.1M`.
pub fn per_second(v: f64) -> String {
    if v < 1e3 {
        format!("{v:.0}")
    } else if v < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{:.1}M", v / 1e6)
    }
}

/// What each flow column holds, for a key under the table.
pub const COLUMN_KEY: &str =
    "E elephant  RATE PKT/s CE/s CNP/s: per second, smoothed  PSN GAPS NAKS: totals";

/// What the host's RoCE does now, summed over its interfaces (fits 80 columns).
pub fn rates_line(d: &Docs) -> String {
    let s = &d.summary;
    if !s.is_object() || n(&s["interfaces"]) == 0.0 {
        return "rates after the agent's second poll".into();
    }
    let ce = match s["ce_ratio"].as_f64() {
        Some(r) => format!(
            "{:.1}% {}/s",
            r * 100.0,
            per_second(r * n(&s["rx_packets_per_second"]))
        ),
        None => "-".into(),
    };
    format!(
        "RoCE rx {}  tx {}  CE {ce}  CNP {}/s  PFC paused {:.0}%",
        bits_per_second(n(&s["rx_bits_per_second"]) / 8.0),
        bits_per_second(n(&s["tx_bits_per_second"]) / 8.0),
        per_second(n(&s["cnp_per_second"])),
        n(&s["pfc_paused_ratio"]) * 100.0,
    )
}

/// One flow of `/api/v1/flows`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowRow {
    pub elephant: bool,
    pub iface: String,
    pub src: String,
    pub dst: String,
    pub sport: u64,
    pub dest_qp: u64,
    pub bits_per_second: f64,
    pub packets_per_second: f64,
    /// CE-marked packets and CNPs per second (smoothed as the rates).
    pub ce: f64,
    pub cnp: f64,
    pub gaps: u64,
    pub naks: u64,
}

impl FlowRow {
    pub fn of(f: &Value) -> FlowRow {
        let naks: f64 = f["naks"]
            .as_object()
            .map(|o| o.values().map(n).sum())
            .unwrap_or(0.0)
            + n(&f["rnr_naks"]);
        FlowRow {
            elephant: f["elephant"].as_bool().unwrap_or(false),
            iface: f["iface"].as_str().unwrap_or("?").to_string(),
            src: f["src"].as_str().unwrap_or("?").to_string(),
            dst: f["dst"].as_str().unwrap_or("?").to_string(),
            sport: n(&f["sport"]) as u64,
            dest_qp: n(&f["dest_qp"]) as u64,
            bits_per_second: n(&f["rate_bytes_per_second"]) * 8.0,
            packets_per_second: n(&f["rate_packets_per_second"]),
            ce: n(&f["ce_per_second"]),
            cnp: n(&f["cnp_per_second"]),
            gaps: n(&f["psn_gaps"]) as u64,
            naks: naks as u64,
        }
    }

    /// Source and destination: IPv6 addresses in brackets so the arrow stays readable.
    pub fn path(&self) -> String {
        let a = |s: &str| {
            if s.contains(':') {
                format!("[{s}]")
            } else {
                s.to_string()
            }
        };
        format!("{} -> {}", a(&self.src), a(&self.dst))
    }

    pub fn qp(&self) -> String {
        format!("0x{:x}", self.dest_qp)
    }

    pub fn rate(&self) -> String {
        bits_per_second(self.bits_per_second / 8.0)
    }
}

/// The flows of a document, in the agent's order (by smoothed rate).
pub fn flow_rows(d: &Docs) -> Vec<FlowRow> {
    d.flows["flows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(FlowRow::of)
        .collect()
}

/// The flow table's sort keys, in the order the `s` key steps through them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sort {
    #[default]
    Rate,
    Packets,
    Ce,
    Cnp,
    Gaps,
    Naks,
    Iface,
}

impl Sort {
    pub const ALL: [Sort; 7] = [
        Sort::Rate,
        Sort::Packets,
        Sort::Ce,
        Sort::Cnp,
        Sort::Gaps,
        Sort::Naks,
        Sort::Iface,
    ];

    pub fn next(self) -> Sort {
        let i = Sort::ALL.iter().position(|s| *s == self).unwrap_or(0);
        Sort::ALL[(i + 1) % Sort::ALL.len()]
    }

    /// The column's heading (with its unit).
    pub fn heading(self) -> &'static str {
        match self {
            Sort::Rate => "RATE b/s",
            Sort::Packets => "PKT/s",
            Sort::Ce => "CE/s",
            Sort::Cnp => "CNP/s",
            Sort::Gaps => "PSN GAPS",
            Sort::Naks => "NAKS",
            Sort::Iface => "IFACE",
        }
    }

    /// Sorts `rows`: numbers highest first, interfaces by name (`reverse` turns either).
    pub fn apply(self, rows: &mut [FlowRow], reverse: bool) {
        let num = |r: &FlowRow| match self {
            Sort::Rate => r.bits_per_second,
            Sort::Packets => r.packets_per_second,
            Sort::Ce => r.ce,
            Sort::Cnp => r.cnp,
            Sort::Gaps => r.gaps as f64,
            Sort::Naks => r.naks as f64,
            Sort::Iface => 0.0,
        };
        rows.sort_by(|a, b| {
            let o = match self {
                Sort::Iface => a.iface.cmp(&b.iface),
                _ => num(b).total_cmp(&num(a)),
            };
            if reverse {
                o.reverse()
            } else {
                o
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(iface: &str, bps: f64, ce: f64) -> FlowRow {
        FlowRow {
            iface: iface.into(),
            bits_per_second: bps,
            ce,
            ..FlowRow::default()
        }
    }

    #[test]
    fn sorts_numbers_highest_first() {
        let mut r = vec![row("a", 1.0, 5.0), row("b", 3.0, 1.0), row("c", 2.0, 9.0)];
        Sort::Rate.apply(&mut r, false);
        assert_eq!(
            r.iter().map(|r| r.iface.as_str()).collect::<String>(),
            "bca"
        );
        Sort::Ce.apply(&mut r, false);
        assert_eq!(
            r.iter().map(|r| r.iface.as_str()).collect::<String>(),
            "cab"
        );
    }

    #[test]
    fn reverse_turns_the_order() {
        let mut r = vec![row("b", 1.0, 0.0), row("a", 3.0, 0.0), row("c", 2.0, 0.0)];
        Sort::Iface.apply(&mut r, false);
        assert_eq!(
            r.iter().map(|r| r.iface.as_str()).collect::<String>(),
            "abc"
        );
        Sort::Iface.apply(&mut r, true);
        assert_eq!(
            r.iter().map(|r| r.iface.as_str()).collect::<String>(),
            "cba"
        );
    }

    #[test]
    fn the_sort_key_cycles_through_every_column() {
        let mut s = Sort::Rate;
        for _ in 0..Sort::ALL.len() {
            s = s.next();
        }
        assert_eq!(s, Sort::Rate);
    }

    #[test]
    fn ipv6_ends_are_bracketed() {
        let r = FlowRow {
            src: "fd00::1".into(),
            dst: "10.0.0.2".into(),
            ..FlowRow::default()
        };
        assert_eq!(r.path(), "[fd00::1] -> 10.0.0.2");
    }

    #[test]
    fn the_header_says_the_totals_with_units() {
        let d = Docs {
            flows: serde_json::json!({"flows_total": 3, "elephants_total": 1}),
            summary: serde_json::json!({"interfaces": 1, "rx_bits_per_second": 2.5e9,
                "tx_bits_per_second": 1e6, "ce_ratio": 0.031, "cnp_per_second": 12_000.0,
                "rx_packets_per_second": 10_000.0,
                "pfc_paused_ratio": 0.25, "findings_active": 2}),
            ..Docs::default()
        };
        assert_eq!(
            rates_line(&d),
            "RoCE rx 2.5 Gb/s  tx 1.0 Mb/s  CE 3.1% 310/s  CNP 12.0k/s  PFC paused 25%"
        );
        assert_eq!(counts_line(&d), "3 flows, 1 elephants, 2 findings");
    }

    fn finding(severity: &str, kind: &str, start_s: f64) -> Value {
        serde_json::json!({"severity": severity, "kind": kind, "subject": "eth0 priority 3",
            "summary": "paused", "start_s": start_s})
    }

    #[test]
    fn the_three_most_severe_findings_come_with_their_age() {
        let d = Docs {
            findings: serde_json::json!({"active": [
                finding("critical", "pfc_storm", 988.0),
                finding("warning", "congestion", 1000.0 - 300.0),
                finding("warning", "cnp_missing", 1000.0 - 9000.0),
                finding("info", "elephant", 999.0),
            ]}),
            now_s: 1000.0,
            ..Docs::default()
        };
        let l = finding_lines(&d, 3);
        assert_eq!(l.len(), 3, "{l:#?}");
        assert_eq!(l[0], "critical pfc_storm for 12 s: eth0 priority 3: paused");
        assert!(l[1].starts_with("warning congestion for 5 min: "), "{l:#?}");
        assert!(
            l[2].starts_with("warning cnp_missing for 2 h 30 min: ")
                && l[2].ends_with(" (+1 more: view 2)"),
            "{l:#?}"
        );
    }

    #[test]
    fn no_active_findings_is_said_and_no_document_says_nothing() {
        let d = Docs {
            findings: serde_json::json!({"active": []}),
            ..Docs::default()
        };
        assert_eq!(finding_lines(&d, 3), ["No active findings."]);
        assert!(finding_lines(&Docs::default(), 3).is_empty());
    }

    /// Strings from the API never reach the terminal with what a terminal acts on.
    #[test]
    fn strings_from_the_agent_lose_their_control_characters() {
        let v = serde_json::json!({
            "iface\u{1b}]0;x\u{7}": ["\u{1b}[2J\u{1b}]0;owned\u{7}eth0", 1, {"s": "a\rb\u{9b}c\u{202e}d"}]
        });
        let text = sanitized(v).to_string();
        for bad in ['\u{1b}', '\u{7}', '\r', '\u{9b}', '\u{202e}'] {
            assert!(!text.contains(bad), "{bad:?} in {text}");
        }
        assert!(
            text.contains("eth0") && text.contains("\u{FFFD}[2J"),
            "{text}"
        );
    }

    #[test]
    fn full_flow_maps_show_in_the_header() {
        let d = Docs {
            summary: serde_json::json!({"flow_maps": [
                {"iface": "eth1", "map": "FLOWS4", "entries": 256, "max_entries": 256,
                 "fill_ratio": 1.0, "pushed_out_total": 40},
                {"iface": "eth1", "map": "FLOWS", "entries": 0, "max_entries": 256,
                 "fill_ratio": 0.0, "pushed_out_total": 0}
            ]}),
            ..Docs::default()
        };
        assert_eq!(
            counts_line(&d),
            "0 flows, 0 elephants, FLOW MAPS FULL: eth1 IPv4 256/256 (40 pushed out)"
        );
    }

    #[test]
    fn before_two_polls_the_header_says_so() {
        let d = Docs {
            flows: serde_json::json!({"flows_total": 0, "elephants_total": 0}),
            summary: serde_json::json!({"interfaces": 0}),
            ..Docs::default()
        };
        assert!(rates_line(&d).contains("after the agent's second poll"));
    }
}

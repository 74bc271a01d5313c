//! Issue #49's goals in one table: each ratio against its goal, this run beside the run before
//! (the report this run replaced). The figures are read out of a report's JSON by one
//! function, [`figures`], so the previous run's are read the same way as this one's.

use serde_json::{json, Value};
use std::fmt::Write as _;

/// One goal: its label, the goal as written, and how a figure meets it.
struct Goal {
    key: String,
    label: String,
    goal: &'static str,
    /// The figure meets the goal.
    met: fn(f64) -> bool,
    /// How the figure reads.
    unit: &'static str,
}

/// The goals, in the order.
fn goals() -> Vec<Goal> {
    let mut g = Vec::new();
    for (at, hook) in [("", "XDP"), ("tc_", "tc ingress")] {
        for payload in [64u64, 4096] {
            for flows in [1u64, 1_000, 10_000, 100_000] {
                g.push(Goal {
                    key: format!("kernel_{at}{flows}x{payload}"),
                    label: format!(
                        "kernel, live {hook}, {flows} flows taking turns, {payload} B payloads: rocemon / the exact per-flow floor"
                    ),
                    goal: "at most x1.3",
                    met: |x| x <= 1.3,
                    unit: "x",
                });
            }
        }
    }
    g.push(Goal {
        key: "analyze_vs_tshark".into(),
        label: "analyze against tshark, the bench's capture".into(),
        goal: "at least 100x",
        met: |x| x >= 100.0,
        unit: "x faster",
    });
    for (name, goal, met) in [
        ("small", "at most 2x", (|x| x <= 2.0) as fn(f64) -> bool),
        ("large", "at most 1.5x", |x| x <= 1.5),
    ] {
        g.push(Goal {
            key: format!("analyze_{name}_vs_cat"),
            label: format!("analyze of 1M {name} frames over 10,000 flows / `cat` of the file"),
            goal,
            met,
            unit: "x",
        });
    }
    for (key, label) in [
        ("million_flows", "a million flows of one packet"),
        (
            "million_flows_bounded",
            "a million flows of one packet under `--max-flows 10000`",
        ),
        ("gapped", "10,000 flows, 64 s silences"),
        ("one_pair", "40,000 connections of one host pair"),
        ("slow_steps", "1,000 slow steps under 200,000 pause runs"),
        (
            "million_pauses",
            "1,000 slow steps under 1,000,000 pause runs",
        ),
    ] {
        for (what, noun) in [("time", "time per frame"), ("memory", "peak memory")] {
            g.push(Goal {
                key: format!("hostile_{key}_{what}"),
                label: format!("analyze, {label}: {noun} / its ordinary twin's"),
                goal: "at most x2",
                met: |x| x <= 2.0,
                unit: "x",
            });
        }
    }
    g.push(Goal {
        key: "sflow_cpu_vs_sfacctd".into(),
        label:
            "sFlow: rocemon's CPU per datagram / sfacctd's, the fabric stream at the lowest rate"
                .into(),
        goal: "at most x1",
        met: |x| x <= 1.0,
        unit: "x",
    });
    g.push(Goal {
        key: "sflow_clean_rate".into(),
        label: "sFlow: the highest rate taken without a datagram lost, one core".into(),
        goal: "at least 200,000/s",
        met: |x| x >= 200_000.0,
        unit: "/s",
    });
    g.push(Goal {
        key: "sflow_table_refusals".into(),
        label: "sFlow: entries refused or pushed out for room at the default sizes, 500 switches x 64 ports (agents, ports, flows, uplink flows)".into(),
        goal: "none",
        met: |x| x == 0.0,
        unit: "",
    });
    g
}

/// Index of the hostile rows by their twin pair (the capture's name starts the row).
fn hostile(r: &Value, starts: &str) -> Option<(f64, f64)> {
    let rows = r["robustness"]["analyze"]["rows"].as_array()?;
    let row = rows
        .iter()
        .find(|x| x["capture"].as_str().is_some_and(|c| c.starts_with(starts)))?;
    Some((
        row["time_per_frame_ratio"].as_f64()?,
        row["memory_ratio"].as_f64()?,
    ))
}

/// The goals' figures in a report (absent where the report has none).
pub(crate) fn figures(r: &Value) -> Value {
    let mut out = serde_json::Map::new();
    let mut put = |k: String, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.insert(k, json!(v));
        }
    };
    for row in r["shapes"]["live"]["rows"].as_array().into_iter().flatten() {
        if row["burst"].as_u64() == Some(1) {
            let at = if crate::report_shapes::is_tc(row) {
                "tc_"
            } else {
                ""
            };
            put(
                format!("kernel_{at}{}x{}", row["flows"], row["payload"]),
                row["ratio_to_floor"].as_f64(),
            );
        }
    }
    let a = &r["analyze"];
    put("analyze_vs_tshark".into(), a["speedup_vs_tshark"].as_f64());
    for name in ["small", "large"] {
        put(
            format!("analyze_{name}_vs_cat"),
            a["by_frame_size"][name]["ratio_vs_cat"].as_f64(),
        );
    }
    for (key, starts) in [
        ("million_flows", "1,000,000 flows of one packet"),
        (
            "million_flows_bounded",
            "1,000,000 flows of one packet, --max-flows",
        ),
        ("gapped", "10,000 flows, 64 s"),
        ("one_pair", "40,000 connections"),
        ("slow_steps", "1,000 slow steps under 200,000"),
        ("million_pauses", "1,000 slow steps under 1,000,000"),
    ] {
        let h = hostile(r, starts);
        put(format!("hostile_{key}_time"), h.map(|h| h.0));
        put(format!("hostile_{key}_memory"), h.map(|h| h.1));
    }
    let x = &r["sflow_rates"];
    let first_cpu = |c: &str| x[c]["rows"][0]["cpu_seconds_per_100k"].as_f64();
    if let (Some(a), Some(b)) = (first_cpu("rocemon"), first_cpu("sfacctd")) {
        put("sflow_cpu_vs_sfacctd".into(), Some(a / b));
    }
    put(
        "sflow_clean_rate".into(),
        x["rocemon"]["highest_rate_without_loss"].as_f64(),
    );
    if let Some(t) = x["tables"].as_object() {
        // The tables sized to hold a fabric; the rhythm's (`MAX_RHYTHM_PORTS`, 480 KB a port)
        // follows a few ports by design and counts the rest it refuses (section 5b).
        let refused: f64 = t
            .iter()
            .filter(|(name, _)| *name != "rhythm_ports")
            .map(|(_, v)| {
                v["dropped"].as_f64().unwrap_or(0.0) + v["evicted"].as_f64().unwrap_or(0.0)
            })
            .sum();
        put("sflow_table_refusals".into(), Some(refused));
    }
    Value::Object(out)
}

fn shown(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "-".into(),
        Some(v) if unit == "x" => format!("x{v:.2}"),
        Some(v) if unit == "/s" => format!("{v:.0}/s"),
        Some(v) if unit.is_empty() => format!("{v:.0}"),
        Some(v) => format!("{v:.0}{unit}"),
    }
}

/// The section: every goal, this run's figure, the previous run's and the verdict.
pub(crate) fn section(r: &Value) -> String {
    let now = figures(r);
    let before = &r["previous"]["figures"];
    let when = r["previous"]["date"].as_str().unwrap_or("none kept");
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n## Issue #49: performance against the floor\n\nEach goal's figure in this run beside the run this report replaced ({when}; a phase not re-run keeps its figure, so both columns then show the same run). The machine can differ between runs: the ratios are each taken within one run.\n\n| goal | target | this run | previous run | verdict |\n| --- | --- | --- | --- | --- |"
    );
    for g in goals() {
        let v = now[&g.key].as_f64();
        let verdict = match v {
            None => "not measured",
            Some(x) if (g.met)(x) => "met",
            Some(_) => "**missed**",
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {verdict} |",
            g.label,
            g.goal,
            shown(v, g.unit),
            shown(before[&g.key].as_f64(), g.unit)
        );
    }
    s
}

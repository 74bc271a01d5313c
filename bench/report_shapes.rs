//! The traffic-shapes section of the report: the cost of rocemon's XDP program against the
//! flow count, as tables and as a curve, its tc ingress program's at the goals' flow counts,
//! and the verdicts against the targets of many flows.

use serde_json::Value;
use std::fmt::Write as _;

/// A bar of `ratio` (one `#` per 0.5x, at most 60).
fn bar(ratio: f64) -> String {
    "#".repeat(((ratio / 0.5).round() as usize).clamp(1, 60))
}

/// Whether a live row is tc ingress's (rows of reports before tc was measured have no hook:
/// XDP's).
pub(crate) fn is_tc(row: &Value) -> bool {
    row["hook"].as_str() == Some("tc ingress")
}

/// A live row of the table: the case, rocemon, the count-only program, the rounds, the floor.
fn live_row(s: &mut String, row: &Value) {
    let rounds: Vec<String> = row["ratios"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_f64().map(|x| format!("x{x:.2}")))
        .collect();
    let f = |k: &str| row[k].as_f64().unwrap_or(0.0);
    let _ = writeln!(
        s,
        "| {} | {:.0} | {:.0} | x{:.2} | {} | {:.0} | x{:.2} | x{:.2} |",
        row["case"].as_str().unwrap_or(""),
        f("run_ns"),
        f("run_ns_count_only"),
        f("ratio"),
        rounds.join(", "),
        f("run_ns_flow_floor"),
        f("floor_ratio"),
        f("ratio_to_floor")
    );
}

/// The live table's header.
const LIVE_HEADER: &str = "| case | run ns rocemon | run ns count-only | ratio | rounds | run ns flow floor | floor / count-only | rocemon / floor |\n| --- | --- | --- | --- | --- | --- | --- | --- |";

/// The section (empty when the phase has not run).
pub(crate) fn section(r: &Value) -> String {
    let mut s = String::new();
    let shapes = &r["shapes"];
    if shapes.is_null() {
        return s;
    }
    let _ = writeln!(s, "\n## 4b. Traffic shapes: many flows taking turns\n\nTargets (the live run time per packet against the count-only program attached the same way): 1 flow at most 2x, 1,000 flows taking turns at most 3x, 10,000 at most 4x, with 64-byte and 4 KiB payloads. A flow is the plain RoCE WRITE with its own destination QP; \"taking turns\": one packet of each flow in turn, so no flow comes back before all others have sent one.\n\nThe flow floor is the least an exact per-flow counter costs (each packet's IPv4 RoCE flow looked up in a per-CPU hash map of the agent's size, inserted when new, a packet and its bytes added: the simplest flow agents' shape). Where flows outnumber what a CPU's caches hold, the floor's own ratio to the count-only program is the memory cost any exact per-flow count pays, and rocemon's ratio to the floor is what it adds.\n\nLive (veth, raw-socket sender on CPU 0, the agent's XDP program in native mode; {} rounds, in each the three programs back to back per case, each measured over {} s after {} s of the same traffic; medians):\n\n{LIVE_HEADER}", shapes["live"]["rounds"], shapes["live"]["seconds_per_case"], shapes["live"]["warmup_seconds"]);
    let rows = shapes["live"]["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (tc, rows): (Vec<Value>, Vec<Value>) = rows.into_iter().partition(is_tc);
    for row in &rows {
        live_row(&mut s, row);
    }
    if !tc.is_empty() {
        let _ = writeln!(s, "\nThe same at tc ingress (the agent's tc ingress program, TCX; the count-only program and the flow floor attached there too; the floor reads a frame's headers in place, or with `bpf_skb_load_bytes` where the skb's linear part holds less of them, as the raw socket's 4 KiB frames do):\n\n{LIVE_HEADER}");
        for row in &tc {
            live_row(&mut s, row);
        }
    }
    let _ = writeln!(s, "\nThe curve (live, flows taking turns: ratio to the count-only program, one `#` per 0.5x; the flow floor's own ratio below each):\n\n```");
    for payload in [64, 4096] {
        let _ = writeln!(s, "{payload}-byte payloads");
        for row in rows
            .iter()
            .filter(|r| r["burst"] == 1 && r["payload"] == payload)
        {
            let ratio = row["ratio"].as_f64().unwrap_or(0.0);
            let floor = row["floor_ratio"].as_f64().unwrap_or(0.0);
            let _ = writeln!(
                s,
                "  {:>7} flows  x{ratio:<5.2} {}\n          floor  x{floor:<5.2} {}",
                row["flows"].as_u64().unwrap_or(0),
                bar(ratio),
                bar(floor)
            );
        }
    }
    let _ = writeln!(s, "```\n\nBPF_PROG_TEST_RUN over a rotating set of frames (each run one frame, the next flow's; every flow created in a pass before the measured one, then the agent's flush after each further pass until the flow cache's mode settles, so the cache column is the mode the agent would leave it in; single runs, so each figure includes the harness's own per-run cost, as the count-only program's does; three interleaved loads, medians):\n\n| flows | frame bytes | cache | its flush, us a poll and CPU | every chunk walked, us | XDP ns | XDP ns, cache switched off | count-only ns | ratio | ratio, cache switched off | flow floor ns | floor / count-only |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for row in shapes["test_run"].as_array().into_iter().flatten() {
        let f = |k: &str| row[k].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | x{:.2} | x{:.2} | {:.0} | x{:.2} |",
            row["flows"],
            row["bytes"],
            row["cache_mode"].as_str().unwrap_or("on"),
            f("flush_us"),
            f("flush_every_chunk_us"),
            f("xdp_ns"),
            f("xdp_cache_off_ns"),
            f("count_only_ns"),
            f("ratio"),
            f("ratio_cache_off"),
            f("flow_floor_ns"),
            f("floor_ratio")
        );
    }
    s
}

/// The verdict rows of the many-flows targets (live, flows taking turns).
pub(crate) fn verdicts(r: &Value, verdict: impl Fn(bool) -> &'static str) -> String {
    let mut s = String::new();
    for row in r["shapes"]["live"]["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| !is_tc(r))
    {
        let target = match (row["burst"].as_u64(), row["flows"].as_u64()) {
            (Some(1), Some(1)) => 2.0,
            (Some(1), Some(1_000)) => 3.0,
            (Some(1), Some(10_000)) => 4.0,
            _ => continue,
        };
        let ratio = row["ratio"].as_f64().unwrap_or(f64::MAX);
        let _ = writeln!(
            s,
            "| live {}: kernel run time at most {target}x the count-only program | median x{ratio:.2} | {} |",
            row["case"].as_str().unwrap_or(""),
            verdict(ratio <= target)
        );
    }
    s
}

//! The report: machine facts and the Markdown page with the verdicts against the targets.

use super::*;

pub(crate) fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    json!({ "cpu": cpu, "cpus": nr_cpus().unwrap_or(0), "kernel": kernel, "rocemon": env!("CARGO_PKG_VERSION") })
}

/// One Markdown table row per JSON row: its `label` field, then each numeric field with its
/// number of decimals.
fn table_rows(s: &mut String, rows: &Value, label: &str, fields: &[(&str, usize)]) {
    use std::fmt::Write as _;
    for row in rows.as_array().into_iter().flatten() {
        let mut line = format!("| {} |", row[label].as_str().unwrap_or(""));
        for &(f, decimals) in fields {
            let _ = write!(line, " {:.*} |", decimals, row[f].as_f64().unwrap_or(0.0));
        }
        let _ = writeln!(s, "{line}");
    }
}

pub(crate) fn markdown(r: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let m = &r["machine"];
    let _ = writeln!(s, "# rocemon benchmark report\n\nMeasured by `cargo xtask bench` on {} ({} CPUs), kernel {}, rocemon {}, {}.\nEvery figure is compared with a baseline measured in the same run.\n", m["cpu"].as_str().unwrap_or("?"), m["cpus"], m["kernel"].as_str().unwrap_or("?"), m["rocemon"].as_str().unwrap_or("?"), r["date"].as_str().unwrap_or("?"));
    let _ = writeln!(s, "## 1. Kernel per-packet cost (BPF_PROG_TEST_RUN, {} repeats; three interleaved loads x three runs: median, and minimum in brackets)\n\nTargets: plain RoCE (fast path) at most 4x the one-counter baseline and under 50 ns; the non-RoCE frames at most 1.5x; the rare shapes (slow program) reported. One load can sit in a slow or a fast mode for all its runs on this machine, so the minimum is the steadier figure of the program's own cost.\n\n| flows in map | frame | path | XDP ns | baseline ns | ratio | tc ns | baseline ns | ratio |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |", r["kernel"]["repeat"]);
    for row in r["kernel"]["rows"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} ({:.0}) | {:.0} | {:.2} ({:.2}) | {:.0} ({:.0}) | {:.0} | {:.2} ({:.2}) |",
            row["flows_in_map"],
            row["frame"].as_str().unwrap_or(""),
            row["path"].as_str().unwrap_or(""),
            row["xdp_ns"].as_f64().unwrap_or(0.0),
            row["xdp_min_ns"].as_f64().unwrap_or(0.0),
            row["xdp_baseline_ns"].as_f64().unwrap_or(0.0),
            row["xdp_ratio"].as_f64().unwrap_or(0.0),
            row["xdp_min_ratio"].as_f64().unwrap_or(0.0),
            row["tc_ns"].as_f64().unwrap_or(0.0),
            row["tc_min_ns"].as_f64().unwrap_or(0.0),
            row["tc_baseline_ns"].as_f64().unwrap_or(0.0),
            row["tc_ratio"].as_f64().unwrap_or(0.0),
            row["tc_min_ratio"].as_f64().unwrap_or(0.0)
        );
    }
    let _ = writeln!(s, "\nWhat the load-time switches cost (plain RoCE frame over XDP; six interleaved rounds, each loading every configuration afresh):\n\n| switches | XDP ns min | XDP ns median | baseline ns | ratio |\n| --- | --- | --- | --- | --- |");
    table_rows(
        &mut s,
        &r["kernel"]["switches"],
        "switches",
        &[
            ("xdp_min_ns", 0),
            ("xdp_ns", 0),
            ("xdp_baseline_ns", 0),
            ("xdp_ratio", 2),
        ],
    );
    let _ = writeln!(s, "\nWhat a flow cache miss costs (single runs, each frame fed on its own, so every figure includes the harness's per-run cost, which the count-only program's figure shows; five rounds):\n\n| case | XDP ns min | XDP ns median | baseline ns |\n| --- | --- | --- | --- |");
    table_rows(
        &mut s,
        &r["kernel"]["flow_cache"],
        "case",
        &[("xdp_min_ns", 0), ("xdp_ns", 0), ("xdp_baseline_ns", 0)],
    );
    let a = &r["analyze"];
    let _ = writeln!(s, "\n## 2. Capture analysis (1,000,000 frames, 10,000 flows, {:.0} MB)\n\nTarget: at least 100x tshark and within 3x of reading the file.\n\n| tool | seconds | frames/s |\n| --- | --- | --- |\n| rocemon analyze --format json | {:.2} | {:.0} |\n| tshark -T fields -e infiniband.bth.opcode | {:.2} | {:.0} |\n| cat FILE > /dev/null | {:.3} | |\n\nrocemon is **{:.1}x** faster than tshark and takes **{:.1}x** the time of reading the file.\n\nBy frame size (1,000,000 frames over 10,000 flows each; medians of five runs interleaved with `cat`; targets: small frames at most 2x `cat`, large frames at most 1.5x):\n\n| frames | file | rocemon s | cat s | ratio |\n| --- | --- | --- | --- | --- |{}", a["file_bytes"].as_f64().unwrap_or(0.0) / 1e6, a["rocemon_seconds"].as_f64().unwrap_or(0.0), a["rocemon_frames_per_second"].as_f64().unwrap_or(0.0), a["tshark_seconds"].as_f64().unwrap_or(0.0), a["tshark_frames_per_second"].as_f64().unwrap_or(0.0), a["cat_seconds"].as_f64().unwrap_or(0.0), a["speedup_vs_tshark"].as_f64().unwrap_or(0.0), a["ratio_vs_cat"].as_f64().unwrap_or(0.0), size_rows(a));
    let c = &r["scale"];
    let _ = writeln!(s, "\n## 3. Agent at scale ({} flows in the kernel map)\n\nTarget: a scrape under 100 ms and resident memory under 200 MB.\n\n| poll (maps -> flow table -> detectors -> metrics) | of which map reads | /metrics render | /metrics size | RSS | CPU at one poll per second |\n| --- | --- | --- | --- | --- | --- |\n| {:.1} ms | {:.1} ms | {:.2} ms | {} bytes | {:.1} MB | {:.1}% |", c["flows"], c["poll_ms"].as_f64().unwrap_or(0.0), c["map_read_ms"].as_f64().unwrap_or(0.0), c["metrics_render_ms"].as_f64().unwrap_or(0.0), c["metrics_bytes"], c["rss_bytes"].as_f64().unwrap_or(0.0) / 1e6, c["cpu_share_at_1s_poll"].as_f64().unwrap_or(0.0) * 100.0);
    let _ = writeln!(s, "\n## 4. Live path ({}-byte RoCE frames through a veth pair, raw-socket sender)\n\nTargets: rocemon's packet rate at least 0.9x and its kernel run time (BPF statistics) at most 3x the count-only program attached the same way. XDP and tc: interleaved rounds (no program, the count-only program, rocemon), each ratio taken within its round; the medians are shown (the rounds' ratios are in the verdicts).\n\n| hook | pps with rocemon | pps with count-only | ratio | pps without a program | ratio | run ns rocemon | run ns count-only | ratio |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |", r["live"]["frame_bytes"]);
    for row in r["live"]["rows"].as_array().into_iter().flatten() {
        let f = |k: &str| {
            row[k]
                .as_f64()
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(|| "-".into())
        };
        let n = |k: &str| {
            row[k]
                .as_f64()
                .map(|v| format!("{v:.0}"))
                .unwrap_or_else(|| "-".into())
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row["hook"].as_str().unwrap_or(""),
            n("pps_with"),
            n("pps_count_only"),
            f("ratio_vs_count_only"),
            n("pps_without"),
            f("ratio"),
            n("run_ns"),
            n("run_ns_count_only"),
            f("run_ns_ratio")
        );
    }
    s.push_str(&crate::report_shapes::section(r));
    s.push_str(&crate::report_sflow_rates::section(r));
    s.push_str(&crate::report_goals::section(r));
    // Against the targets, computed from this run.
    let rows = r["kernel"]["rows"].as_array().cloned().unwrap_or_default();
    let worst = |k: &str| {
        rows.iter()
            .filter_map(|x| x[k].as_f64())
            .fold(0.0, f64::max)
    };
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let _ = writeln!(
        s,
        "\n## Against the targets\n\n| target | this run | verdict |\n| --- | --- | --- |"
    );
    // Plain RoCE on the fast path, the common non-RoCE frames, and the rare shapes (reported).
    let class = |x: &Value| {
        let label = x["frame"].as_str().unwrap_or("");
        if label.contains("(not ") {
            "other"
        } else if x["path"] == "slow" {
            "rare"
        } else {
            "roce"
        }
    };
    let worst_of = |cls: &str, k: &str| {
        rows.iter()
            .filter(|x| class(x) == cls)
            .filter_map(|x| x[k].as_f64())
            .fold(0.0, f64::max)
    };
    let (xr, tr, xn, tn) = (
        worst_of("roce", "xdp_ratio"),
        worst_of("roce", "tc_ratio"),
        worst_of("roce", "xdp_ns"),
        worst_of("roce", "tc_ns"),
    );
    let (xm, tm) = (
        worst_of("roce", "xdp_min_ratio"),
        worst_of("roce", "tc_min_ratio"),
    );
    let _ = writeln!(
        s,
        "| kernel: plain RoCE at most 4x the count-only program | worst XDP x{xr:.1}, tc x{tr:.1} (minimums: x{xm:.1}, x{tm:.1}) | {} |",
        verdict(xr <= 4.0 && tr <= 4.0)
    );
    let _ = writeln!(
        s,
        "| kernel: plain RoCE under 50 ns per packet (the count-only program alone costs {:.0}-{:.0} ns here) | worst XDP {xn:.0} ns, tc {tn:.0} ns | {} |",
        rows.iter().filter_map(|x| x["xdp_baseline_ns"].as_f64()).fold(f64::MAX, f64::min),
        worst("xdp_baseline_ns"),
        verdict(xn < 50.0 && tn < 50.0)
    );
    let (ox, ot) = (
        worst_of("other", "xdp_ratio"),
        worst_of("other", "tc_ratio"),
    );
    let _ = writeln!(
        s,
        "| kernel: non-RoCE frames at most 1.5x | worst XDP x{ox:.2}, tc x{ot:.2} | {} |",
        verdict(ox <= 1.5 && ot <= 1.5)
    );
    let _ = writeln!(
        s,
        "| kernel: rare shapes (slow program; reported) | worst XDP x{:.1}, tc x{:.1} | - |",
        worst_of("rare", "xdp_ratio"),
        worst_of("rare", "tc_ratio")
    );
    if let Some(v) = r["kernel"]["verified_instructions"].as_object() {
        let most = v.values().filter_map(Value::as_u64).max().unwrap_or(0);
        let _ = writeln!(
            s,
            "| kernel: every program under 100,000 verified instructions | most {most} ({}) | {} |",
            v.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            verdict(most < 100_000)
        );
    }
    for row in r["live"]["rows"].as_array().into_iter().flatten() {
        if let (Some(p), Some(n)) = (
            row["ratio_vs_count_only"].as_f64(),
            row["run_ns_ratio"].as_f64(),
        ) {
            let hook = row["hook"].as_str().unwrap_or("");
            let rounds = |k: &str| {
                let v: Vec<String> = row[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_f64().map(|x| format!("x{x:.2}")))
                    .collect();
                if v.is_empty() {
                    String::new()
                } else {
                    format!(" (rounds: {})", v.join(", "))
                }
            };
            let _ = writeln!(
                s,
                "| live {hook}: packet rate at least 0.9x the count-only program | median x{p:.2}{} | {} |",
                rounds("ratios_vs_count_only"),
                verdict(p >= 0.9)
            );
            let _ = writeln!(
                s,
                "| live {hook}: kernel run time at most 3x the count-only program | median x{n:.2}{} | {} |",
                rounds("run_ns_ratios"),
                verdict(n <= 3.0)
            );
        } else if let Some(p) = row["ratio"].as_f64() {
            // The verdict is the default settings'; the other rows show what the receive
            // loop's settings change.
            if row["hook"]
                .as_str()
                .unwrap_or("")
                .starts_with("afxdp copy, default")
            {
                let _ = writeln!(
                    s,
                    "| live AF_XDP copy mode (default settings): at least 0.8x of what the stack alone receives | x{p:.2} | {} |",
                    verdict(p >= 0.8)
                );
            }
        }
    }
    s.push_str(&crate::report_shapes::verdicts(r, verdict));
    s.push_str(&crate::report_sflow_rates::verdicts(r, verdict));
    let sp = a["speedup_vs_tshark"].as_f64().unwrap_or(0.0);
    let rc = a["ratio_vs_cat"].as_f64().unwrap_or(0.0);
    let _ = writeln!(
        s,
        "| analyze: at least 100x tshark | {sp:.0}x | {} |",
        verdict(sp >= 100.0)
    );
    let _ = writeln!(
        s,
        "| analyze: within 3x of reading the file | {rc:.1}x | {} |",
        verdict(rc <= 3.0)
    );
    if let Some(g) = a["steady"]["ns_per_frame_30_over_5"].as_f64() {
        let per: Vec<String> = a["steady"]["captures"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{} min {:.2} s",
                    c["minutes"].as_u64().unwrap_or(0),
                    c["rocemon_seconds"].as_f64().unwrap_or(0.0)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "| analyze: a steady capture in time proportional to its frames (30 min per frame at most 1.5x 5 min; {}) | {g:.2}x | {} |",
            per.join(", "),
            verdict(g <= 1.5)
        );
    }
    for (name, target) in [("small", 2.0), ("large", 1.5)] {
        if let Some(x) = a["by_frame_size"][name]["ratio_vs_cat"].as_f64() {
            let _ = writeln!(
                s,
                "| analyze: {name} frames at most {target}x reading the file | {x:.1}x | {} |",
                verdict(x <= target)
            );
        }
    }
    let render = c["metrics_render_ms"].as_f64().unwrap_or(0.0);
    let rss = c["rss_bytes"].as_f64().unwrap_or(0.0) / 1e6;
    let _ = writeln!(
        s,
        "| scale: a scrape under 100 ms | {render:.2} ms | {} |",
        verdict(render < 100.0)
    );
    let _ = writeln!(
        s,
        "| scale: resident memory under 200 MB | {rss:.0} MB | {} |",
        verdict(rss < 200.0)
    );
    if !r["robustness"].is_null() {
        robustness::markdown(&r["robustness"], &mut s);
    }
    if !r["diagnosis"].is_null() {
        super::diagnosis::markdown(&r["diagnosis"], &mut s);
    }
    let x = &r["ipfix"];
    if !x.is_null() {
        let f = |k: &str| x[k].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            s,
            "\n## IPFIX flow records ({} flows)\n\nTarget: the agent's poll with export on within 10% of export off.\n\n| figure | value |\n| --- | --- |\n| records per second through the exporter's thread (encode, UDP send), one core | {:.0} |\n| bytes per IPv4 record on the wire (record {} B, IPv6 {} B, with headers and templates) | {:.1} |\n| poll, export off (map read, ingest, tick, ECMP views) | {:.1} ms |\n| poll, export on (60 s active timeout, a sixtieth of the flows due each poll) | {:.1} ms |\n| records per poll | {:.0} |\n\nExport on costs **x{:.3}** the poll without it ({}; medians of {} polls each, interleaved).",
            x["flows"],
            f("records_per_second_one_core"),
            x["ipv4_record_bytes"],
            x["ipv6_record_bytes"],
            f("bytes_per_ipv4_record"),
            f("poll_ms_export_off"),
            f("poll_ms_export_on"),
            f("records_per_poll"),
            f("poll_ratio"),
            verdict(f("poll_ratio") <= 1.10),
            x["polls_each"]
        );
    }
    let f = &r["sflow"];
    if !f.is_null() {
        let _ = writeln!(
            s,
            "\n## sFlow collector capacity (one core, {} datagrams of {} samples)\n\n| path | samples/s | datagrams/s |\n| --- | --- | --- |\n| decode, shared parser, collector tables | {:.0} | {:.0} |\n| the shared parser alone over the same headers (baseline) | {:.0} | |\n\nThe collector costs **{:.1}x** the parser alone.",
            f["datagrams"],
            f["samples"].as_f64().unwrap_or(0.0) / f["datagrams"].as_f64().unwrap_or(1.0),
            f["collector_samples_per_second"].as_f64().unwrap_or(0.0),
            f["collector_datagrams_per_second"].as_f64().unwrap_or(0.0),
            f["parse_only_samples_per_second"].as_f64().unwrap_or(0.0),
            f["ratio_vs_parse_only"].as_f64().unwrap_or(0.0)
        );
        let x = &f["fabric"];
        if !x.is_null() {
            let _ = writeln!(
                s,
                "\nAt a fabric's scale (the stream of section 5b: {} ports, {} flows held, the fabric view over two groups' {} uplink flows, ticked once per simulated second): **{:.2} us per datagram** ({:.0} datagrams/s on one core, without the socket), the fabric view's tick {:.1} ms{}.",
                x["ports"],
                x["flows"],
                x["port_flows"],
                x["seconds_per_datagram"].as_f64().unwrap_or(0.0) * 1e6,
                x["datagrams_per_second"].as_f64().unwrap_or(0.0),
                x["fabric_tick_seconds"].as_f64().unwrap_or(0.0) * 1e3,
                x["view_seconds"].as_f64().map_or(String::new(), |v| format!(
                    "; the live poll's view of the collector (its API report of every port and the top flows, built under the collector's lock once a second) {:.1} ms",
                    v * 1e3
                ))
            );
        }
    }
    s
}

/// The analyze phase's rows by frame size.
fn size_rows(a: &Value) -> String {
    let mut rows = String::new();
    for name in ["small", "large"] {
        let r = &a["by_frame_size"][name];
        if r.is_null() {
            continue;
        }
        let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
        rows.push_str(&format!(
            "\n| {name} | {:.0} MB | {:.2} | {:.3} | {:.1}x |",
            f("file_bytes") / 1e6,
            f("rocemon_seconds"),
            f("cat_seconds"),
            f("ratio_vs_cat")
        ));
    }
    rows
}

//! The runbook is something to act on: every entry says how urgent it is, gives commands to
//! confirm it, the first mitigation and its look-alikes; every finding kind has commands for
//! the host and the switch. The commands are checked against what they name: an `ethtool -S`
//! filter matches driver counters the NIC reader knows, a sysfs `hw_counters` name is a real
//! RDMA NIC counter, a `/metrics` filter matches metrics of the catalog, an API path is served,
//! and a `rocemon` command line parses.

use regex::Regex;
use rocemon::detect::findings::KINDS;
use rocemon::export::metrics::Metrics;
use rocemon::sources::nic_pause::classify_ethtool;
use std::collections::BTreeMap;
use std::process::Command;

const RUNBOOK: &str = include_str!("../docs/runbook.md");

/// The entries: heading -> body (up to the next heading).
fn entries() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut cur: Option<(String, String)> = None;
    for line in RUNBOOK.lines() {
        if line.starts_with("# ") || line.starts_with("## ") {
            if let Some((h, b)) = cur.take() {
                out.insert(h, b);
            }
            if let Some(h) = line.strip_prefix("## ") {
                cur = Some((h.trim().to_string(), String::new()));
            }
            continue;
        }
        if let Some((_, b)) = cur.as_mut() {
            b.push_str(line);
            b.push('\n');
        }
    }
    if let Some((h, b)) = cur {
        out.insert(h, b);
    }
    out.remove("Many findings of one kind");
    out
}

/// Every line of every `sh` block of the runbook.
fn commands() -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in RUNBOOK.lines() {
        if line.starts_with("```") {
            inside = line == "```sh";
            continue;
        }
        if inside && !line.trim().is_empty() {
            // A trailing comment explains the command; it is not part of it.
            let cmd = line.split("  #").next().unwrap_or(line).trim();
            out.push(cmd.to_string());
        }
    }
    out
}

/// The quoted pattern of a `grep -E 'PATTERN'` (or `grep 'x'`, `grep x`) at the end of a line.
fn grep_pattern(cmd: &str) -> Option<String> {
    let g = cmd.rsplit_once("| grep ")?.1;
    let g = g.trim_start_matches("-E ").trim_start_matches("-i ").trim();
    Some(g.trim_matches('\'').to_string())
}

#[test]
fn every_entry_has_urgency_commands_mitigation_and_look_alikes() {
    let e = entries();
    assert!(e.len() >= 30, "{} entries", e.len());
    for (h, body) in &e {
        for part in [
            "**Urgency.**",
            "```sh",
            "**First mitigation.**",
            "**Looks like it.**",
        ] {
            assert!(body.contains(part), "runbook entry {h} has no {part}");
        }
    }
}

#[test]
fn every_finding_kind_has_host_and_switch_commands() {
    let e = entries();
    for kind in KINDS {
        let body = e
            .get(kind)
            .unwrap_or_else(|| panic!("no runbook entry for the finding kind {kind}"));
        for part in ["**Confirm on the host", "**Confirm on the switch"] {
            assert!(body.contains(part), "{kind} has no {part}");
        }
    }
    // The switch commands of the kinds that live in the switches name all three systems.
    for kind in [
        "pfc_storm",
        "congestion",
        "retransmissions",
        "ecmp_collision",
        "lossy_roce",
    ] {
        let body = &e[kind];
        for os in ["SONiC", "Arista EOS", "Cumulus"] {
            assert!(body.contains(os), "{kind}: no {os} command");
        }
    }
}

/// mlx5's `ethtool -S` names the entries may filter for (en_stats.c): the per-priority pause
/// counters the NIC reader takes, and the physical port's discard and error counters.
const MLX5_ETHTOOL: &[&str] = &[
    "rx_prio3_pause",
    "tx_prio3_pause",
    "rx_prio3_pause_duration",
    "tx_prio3_pause_duration",
    "rx_prio3_pause_transition",
    "rx_discards_phy",
    "tx_discards_phy",
    "rx_crc_errors_phy",
    "rx_symbol_err_phy",
];

#[test]
fn every_ethtool_filter_matches_counters_the_nic_reader_knows() {
    let names: Vec<String> = MLX5_ETHTOOL.iter().map(|s| s.to_string()).collect();
    let mut filters = 0;
    for cmd in commands().iter().filter(|c| c.starts_with("ethtool -S ")) {
        let pat = grep_pattern(cmd).unwrap_or_else(|| panic!("{cmd}: no filter"));
        let re = Regex::new(&pat).unwrap_or_else(|e| panic!("{cmd}: {e}"));
        let hits: Vec<&String> = names.iter().filter(|n| re.is_match(n)).collect();
        assert!(!hits.is_empty(), "{cmd}: matches no counter of the driver");
        if pat.contains("pause") {
            // A pause filter finds what rocemon itself reads as PFC counters or pause time.
            let hit: Vec<String> = hits.iter().map(|s| s.to_string()).collect();
            let n = classify_ethtool(&hit, &vec![1; hit.len()]);
            assert!(
                !n.pfc.is_empty() || !n.durations.is_empty(),
                "{cmd}: {hit:?} are no pause counters the reader knows"
            );
        }
        filters += 1;
    }
    assert!(filters >= 5, "{filters} ethtool filters");
}

/// The RDMA NIC counters (`/sys/class/infiniband/DEV/ports/PORT/hw_counters/`) of mlx5, as
/// the kernel documents them (Documentation/admin-guide/infiniband, mlx5 counters).
const HW_COUNTERS: &[&str] = &[
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "out_of_sequence",
    "packet_seq_err",
    "duplicate_request",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
];

#[test]
fn every_hw_counter_named_is_a_real_rdma_counter() {
    let re = Regex::new(r"hw_counters/([a-z_]+)").unwrap();
    let mut n = 0;
    for c in re.captures_iter(RUNBOOK) {
        assert!(
            HW_COUNTERS.contains(&&c[1]),
            "hw_counters/{} is no mlx5 counter",
            &c[1]
        );
        n += 1;
    }
    assert!(n >= 10, "{n} hw counters named");
}

#[test]
fn every_metrics_filter_matches_a_metric_of_the_catalog() {
    let catalog = Metrics::new().unwrap().catalog;
    let mut n = 0;
    for cmd in commands().iter().filter(|c| c.contains("/metrics | grep")) {
        let pat = grep_pattern(cmd).unwrap();
        let re = Regex::new(&pat).unwrap_or_else(|e| panic!("{cmd}: {e}"));
        let alts: Vec<&str> = pat.split('|').collect();
        assert!(
            catalog.iter().any(|m| re.is_match(m)),
            "{cmd}: matches no metric of the catalog"
        );
        // Each alternative of an alternation finds something (a renamed metric in a list
        // would otherwise hide behind the others).
        if alts.len() > 1 && !pat.contains('(') {
            for a in alts {
                assert!(catalog.iter().any(|m| m.contains(a)), "{cmd}: {a}");
            }
        }
        n += 1;
    }
    assert!(n >= 8, "{n} metrics filters");
}

#[test]
fn every_api_path_named_is_served() {
    let served = include_str!("../agent/src/export/http.rs");
    let re = Regex::new(r"127\.0\.0\.1:9442(/[a-z0-9/]+)").unwrap();
    let mut n = 0;
    for c in re.captures_iter(RUNBOOK) {
        let path = &c[1];
        assert!(
            served.contains(&format!(".route(\"{path}\"")),
            "{path} is not served by the agent"
        );
        n += 1;
    }
    assert!(n >= 10, "{n} API calls");
}

#[test]
fn every_rocemon_command_line_parses() {
    let bin = env!("CARGO_BIN_EXE_rocemon");
    let mut n = 0;
    for cmd in commands().iter() {
        let Some(rest) = cmd.strip_prefix("rocemon ") else {
            continue;
        };
        let line = rest.split(" | ").next().unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let help = Command::new(bin)
            .args([words[0], "--help"])
            .output()
            .unwrap();
        assert!(
            help.status.success(),
            "rocemon {}: no such command",
            words[0]
        );
        let help = String::from_utf8_lossy(&help.stdout);
        for w in &words[1..] {
            if let Some(flag) = w.strip_prefix("--") {
                let flag = flag.split('=').next().unwrap();
                assert!(
                    help.contains(&format!("--{flag}")),
                    "rocemon {line}: no --{flag}"
                );
            }
        }
        n += 1;
    }
    assert!(n >= 2, "{n} rocemon command lines");
}

//! The dashboard and the rules read as a person would: no two panels overlap, percent panels
//! show ratios, no expression hard-codes a job, every alert links to its runbook entry.

use rocemon_testkit::dashboards::{anchor, dashboard, dashboard_exprs, panels, DIR};
use serde_json::Value;

/// Panels in grid units: (title, x, y, w, h).
fn grid(panels: &[Value]) -> Vec<(String, i64, i64, i64, i64)> {
    panels
        .iter()
        .map(|p| {
            let g = &p["gridPos"];
            let n = |k: &str| g[k].as_i64().unwrap();
            (
                p["title"].as_str().unwrap().to_string(),
                n("x"),
                n("y"),
                n("w"),
                n("h"),
            )
        })
        .collect()
}

#[test]
fn no_two_panels_overlap_and_every_panel_fits_the_grid() {
    let top = dashboard()["panels"].as_array().unwrap().clone();
    no_overlap(&grid(&top));
    // A collapsed row's panels, opened, do not overlap one another.
    for row in &top {
        no_overlap(&grid(row["panels"].as_array().map_or(&[][..], |v| v)));
    }
}

fn no_overlap(g: &[(String, i64, i64, i64, i64)]) {
    for (i, a) in g.iter().enumerate() {
        assert!(a.1 >= 0 && a.1 + a.3 <= 24, "{a:?} leaves the 24 columns");
        for b in &g[i + 1..] {
            let apart =
                a.1 + a.3 <= b.1 || b.1 + b.3 <= a.1 || a.2 + a.4 <= b.2 || b.2 + b.4 <= a.2;
            assert!(apart, "{a:?} and {b:?} overlap");
        }
    }
}

/// A percent panel shows shares: every expression of it is a ratio (a division, a
/// `_ratio` series, or seconds per second); counts are never percent (one slow step read as
/// 100%).
#[test]
fn percent_panels_show_ratios_only() {
    for p in panels() {
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
        if !unit.starts_with("percent") {
            continue;
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().unwrap();
            let ratio = e.contains('/')
                || e.contains("_ratio")
                || (e.contains("rate(") && e.contains("_seconds_total"));
            assert!(ratio, "{}: {e} is not a ratio under {unit}", p["title"]);
        }
    }
}

#[test]
fn the_dashboard_filters_by_job_and_hard_codes_none() {
    let d = dashboard();
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(vars.contains(&"job"), "{vars:?}");
    for e in dashboard_exprs() {
        assert!(!e.contains("job=\""), "{e} hard-codes a job");
    }
}

/// Every alert's runbook link: the external label `rocemon_runbook_base` where the server has
/// it, else the project's repository, then `#` and the entry.
const RUNBOOK_BASE: &str = "{{ with $externalLabels.rocemon_runbook_base }}{{ . }}{{ else }}https://github.com/rocemon/rocemon/blob/main/docs/runbook.md{{ end }}#";

#[test]
fn every_alert_links_to_an_entry_of_the_runbook() {
    let rules_text = std::fs::read_to_string(format!("{DIR}/rocemon.rules.yml")).unwrap();
    assert!(!rules_text.contains("example.invalid"), "a placeholder URL");
    let book = std::fs::read_to_string(format!("{DIR}/../docs/runbook.md")).unwrap();
    let anchors: Vec<String> = book
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(anchor)
        .collect();
    let rules = std::fs::read_to_string(format!("{DIR}/rocemon.rules.yml")).unwrap();
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rules).unwrap();
    let mut alerts = 0;
    for g in doc["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            let Some(name) = r["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let url = r["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} has no runbook_url"));
            let frag = url.strip_prefix(RUNBOOK_BASE).unwrap_or_else(|| {
                panic!("{name}: {url} does not start from the one base {RUNBOOK_BASE}")
            });
            assert!(
                anchors.iter().any(|a| a == frag),
                "{name}: no heading of docs/runbook.md has the anchor #{frag}"
            );
        }
    }
    assert!(alerts >= 30, "{alerts} alerts");
}

/// What is wrong comes first: the first row is open and holds headline stats, each with
/// thresholds that turn it red or orange, then the table of active findings with their
/// subjects; every row below is collapsed.
#[test]
fn the_first_row_is_headline_stats_with_thresholds_and_the_findings_table() {
    let d = dashboard();
    let top = d["panels"].as_array().unwrap();
    assert_eq!(top[0]["type"], "row");
    assert_eq!(top[0]["collapsed"], false, "the first row is open");
    let first: Vec<&Value> = top[1..].iter().take_while(|p| p["type"] != "row").collect();
    let stats: Vec<&&Value> = first.iter().filter(|p| p["type"] == "stat").collect();
    let titles: Vec<&str> = stats.iter().map(|p| p["title"].as_str().unwrap()).collect();
    for want in [
        "Agents up",
        "RoCE throughput",
        "ECN CE share",
        "Paused share",
        "Critical findings",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(want)),
            "no {want} stat in {titles:?}"
        );
    }
    for p in &stats {
        assert_eq!(
            p["gridPos"]["y"], 1,
            "{}: stats on the first line",
            p["title"]
        );
        let steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]
            .as_array()
            .unwrap_or_else(|| panic!("{} has no thresholds", p["title"]));
        if p["title"] != "RoCE throughput" {
            assert!(steps.len() >= 2, "{}: {steps:?}", p["title"]);
            let colours: Vec<&str> = steps.iter().filter_map(|s| s["color"].as_str()).collect();
            assert!(
                colours.contains(&"red") || colours.contains(&"orange"),
                "{}: {colours:?}",
                p["title"]
            );
        }
    }
    let ce = stats.iter().find(|p| p["title"] == "ECN CE share").unwrap();
    let at: Vec<f64> = ce["fieldConfig"]["defaults"]["thresholds"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["value"].as_f64())
        .collect();
    assert_eq!(at, [0.01, 0.05], "CE share turns at 1% and 5%");
    let table = first
        .iter()
        .find(|p| p["type"] == "table" && p["title"] == "Active findings")
        .expect("a table of active findings in the first row");
    let e = table["targets"][0]["expr"].as_str().unwrap();
    assert!(
        e.contains("rocemon_active_finding_info") && e.contains("subject"),
        "{e}"
    );
    let rows = top.iter().filter(|p| p["type"] == "row").skip(1);
    for r in rows {
        assert_eq!(r["collapsed"], true, "{} is open", r["title"]);
        assert!(
            !r["panels"].as_array().unwrap().is_empty(),
            "{}",
            r["title"]
        );
    }
}

/// A legend never lists every host of a fleet: a timeseries whose series are per host is
/// bounded with topk.
#[test]
fn per_host_timeseries_legends_are_bounded_with_topk() {
    for p in panels() {
        if p["type"] != "timeseries" {
            continue;
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().unwrap();
            let per_host = e.starts_with("sum by (instance")
                || e.starts_with("max by (instance")
                || e.starts_with("avg by (instance");
            assert!(!per_host, "{}: {e} is not bounded by topk", p["title"]);
        }
    }
}

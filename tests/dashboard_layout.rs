//! The dashboard and the rules read as a person would: no two panels overlap, percent panels
//! show ratios, no expression hard-codes a job, every alert links to its runbook entry.

use rocemon_testkit::dashboards::{anchor, dashboard, dashboard_exprs, DIR};

/// Panels in grid units: (title, x, y, w, h).
fn grid() -> Vec<(String, i64, i64, i64, i64)> {
    dashboard()["panels"]
        .as_array()
        .unwrap()
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
    let g = grid();
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
    for p in dashboard()["panels"].as_array().unwrap() {
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

#[test]
fn every_alert_links_to_an_entry_of_the_runbook() {
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
            let (page, frag) = url
                .split_once('#')
                .unwrap_or_else(|| panic!("{name}: {url} names no entry"));
            assert!(page.ends_with("/docs/runbook.md"), "{name}: {url}");
            assert!(
                anchors.iter().any(|a| a == frag),
                "{name}: no heading of docs/runbook.md has the anchor #{frag}"
            );
        }
    }
    assert!(alerts >= 30, "{alerts} alerts");
}

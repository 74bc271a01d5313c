//! The Grafana dashboard and the Prometheus rules as the tests read them, and the parts of a
//! Prometheus lab: a child killed on every exit, a looping replay, an RDMA NIC whose
//! counters move.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The repository's `dashboards/` directory.
pub const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dashboards");

pub fn dashboard() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{DIR}/rocemon.json")).unwrap()).unwrap()
}

/// Every panel, rows and the panels inside collapsed rows alike (a collapsed row holds its
/// panels in its own `panels`).
pub fn panels() -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for p in dashboard()["panels"].as_array().unwrap() {
        out.push(p.clone());
        out.extend(p["panels"].as_array().into_iter().flatten().cloned());
    }
    out
}

/// Every PromQL expression of the dashboard (panel targets and annotations).
pub fn dashboard_exprs() -> Vec<String> {
    let d = dashboard();
    let mut out = Vec::new();
    for p in panels() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    let annotations = d["annotations"]["list"].as_array().unwrap();
    assert!(!annotations.is_empty(), "the dashboard marks alerts");
    for a in annotations {
        out.push(a["expr"].as_str().unwrap().to_string());
    }
    out
}

/// (kind, name, expr) of every rule: kind "record" or "alert".
pub fn rules() -> Vec<(String, String, String)> {
    let y: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(format!("{DIR}/rocemon.rules.yml")).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    for g in y["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            let expr = r["expr"].as_str().unwrap().to_string();
            if let Some(n) = r["record"].as_str() {
                out.push(("record".into(), n.to_string(), expr));
            } else {
                out.push((
                    "alert".into(),
                    r["alert"].as_str().unwrap().to_string(),
                    expr,
                ));
            }
        }
    }
    out
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to dashes, other punctuation
/// but `-` and `_` dropped.
pub fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// A child process killed (and reaped) on every exit path.
pub struct Killed(pub Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tcpreplay` of `pcaps` out of `iface` in namespace `ns`, looping until dropped.
pub fn replay_forever(ns: &str, iface: &str, pcaps: &[PathBuf], pps: Option<u32>) -> Killed {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "tcpreplay", "-q", "--loop=0"])
        .args(pps.map(|p| format!("--pps={p}")))
        .args(["-i", iface])
        .args(pcaps)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Killed(c.spawn().expect("tcpreplay"))
}

/// A thread that moves an RDMA NIC's hardware counters (files under a fake sysfs) every 200
/// ms, each written whole (a new file renamed over the old) so a read never sees half a
/// number; stopped when dropped.
pub fn nic_counters(dir: &Path) -> crate::Ticker {
    std::fs::create_dir_all(dir).unwrap();
    let dir = dir.to_path_buf();
    let per_tick = [
        ("np_cnp_sent", 4_000u64),
        ("np_ecn_marked_roce_packets", 1_000),
        ("out_of_sequence", 20),
    ];
    crate::Ticker::start(Duration::from_millis(200), move |n| {
        for (name, step) in per_tick {
            let tmp = dir.join(format!(".{name}"));
            let _ = std::fs::write(&tmp, format!("{}\n", n * step));
            let _ = std::fs::rename(&tmp, dir.join(name));
        }
    })
}

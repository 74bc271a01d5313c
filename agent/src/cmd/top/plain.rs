//! `rocemon top`'s plain text: one screen as lines, for `--once`, pipes and scripts (the
//! terminal UI, [`super::tui`], draws the same documents).

use super::rows::{
    age, counts_line, finding_lines, flow_rows, n, rates_line, verdict_line, Docs, Sort, COLUMN_KEY,
};
use crate::detect::findings::bits_per_second;
use crate::export::report::human_bytes;
use serde_json::Value;
use std::fmt::Write as _;

/// Renders one screen from the API documents (`lossless`, `sflow`, `training` may be null).
pub fn render(d: &Docs, color: bool) -> String {
    let (hi, lo) = if color {
        ("\x1b[1;31m", "\x1b[0m")
    } else {
        ("", "")
    };
    let mut s = String::new();
    let _ = writeln!(s, "rocemon top: {}; {}", rates_line(d), counts_line(d));
    if let Some(v) = verdict_line(d) {
        let _ = writeln!(s, "{v}");
    }
    for l in finding_lines(d, 3) {
        let _ = writeln!(s, "  {l}");
    }
    let _ = writeln!(s, "{COLUMN_KEY}");
    let _ = writeln!(
        s,
        "{:<2}{:<10} {:<34} {:>6} {:>9} {:>11} {:>9} {:>7} {:>8} {:>8} {:>5}",
        "",
        "IFACE",
        "SRC -> DST",
        "SPORT",
        "DEST_QP",
        Sort::Rate.heading(),
        Sort::Packets.heading(),
        Sort::Ce.heading(),
        Sort::Cnp.heading(),
        Sort::Gaps.heading(),
        Sort::Naks.heading()
    );
    for f in flow_rows(d) {
        let line = format!(
            "{:<2}{:<10} {:<34} {:>6} {:>9} {:>11} {:>9.0} {:>7.0} {:>8.0} {:>8} {:>5}",
            if f.elephant { "E" } else { "" },
            f.iface,
            f.path(),
            f.sport,
            f.qp(),
            f.rate(),
            f.packets_per_second,
            f.ce,
            f.cnp,
            f.gaps,
            f.naks
        );
        if f.elephant {
            let _ = writeln!(s, "{hi}{line}{lo}");
        } else {
            let _ = writeln!(s, "{line}");
        }
    }
    render_findings(&mut s, &d.findings, d.now_s, hi, lo);
    render_ecmp(&mut s, &d.ecmp, hi, lo);
    render_lossless(&mut s, &d.lossless, hi, lo);
    render_sflow(&mut s, &d.sflow, hi, lo);
    render_training(&mut s, &d.training, hi, lo);
    s
}

/// The active findings, most serious first: severity, subject, since when and for how long,
/// and the sentence.
pub fn render_findings(s: &mut String, doc: &Value, now_s: f64, hi: &str, lo: &str) {
    for x in doc["active"].as_array().into_iter().flatten() {
        let severity = x["severity"].as_str().unwrap_or("?");
        let (a, b) = if severity == "info" {
            ("", "")
        } else {
            (hi, lo)
        };
        let start = n(&x["start_s"]);
        let since = utc_clock(start);
        let _ = writeln!(
            s,
            "{a}FINDING {severity} {}: {}{b} (since {since} UTC, for {})\n  {}",
            x["kind"].as_str().unwrap_or("?"),
            x["subject"].as_str().unwrap_or("?"),
            age(now_s, start),
            x["summary"].as_str().unwrap_or("")
        );
    }
}

/// The time of day of a Unix time, `HH:MM:SS` (UTC).
fn utc_clock(unix_s: f64) -> String {
    let t = unix_s.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", t / 3600, t % 3600 / 60, t % 60)
}

/// The ECMP groups (observed and predicted), their members' rates and collisions.
pub fn render_ecmp(s: &mut String, ecmp: &Value, hi: &str, lo: &str) {
    let groups = ecmp["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| (g, "observed"));
    let predicted = ecmp
        .get("predicted")
        .filter(|p| !p.is_null())
        .map(|p| (p, "predicted"));
    for (g, kind) in groups.chain(predicted) {
        let collision = g["collision"].as_bool().unwrap_or(false);
        let _ = writeln!(
            s,
            "\nECMP {kind} {}: imbalance {:.2}{}",
            g["name"].as_str().unwrap_or("?"),
            n(&g["imbalance_ratio"]),
            if collision {
                format!("  {hi}COLLISION{lo}")
            } else {
                String::new()
            }
        );
        for m in g["members"].as_array().into_iter().flatten() {
            let colliding = m["colliding"].as_bool().unwrap_or(false);
            let _ = writeln!(
                s,
                "  {:<12} {:>11} {:>4} flows {:>3} elephants{}",
                m["member"].as_str().unwrap_or("?"),
                bits_per_second(n(&m["bytes_per_second"])),
                n(&m["flows"]),
                n(&m["elephants"]),
                if colliding {
                    format!("  {hi}<- collision{lo}")
                } else {
                    String::new()
                }
            );
        }
    }
    let shared = ecmp["shared_5tuples"]
        .as_array()
        .map(|a| a.len())
        .unwrap_or(0);
    let _ = writeln!(s, "\nshared 5-tuples: {shared}");
}

/// The training rhythm of each interface that has one, and its slow steps; under it, each
/// job found on the interface (two jobs interleaved may leave the link without a rhythm of
/// its own: the jobs are listed all the same).
pub fn render_training(s: &mut String, doc: &Value, hi: &str, lo: &str) {
    let slow_note = |v: &Value| {
        let slow = n(v);
        if slow > 0.0 {
            format!("  {hi}{slow} slow steps{lo}")
        } else {
            String::new()
        }
    };
    for i in doc["interfaces"].as_array().into_iter().flatten() {
        let iface = i["iface"].as_str().unwrap_or("?");
        let jobs = i["jobs"].as_array().map_or(&[][..], |j| j.as_slice());
        match i["period_seconds"].as_f64() {
            Some(p) => {
                let _ = writeln!(
                    s,
                    "\nTRAINING {iface}: step period {:.1} ms, communication {:.0}% of a step, {} per step{}",
                    p * 1e3,
                    n(&i["duty_ratio"]) * 100.0,
                    human_bytes(n(&i["step_bytes"])),
                    slow_note(&i["slow_steps"])
                );
            }
            None if !jobs.is_empty() => {
                let _ = writeln!(s, "\nTRAINING {iface}: no rhythm of the whole link");
            }
            None => continue,
        }
        for j in jobs {
            let _ = writeln!(
                s,
                "  {}: {} sources, {} hosts, step period {:.1} ms, communication {:.0}%{}",
                j["id"].as_str().unwrap_or("?"),
                j["sources"].as_array().map_or(0, |a| a.len()),
                j["hosts"].as_array().map_or(0, |a| a.len()),
                n(&j["period_seconds"]) * 1e3,
                n(&j["duty_ratio"]) * 100.0,
                slow_note(&j["slow_steps"])
            );
        }
    }
}

/// The switches' view: datagrams, estimates, the busiest ports, and the fabric groups.
pub fn render_sflow(s: &mut String, doc: &Value, hi: &str, lo: &str) {
    if !doc.is_object() {
        return;
    }
    let e = &doc["estimated"];
    let _ = writeln!(
        s,
        "\nSFLOW {} datagrams from {} agents ({} lost): RoCE ~{:.0} packets, ~{} (CE {:.0}, CNP {:.0}) from {} samples",
        n(&doc["datagrams"]),
        doc["agents"].as_array().map_or(0, Vec::len),
        n(&doc["lost_datagrams"]),
        n(&e["packets"]),
        human_bytes(n(&e["bytes"])),
        n(&e["ecn"]["ce"]),
        n(&e["cnp"]),
        n(&doc["samples"]["packets"])
    );
    let mut ports: Vec<&Value> = doc["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| n(&p["roce_samples"]) > 0.0)
        .collect();
    ports.sort_by(|a, b| n(&b["estimated_bytes"]).total_cmp(&n(&a["estimated_bytes"])));
    for p in ports.iter().take(5) {
        let _ = writeln!(
            s,
            "  {:<24} {:<7} ~{:>10} {:>6} samples{}",
            format!(
                "{}/{}",
                p["agent"].as_str().unwrap_or("?"),
                n(&p["ifindex"])
            ),
            p["direction"].as_str().unwrap_or("?"),
            human_bytes(n(&p["estimated_bytes"])),
            n(&p["roce_samples"]),
            if p["few_samples"].as_bool().unwrap_or(false) {
                " (few)"
            } else {
                ""
            }
        );
    }
    for g in doc["fabric"]["groups"].as_array().into_iter().flatten() {
        let collision = g["collision"].as_bool().unwrap_or(false);
        let members: Vec<String> = g["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                let c = m["colliding"].as_bool().unwrap_or(false);
                format!(
                    "{}{} {}e{}",
                    if c { hi } else { "" },
                    m["member"].as_str().unwrap_or("?"),
                    n(&m["elephants"]),
                    if c { lo } else { "" }
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "  switch group {}: {}{}",
            g["name"].as_str().unwrap_or("?"),
            members.join("  "),
            if collision {
                format!("  {hi}COLLISION{lo}")
            } else {
                String::new()
            }
        );
    }
}

/// The lossless fabric: per interface and hook, PFC by priority, PAUSE and lossy RoCE (totals
/// since the programs were attached; only what was seen), and the NIC's own PFC counters.
pub fn render_lossless(s: &mut String, doc: &Value, hi: &str, lo: &str) {
    for h in doc["hooks"].as_array().into_iter().flatten() {
        let pfc = n(&h["pfc"]["frames"]);
        let pause = n(&h["pause"]["frames"]);
        let lossy = n(&h["lossy"]["packets"]);
        let cnp_out = n(&h["lossy"]["cnp_out_of_class"]);
        if pfc + pause + lossy + cnp_out == 0.0 {
            continue;
        }
        let prios: Vec<String> = h["pfc"]["priorities"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| n(&p["xoff"]) + n(&p["xon"]) > 0.0)
            .map(|p| {
                format!(
                    "p{} xoff {} xon {}",
                    n(&p["priority"]),
                    n(&p["xoff"]),
                    n(&p["xon"])
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "\nLOSSLESS {} {}: PFC {pfc} ({})  PAUSE {pause}",
            h["iface"].as_str().unwrap_or("?"),
            h["hook"].as_str().unwrap_or("?"),
            prios.join(", ")
        );
        if lossy + cnp_out > 0.0 {
            let _ = writeln!(
                s,
                "  {hi}lossy RoCE {lossy} packets, CNPs out of class {cnp_out}{lo}  (expected {})",
                h["lossy"]["expected"].as_str().unwrap_or("?")
            );
        }
    }
    for c in doc["nic"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "NIC {} p{} PFC rx {} tx {} ({})",
            c["iface"].as_str().unwrap_or("?"),
            n(&c["priority"]),
            n(&c["rx"]),
            n(&c["tx"]),
            c["origin"].as_str().unwrap_or("?")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_elephants_and_collisions() {
        let flows = serde_json::json!({"flows_total": 2, "elephants_total": 1, "flows": [
            {"iface": "up0", "src": "10.0.0.1", "dst": "10.0.0.2", "sport": 49152, "dest_qp": 32, "rate_bytes_per_second": 5e6,
             "rate_packets_per_second": 1000.0, "ecn_ce": 3, "cnp": 1, "psn_gaps": 0, "naks": {"psn_sequence_error": 2}, "rnr_naks": 1, "elephant": true},
            {"iface": "up1", "src": "10.0.0.3", "dst": "10.0.0.2", "sport": 49153, "dest_qp": 33, "rate_bytes_per_second": 10.0,
             "rate_packets_per_second": 1.0, "ecn_ce": 0, "cnp": 0, "psn_gaps": 0, "naks": {}, "rnr_naks": 0, "elephant": false}]});
        let ecmp = serde_json::json!({"groups": [{"name": "spine", "imbalance_ratio": 2.0, "collision": true, "members": [
            {"member": "up0", "bytes_per_second": 5e6, "flows": 2, "elephants": 2, "colliding": true},
            {"member": "up1", "bytes_per_second": 0.0, "flows": 0, "elephants": 0, "colliding": false}]}],
            "predicted": null, "shared_5tuple_groups": 1, "shared_5tuples": [{}]});
        let d = Docs {
            flows,
            ecmp,
            ..Docs::default()
        };
        let s = render(&d, true);
        assert!(s.contains("2 flows, 1 elephants"));
        assert!(s.contains("\x1b[1;31mE up0"), "{s}");
        assert!(s.contains("COLLISION"));
        assert!(s.contains("<- collision"));
        assert!(s.contains("shared 5-tuples: 1"));
        let plain = render(&d, false);
        assert!(!plain.contains('\x1b'));
    }

    #[test]
    fn renders_pfc_lossy_roce_and_nic_counters() {
        let empty = serde_json::json!({"flows_total": 0, "elephants_total": 0, "flows": []});
        let ecmp = serde_json::json!({"groups": [], "predicted": null, "shared_5tuples": []});
        let lossless = serde_json::json!({"hooks": [
            {"iface": "eth0", "hook": "xdp", "pfc": {"frames": 40, "priorities": [
                {"priority": 3, "xoff": 38, "xon": 2, "quanta": 9}, {"priority": 4, "xoff": 0, "xon": 0, "quanta": 0}]},
             "pause": {"frames": 1}, "lossy": {"packets": 5, "cnp_out_of_class": 0, "expected": "RoCE DSCP 26 priority 3, CNP DSCP 48"}},
            {"iface": "eth1", "hook": "xdp", "pfc": {"frames": 0, "priorities": []}, "pause": {"frames": 0},
             "lossy": {"packets": 0, "cnp_out_of_class": 0}}],
            "nic": [{"iface": "eth2", "priority": 3, "rx": 7, "tx": 9, "origin": "dcb"}]});
        let d = Docs {
            flows: empty,
            ecmp,
            lossless,
            ..Docs::default()
        };
        let s = render(&d, false);
        assert!(
            s.contains("LOSSLESS eth0 xdp: PFC 40 (p3 xoff 38 xon 2)  PAUSE 1"),
            "{s}"
        );
        assert!(s.contains("lossy RoCE 5 packets"), "{s}");
        assert!(!s.contains("eth1"), "quiet interfaces are left out: {s}");
        assert!(s.contains("NIC eth2 p3 PFC rx 7 tx 9 (dcb)"), "{s}");
    }

    #[test]
    fn renders_the_switches_view() {
        let empty = serde_json::json!({"flows_total": 0, "elephants_total": 0, "flows": []});
        let ecmp = serde_json::json!({"groups": [], "predicted": null, "shared_5tuples": []});
        let sflow = serde_json::json!({"datagrams": 95, "lost_datagrams": 2, "agents": [{}],
            "samples": {"packets": 621}, "estimated": {"packets": 2484, "bytes": 1.4e6, "cnp": 92, "ecn": {"ce": 600}},
            "ports": [{"agent": "10.0.0.1", "ifindex": 49, "direction": "egress", "roce_samples": 20,
                       "estimated_bytes": 1e6, "few_samples": true}],
            "fabric": {"groups": [{"name": "leaf-a", "collision": true, "members": [
                {"member": "10.0.0.1/49", "elephants": 2, "colliding": true},
                {"member": "10.0.0.1/50", "elephants": 0, "colliding": false}]}]}});
        let d = Docs {
            flows: empty,
            ecmp,
            sflow,
            ..Docs::default()
        };
        let s = render(&d, false);
        assert!(
            s.contains("SFLOW 95 datagrams from 1 agents (2 lost): RoCE ~2484 packets"),
            "{s}"
        );
        assert!(s.contains("10.0.0.1/49") && s.contains("(few)"), "{s}");
        assert!(
            s.contains("switch group leaf-a: 10.0.0.1/49 2e  10.0.0.1/50 0e  COLLISION"),
            "{s}"
        );
    }

    #[test]
    fn renders_the_training_rhythm() {
        let training = serde_json::json!({"interfaces": [
            {"iface": "eth0", "period_seconds": 0.1, "duty_ratio": 0.2, "step_bytes": 2.5e6, "slow_steps": 1},
            {"iface": "eth1", "period_seconds": null, "duty_ratio": null, "step_bytes": null, "slow_steps": 0}]});
        let d = Docs {
            training,
            ..Docs::default()
        };
        let s = render(&d, false);
        assert!(
            s.contains("TRAINING eth0: step period 100.0 ms, communication 20% of a step"),
            "{s}"
        );
        assert!(s.contains("1 slow steps"), "{s}");
        assert!(!s.contains("eth1"), "no rhythm, no line: {s}");
    }

    #[test]
    fn renders_each_job_under_its_interface() {
        let job = |id: &str, p: f64, slow: u64| {
            serde_json::json!({"id": id, "sources": ["10.0.0.1", "10.0.0.2"],
                "hosts": ["10.0.0.1", "10.0.0.2", "10.0.1.1"], "period_seconds": p,
                "duty_ratio": 0.25, "slow_steps": slow})
        };
        let training = serde_json::json!({"interfaces": [
            {"iface": "eth0", "period_seconds": null, "duty_ratio": null, "step_bytes": null,
             "slow_steps": 0, "jobs": [job("job-10.0.0.1", 0.1, 2), job("job-10.0.0.5", 0.17, 0)]}]});
        let d = Docs {
            training,
            ..Docs::default()
        };
        let s = render(&d, false);
        assert!(
            s.contains("TRAINING eth0: no rhythm of the whole link"),
            "{s}"
        );
        assert!(
            s.contains("  job-10.0.0.1: 2 sources, 3 hosts, step period 100.0 ms, communication 25%  2 slow steps"),
            "{s}"
        );
        assert!(
            s.contains(
                "  job-10.0.0.5: 2 sources, 3 hosts, step period 170.0 ms, communication 25%\n"
            ),
            "{s}"
        );
    }
}

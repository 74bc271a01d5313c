//! Findings on captures with planted causes: every truth comes from the generator's
//! parameters or from intervals computed here, never from rocemon's parser. Each kind has a
//! capture that raises it and one that must not.

use rocemon_testkit::findings_lab::{ce_exchange, A, B, T0};
use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::frames::{self, Roce};
use rocemon_testkit::{training, TempDir};
use serde_json::Value;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `rocemon analyze --format json` of `frames` (time, bytes) with `args`.
fn analyze(name: &'static str, frames: Vec<(u64, Vec<u8>)>, args: &[&str]) -> Value {
    rocemon_testkit::findings_lab::analyze_frames(
        env!("CARGO_BIN_EXE_rocemon"),
        name,
        frames,
        args,
        None,
    )
}

fn findings<'a>(j: &'a Value, kind: &str) -> Vec<&'a Value> {
    rocemon_testkit::findings_lab::findings_of(j, kind)
}

fn kinds(j: &Value) -> Vec<String> {
    j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

/// One 0xFFFF-quanta pause at 100 Gb/s, in ns (512 bit times a quantum).
const FULL_PAUSE_NS: u64 = 0xFFFF * 512 / 100;

/// XOFFs on priority 3, `n` of them `every_ns` apart from T0.
fn xoffs(n: u64, every_ns: u64, from: u64) -> Vec<(u64, Vec<u8>)> {
    (0..n)
        .map(|k| {
            (
                from + k * every_ns,
                frames::pfc(0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]),
            )
        })
        .collect()
}

fn paused(j: &Value, prio: usize) -> f64 {
    j["pfc"]["priorities"][prio]["paused_seconds"]
        .as_f64()
        .unwrap()
}

#[test]
fn refreshed_xoffs_pause_for_their_union_and_make_a_storm() {
    // 1,500 XOFFs 200 us apart: one continuous pause from the first to 0xFFFF quanta after
    // the last; their summed quanta would say 1.68 times more.
    let f = xoffs(1_500, 200_000, T0);
    let mac = frames::pfc(0x08, [0; 8])[6..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let j = analyze("storm", f, &["--link-speed", "100"]);
    let want = (1_499 * 200_000 + FULL_PAUSE_NS) as f64 / 1e9;
    assert!(
        (paused(&j, 3) - want).abs() < 1e-9,
        "{} vs {want}",
        paused(&j, 3)
    );
    assert_eq!(paused(&j, 2), 0.0);
    let storms = findings(&j, "pfc_storm");
    assert_eq!(storms.len(), 1, "{:#}", j["findings"]);
    let s = storms[0];
    assert_eq!(s["severity"], "critical");
    assert_eq!(s["subject"], "priority 3");
    assert_eq!(s["evidence"]["xoff_frames"], 1_500);
    assert_eq!(s["evidence"]["pausing_mac"], mac.as_str());
    assert!((s["evidence"]["paused_seconds"].as_f64().unwrap() - want).abs() < 1e-9);
    assert_eq!(s["runbook"], "docs/runbook.md#pfc_storm");
    assert!(s["summary"]
        .as_str()
        .unwrap()
        .contains("Priority 3 was paused for"));
}

#[test]
fn xoff_and_xon_pairs_pause_between_them_and_are_no_storm() {
    let mut f = Vec::new();
    for k in 0..10u64 {
        let t = T0 + k * 1_000_000;
        f.push((t, frames::pfc(0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0])));
        f.push((t + 50_000, frames::pfc(0x08, [0; 8])));
    }
    let j = analyze("xon", f, &["--link-speed", "100"]);
    assert!(
        (paused(&j, 3) - 10.0 * 50e-6).abs() < 1e-9,
        "{}",
        paused(&j, 3)
    );
    assert!(findings(&j, "pfc_storm").is_empty());
}

#[test]
fn a_pause_shorter_than_a_configured_threshold_is_no_storm() {
    let j = analyze(
        "storm-threshold",
        xoffs(1_500, 200_000, T0),
        &["--link-speed", "100", "--pfc-storm-seconds", "1"],
    );
    assert!(findings(&j, "pfc_storm").is_empty(), "{:#}", j["findings"]);
}

#[test]
fn a_receiver_that_never_answers_ce_is_cnp_missing() {
    let j = analyze("cnp-missing", ce_exchange(200, 5, None), &[]);
    let r = &j["roce"]["cnp_response"];
    assert_eq!(r["ce_packets"], 40);
    assert_eq!(r["unanswered_ce"], 40);
    assert_eq!(r["answered_ce"], 0);
    assert_eq!(r["latency_seconds"]["p50"], Value::Null);
    let m = findings(&j, "cnp_missing");
    assert_eq!(m.len(), 1, "{:#}", j["findings"]);
    assert_eq!(m[0]["subject"], format!("receiver {B}"));
    assert_eq!(m[0]["evidence"]["ce_packets"], 40);
}

#[test]
fn a_receiver_that_answers_ce_is_paired_with_its_latency_and_pacing() {
    // 10 us from each CE packet to its CNP; CE packets 200 us apart (every 5th of packets
    // 40 us apart): the CNPs are 200 us apart.
    let j = analyze("cnp-answered", ce_exchange(200, 5, Some(10_000)), &[]);
    let r = &j["roce"]["cnp_response"];
    assert_eq!(
        (r["ce_packets"].as_u64(), r["answered_ce"].as_u64()),
        (Some(40), Some(40))
    );
    assert_eq!(r["unanswered_ce"], 0);
    assert_eq!(r["cnps"], 40);
    assert!((r["latency_seconds"]["p50"].as_f64().unwrap() - 10e-6).abs() < 1e-12);
    assert!((r["latency_seconds"]["p99"].as_f64().unwrap() - 10e-6).abs() < 1e-12);
    assert!((r["min_gap_seconds"].as_f64().unwrap() - 200e-6).abs() < 1e-12);
    let c = &r["connections"][0];
    assert_eq!(c["src"], A);
    assert_eq!(c["dst"], B);
    assert_eq!(c["dest_qp"], 0x200);
    assert!(
        findings(&j, "cnp_missing").is_empty(),
        "{:#}",
        j["findings"]
    );
}

#[test]
fn ce_marks_on_a_share_of_the_traffic_are_congestion() {
    // 20% CE-marked, answered: congestion, not cnp_missing.
    let j = analyze("congestion", ce_exchange(200, 5, Some(10_000)), &[]);
    let c = findings(&j, "congestion");
    assert_eq!(c.len(), 1, "{:#}", j["findings"]);
    assert_eq!(c[0]["evidence"]["ce_packets"], 40);
    assert_eq!(c[0]["evidence"]["packets"], 200);
    assert_eq!(c[0]["evidence"]["cnps"], 40);
}

/// Four senders to four receivers at once, a fifth of each flow CE-marked, no receiver
/// sending a CNP: one congestion incident and one cnp_missing incident (not four of each),
/// each listing its receivers with the totals, under a verdict that names both.
#[test]
fn receivers_congested_at_once_read_as_incidents_under_a_verdict() {
    let mut f = Vec::new();
    for r in 0..4u32 {
        let (a, b) = (
            ip(&format!("10.60.0.{}", r + 1)),
            ip(&format!("10.61.0.{}", r + 1)),
        );
        for k in 0..200u64 {
            let mut d = Roce::new(a, b, 0xC123, 0x200 + r, 0x0A);
            d.psn = k as u32;
            d.payload = 1024;
            d.dma_len = 1024;
            if k % 5 == 0 {
                d.ecn = 3;
            }
            f.push((T0 + k * 40_000 + u64::from(r) * 1_000, d.frame()));
        }
    }
    f.sort_by_key(|(t, _)| *t);
    let j = analyze("four-receivers", f, &[]);
    // The four flows run at about 220 Mb/s: elephants too, one finding each (info).
    assert_eq!(
        kinds(&j),
        [
            "cnp_missing",
            "congestion",
            "elephant",
            "elephant",
            "elephant",
            "elephant"
        ],
        "{:#}",
        j["findings"]
    );
    let c = findings(&j, "congestion")[0];
    assert_eq!(c["subject"], "4 receivers");
    assert_eq!(c["evidence"]["members"], 4);
    assert_eq!(c["evidence"]["totals"]["ce_packets"], 160);
    assert_eq!(c["evidence"]["totals"]["packets"], 800);
    assert_eq!(c["evidence"]["listed"].as_array().unwrap().len(), 4);
    let m = findings(&j, "cnp_missing")[0];
    assert_eq!(m["evidence"]["members"], 4);
    assert_eq!(
        j["verdict"],
        "4 receivers never send CNPs, CE on 4 receivers, 4 elephants."
    );
}

#[test]
fn a_few_ce_marks_are_no_congestion() {
    // 4 CE-marked of 2,000 (0.2%).
    let j = analyze("no-congestion", ce_exchange(2_000, 500, Some(10_000)), &[]);
    assert!(findings(&j, "congestion").is_empty(), "{:#}", j["findings"]);
    assert!(
        findings(&j, "cnp_missing").is_empty(),
        "{:#}",
        j["findings"]
    );
}

/// A's WRITEs to B, PSN 0..n; with `lose`, PSN 5 goes missing, B NAKs (sequence error) and A
/// goes back to 5.
fn transfer(n: u32, lose: bool) -> Vec<(u64, Vec<u8>)> {
    let data = |psn: u32| {
        let mut d = Roce::new(ip(A), ip(B), 0xC200, 0x300, 0x0A);
        d.psn = psn;
        d.payload = 512;
        d.dma_len = 512;
        d.frame()
    };
    let mut f = Vec::new();
    let mut t = T0;
    for psn in 0..n {
        if lose && psn == 5 {
            continue;
        }
        t += 10_000;
        f.push((t, data(psn)));
        if lose && psn == 6 {
            let mut nak = Roce::new(ip(B), ip(A), 0xC200, 0x301, 0x11);
            nak.psn = 5;
            nak.syndrome = 0x60; // NAK: PSN sequence error
            f.push((t + 1_000, nak.frame()));
        }
    }
    if lose {
        for psn in 5..n {
            t += 10_000;
            f.push((t, data(psn)));
        }
    }
    f.sort_by_key(|(t, _)| *t);
    f
}

#[test]
fn a_nak_and_a_go_back_are_retransmissions() {
    let j = analyze("retransmit", transfer(20, true), &[]);
    let r = findings(&j, "retransmissions");
    assert!(!r.is_empty(), "{:#}", j["findings"]);
    let data = r
        .iter()
        .find(|f| {
            f["subject"]
                .as_str()
                .unwrap()
                .starts_with(&format!("flow {A} -> {B}"))
        })
        .expect("the data flow");
    assert!(
        data["evidence"]["psn_gaps"].as_u64().unwrap() >= 1,
        "{data}"
    );
    assert!(
        data["evidence"]["retransmitted_packets"].as_u64().unwrap() >= 1,
        "{data}"
    );
}

/// One loss, one incident: the NAK B sent back is folded into A's data flow, with the
/// construction's exact counts (PSN 5 missing: one gap; A goes back and resends 5 to 19:
/// fifteen packets at or before a PSN already seen; one NAK back).
#[test]
fn a_nak_driven_retransmission_is_one_finding_on_the_data_flow() {
    let j = analyze("retransmit-once", transfer(20, true), &[]);
    let r = findings(&j, "retransmissions");
    assert_eq!(r.len(), 1, "{:#}", j["findings"]);
    let f = r[0];
    assert!(
        f["subject"]
            .as_str()
            .unwrap()
            .starts_with(&format!("flow {A} -> {B}")),
        "{f}"
    );
    let e = &f["evidence"];
    assert_eq!(e["psn_gaps"], 1, "{f}");
    assert_eq!(e["retransmitted_packets"], 15, "{f}");
    assert_eq!(e["naks_returned"], 1, "{f}");
    assert!(f["summary"].as_str().unwrap().contains("1 NAK back"), "{f}");
}

#[test]
fn a_clean_transfer_has_no_retransmissions() {
    let j = analyze("clean-transfer", transfer(20, false), &[]);
    assert!(
        findings(&j, "retransmissions").is_empty(),
        "{:#}",
        j["findings"]
    );
}

/// `n` RoCE packets in the lossless class (DSCP 26) and `lossy` with DSCP 0.
fn classes(n: u64, lossy: u64) -> Vec<(u64, Vec<u8>)> {
    (0..n + lossy)
        .map(|k| {
            let mut d = Roce::new(ip(A), ip(B), 0xC300, 0x400, 0x0A);
            d.psn = k as u32;
            d.payload = 256;
            d.dma_len = 256;
            if k >= n {
                d.dscp = 0;
            }
            (T0 + k * 10_000, d.frame())
        })
        .collect()
}

#[test]
fn roce_outside_the_lossless_class_on_a_share_is_lossy_roce() {
    let j = analyze("lossy", classes(1_000, 150), &[]);
    let l = findings(&j, "lossy_roce");
    assert_eq!(l.len(), 1, "{:#}", j["findings"]);
    assert_eq!(l[0]["evidence"]["lossy_packets"], 150);
    assert_eq!(l[0]["evidence"]["roce_packets"], 1_150);
}

#[test]
fn one_stray_packet_is_no_lossy_roce() {
    let j = analyze("one-lossy", classes(1_000, 1), &[]);
    assert!(findings(&j, "lossy_roce").is_empty(), "{:#}", j["findings"]);
}

#[test]
fn traffic_with_no_rhythm_and_no_trouble_has_no_findings() {
    let dir = TempDir::new("rocemon-calm").unwrap();
    let p = training::steady(3).write(dir.path()).unwrap();
    let j = rocemon_testkit::analyze_json(env!("CARGO_BIN_EXE_rocemon"), &[], &[&p]);
    assert_eq!(kinds(&j), Vec::<String>::new(), "{:#}", j["findings"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .arg("analyze")
        .arg(&p)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    // The verdict opens the table, the findings come next.
    assert!(
        t.starts_with("Verdict     Nothing in the network got in the way.\nFINDINGS    none"),
        "{t}"
    );
    assert_eq!(j["verdict"], "Nothing in the network got in the way.");
}

/// A training job of 100 ms steps (20 ms bursts) whose 7th step takes twice as long.
const JOB: training::Job = training::Job {
    slow_at: Some(6),
    ..training::Job::steady(14)
};

/// The start of step `i` of [`JOB`] (each step before the slow one 100 ms).
fn step_start(i: u64) -> u64 {
    T0 + i * 100_000_000
}

fn slow_steps(j: &Value) -> Vec<&Value> {
    j["training"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["slow"] == true)
        .collect()
}

#[test]
fn a_slow_step_under_a_pfc_pause_is_explained_by_it() {
    let mut f = training::frames(JOB, "10.78.0.1", "10.78.0.2", 0);
    // After the slow step's burst, its priority paused for the 100 ms the step lost.
    f.extend(xoffs(500, 200_000, step_start(6) + 20_000_000));
    f.sort_by_key(|(t, _)| *t);
    let j = analyze("slow-pause", f, &["--link-speed", "100"]);
    let slow = slow_steps(&j);
    assert_eq!(slow.len(), 1, "{:#}", j["training"]);
    let causes = slow[0]["causes"].as_array().unwrap();
    assert_eq!(causes[0]["kind"], "pfc_pause", "{causes:?}");
    assert!(causes[0]["share"].as_f64().unwrap() > 0.9, "{causes:?}");
    let s = findings(&j, "slow_step");
    assert_eq!(s.len(), 1, "{:#}", j["findings"]);
    assert!(
        s[0]["summary"].as_str().unwrap().contains("pfc pause"),
        "{}",
        s[0]["summary"]
    );
    assert!(
        findings(&j, "pfc_storm").is_empty(),
        "100 ms is under the storm threshold"
    );
}

#[test]
fn a_slow_step_with_a_clean_network_is_unexplained() {
    let f = training::frames(JOB, "10.78.0.1", "10.78.0.2", 0);
    let j = analyze("slow-clean", f, &[]);
    let slow = slow_steps(&j);
    assert_eq!(slow.len(), 1, "{:#}", j["training"]);
    let causes = slow[0]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0]["kind"], "unexplained");
    let s = findings(&j, "slow_step");
    assert!(
        s[0]["summary"]
            .as_str()
            .unwrap()
            .contains("look at the hosts"),
        "{}",
        s[0]["summary"]
    );
}

#[test]
fn steps_that_are_not_slow_have_no_causes() {
    let f = training::frames(JOB, "10.78.0.1", "10.78.0.2", 0);
    let j = analyze("causes-empty", f, &[]);
    for s in j["training"]["steps"].as_array().unwrap() {
        if s["slow"] == false {
            assert_eq!(s["causes"], serde_json::json!([]), "{s}");
        }
    }
}

#[test]
fn every_kind_has_a_runbook_entry() {
    let book = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/runbook.md"))
        .expect("docs/runbook.md");
    for kind in rocemon::detect::findings::KINDS {
        assert!(
            book.lines().any(|l| l.trim() == format!("## {kind}")),
            "no '## {kind}' entry in docs/runbook.md"
        );
    }
}

/// The HTML report opens with the findings, each linked to its runbook entry.
#[test]
fn the_html_report_opens_with_the_findings() {
    let dir = TempDir::new("rocemon-findings-html").unwrap();
    // The storm, and RoCE across it every 300 us (the charts' time axis).
    let mut frames = xoffs(1_500, 200_000, T0);
    frames.extend(
        classes(1_000, 0)
            .into_iter()
            .map(|(t, f)| (T0 + (t - T0) * 30, f)),
    );
    frames.sort_by_key(|(t, _)| *t);
    let p = whole("storm-html", Format::PcapNanos, frames, false)
        .write(dir.path())
        .unwrap();
    let html = dir.path().join("report.html");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--link-speed", "100", "--html"])
        .arg(&html)
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    let findings = page.find("Findings (1)").expect("a findings section");
    let totals = page.find("<h2>Totals</h2>").expect("totals");
    assert!(findings < totals, "the findings come first");
    // The runbook linked absolutely (the page is read away from the repository), and the
    // base is the user's to choose.
    assert!(page.contains(
        r#"<a href="https://github.com/rocemon/rocemon/blob/main/docs/runbook.md#pfc_storm">pfc_storm</a>"#
    ));
    let own = dir.path().join("own.html");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--link-speed", "100", "--runbook-url"])
        .arg("https://wiki.example.org/rocemon/runbook")
        .arg("--html")
        .arg(&own)
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success());
    let own = std::fs::read_to_string(&own).unwrap();
    assert!(own.contains(r#"<a href="https://wiki.example.org/rocemon/runbook#pfc_storm">"#));
    assert!(
        page.contains("share of the time each priority was paused (PFC)"),
        "the pause chart"
    );
}

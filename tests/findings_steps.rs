//! Why a step was slow, and whether a sender answers CNPs: captures with planted causes, the
//! truth from the generator's parameters (the step that was slowed, by what, which host was
//! late, whether the sender cut its rate), never from rocemon's parser. Each cause has a
//! capture that raises it and one that must not.

use rocemon_testkit::findings_lab::{dcqcn, elephants_on, hosts_job, v4};
use rocemon_testkit::frames::{self, Roce};
use rocemon_testkit::{demo, training, TempDir};
use serde_json::Value;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `rocemon analyze --format json` of `frames` with `args` (and a config file's text).
fn analyze(
    name: &'static str,
    frames: Vec<(u64, Vec<u8>)>,
    args: &[&str],
    config: Option<&str>,
) -> Value {
    rocemon_testkit::findings_lab::analyze_frames(
        env!("CARGO_BIN_EXE_rocemon"),
        name,
        frames,
        args,
        config,
    )
}

fn findings<'a>(j: &'a Value, kind: &str) -> Vec<&'a Value> {
    rocemon_testkit::findings_lab::findings_of(j, kind)
}

/// The job of `training::frames`: 100 ms steps, 20 ms bursts; `slow` makes the 7th step
/// (index 6) take 200 ms.
fn job(slow: bool) -> training::Job {
    training::Job {
        slow_at: slow.then_some(6),
        ..training::Job::steady(14)
    }
}

/// Its first frame's time (training::frames starts there).
const JOB_T0: u64 = 1_764_547_200_000_000_000;

fn job_frames(slow: bool) -> Vec<(u64, Vec<u8>)> {
    training::frames(job(slow), "10.78.0.1", "10.78.0.2", 0)
}

fn slow_steps(j: &Value) -> Vec<&Value> {
    j["training"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["slow"] == true)
        .collect()
}

fn cause_kinds(step: &Value) -> Vec<String> {
    step["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap().to_string())
        .collect()
}

/// The one slow step (the 7th) and its causes.
fn the_slow_step(j: &Value) -> &Value {
    let slow = slow_steps(j);
    assert_eq!(slow.len(), 1, "{:#}", j["training"]);
    assert_eq!(
        slow[0]["start_ns"].as_u64().unwrap(),
        JOB_T0 + 600_000_000,
        "the 7th step: {:#}",
        slow[0]
    );
    slow[0]
}

/// XOFFs on priority 3 (full quanta, 335 us at 100 Gb/s) every 200 us over `[from, to)`.
fn pause_over(from: u64, to: u64) -> Vec<(u64, Vec<u8>)> {
    (from..to)
        .step_by(200_000)
        .map(|t| (t, frames::pfc(0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0])))
        .collect()
}

/// The job with its 7th step's burst held 100 ms after its first 10 ms (every later frame
/// moved 100 ms on), with or without the PFC pause that held it.
fn held_burst(paused: bool) -> Vec<(u64, Vec<u8>)> {
    let cut = JOB_T0 + 600_000_000 + 10_000_000;
    let mut f: Vec<(u64, Vec<u8>)> = job_frames(false)
        .into_iter()
        .map(|(t, fr)| (if t >= cut { t + 100_000_000 } else { t }, fr))
        .collect();
    if paused {
        f.extend(pause_over(cut, cut + 100_000_000));
    }
    f.sort_by_key(|(t, _)| *t);
    f
}

#[test]
fn a_pause_in_the_middle_of_a_burst_does_not_end_the_step() {
    let j = analyze(
        "held-burst",
        held_burst(true),
        &["--link-speed", "100"],
        None,
    );
    // 14 bursts: 13 steps from one burst start to the next; the held one is one 200 ms step.
    assert_eq!(
        j["training"]["steps"].as_array().unwrap().len(),
        13,
        "{:#}",
        j["training"]
    );
    let s = the_slow_step(&j);
    assert!(
        (s["seconds"].as_f64().unwrap() - 0.2).abs() < 0.002,
        "{s:#}"
    );
    assert_eq!(cause_kinds(s), ["pfc_pause"], "{s:#}");
    assert!(s["causes"][0]["share"].as_f64().unwrap() > 0.95, "{s:#}");
}

/// The counterpart: the same silence with no pause is the end of a burst, as before.
#[test]
fn the_same_silence_without_a_pause_starts_a_new_step() {
    let j = analyze("held-no-pause", held_burst(false), &[], None);
    assert_eq!(
        j["training"]["steps"].as_array().unwrap().len(),
        14,
        "{:#}",
        j["training"]
    );
}

/// The job with a NAK (PSN sequence error) from its receiver 25 ms into the 7th step and
/// its sender going back: the first 5 ms of the step's WRITEs of QP 0x11 again at 30 ms.
#[test]
fn a_slow_step_with_a_nak_and_a_go_back_is_explained_by_retransmission() {
    let mut f = job_frames(true);
    let step = JOB_T0 + 600_000_000;
    let mut nak = Roce::new(ip("10.78.0.2"), ip("10.78.0.1"), 0xC111, 0x77, 0x11);
    nak.syndrome = 0x60;
    f.push((step + 25_000_000, nak.frame()));
    let again: Vec<(u64, Vec<u8>)> = f
        .iter()
        .filter(|(t, fr)| {
            (step..step + 5_000_000).contains(t) && fr.len() > 2000 // the WRITEs of 2 KiB
        })
        .map(|(t, fr)| (t + 30_000_000, fr.clone()))
        .collect();
    assert!(!again.is_empty());
    f.extend(again);
    f.sort_by_key(|(t, _)| *t);
    let j = analyze("slow-retransmit", f, &[], None);
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["retransmission"], "{s:#}");
}

/// `n` WRITE ONLY packets of 256 bytes from `src` to `dst` on a QP of their own (PSNs from 0:
/// no gap), one every 300 us from 100 us into the 7th step, each changed by `set`.
fn planted(src: &str, dst: &str, n: u64, set: impl Fn(&mut Roce)) -> Vec<(u64, Vec<u8>)> {
    let step = JOB_T0 + 600_000_000;
    (0..n)
        .map(|k| {
            let mut d = Roce::new(ip(src), ip(dst), 0xC500, 0x700, 0x0A);
            d.psn = k as u32;
            d.payload = 256;
            d.dma_len = 256;
            set(&mut d);
            (step + 100_000 + k * 300_000, d.frame())
        })
        .collect()
}

/// The slow job with `extra` frames.
fn slow_job_with(extra: Vec<(u64, Vec<u8>)>) -> Vec<(u64, Vec<u8>)> {
    let mut f = job_frames(true);
    f.extend(extra);
    f.sort_by_key(|(t, _)| *t);
    f
}

/// 50 RoCE packets of the job's own host pair with DSCP 0 (outside the lossless class 26) in
/// the 7th step's burst.
#[test]
fn a_slow_step_with_lossy_roce_is_explained_by_the_lossy_class() {
    let f = slow_job_with(planted("10.78.0.1", "10.78.0.2", 50, |d| d.dscp = 0));
    let j = analyze("slow-lossy", f, &[], None);
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["lossy_class"], "{s:#}");
}

/// The same 50 lossy packets between two other hosts: another tenant's trouble, no cause of
/// the job's step.
#[test]
fn lossy_roce_of_another_host_pair_is_no_cause_of_the_step() {
    let f = slow_job_with(planted("10.78.0.5", "10.78.0.6", 50, |d| d.dscp = 0));
    let j = analyze("slow-lossy-elsewhere", f, &[], None);
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["unexplained"], "{s:#}");
}

/// 50 CE-marked packets on the job's own host pair in the 7th step: congestion.
#[test]
fn ce_marks_on_the_jobs_flows_make_the_slow_step_congestion() {
    let f = slow_job_with(planted("10.78.0.1", "10.78.0.2", 50, |d| d.ecn = 3));
    let j = analyze("slow-congestion", f, &[], None);
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["congestion"], "{s:#}");
    assert_eq!(s["causes"][0]["share"], 1.0, "{s:#}");
}

/// The same CE marks on another tenant's flow at the same time: no cause of the job's step
/// (the tenant's own congestion may be a finding of its own).
#[test]
fn ce_marks_of_another_tenant_are_no_cause_of_the_step() {
    let f = slow_job_with(planted("10.78.0.5", "10.78.0.6", 50, |d| d.ecn = 3));
    let j = analyze("slow-congestion-elsewhere", f, &[], None);
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["unexplained"], "{s:#}");
}

/// Another tenant's NAK in the step: no retransmission of the job's.
#[test]
fn a_nak_of_another_tenant_is_no_cause_of_the_step() {
    let f = slow_job_with(planted("10.78.0.6", "10.78.0.5", 1, |d| {
        d.opcode = 0x11;
        d.syndrome = 0x60;
    }));
    let j = analyze("slow-nak-elsewhere", f, &[], None);
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["unexplained"], "{s:#}");
}

/// Two causes: the job's priority paused for 70 ms of the 100 ms the step lost (XOFFs
/// every 200 us after the burst, their union measured), and CE marks on the job's flows.
/// The pause takes its measured share, congestion the rest, in that order.
#[test]
fn a_step_with_a_pause_and_congestion_ranks_the_measured_pause_first() {
    let step = JOB_T0 + 600_000_000;
    let mut extra = planted("10.78.0.1", "10.78.0.2", 50, |d| d.ecn = 3);
    let from = step + 30_000_000;
    extra.extend(pause_over(from, from + 70_000_000));
    let j = analyze(
        "slow-two-causes",
        slow_job_with(extra),
        &["--link-speed", "100"],
        None,
    );
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["pfc_pause", "congestion"], "{s:#}");
    // The last XOFF at 69.8 ms holds a full 0xFFFF quanta at 100 Gb/s (335.5392 us).
    let paused_ns = 69_800_000.0 + 65_535.0 * 512.0 / 100.0;
    let pause = s["causes"][0]["share"].as_f64().unwrap();
    assert!((pause - paused_ns / 100e6).abs() < 1e-4, "{pause} {s:#}");
    let rest = s["causes"][1]["share"].as_f64().unwrap();
    assert!((rest - (1.0 - paused_ns / 100e6)).abs() < 1e-4, "{rest}");
    assert_eq!(s["causes"][0]["basis"], "measured");
    assert_eq!(s["causes"][1]["basis"], "shared");
}

/// Elephants on a 4-path CRC-16/XMODEM hash, entering at once above 2 MB/s (the job's own
/// flows stay under 1 MB/s, the elephants run at 11 MB/s).
const ECMP_CONFIG: &str = "[ecmp.hash]\nfunction = \"crc16-1021\"\npaths = 4\n\n[elephant]\nthreshold_bytes_per_second = 2000000\nmin_duration_seconds = 0\n";

/// The paths of the job's three flows (ports 0xC111..0xC113), by the test's own hash.
fn job_paths() -> Vec<u32> {
    (0xC111u16..=0xC113)
        .map(|p| demo::path_among(v4("10.78.0.1"), v4("10.78.0.2"), p, 4))
        .collect()
}

#[test]
fn a_slow_step_whose_flow_shares_a_path_with_colliding_elephants_is_an_ecmp_collision() {
    let path = job_paths()[0];
    let mut f = job_frames(true);
    // Another job's elephants on the job's path, all along (a steady background under the
    // job's bursts).
    f.extend(elephants_on(path, JOB_T0, 1_500));
    f.sort_by_key(|(t, _)| *t);
    let j = analyze("slow-ecmp", f, &[], Some(ECMP_CONFIG));
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["ecmp_collision"], "{s:#} {:#}", j["ecmp"]);
}

#[test]
fn colliding_elephants_on_a_path_the_job_does_not_use_explain_nothing() {
    let used = job_paths();
    let free = (0..4).find(|p| !used.contains(p)).expect("a free path");
    let mut f = job_frames(true);
    f.extend(elephants_on(free, JOB_T0, 1_500));
    f.sort_by_key(|(t, _)| *t);
    let j = analyze("slow-ecmp-elsewhere", f, &[], Some(ECMP_CONFIG));
    let predicted = &j["ecmp"]["predicted"];
    assert!(
        predicted["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["colliding"] == true && m["member"].as_str() == Some(&*free.to_string())),
        "the elephants collide on path {free}: {predicted:#}"
    );
    let s = the_slow_step(&j);
    assert_eq!(cause_kinds(s), ["unexplained"], "{s:#}");
}

const SENDERS: [&str; 3] = ["10.91.0.1", "10.91.0.2", "10.91.0.3"];

#[test]
fn a_slow_step_with_a_clean_network_names_the_late_host() {
    let j = analyze(
        "straggler",
        hosts_job(&SENDERS, "10.91.0.10", Some("10.91.0.3")),
        &[],
        None,
    );
    let slow = slow_steps(&j);
    assert_eq!(slow.len(), 1, "{:#}", j["training"]);
    assert_eq!(cause_kinds(slow[0]), ["unexplained"], "{:#}", slow[0]);
    let st = &slow[0]["straggler"];
    assert_eq!(st["host"], "10.91.0.3", "{st:#}");
    // Its burst ended at 119 ms, the others' at 19 ms; it started 15 ms after them.
    let ended = st["ended_late_seconds"].as_f64().unwrap();
    let started = st["started_late_seconds"].as_f64().unwrap();
    assert!((ended - 0.100).abs() <= 0.002, "{st:#}");
    assert!((started - 0.015).abs() <= 0.002, "{st:#}");
    let f = findings(&j, "slow_step");
    assert_eq!(f.len(), 1, "{:#}", j["findings"]);
    let summary = f[0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("host 10.91.0.3 ended its burst 100.0 ms after the others"),
        "{summary}"
    );
    assert_eq!(f[0]["evidence"]["straggler"]["host"], "10.91.0.3");
}

#[test]
fn a_slow_step_whose_hosts_kept_together_names_no_host() {
    let j = analyze(
        "no-straggler",
        hosts_job(&SENDERS, "10.91.0.10", None),
        &[],
        None,
    );
    let slow = slow_steps(&j);
    assert_eq!(slow.len(), 1, "{:#}", j["training"]);
    assert_eq!(slow[0]["straggler"], Value::Null, "{:#}", slow[0]);
    let f = findings(&j, "slow_step");
    assert!(
        f[0]["summary"]
            .as_str()
            .unwrap()
            .contains("look at the hosts"),
        "{}",
        f[0]["summary"]
    );
}

#[test]
fn a_sender_that_keeps_its_rate_while_cnps_arrive_is_cnp_ignored() {
    let j = analyze("dcqcn-off", dcqcn(false), &[], None);
    let f = findings(&j, "cnp_ignored");
    assert_eq!(f.len(), 1, "{:#}", j["findings"]);
    assert_eq!(f[0]["subject"], "sender 10.90.0.1");
    // 1 KiB payloads every 10 us before and after: the same rate.
    let ratio = f[0]["evidence"]["rate_after_cnps_ratio"].as_f64().unwrap();
    assert!((ratio - 1.0).abs() < 0.05, "{:#}", f[0]);
    let c = &j["roce"]["cnp_response"]["connections"][0];
    assert_eq!(c["cnp_bursts"], 1, "{c:#}");
    assert_eq!(c["cnp_bursts_ignored"], 1, "{c:#}");
}

#[test]
fn a_sender_that_halves_its_rate_on_cnps_is_no_finding() {
    let j = analyze("dcqcn-on", dcqcn(true), &[], None);
    assert!(
        findings(&j, "cnp_ignored").is_empty(),
        "{:#}",
        j["findings"]
    );
    let c = &j["roce"]["cnp_response"]["connections"][0];
    assert_eq!(c["cnp_bursts"], 1, "{c:#}");
    let ratio = c["rate_after_cnps_ratio"].as_f64().unwrap();
    assert!((ratio - 0.5).abs() < 0.05, "{c:#}");
}

/// The HTML report shades the slow step on the throughput chart, where the generator put it:
/// 600 ms to 800 ms after the first packet.
#[test]
fn the_html_report_marks_the_slow_step_on_the_timeline() {
    let dir = TempDir::new("rocemon-steps-html").unwrap();
    let page = rocemon_testkit::findings_lab::html_of(
        env!("CARGO_BIN_EXE_rocemon"),
        dir.path(),
        "slow-html",
        job_frames(true),
    );
    assert_eq!(
        page.matches(r#"<rect class="slow-step""#).count(),
        1,
        "one slow step shaded"
    );
    assert!(
        page.contains("<title>slow step 7: 200.0 ms from 0.600 s (unexplained)</title>"),
        "{}",
        &page[page.find("slow-step").unwrap_or(0)..][..300.min(page.len())]
    );
    assert!(page.contains("slow training steps shaded red"));
}

/// A capture whose steps are all on time has nothing shaded.
#[test]
fn the_html_report_of_steps_on_time_shades_nothing() {
    let dir = TempDir::new("rocemon-steps-html-ok").unwrap();
    let page = rocemon_testkit::findings_lab::html_of(
        env!("CARGO_BIN_EXE_rocemon"),
        dir.path(),
        "ontime-html",
        job_frames(false),
    );
    assert!(!page.contains("slow-step"));
}

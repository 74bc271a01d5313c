//! Captures built to blow up `analyze`, as bounded-memory tests: each runs to the end and its
//! peak resident memory stays under a generous ceiling (GNU time's figure; never a time:
//! `cargo xtask bench --only robustness` measures time per frame against an ordinary capture
//! of the same size). The shapes: a million flows of one packet (also under a small
//! `--max-flows`), 40,000 connections of one
//! host pair with CE marks and CNPs, and a job with 1,000 slow steps under 200,000 pause runs.

use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::frames::Roce;
use rocemon_testkit::TempDir;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const MIB: u64 = 1 << 20;

/// `rocemon analyze --format json FILE`: its report and its peak resident memory (bytes).
fn analyze_peak(path: &Path) -> (serde_json::Value, u64) {
    analyze_peak_with(path, &[])
}

/// [`analyze_peak`] with `extra` flags.
fn analyze_peak_with(path: &Path, extra: &[&str]) -> (serde_json::Value, u64) {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(BIN)
        .args(["analyze", "--no-progress", "--format", "json"])
        .args(extra)
        .arg(path)
        .output()
        .expect("/usr/bin/time (Debian package time; cargo xtask setup installs it)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "analyze failed: {err}");
    let kib: u64 = err
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak memory from time: {err}"));
    eprintln!("{}: peak {} MiB", path.display(), kib / 1024);
    let report = serde_json::from_slice(&out.stdout).expect("the JSON report");
    (report, kib * 1024)
}

/// A million flows of one packet each, every one on a port of its own.
fn million_flows(dir: &Path) -> std::path::PathBuf {
    let dst = "10.250.0.1".parse().unwrap();
    let frames = (0..1_000_000u32)
        .map(|i| {
            let src = std::net::Ipv4Addr::from(0x0A00_0000 | i).into();
            let r = Roce::new(src, dst, 0xC000 | (i & 0x3FFF) as u16, i & 0xFF_FFFF, 0x04);
            (1_700_000_000_000_000_000 + u64::from(i) * 1000, r.frame())
        })
        .collect();
    whole("million", Format::PcapNanos, frames, false)
        .write(dir)
        .unwrap()
}

#[test]
fn a_million_flows_of_one_packet_stay_bounded() {
    let dir = TempDir::new("rocemon-hostile-million").unwrap();
    let (j, peak) = analyze_peak(&million_flows(dir.path()));
    assert_eq!(j["roce"]["packets"], 1_000_000);
    assert!(peak < 1024 * MIB, "peak {} MiB", peak / MIB);
}

/// `--max-flows` bounds every per-flow table, the CE/CNP pairing's port index too: a
/// million flows under `--max-flows 1000` take tens of MiB (the index alone took 330 MiB
/// when it held every flow's port), the flows past the bound counted.
#[test]
fn a_million_flows_under_a_small_max_flows_stay_small() {
    let dir = TempDir::new("rocemon-hostile-million-small").unwrap();
    let p = million_flows(dir.path());
    let (j, peak) = analyze_peak_with(&p, &["--max-flows", "1000"]);
    assert_eq!(j["roce"]["packets"], 1_000_000);
    assert_eq!(j["roce"]["cnp_response"]["flows_not_indexed"], 999_000);
    assert!(peak < 128 * MIB, "peak {} MiB", peak / MIB);
}

#[test]
fn forty_thousand_connections_of_one_host_pair_stay_bounded() {
    let dir = TempDir::new("rocemon-hostile-pair").unwrap();
    let (a, b) = ("10.251.0.1".parse().unwrap(), "10.251.0.2".parse().unwrap());
    let mut f = Vec::with_capacity(80_000);
    for i in 0..40_000u32 {
        let t = 1_700_000_000_000_000_000 + u64::from(i) * 10_000;
        let mut w = Roce::new(a, b, 0xC000 | (i & 0x3FFF) as u16, 0x10_0000 + i, 0x0A);
        w.ecn = 3;
        f.push((t, w.frame()));
        f.push((t + 5_000, Roce::cnp(b, a, 0xC777, 0x20_0000 + i).frame()));
    }
    let p = whole("pair", Format::PcapNanos, f, false)
        .write(dir.path())
        .unwrap();
    let (j, peak) = analyze_peak(&p);
    assert_eq!(j["roce"]["cnp"], 40_000);
    assert!(peak < 512 * MIB, "peak {} MiB", peak / MIB);
}

#[test]
fn thousands_of_slow_steps_under_pause_runs_stay_bounded() {
    let dir = TempDir::new("rocemon-hostile-steps").unwrap();
    let p = rocemon_testkit::hostile_steps::job(true)
        .write(dir.path())
        .unwrap();
    let (j, peak) = analyze_peak(&p);
    let t = &j["training"];
    // Every other step of 2,000 takes twice the period: 1,000 slow (the first one or two,
    // before a typical step is known, may not count); each explained.
    let slow = t["slow_steps"].as_u64().unwrap_or(0);
    assert!((990..=1_000).contains(&slow), "{slow} slow steps: {t:#}");
    let jobs = t["jobs"].as_array().map_or(0, Vec::len);
    assert_eq!(jobs, 1, "one job: {t:#}");
    let explained = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["slow"] == true && !s["causes"].as_array().unwrap().is_empty())
        .count() as u64;
    assert_eq!(explained, slow, "every slow step has its causes");
    assert!(peak < 256 * MIB, "peak {} MiB", peak / MIB);
}

/// A million pause runs (125 in every millisecond of the job's bursts) under the same 1,000
/// slow steps: the pause tracker and the slow-step explanation stay linear and bounded, and
/// every pause run is counted (tshark would count the XOFF frames the same: one per run).
#[test]
fn a_million_pause_runs_stay_bounded() {
    let dir = TempDir::new("rocemon-hostile-pauses").unwrap();
    let p = rocemon_testkit::hostile_steps::job_with(true, 125)
        .write(dir.path())
        .unwrap();
    let (j, peak) = analyze_peak(&p);
    let slow = j["training"]["slow_steps"].as_u64().unwrap_or(0);
    assert!((990..=1_000).contains(&slow), "{slow} slow steps");
    let p3 = j["pfc"]["priorities"]
        .as_array()
        .and_then(|v| v.iter().find(|p| p["priority"] == 3))
        .cloned()
        .unwrap_or_default();
    assert_eq!(p3["xoff"], 1_000_000, "every pause run's XOFF: {p3}");
    assert_eq!(p3["xon"], 1_000_000, "and its XON: {p3}");
    assert!(peak < 256 * MIB, "peak {} MiB", peak / MIB);
}

//! The live agent's pause time is the union of the pause intervals, as `analyze`'s: PFC
//! frames replayed through a veth at the pace of their timestamps, the link's speed read as
//! 1 Gb/s (from a sysfs of the test's own: a whole XOFF, 65,535 quanta, pauses 33.55 ms, so a
//! sender the scheduler holds back for milliseconds on a loaded machine changes little).
//! Bursts of back-to-back XOFFs (spoofed: their quanta sum to all of the time, the link was
//! paused a tenth of it) are no storm; XOFFs refreshed before their timers run out are one.

use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::netns::{metric_sum, VethPair};
use rocemon_testkit::{frames, require_root, TempDir};
use serde_json::Value;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9443";
const MS: u64 = 1_000_000;

/// A whole XOFF for priority 3.
fn xoff() -> Vec<u8> {
    let mut times = [0; 8];
    times[3] = 65_535;
    frames::pfc(1 << 3, times)
}

/// Replays XOFFs at `times` (ns from the start) into an agent on a veth; returns every
/// finding the agent listed (active and recent) once a few polls passed after the last one,
/// and its metrics then.
fn findings_after(name: &str, times: Vec<u64>) -> (Vec<Value>, String) {
    let dir = TempDir::new(name).unwrap();
    let t0 = 1_764_460_800_000_000_000u64;
    let cap = whole(
        "pauses",
        Format::PcapMicros,
        times.into_iter().map(|t| (t0 + t, xoff())).collect(),
        true,
    )
    .write(dir.path())
    .unwrap();
    let pair = VethPair::new("rcpause").unwrap();
    // The last pause runs out 34 ms after its frame; then a few polls.
    let (found, metrics, _) = rocemon_testkit::findings_lab::live_findings(
        &pair,
        BIN,
        ADDR,
        dir.path(),
        &cap,
        &[],
        Duration::from_millis(500),
    );
    (found, metrics)
}

fn storms(findings: &[Value]) -> Vec<&Value> {
    findings
        .iter()
        .filter(|f| f["kind"] == "pfc_storm")
        .collect()
}

/// Ten back-to-back XOFFs (1 us apart) every 335.5 ms for 4 s: the quanta ask for the whole
/// time, the link was paused 10% of it. (With the quanta's sum as the pause time, this was a
/// critical storm "paused for 4 s without a break".)
#[test]
fn bursts_of_back_to_back_xoffs_are_no_storm() {
    if !require_root("a live pause test (namespaces, BPF)") {
        return;
    }
    let times = (0..12u64)
        .flat_map(|b| (0..10u64).map(move |i| b * 335_500_000 + i * 1_000))
        .collect();
    let (found, metrics) = findings_after("rocemon-pause-bursts", times);
    assert!(storms(&found).is_empty(), "{found:#?}");
    // Each burst paused 33.55 ms (plus the microseconds it took to send): about 0.40 s in
    // all, where the quanta ask for 4.03 s (a loaded sender spreads a burst: the union grows
    // by what it really took, still far below the quanta's sum).
    let prio3 = [("priority", "3")];
    let union = metric_sum(&metrics, "rocemon_pfc_paused_seconds_total", &prio3);
    let asked = metric_sum(&metrics, "rocemon_pfc_pause_seconds_total", &prio3);
    assert!((asked - 4.026).abs() < 0.01, "{asked} s asked");
    assert!((0.40..1.2).contains(&union), "{union} s paused");
}

/// XOFFs refreshed every 5 ms for 3 s (each pauses 33.55 ms): paused without a break, past
/// the 200 ms threshold: a storm on priority 3.
#[test]
fn refreshed_xoffs_are_a_storm() {
    if !require_root("a live pause test (namespaces, BPF)") {
        return;
    }
    let times = (0..600u64).map(|i| i * 5 * MS).collect();
    let (found, _) = findings_after("rocemon-pause-storm", times);
    let s = storms(&found);
    assert!(!s.is_empty(), "{found:#?}");
    assert!(
        s.iter().all(|f| f["subject"]
            .as_str()
            .unwrap_or("")
            .starts_with("priority 3 on")),
        "{s:#?}"
    );
}

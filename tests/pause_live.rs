//! The live agent's pause time is the union of the pause intervals, as `analyze`'s: PFC
//! frames replayed through a veth at the pace of their timestamps (a veth reports 10 Gb/s: a
//! whole XOFF, 65,535 quanta, pauses 3.355 ms). Bursts of back-to-back XOFFs (spoofed: their
//! quanta sum to all of the time, the link was paused a tenth of it) are no storm; XOFFs
//! refreshed before their timers run out are one.

use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::netns::{http_get_in, Agent, VethPair};
use rocemon_testkit::{frames, require_root, TempDir};
use serde_json::Value;
use std::time::{Duration, Instant};

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
/// finding the agent listed (active and recent) once two polls passed after the last one.
fn findings_after(name: &str, times: Vec<u64>) -> Vec<Value> {
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
    // The veth's own speed stands; this one is for a kernel whose veth reports none.
    let cfg = dir.path().join("rocemon.toml");
    std::fs::write(&cfg, "[elephant]\nlink_speed_mbps = 10000.0\n").unwrap();
    let pair = VethPair::new("rcpause").unwrap();
    let agent = Agent::on_iface(
        &pair.ns_a,
        BIN,
        (&pair.a_if, "xdp"),
        ADDR,
        &["--config", cfg.to_str().unwrap()],
    )
    .unwrap();
    pair.replay_timed_from_b(&cap).unwrap();
    // The last pause runs out 3.4 ms after its frame; then a few polls.
    std::thread::sleep(Duration::from_millis(500));
    let deadline = Instant::now() + Duration::from_secs(30);
    let doc: Value = loop {
        let (status, body) = http_get_in(&pair.ns_a, ADDR, "/api/v1/findings").unwrap();
        if status == 200 {
            break serde_json::from_str(&body).unwrap();
        }
        assert!(Instant::now() < deadline, "no findings answer: {status}");
        std::thread::sleep(Duration::from_millis(200));
    };
    agent.stop_ok();
    let mut out = Vec::new();
    for list in ["active", "recent"] {
        out.extend(doc[list].as_array().cloned().unwrap_or_default());
    }
    out
}

fn storms(findings: &[Value]) -> Vec<&Value> {
    findings
        .iter()
        .filter(|f| f["kind"] == "pfc_storm")
        .collect()
}

/// Ten back-to-back XOFFs every 33.5 ms for 4 s: the quanta ask for the whole time, the link
/// was paused 10% of it. (With the quanta's sum as the pause time, this was a critical storm
/// "paused for 4 s without a break".)
#[test]
fn bursts_of_back_to_back_xoffs_are_no_storm() {
    if !require_root("a live pause test (namespaces, BPF)") {
        return;
    }
    let times = (0..120u64)
        .flat_map(|b| (0..10u64).map(move |i| b * 33_550_000 + i * 20_000))
        .collect();
    let found = findings_after("rocemon-pause-bursts", times);
    assert!(storms(&found).is_empty(), "{found:#?}");
}

/// XOFFs refreshed every millisecond for 3 s (each pauses 3.355 ms): paused without a break,
/// past the 200 ms threshold: a storm on priority 3.
#[test]
fn refreshed_xoffs_are_a_storm() {
    if !require_root("a live pause test (namespaces, BPF)") {
        return;
    }
    let times = (0..3_000u64).map(|i| i * MS).collect();
    let found = findings_after("rocemon-pause-storm", times);
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

//! Live equals offline: each of the test kit's planted-cause captures, replayed at its own
//! pace through a veth pair to a live agent, raises the same findings as `rocemon analyze` of
//! the same capture: the same kinds, about the same hosts, a slow step with the same causes,
//! and the same pause time (within 10%) as `analyze` of what the agent's link received
//! (recorded by dumpcap beside it: the frames at the pace they came). One test per capture, so that one disagreement never
//! hides another.
//!
//! Both sides read the link as 1 Gb/s (`--link-speed 1` offline, a sysfs of the test's own
//! live) and take the same settings. Offline findings are incidents (several receivers at one
//! time are one); the hosts compared are every address a finding names, in its subject or in
//! the subjects it lists.
//!
//! One difference is by design and kept out: a capture shorter than the elephant minimum
//! duration names its largest flows elephants (offline only: a capture is a sample of longer
//! traffic, and live traffic is never shorter than itself). The congestion captures last 16 ms,
//! so they run with an elephant threshold none of their flows reaches; the ECMP case compares
//! elephants on equal terms.

use rocemon_testkit::findings_lab::{ce_exchange, hosts_job, step_number, A, B, T0};
use rocemon_testkit::fixtures::{self, whole, Format};
use rocemon_testkit::frames::{self, Roce};
use rocemon_testkit::netns::{metric_sum, VethPair};
use rocemon_testkit::{require_root, TempDir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9461";
const MS: u64 = 1_000_000;

/// What one side found: per kind, the addresses its findings name; the slow steps' causes
/// and numbers; the time priority 3 was paused.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    kinds: BTreeMap<String, BTreeSet<String>>,
    causes: BTreeSet<String>,
    steps: BTreeSet<u64>,
    paused_s: f64,
}

/// Every IPv4 address in `text`.
fn addresses(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| w.parse::<std::net::Ipv4Addr>().is_ok())
        .map(str::to_string)
        .collect()
}

fn add(seen: &mut Seen, f: &Value) {
    let kind = f["kind"].as_str().unwrap_or("?").to_string();
    let mut hosts = addresses(f["subject"].as_str().unwrap_or(""));
    for s in f["evidence"]["listed"].as_array().into_iter().flatten() {
        hosts.extend(addresses(&s.to_string()));
    }
    for c in f["evidence"]["causes"].as_array().into_iter().flatten() {
        if let Some(k) = c["kind"].as_str() {
            seen.causes.insert(k.to_string());
        }
    }
    if kind == "slow_step" {
        seen.steps
            .extend(step_number(f["subject"].as_str().unwrap_or("")));
    }
    seen.kinds.entry(kind).or_default().extend(hosts);
}

/// `rocemon analyze` of the capture.
fn offline(cap: &Path, extra: &[&str]) -> Seen {
    let mut args = vec!["--link-speed", "1"];
    args.extend_from_slice(extra);
    let j = rocemon_testkit::analyze_json(BIN, &args, &[cap]);
    let mut seen = Seen::default();
    for f in j["findings"].as_array().into_iter().flatten() {
        add(&mut seen, f);
    }
    seen.paused_s = j["pfc"]["priorities"][3]["paused_seconds"]
        .as_f64()
        .unwrap_or(0.0);
    seen
}

/// A live agent on a veth whose far end replays the capture at its own pace; every finding
/// it listed (active and recent) once the replay ended and a few polls passed, and what its
/// link received (recorded beside it).
fn live(name: &str, cap: &Path, extra: &[&str]) -> (Seen, TempDir, std::path::PathBuf) {
    let dir = TempDir::new(name).unwrap();
    let pair = VethPair::new("rclo").unwrap();
    // A pause runs out 34 ms after its last frame; a step is judged when the next begins or
    // the series ends; then a few polls (100 ms each).
    let (found, metrics, received) = rocemon_testkit::findings_lab::live_findings(
        &pair,
        BIN,
        ADDR,
        dir.path(),
        cap,
        extra,
        Duration::from_millis(1_500),
    );
    let mut seen = Seen::default();
    for f in &found {
        add(&mut seen, f);
    }
    seen.paused_s = metric_sum(
        &metrics,
        "rocemon_pfc_paused_seconds_total",
        &[("priority", "3")],
    );
    (seen, dir, received)
}

/// Replays `frames` both ways and compares: the same kinds about the same hosts, the same
/// slow-step causes, the pause time within 10% (or both none). Returns the offline side.
fn same(name: &'static str, frames: Vec<(u64, Vec<u8>)>, extra: &[&str]) -> Option<Seen> {
    if !require_root("the live/offline differential (namespaces, BPF)") {
        return None;
    }
    let dir = TempDir::new(name).unwrap();
    let cap = whole(name, Format::PcapNanos, frames, true)
        .write(dir.path())
        .unwrap();
    Some(compare(name, &cap, extra))
}

/// The same findings live as offline; the same pause time as `analyze` gives for what the
/// agent's link received (the capture's frames at the times they came: a replay on a loaded
/// machine keeps the frames, not always their pace, and a pause's length is its pace).
fn compare(name: &str, cap: &Path, extra: &[&str]) -> Seen {
    let off = offline(cap, extra);
    let (on, _dir, received) = live(name, cap, extra);
    let got = offline(&received, extra);
    eprintln!("{name}: offline {off:?}\n{name}: live    {on:?}\n{name}: received {got:?}");
    assert_eq!(
        on.kinds, off.kinds,
        "{name}: live (left) and offline (right) findings differ"
    );
    assert_eq!(on.causes, off.causes, "{name}: slow-step causes");
    // Each slow step offline has the same number live (by its place among the job's steps).
    // A replay on a loaded machine can stretch a step on time into a slow one live (a set of
    // kinds does not see that; a set of numbers does), so live may name more.
    assert!(
        off.steps.is_subset(&on.steps),
        "{name}: the slow steps' numbers: offline {:?}, live {:?}",
        off.steps,
        on.steps
    );
    let tolerance = 0.1 * got.paused_s.max(on.paused_s);
    assert!(
        (on.paused_s - got.paused_s).abs() <= tolerance,
        "{name}: paused {} s live, {} s offline of what the link received ({} s of the capture)",
        on.paused_s,
        got.paused_s,
        off.paused_s
    );
    off
}

/// XOFFs on priority 3 refreshed every 5 ms for a second (each pauses 33.55 ms at 1 Gb/s).
fn refreshed_xoffs() -> Vec<(u64, Vec<u8>)> {
    let mut times = [0; 8];
    times[3] = 65_535;
    (0..200u64)
        .map(|i| (T0 + i * 5 * MS, frames::pfc(1 << 3, times)))
        .collect()
}

/// An elephant threshold the 16 ms congestion captures' flows stay below (see the module's
/// doc).
const NO_ELEPHANTS: &[&str] = &["--elephant-bps", "10G"];

/// CE marks into a host that sends no CNP: congestion and cnp_missing, about that receiver.
#[test]
fn congestion_without_cnps_is_the_same_live_and_offline() {
    let Some(off) = same("lo-ce-no-cnp", ce_exchange(400, 5, None), NO_ELEPHANTS) else {
        return;
    };
    assert!(off.kinds.contains_key("congestion"), "{off:?}");
    assert!(off.kinds.contains_key("cnp_missing"), "{off:?}");
}

/// CE marks answered by CNPs: congestion, and no cnp_missing.
#[test]
fn congestion_with_cnps_is_the_same_live_and_offline() {
    let Some(off) = same("lo-ce-cnp", ce_exchange(400, 5, Some(20_000)), NO_ELEPHANTS) else {
        return;
    };
    assert!(off.kinds.contains_key("congestion"), "{off:?}");
    assert!(!off.kinds.contains_key("cnp_missing"), "{off:?}");
}

/// XOFFs on priority 3 refreshed every 5 ms for a second (each pauses 33.55 ms at 1 Gb/s):
/// a storm, and the same pause time.
#[test]
fn a_pause_storm_is_the_same_live_and_offline() {
    let frames = refreshed_xoffs();
    let Some(off) = same("lo-storm", frames, &[]) else {
        return;
    };
    assert!(off.kinds.contains_key("pfc_storm"), "{off:?}");
    assert!(off.paused_s > 0.9, "{off:?}");
}

/// The storm threshold is the same setting on both sides: the same second of refreshed XOFFs
/// under `--pfc-storm-seconds 2` is no storm, live or offline (the pause time is the same).
#[test]
fn a_raised_storm_threshold_is_the_same_live_and_offline() {
    let frames = refreshed_xoffs();
    let Some(off) = same("lo-storm-2s", frames, &["--pfc-storm-seconds", "2"]) else {
        return;
    };
    assert!(!off.kinds.contains_key("pfc_storm"), "{off:?}");
    assert!(off.paused_s > 0.9, "{off:?}");
}

/// PSN gaps, go-back retransmissions, a duplicate, NAKs of every code and RNR NAKs (the test
/// kit's PSN fixture): retransmissions.
#[test]
fn loss_and_go_back_are_the_same_live_and_offline() {
    if !require_root("the live/offline differential (namespaces, BPF)") {
        return;
    }
    let dir = TempDir::new("lo-psn").unwrap();
    let cap = fixtures::psn_health().write(dir.path()).unwrap();
    let off = compare("lo-psn", &cap, &[]);
    assert!(off.kinds.contains_key("retransmissions"), "{off:?}");
}

/// A training job of three hosts whose step 6 takes twice the others, nothing else on the
/// link: the same slow step with the same (no network) cause.
#[test]
fn a_slow_training_step_is_the_same_live_and_offline() {
    let hosts = ["10.93.0.1", "10.93.0.2", "10.93.0.3"];
    let Some(off) = same("lo-step", hosts_job(&hosts, "10.93.0.9", None), &[]) else {
        return;
    };
    assert!(off.kinds.contains_key("slow_step"), "{off:?}");
}

/// RoCE outside the lossless class: 144 packets with DSCP 0 among 1,150: lossy_roce.
#[test]
fn a_lossy_class_is_the_same_live_and_offline() {
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let mut frames = Vec::new();
    for k in 0..1_150u64 {
        let mut d = Roce::new(ip(A), ip(B), 0xC300, 0x400, 0x0A);
        d.psn = k as u32;
        d.payload = 256;
        d.dma_len = 256;
        if k % 8 == 0 {
            d.dscp = 0;
        }
        frames.push((T0 + k * 100_000, d.frame()));
    }
    let Some(off) = same("lo-lossy", frames, &[]) else {
        return;
    };
    assert!(off.kinds.contains_key("lossy_roce"), "{off:?}");
}

/// Two elephants on one path of a 4-path CRC-16 hash model for 1.5 s (both sides with the
/// same model and an elephant threshold of 2 MB/s entered at once): elephant and
/// ecmp_collision.
#[test]
fn colliding_elephants_are_the_same_live_and_offline() {
    let dir = TempDir::new("lo-ecmp-config").unwrap();
    let config = dir.path().join("rocemon.toml");
    std::fs::write(
        &config,
        "[ecmp.hash]\nfunction = \"crc16-1021\"\npaths = 4\n\n[elephant]\nthreshold_bytes_per_second = 2000000\nmin_duration_seconds = 0\n",
    )
    .unwrap();
    let frames = rocemon_testkit::findings_lab::elephants_on(2, T0, 1_500);
    let Some(off) = same("lo-ecmp", frames, &["--config", config.to_str().unwrap()]) else {
        return;
    };
    assert!(off.kinds.contains_key("ecmp_collision"), "{off:?}");
    assert_eq!(off.kinds["elephant"].len(), 3, "{off:?}");
}

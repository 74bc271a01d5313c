//! ECMP collisions against a real ECMP router: a sender namespace, a router namespace with an
//! equal-cost multipath route over four veth uplinks hashed by the kernel on L4
//! (`fib_multipath_hash_policy=1`), and a receiver namespace. `rocemon run` watches the
//! router's uplinks (tc egress) as one ECMP group. Ground truth is the kernel's own
//! per-uplink transmit counters: each candidate flow is first sent alone to learn its uplink,
//! then sets of heavy flows are chosen so that both collision and no-collision cases occur, and
//! rocemon must flag exactly the uplinks that carry two or more heavy flows while another
//! carries none. Also checks `/api/v1/flows`, `/api/v1/ecmp`, the metrics and `rocemon top`.

use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::frames::Roce;
use rocemon_testkit::netns::{http_get_in, metric_sum, run, Agent, EcmpLab};
use rocemon_testkit::{require_root, TempDir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";
const UPLINKS: usize = 4;

fn flow(sport: u16, payload: usize, psn: u32) -> Roce {
    let src: IpAddr = EcmpLab::SRC.parse().unwrap();
    let dst: IpAddr = EcmpLab::DST.parse().unwrap();
    let mut r = Roce::new(src, dst, sport, 0x700 + sport as u32 % 97, 0x07);
    r.payload = payload;
    r.psn = psn;
    r
}

/// Which uplink each candidate source port takes, from the kernel's counters.
fn probe(lab: &EcmpLab, dir: &std::path::Path, sports: &[u16]) -> BTreeMap<u16, usize> {
    let mut map = BTreeMap::new();
    for &sp in sports {
        let frames = (0..64u32)
            .map(|i| {
                (
                    1_700_000_000_000_000_000 + i as u64 * 1000,
                    flow(sp, 256, i).frame(),
                )
            })
            .collect();
        let path = whole("probe", Format::PcapMicros, frames, true)
            .write(dir)
            .unwrap();
        let before = lab.uplink_tx().unwrap();
        lab.send(&path).unwrap();
        let after = lab.uplink_tx().unwrap();
        let deltas: Vec<u64> = before.iter().zip(&after).map(|(b, a)| a.0 - b.0).collect();
        let up = deltas
            .iter()
            .position(|&d| d >= 64)
            .unwrap_or_else(|| panic!("sport {sp}: no uplink carried the probe: {deltas:?}"));
        assert!(
            deltas.iter().enumerate().all(|(i, &d)| i == up || d < 16),
            "sport {sp}: ambiguous probe {deltas:?}"
        );
        map.insert(sp, up);
    }
    map
}

/// Heavy flows (about 1.6 MB/s each at the replay rate) and light flows, interleaved.
fn scenario_pcap(dir: &std::path::Path, heavy: &[u16], light: &[u16]) -> std::path::PathBuf {
    let mut frames = Vec::new();
    let mut t = 1_700_000_000_000_000_000u64;
    for round in 0..200u32 {
        for &sp in heavy {
            frames.push((t, flow(sp, 1024, round).frame()));
            t += 1000;
        }
        if round % 20 == 0 {
            for &sp in light {
                frames.push((t, flow(sp, 64, round / 20).frame()));
                t += 1000;
            }
        }
    }
    whole("scenario", Format::PcapMicros, frames, true)
        .write(dir)
        .unwrap()
}

fn api(lab: &EcmpLab, path: &str) -> Value {
    let (status, body) = http_get_in(&lab.r, ADDR, path).unwrap();
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

fn run_scenario(
    lab: &EcmpLab,
    dir: &std::path::Path,
    name: &str,
    heavy: &[u16],
    light: &[u16],
    uplink_of: &BTreeMap<u16, usize>,
) {
    let mut heavy_per_up = [0usize; UPLINKS];
    for sp in heavy {
        heavy_per_up[uplink_of[sp]] += 1;
    }
    let idle = heavy_per_up.contains(&0);
    let expect: BTreeSet<usize> = (0..UPLINKS)
        .filter(|&u| idle && heavy_per_up[u] >= 2)
        .collect();
    eprintln!("scenario {name}: heavy per uplink {heavy_per_up:?}, expected colliding {expect:?}");

    let cfg = dir.join(format!("{name}.toml"));
    let ups = lab
        .ups
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    std::fs::write(
        &cfg,
        format!(
            "interfaces = [{ups}]\nhooks = [\"tc-egress\"]\npoll_interval_ms = 200\nrate_window_seconds = 0.5\n\
             [elephant]\nthreshold_bytes_per_second = 400000\nmin_duration_seconds = 1.5\nrelease_seconds = 1\n\
             [ecmp]\ngroups = [{{ name = \"spine\", interfaces = [{ups}] }}]\n"
        ),
    )
    .unwrap();
    let mut agent = Agent::start(
        &lab.r,
        BIN,
        &["run", "--config", cfg.to_str().unwrap(), "--listen", ADDR],
    )
    .unwrap();
    agent
        .wait_metrics(&lab.r, ADDR, Duration::from_secs(30), |_| true)
        .unwrap();
    let pcap = scenario_pcap(dir, heavy, light);
    let before = lab.uplink_tx().unwrap();
    let mut replay = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.s,
            "tcpreplay",
            "-q",
            "--mbps=40",
            "--loop=0",
            "-i",
            &lab.s_if,
        ])
        .arg(&pcap)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The replay loops until stopped, so traffic never ends before the snapshot. Heavy flows
    // must stay above the threshold for 1.5 s: wait until rocemon counts as many elephants as
    // there are heavy flows (at least 3 s of traffic, for the byte checks below), then two
    // more polls, then look at everything while the traffic still runs.
    let t = std::time::Instant::now();
    loop {
        let (_, m) = http_get_in(&lab.r, ADDR, "/metrics").unwrap();
        if metric_sum(&m, "rocemon_elephant_flows", &[]) as usize >= heavy.len()
            && t.elapsed() >= Duration::from_secs(3)
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{name}: {} heavy flows never all became elephants",
            heavy.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Two more polls: the views below are of a poll after the last elephant entered.
    let polls = |m: &str| metric_sum(m, "rocemon_poll_duration_seconds_count", &[]);
    let (_, m) = http_get_in(&lab.r, ADDR, "/metrics").unwrap();
    let want = polls(&m) + 2.0;
    let t = std::time::Instant::now();
    loop {
        let (_, m) = http_get_in(&lab.r, ADDR, "/metrics").unwrap();
        if polls(&m) >= want {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{name}: no more polls"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ecmp = api(lab, "/api/v1/ecmp");
    let flows = api(lab, "/api/v1/flows");
    let (_, metrics) = http_get_in(&lab.r, ADDR, "/metrics").unwrap();
    let top = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.r,
            BIN,
            "top",
            "--addr",
            ADDR,
            "--iterations",
            "1",
        ])
        .output()
        .unwrap();
    assert!(
        replay.try_wait().unwrap().is_none(),
        "tcpreplay ended before the snapshot"
    );
    let _ = replay.kill();
    let _ = replay.wait();
    let after = lab.uplink_tx().unwrap();

    // Ground truth from the kernel: heavy traffic went where the probes said.
    for u in 0..UPLINKS {
        let bytes = after[u].1 - before[u].1;
        if heavy_per_up[u] > 0 {
            assert!(
                bytes > 2_000_000 * heavy_per_up[u] as u64,
                "{name}: uplink {u} carried only {bytes} bytes"
            );
        } else {
            assert!(
                bytes < 500_000,
                "{name}: uplink {u} without heavy flows carried {bytes} bytes"
            );
        }
    }
    // rocemon's view.
    let g = &ecmp["groups"][0];
    assert_eq!(g["name"], "spine");
    let members = g["members"].as_array().unwrap();
    let flagged: BTreeSet<usize> = members
        .iter()
        .enumerate()
        .filter(|(_, m)| m["colliding"] == true)
        .map(|(i, _)| i)
        .collect();
    let elephants: Vec<u64> = members
        .iter()
        .map(|m| m["elephants"].as_u64().unwrap())
        .collect();
    assert_eq!(
        elephants,
        heavy_per_up.iter().map(|&n| n as u64).collect::<Vec<_>>(),
        "{name}: elephants per uplink"
    );
    assert_eq!(flagged, expect, "{name}: colliding uplinks");
    assert_eq!(g["collision"], Value::Bool(!expect.is_empty()));
    assert!(g["imbalance_ratio"].as_f64().unwrap() > 1.0);
    assert_eq!(
        metric_sum(
            &metrics,
            "rocemon_ecmp_colliding_uplinks",
            &[("group", "spine")]
        ) as usize,
        expect.len()
    );
    for (u, up) in lab.ups.iter().enumerate() {
        let c = metric_sum(
            &metrics,
            "rocemon_ecmp_uplink_colliding",
            &[("group", "spine"), ("iface", up)],
        );
        assert_eq!(
            c as usize,
            expect.contains(&u) as usize,
            "{name}: metric for {up}"
        );
    }
    assert_eq!(
        metric_sum(&metrics, "rocemon_elephant_flows", &[]) as usize,
        heavy.len()
    );
    // Flows API: heavy flows are elephants on their uplink; light flows never. Every heavy
    // flow must be listed (an empty answer fails).
    let listed = flows["flows"].as_array().unwrap();
    let listed_heavy: BTreeSet<u16> = listed
        .iter()
        .map(|f| f["sport"].as_u64().unwrap() as u16)
        .filter(|sp| heavy.contains(sp))
        .collect();
    assert_eq!(
        listed_heavy.len(),
        heavy.len(),
        "{name}: every heavy flow is in the flows API"
    );
    for f in listed {
        let sp = f["sport"].as_u64().unwrap() as u16;
        if heavy.contains(&sp) {
            assert_eq!(f["elephant"], true, "{name}: heavy flow {sp}");
            assert_eq!(
                f["iface"],
                lab.ups[uplink_of[&sp]].as_str(),
                "{name}: uplink of {sp}"
            );
            assert_eq!(f["group"], "spine", "f {f:?}");
        } else {
            assert_eq!(f["elephant"], false, "{name}: light flow {sp}");
        }
    }
    let screen = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "rocemon top: {}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(screen.contains("ECMP observed spine"), "{screen}");
    assert_eq!(screen.contains("COLLISION"), !expect.is_empty(), "{screen}");
    let stderr = agent.stop_ok();
    assert_eq!(
        stderr.matches("elephant started").count(),
        heavy.len(),
        "{name}: start logged once per elephant: {stderr}"
    );
}

#[test]
fn rocemon_flags_exactly_the_uplinks_with_colliding_elephants() {
    if !require_root("the ECMP router test (namespaces, BPF)") {
        return;
    }
    run("tcpreplay", &["--version"]).expect("tcpreplay is not installed; run `cargo xtask setup`");
    let lab = EcmpLab::new(UPLINKS).unwrap();
    let dir = TempDir::new("rocemon-ecmp").unwrap();
    let pool: Vec<u16> = (0..16u16).map(|i| 0xC000 + 0x0123 * i).collect();
    let uplink_of = probe(&lab, dir.path(), &pool);
    let mut by_up: BTreeMap<usize, Vec<u16>> = BTreeMap::new();
    for (sp, up) in &uplink_of {
        by_up.entry(*up).or_default().push(*sp);
    }
    eprintln!("probed uplinks: {by_up:?}");
    let light: Vec<u16> = (0..4u16).map(|i| 0xF000 + 0x0321 * i).collect();

    // A collision: two heavy flows on one uplink, one on another.
    let (&crowded, two) = by_up
        .iter()
        .find(|(_, v)| v.len() >= 2)
        .expect("16 flows over 4 uplinks: one has two");
    let mut heavy = vec![two[0], two[1]];
    if let Some((_, v)) = by_up.iter().find(|(u, _)| **u != crowded) {
        heavy.push(v[0]);
    }
    run_scenario(&lab, dir.path(), "collision", &heavy, &light, &uplink_of);

    // No collision: one heavy flow on each of up to three uplinks.
    let spread: Vec<u16> = by_up.values().take(3).map(|v| v[0]).collect();
    assert!(
        spread.len() >= 2,
        "the L4 hash spread 16 flows over fewer than two uplinks: {by_up:?}"
    );
    run_scenario(&lab, dir.path(), "spread", &spread, &light, &uplink_of);

    // Another collision set, if one uplink took three candidates.
    if let Some((_, v)) = by_up.iter().find(|(_, v)| v.len() >= 3) {
        run_scenario(&lab, dir.path(), "three", &v[..3], &light, &uplink_of);
    }
}

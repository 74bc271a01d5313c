//! PSN gaps are judged per flow, not per CPU: a sender that moves between CPUs (here a replay
//! whose parts run on alternate CPUs; XDP on a veth counts on the sending CPU) spreads one
//! flow's sequence over the CPUs' values, and no gap or retransmission may come of it, while
//! a real gap in the same traffic is still counted, exactly.

use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::frames;
use rocemon_testkit::netns::{http_get_in, metric_sum, run, try_metric_sum, Agent, VethPair};
use rocemon_testkit::{require_tshark, tshark, TempDir};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

/// `n` RDMA WRITEs of one flow from `src`, PSNs from 100, `skip` PSNs left out after the
/// packet `skip_at` (a real loss: the packets never reach the wire).
fn writes(src: &str, n: u32, skip_at: Option<u32>, skip: u32) -> Vec<Vec<u8>> {
    let psns = (0..n).map(|i| {
        100 + i
            + if skip_at.is_some_and(|s| i > s) {
                skip
            } else {
                0
            }
    });
    frames::writes(src, "10.93.0.2", (0xD100, 0x710), psns, 256)
}

#[test]
fn a_sender_that_moves_between_cpus_shows_no_false_gaps() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    require_tshark();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("SKIP: one CPU: a sender cannot move between CPUs here");
        return;
    }
    let dir = TempDir::new("rocemon-psn-cpus").unwrap();
    // Two flows taking turns, in 20 parts: one clean, one with 7 packets lost after its 500th.
    let clean = writes("10.93.0.1", 1_000, None, 0);
    let lossy = writes("10.93.0.3", 1_000, Some(500), 7);
    let mut parts = Vec::new();
    for p in 0..20 {
        let frames: Vec<(u64, Vec<u8>)> = (p * 50..(p + 1) * 50)
            .flat_map(|i| [clean[i].clone(), lossy[i].clone()])
            .enumerate()
            .map(|(k, f)| (1_764_460_800_000_000_000 + k as u64 * 1_000, f))
            .collect();
        let d = dir.path().join(format!("{p}"));
        std::fs::create_dir_all(&d).unwrap();
        parts.push(
            whole("part", Format::PcapMicros, frames, true)
                .write(&d)
                .unwrap(),
        );
    }
    let roce: u64 = parts
        .iter()
        .map(|p| tshark::expected(p).unwrap().roce_packets)
        .sum();
    assert_eq!(roce, 2_000);
    let pair = VethPair::new("rcpsncpu").unwrap();
    let mut agent = Agent::on_iface(&pair.ns_a, BIN, (&pair.a_if, "xdp"), ADDR, &[]).unwrap();
    for (p, path) in parts.iter().enumerate() {
        let cpu = (p % 2).to_string();
        run(
            "ip",
            &[
                "netns",
                "exec",
                &pair.ns_b,
                "taskset",
                "-c",
                &cpu,
                "tcpreplay",
                "-q",
                "-i",
                &pair.b_if,
                path.to_str().unwrap(),
            ],
        )
        .unwrap();
    }
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(60), |b| {
            try_metric_sum(b, "rocemon_packets_total", &[]).unwrap_or(0.0) as u64 >= roce
        })
        .unwrap();
    let polls = metric_sum(&body, "rocemon_poll_duration_seconds_count", &[]);
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(20), |b| {
            metric_sum(b, "rocemon_poll_duration_seconds_count", &[]) >= polls + 2.0
        })
        .unwrap();
    assert_eq!(
        metric_sum(&body, "rocemon_psn_gaps_total", &[]),
        7.0,
        "the 7 packets lost, and no gap of the CPUs'"
    );
    assert_eq!(
        metric_sum(&body, "rocemon_retransmitted_packets_total", &[]),
        0.0
    );
    let (status, flows) = http_get_in(&pair.ns_a, ADDR, "/api/v1/flows").unwrap();
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&flows).unwrap();
    let gaps = |src: &str| {
        doc["flows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["src"] == src)
            .map(|f| {
                (
                    f["packets"].as_u64(),
                    f["psn_gaps"].as_u64(),
                    f["retransmits"].as_u64(),
                )
            })
    };
    assert_eq!(
        gaps("10.93.0.1"),
        Some((Some(1_000), Some(0), Some(0))),
        "{flows}"
    );
    assert_eq!(
        gaps("10.93.0.3"),
        Some((Some(1_000), Some(7), Some(0))),
        "{flows}"
    );
    agent.stop_ok();
}

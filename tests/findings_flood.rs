//! A flood of findings live: 60 flows that all become elephants at once (spoofed traffic can
//! make as many subjects as it likes) open 20 elephant findings and one "40 more", the finding
//! of another kind stays listed, and the log says it in a few lines, not one per flow.

use rocemon_testkit::frames::Roce;
use rocemon_testkit::netns::{http_get_in, Agent, VethPair};
use rocemon_testkit::TempDir;
use serde_json::Value;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";
const FLOWS: u32 = 60;

/// 60 flows, a 1 KiB WRITE each every 10 ms for 8 s; the first flow outside the lossless
/// class (DSCP 0: 1.7% of the RoCE, a `lossy_roce`).
fn frames() -> Vec<(u64, Vec<u8>)> {
    let t0 = 1_764_547_200_000_000_000u64;
    let mut out = Vec::new();
    for tick in 0..800u64 {
        for f in 0..FLOWS {
            let mut r = Roce::new(
                format!("10.95.0.{}", f + 1).parse().unwrap(),
                "10.95.1.1".parse().unwrap(),
                0xC000 + f as u16,
                0x300 + f,
                0x0A,
            );
            r.psn = tick as u32;
            r.payload = 1024;
            r.dma_len = 1024;
            if f == 0 {
                r.dscp = 0;
            }
            out.push((t0 + tick * 10_000_000 + u64::from(f) * 10_000, r.frame()));
        }
    }
    out
}

fn findings(ns: &str) -> Value {
    let (status, body) = http_get_in(ns, ADDR, "/api/v1/findings").unwrap();
    assert_eq!(status, 200);
    serde_json::from_str(&body).unwrap()
}

#[test]
fn a_flood_of_one_finding_kind_is_bounded_live_and_the_others_stay() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let dir = TempDir::new("rocemon-findings-flood").unwrap();
    let cfg = dir.path().join("rocemon.toml");
    std::fs::write(
        &cfg,
        "rate_window_seconds = 1.0\n[elephant]\nthreshold_bytes_per_second = 1000.0\nmin_duration_seconds = 0.5\n",
    )
    .unwrap();
    let pair = VethPair::new("rcfflood").unwrap();
    let agent = Agent::on_iface(
        &pair.ns_a,
        BIN,
        (&pair.a_if, "xdp"),
        ADDR,
        &["--config", cfg.to_str().unwrap()],
    )
    .unwrap();
    let sender = {
        let (ns, ifn) = (pair.ns_b.clone(), pair.b_if.clone());
        std::thread::spawn(move || rocemon_testkit::sender::send_paced(&ns, &ifn, frames()))
    };
    // Every flow an elephant at once: 20 listed, the 40 others in one finding, the lossy
    // class beside them.
    let t = Instant::now();
    let seen = loop {
        let f = findings(&pair.ns_a);
        let active = f["active"].as_array().cloned().unwrap_or_default();
        let more = active
            .iter()
            .find(|x| x["kind"] == "elephant" && x["subject"] == "more subjects")
            .and_then(|x| x["evidence"]["more"].as_u64());
        let lossy = active.iter().any(|x| x["kind"] == "lossy_roce");
        if more == Some(u64::from(FLOWS) - 20) && lossy {
            break f;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "never all {FLOWS} elephants bounded beside the lossy finding: {f:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let active = seen["active"].as_array().unwrap();
    let elephants = active.iter().filter(|x| x["kind"] == "elephant").count();
    assert_eq!(elephants, 21, "20 listed and one for the rest: {seen:#}");
    let _ = sender.join();
    let log = agent.stop_ok();
    let lines = log.lines().filter(|l| l.contains("elephant")).count();
    assert!(
        lines < 20,
        "{lines} log lines about elephants for {FLOWS} flows: {log}"
    );
}

//! Failure behaviour of the live agent: a full flow map keeps global counters exact and counts
//! evictions; the HTTP endpoint survives malformed requests, slow clients and many concurrent
//! scrapes without stalling the map polling.

use rocemon_testkit::netns::{connect_in, http_get_in, metric_sum, Agent, LoopNs, VethPair};
use rocemon_testkit::{fixtures, require_root, require_tshark, tshark, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

fn can_run() -> bool {
    require_root("a robustness test (namespaces, BPF)")
}

fn wait_ready(ns: &str, agent: &mut Agent) -> String {
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(30), |_| true)
        .unwrap()
}

#[test]
fn full_flow_map_counts_evictions_and_keeps_totals_exact() {
    if !can_run() {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-full").unwrap();
    let p = fixtures::many_flows().write(dir.path()).unwrap();
    let e = tshark::expected(&p).unwrap();
    assert!(e.flows.len() > 100);
    let pair = VethPair::new("rcfull").unwrap();
    let mut agent = Agent::start(
        &pair.ns_a,
        BIN,
        &[
            "run",
            "--iface",
            &pair.a_if,
            "--hooks",
            "xdp",
            "--flow-map-entries",
            "16",
            "--poll-interval-ms",
            "50",
            "--listen",
            ADDR,
        ],
    )
    .unwrap();
    wait_ready(&pair.ns_a, &mut agent);
    pair.replay_from_b(&p).unwrap();
    // Poll until the totals are in (and one more poll has read the flow map after them).
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(20), |b| {
            metric_sum(b, "rocemon_packets_total", &[]) as u64 >= e.roce_packets
        })
        .unwrap();
    let polls = metric_sum(&body, "rocemon_poll_duration_seconds_count", &[]);
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(20), |b| {
            metric_sum(b, "rocemon_poll_duration_seconds_count", &[]) >= polls + 2.0
        })
        .unwrap();
    assert_eq!(
        metric_sum(&body, "rocemon_packets_total", &[]) as u64,
        e.roce_packets,
        "global counters stay exact"
    );
    assert_eq!(
        metric_sum(&body, "rocemon_bytes_total", &[]) as u64,
        e.roce_bytes
    );
    let flows = metric_sum(&body, "rocemon_flows", &[]) as usize;
    assert!(
        flows < e.flows.len(),
        "the flow map holds {flows} of {} flows",
        e.flows.len()
    );
    // The LRU map evicted flows; no update failed. The fixture sends each flow's packets
    // together, so every flow was created once: evicted + held = flows sent, exactly.
    let evicted = metric_sum(&body, "rocemon_flow_evictions_total", &[]) as usize;
    let failed = metric_sum(&body, "rocemon_map_update_errors_total", &[]);
    assert_eq!(failed, 0.0, "no flow update may fail in an LRU map");
    assert_eq!(
        evicted + flows,
        e.flows.len(),
        "evicted {evicted} + held {flows} = flows sent"
    );
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{stderr}");
}

#[test]
fn http_survives_garbage_slow_clients_and_concurrent_scrapes() {
    if !can_run() {
        return;
    }
    let host = LoopNs::new("rchttp").unwrap();
    let ns = host.0.clone();
    let mut agent = Agent::start(
        &ns,
        BIN,
        &[
            "run",
            "--iface",
            "lo",
            "--hooks",
            "tc-ingress",
            "--poll-interval-ms",
            "100",
            "--listen",
            ADDR,
        ],
    )
    .unwrap();
    let first = wait_ready(&ns, &mut agent);
    let polls_before = metric_sum(&first, "rocemon_poll_duration_seconds_count", &[]);

    // Malformed requests: answered with an error or closed, never a crash.
    for garbage in [
        &b"\x00\x01\x02\xff\xfe\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"BREW /metrics HTCPCP/1.0\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    ] {
        let mut s = connect_in(&ns, ADDR).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(garbage);
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf);
        assert!(
            buf.is_empty() || text.starts_with("HTTP/1.1 4") || text.starts_with("HTTP/1.1 200"),
            "{text}"
        );
    }
    let (status, _) = http_get_in(&ns, ADDR, "/api/v1/flows?limit=abc").unwrap();
    assert_eq!(status, 400);
    let (status, _) = http_get_in(&ns, ADDR, "/nope").unwrap();
    assert_eq!(status, 404);

    // Slow clients: 100 connections that send half a request and stall.
    let slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = connect_in(&ns, ADDR).unwrap();
            s.write_all(b"GET /metr").unwrap();
            s
        })
        .collect();
    // Many concurrent scrapes meanwhile: all answered.
    let t = Instant::now();
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let ns = ns.clone();
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| http_get_in(&ns, ADDR, "/metrics").map(|r| r.0).unwrap_or(0))
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    for h in handles {
        assert!(
            h.join().unwrap().iter().all(|&s| s == 200),
            "a concurrent scrape failed"
        );
    }
    eprintln!(
        "160 concurrent scrapes with 100 stalled clients in {:?}",
        t.elapsed()
    );
    std::thread::sleep(Duration::from_millis(500));
    let (_, body) = http_get_in(&ns, ADDR, "/metrics").unwrap();
    let polls_after = metric_sum(&body, "rocemon_poll_duration_seconds_count", &[]);
    assert!(
        polls_after >= polls_before + 5.0,
        "map polling stalled: {polls_before} -> {polls_after}"
    );
    drop(slow);
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{stderr}");
}

//! Failure behaviour of the live agent: a full flow map refuses new flows, counted, keeps global
//! counters exact, and makes room by the idle timeout; the HTTP endpoint survives malformed requests, slow clients and many concurrent
//! scrapes without stalling the map polling.

use rocemon_testkit::netns::{
    connect_from_in, connect_in, http_get_in, http_request_in, metric_sum, try_metric_sum, Agent,
    LoopNs, VethPair,
};
use rocemon_testkit::{fixtures, require_root, require_tshark, tshark, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

fn can_run() -> bool {
    require_root("a robustness test (namespaces, BPF)")
}

/// An agent on the namespace's loopback, with `extra` flags.
fn agent_on_lo(ns: &str, extra: &[&str]) -> anyhow::Result<Agent> {
    Agent::on_loopback(ns, BIN, ADDR, extra)
}

fn wait_ready(ns: &str, agent: &mut Agent) -> String {
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(30), |_| true)
        .unwrap()
}

/// A full flow map refuses the flows that come when it is full, by its stated policy: the
/// first 16 flows (the map's size) in the order of their first packet are held with exact
/// counts, every packet of a later flow is a counted update error, the global counters stay
/// exact; then the idle timeout (lowered by a reload) deletes the held flows, counted as
/// evictions. The order, the flows and their packets come from tshark.
#[test]
fn full_flow_map_refuses_new_flows_counts_them_and_expires_idle_ones() {
    if !can_run() {
        return;
    }
    require_tshark();
    const MAP: usize = 16;
    let dir = TempDir::new("rocemon-full").unwrap();
    let p = fixtures::many_flows().write(dir.path()).unwrap();
    let e = tshark::expected(&p).unwrap();
    assert!(e.flows.len() > 100);
    let (held, refused) = e.flow_order.split_at(MAP);
    let refused_packets: u64 = refused.iter().map(|k| e.flows[k].packets).sum();
    let cfg = dir.path().join("rocemon.toml");
    // Long enough that nothing expires while the test reads the held flows.
    std::fs::write(&cfg, "flow_idle_timeout_seconds = 600\n").unwrap();
    let pair = VethPair::new("rcfull").unwrap();
    let map = MAP.to_string();
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
            &map,
            "--poll-interval-ms",
            "50",
            "--listen",
            ADDR,
            "--config",
            cfg.to_str().unwrap(),
        ],
    )
    .unwrap();
    wait_ready(&pair.ns_a, &mut agent);
    pair.replay_from_b(&p).unwrap();
    // Poll until the totals are in (and one more poll has read the flow map after them).
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(20), |b| {
            try_metric_sum(b, "rocemon_packets_total", &[]).unwrap_or(0.0) as u64 >= e.roce_packets
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
    assert_eq!(metric_sum(&body, "rocemon_flows", &[]) as usize, MAP);
    assert_eq!(
        metric_sum(&body, "rocemon_map_update_errors_total", &[]) as u64,
        refused_packets,
        "every packet of the {} flows after the first {MAP} is refused",
        refused.len()
    );
    assert_eq!(metric_sum(&body, "rocemon_flow_evictions_total", &[]), 0.0);
    let got = rocemon_testkit::e2e::api_flows(&pair.ns_a, ADDR, "xdp");
    let want: std::collections::BTreeMap<_, _> =
        held.iter().map(|k| (k.clone(), e.flows[k])).collect();
    assert_eq!(got, want, "the first {MAP} flows, exactly");
    // The idle timeout, lowered by a reload: the held flows leave, counted, and the map has
    // room again.
    std::fs::write(&cfg, "flow_idle_timeout_seconds = 1\n").unwrap();
    agent.signal(libc::SIGHUP);
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(60), |b| {
            try_metric_sum(b, "rocemon_flow_evictions_total", &[]).unwrap_or(0.0) as usize >= MAP
        })
        .unwrap();
    assert_eq!(
        metric_sum(&body, "rocemon_flow_evictions_total", &[]) as usize,
        MAP,
        "each held flow deleted once"
    );
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(20), |b| {
            metric_sum(b, "rocemon_flows", &[]) == 0.0
        })
        .unwrap();
    assert_eq!(
        metric_sum(&body, "rocemon_map_update_errors_total", &[]) as u64,
        refused_packets
    );
    // Room again: the capture once more, and the first 16 flows are held anew.
    pair.replay_from_b(&p).unwrap();
    agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(20), |b| {
            metric_sum(b, "rocemon_flows", &[]) as usize == MAP
        })
        .unwrap();
    agent.stop_ok();
}

#[test]
fn http_survives_garbage_slow_clients_and_concurrent_scrapes() {
    if !can_run() {
        return;
    }
    let host = LoopNs::new("rchttp").unwrap();
    let ns = host.0.clone();
    let mut agent = agent_on_lo(&ns, &[]).unwrap();
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

    // Slow clients: 100 connections that send half a request and stall, ten from each of ten
    // addresses (under the per-client bound, so all are held).
    let slow: Vec<TcpStream> = (0..100u8)
        .map(|i| {
            let from = std::net::Ipv4Addr::new(127, 0, 0, 10 + i / 10);
            let mut s = connect_from_in(&ns, Some(from), ADDR).unwrap();
            s.write_all(b"GET /metr").unwrap();
            s
        })
        .collect();
    // Many concurrent scrapes meanwhile: all answered.
    let t = Instant::now();
    let handles: Vec<_> = (0..16u8)
        .map(|i| {
            let ns = ns.clone();
            // One address per scraper, as Prometheus servers have.
            let from = std::net::Ipv4Addr::new(127, 0, 0, 100 + i);
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| {
                        http_request_in(&ns, Some(from), ADDR, "/metrics", &[])
                            .map(|r| r.0)
                            .unwrap_or(0)
                    })
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
    // The map polling goes on while the stalled clients stay: five more polls come (a
    // stalled loop would never give them; how fast they come is the bench's business).
    agent
        .wait_metrics(&ns, ADDR, Duration::from_secs(60), |b| {
            metric_sum(b, "rocemon_poll_duration_seconds_count", &[]) >= polls_before + 5.0
        })
        .expect("map polling stalled while clients stalled");
    drop(slow);
    agent.stop_ok();
}

/// One unauthenticated client cannot deny `/metrics`: from one address, hundreds of
/// connections that send nothing (re-opened as they are cut); from another, many threads of
/// wrong passwords, each new. Meanwhile every scrape with the right password from a third
/// address is answered, and the kernel maps keep being polled.
#[test]
fn one_client_cannot_deny_metrics() {
    if !can_run() {
        return;
    }
    use rocemon_testkit::hostile::{basic_auth, Hostile};
    use std::net::Ipv4Addr;
    let dir = TempDir::new("rocemon-dos").unwrap();
    // The shipped example's user: prometheus / change-me (bcrypt cost 10).
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        "basic_auth_users:\n  prometheus: $2b$10$w7J3xf6wlQ7ohRCOMt7v6.1iTY7ihpF1/wH3sU.3jAQKTZKZqyN1S\n",
    )
    .unwrap();
    let host = LoopNs::new("rcdos").unwrap();
    let ns = host.0.clone();
    let mut agent = agent_on_lo(&ns, &["--web-config", web.to_str().unwrap()]).unwrap();
    let good = basic_auth("prometheus:change-me");
    let scrape = |from: u8, a: &str| {
        http_request_in(
            &ns,
            Some(Ipv4Addr::new(127, 0, 0, from)),
            ADDR,
            "/metrics",
            &[("Authorization", a)],
        )
    };
    let t = Instant::now();
    let first = loop {
        if let Ok((200, body)) = scrape(1, &good) {
            break body;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the agent never served"
        );
        assert!(agent.try_wait().is_none(), "the agent exited");
        std::thread::sleep(Duration::from_millis(100));
    };
    let polls_before = metric_sum(&first, "rocemon_poll_duration_seconds_count", &[]);

    let attack = Hostile::start(&ns, ADDR, 256, 32);
    // The scraper: every scrape answered, with the metrics.
    let mut latencies = Vec::new();
    let attack_start = Instant::now();
    while attack_start.elapsed() < Duration::from_secs(8) {
        let t = Instant::now();
        let (status, body) = scrape(1, &good).unwrap();
        latencies.push(t.elapsed());
        assert_eq!(status, 200, "a scrape was denied under attack: {body}");
        assert!(body.contains("rocemon_build_info"));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Still under attack: the map polling goes on (ten more polls; how fast they come under
    // attack is the bench's measure, not this test's).
    let mut body = String::new();
    let t = Instant::now();
    let polls_in = |b: &str| {
        rocemon_testkit::netns::try_metric_sum(b, "rocemon_poll_duration_seconds_count", &[])
            .unwrap_or(0.0)
    };
    while polls_in(&body) < polls_before + 10.0 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the map polling stalled under attack"
        );
        std::thread::sleep(Duration::from_millis(100));
        if let Ok((200, b)) = scrape(1, &good) {
            body = b;
        }
    }
    let guesses = attack.stop();
    let polls = metric_sum(&body, "rocemon_poll_duration_seconds_count", &[]) - polls_before;
    latencies.sort();
    eprintln!(
        "under attack ({guesses:.0} wrong passwords per second, 256 idle connections re-opened each second): {} scrapes, median {:?}, max {:?}, {polls} polls in {:?}",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
        attack_start.elapsed()
    );
    agent.stop_ok();
}

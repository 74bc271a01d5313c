//! Failure behaviour of the live agent: a flood of spoofed flows cannot shut legitimate flows
//! out of the flow maps (they push the least recently active flows out, counted and said),
//! global counters stay exact; the HTTP endpoint survives malformed requests, slow clients and many concurrent
//! scrapes without stalling the map polling.

use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::frames::Roce;
use rocemon_testkit::netns::{
    connect_from_in, connect_in, http_get_in, http_request_in, metric_sum, try_metric_sum, Agent,
    LoopNs, VethPair,
};
use rocemon_testkit::{require_root, require_tshark, tshark, TempDir};
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

/// A spoofed RoCE frame: one packet of a flow nobody runs (`i` picks its 5-tuple and QP).
fn spoofed(i: u32) -> Vec<u8> {
    let src = format!("10.66.{}.{}", (i / 250) % 250, 1 + i % 250);
    Roce::new(
        src.parse().unwrap(),
        "10.67.0.1".parse().unwrap(),
        0xC000 | (i % 0x3FFF) as u16,
        0x100 + i,
        0x0A,
    )
    .frame()
}

/// A legitimate flow's frames: RDMA WRITEs, PSNs in order.
fn legit(src: &str, dst: &str, n: u32) -> Vec<Vec<u8>> {
    rocemon_testkit::frames::writes(src, dst, (0xD001, 0x700), 0..n, 512)
}

/// The flood, then the refreshed flood with a legitimate flow among it: `first` distinct
/// spoofed flows of one packet, then the first `kept` of them sent again `rounds` times, one
/// frame of `legit` after every `every` spoofed frames.
fn flood_capture(
    dir: &std::path::Path,
    name: &'static str,
    (first, kept, rounds, every): (u32, u32, u32, usize),
    legit: Vec<Vec<u8>>,
) -> std::path::PathBuf {
    let mut frames: Vec<Vec<u8>> = (0..first).map(spoofed).collect();
    let mut legit = legit.into_iter();
    for (k, i) in (0..rounds).flat_map(|_| 0..kept).enumerate() {
        frames.push(spoofed(i));
        if k % every == 0 {
            frames.extend(legit.next());
        }
    }
    frames.extend(legit);
    let t0 = 1_764_460_800_000_000_000u64;
    let frames = frames
        .into_iter()
        .enumerate()
        .map(|(i, f)| (t0 + i as u64 * 1_000, f))
        .collect();
    whole(name, Format::PcapMicros, frames, true)
        .write(dir)
        .unwrap()
}

/// The flow maps' size in the flood tests; the floods are sized in multiples of it. Not
/// smaller: the kernel's LRU hands free elements to each CPU 128 at a time, so a map of a
/// few hundred entries evicts half of itself at once, recently used or not (at 256 entries
/// a flow seen every tenth packet still lost counts in 1 of 30 loaded runs); from a few thousand
/// entries on it evicts the least recently used, which is the policy these tests check.
const MAP: u32 = 2_048;

/// An agent with [`MAP`]-entry flow maps on `pair`'s interface, the given hooks, polling fast,
/// with the configuration file `cfg` (a flow idle timeout long enough that nothing expires
/// while the test reads).
fn small_map_agent(pair: &VethPair, hooks: &str, cfg: &std::path::Path) -> Agent {
    std::fs::write(cfg, "flow_idle_timeout_seconds = 600\n").unwrap();
    Agent::on_iface(
        &pair.ns_a,
        BIN,
        (&pair.a_if, hooks),
        ADDR,
        &[
            "--flow-map-entries",
            &MAP.to_string(),
            "--config",
            cfg.to_str().unwrap(),
        ],
    )
    .unwrap()
}

/// Waits for the capture's RoCE packets in the global counters, then for two more polls (the
/// flow maps read after them).
fn settled(pair: &VethPair, agent: &mut Agent, roce: u64) -> String {
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(60), |b| {
            try_metric_sum(b, "rocemon_packets_total", &[]).unwrap_or(0.0) as u64 >= roce
        })
        .unwrap();
    let polls = metric_sum(&body, "rocemon_poll_duration_seconds_count", &[]);
    agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(20), |b| {
            metric_sum(b, "rocemon_poll_duration_seconds_count", &[]) >= polls + 2.0
        })
        .unwrap()
}

/// An attacker fills the flow maps with spoofed 5-tuples (16 times as many flows as they
/// hold), then keeps four times their size fresh; a legitimate flow that starts among the refreshed flood is
/// counted per flow, exactly as tshark counts it, and everything says the maps are full: the
/// fill gauges, the push-outs, the `flow_table_full` finding, the summary, one warning line.
/// The global counters stay exact. Then the idle timeout (lowered by a reload) empties the
/// maps. (With the maps that refused new flows when full, the legitimate flow was absent.)
#[test]
fn a_flood_of_spoofed_flows_cannot_shut_a_legitimate_flow_out() {
    if !can_run() {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-flood").unwrap();
    let p = flood_capture(
        dir.path(),
        "flood",
        (MAP * 16, MAP * 4, 3, MAP as usize * 12 / 300),
        legit("10.90.0.1", "10.90.0.2", 300),
    );
    let e = tshark::expected(&p).unwrap();
    let key = (
        "10.90.0.1".to_string(),
        "10.90.0.2".to_string(),
        0xD001u16,
        0x700u32,
    );
    assert_eq!(
        e.flows[&key].packets, 300,
        "tshark sees the legitimate flow"
    );
    let pair = VethPair::new("rcflood").unwrap();
    let cfg = dir.path().join("rocemon.toml");
    let mut agent = small_map_agent(&pair, "xdp", &cfg);
    pair.replay_from_b(&p).unwrap();
    let body = settled(&pair, &mut agent, e.roce_packets);
    assert_eq!(
        metric_sum(&body, "rocemon_packets_total", &[]) as u64,
        e.roce_packets,
        "global counters stay exact"
    );
    assert_eq!(
        metric_sum(&body, "rocemon_bytes_total", &[]) as u64,
        e.roce_bytes
    );
    let flows = rocemon_testkit::e2e::api_flows(&pair.ns_a, ADDR, "xdp");
    assert_eq!(
        flows.get(&key),
        Some(&e.flows[&key]),
        "the legitimate flow, counted exactly per flow"
    );
    // Said loudly.
    let v4 = [("map", "FLOWS4")];
    assert_eq!(
        metric_sum(&body, "rocemon_flow_map_max_entries", &v4),
        f64::from(MAP)
    );
    let held = metric_sum(&body, "rocemon_flow_map_entries", &v4);
    assert!(
        held > f64::from(MAP / 2) && held <= f64::from(MAP),
        "{held} entries"
    );
    let pushed = metric_sum(&body, "rocemon_flows_pushed_out_total", &v4);
    assert!(pushed >= f64::from(MAP * 12), "{pushed} flows pushed out");
    let (status, findings) = http_get_in(&pair.ns_a, ADDR, "/api/v1/findings").unwrap();
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&findings).unwrap();
    let full: Vec<&serde_json::Value> = doc["active"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "flow_table_full")
        .collect();
    assert_eq!(full.len(), 1, "{findings}");
    assert_eq!(full[0]["subject"], format!("flow maps of {}", pair.a_if));
    let (_, summary) = http_get_in(&pair.ns_a, ADDR, "/api/v1/summary").unwrap();
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let maps = summary["flow_maps"].as_array().unwrap();
    let ipv4 = maps.iter().find(|m| m["map"] == "FLOWS4").unwrap();
    assert_eq!(ipv4["max_entries"], MAP);
    assert!(
        ipv4["pushed_out_total"].as_u64().unwrap() >= u64::from(MAP * 12),
        "{ipv4}"
    );
    // The idle timeout, lowered by a reload: the maps empty, counted as idle deletions, not
    // as push-outs.
    std::fs::write(&cfg, "flow_idle_timeout_seconds = 1\n").unwrap();
    agent.signal(libc::SIGHUP);
    let body = agent
        .wait_metrics(&pair.ns_a, ADDR, Duration::from_secs(60), |b| {
            metric_sum(b, "rocemon_flow_map_entries", &[]) == 0.0
        })
        .unwrap();
    assert!(metric_sum(&body, "rocemon_flow_evictions_total", &[]) >= held);
    assert_eq!(
        metric_sum(&body, "rocemon_flows_pushed_out_total", &v4),
        pushed,
        "idle deletions are not push-outs"
    );
    let log = agent.stop_ok();
    assert_eq!(
        log.matches("the flow maps are full").count(),
        1,
        "one warning line a minute: {log}"
    );
}

/// A flood that comes in does not hide what the host sends: with both tc hooks on small maps,
/// an ingress flood of spoofed flows fills the incoming flows' maps, then goes on while the
/// host sends a flow out: the sent flow lives in its own map (`FLOWS_OUT`), which the flood
/// never touches, and is counted exactly per flow (tc egress). (With one map for both
/// directions an LRU pushed the sent flow out between its packets under load: 1 to 188 of
/// 400 packets lost in one run in four.)
#[test]
fn egress_flows_are_counted_beside_an_ingress_flood() {
    if !can_run() {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-flood-egress").unwrap();
    let fill = flood_capture(dir.path(), "fill", (MAP * 16, 0, 0, usize::MAX), Vec::new());
    let refresh = flood_capture(
        dir.path(),
        "refresh",
        (0, MAP * 4, 3, usize::MAX),
        Vec::new(),
    );
    let out = whole(
        "sent",
        Format::PcapMicros,
        legit("10.91.0.1", "10.91.0.2", 400)
            .into_iter()
            .enumerate()
            .map(|(i, f)| (1_764_460_800_000_000_000 + i as u64 * 20_000, f))
            .collect(),
        true,
    )
    .write(dir.path())
    .unwrap();
    let (e_fill, e_refresh, e_out) = (
        tshark::expected(&fill).unwrap(),
        tshark::expected(&refresh).unwrap(),
        tshark::expected(&out).unwrap(),
    );
    let pair = VethPair::new("rcflegr").unwrap();
    let mut agent = small_map_agent(
        &pair,
        "tc-ingress,tc-egress",
        &dir.path().join("rocemon.toml"),
    );
    // The maps filled first, then the refreshed flood into the host and the host's flow out
    // of it at once.
    pair.replay_from_b(&fill).unwrap();
    let sender = {
        let (ns, ifn, path) = (pair.ns_a.clone(), pair.a_if.clone(), out.clone());
        std::thread::spawn(move || {
            rocemon_testkit::netns::run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "tcpreplay",
                    "-q",
                    "--pps",
                    "2000",
                    "-i",
                    &ifn,
                    path.to_str().unwrap(),
                ],
            )
        })
    };
    pair.replay_from_b(&refresh).unwrap();
    sender.join().unwrap().unwrap();
    let body = settled(
        &pair,
        &mut agent,
        e_fill.roce_packets + e_refresh.roce_packets + e_out.roce_packets,
    );
    // Its own map: the flood never reached it.
    let out = [("map", "FLOWS_OUT")];
    assert_eq!(metric_sum(&body, "rocemon_flow_map_entries", &out), 1.0);
    assert_eq!(
        metric_sum(&body, "rocemon_flows_pushed_out_total", &out),
        0.0
    );
    let key = (
        "10.91.0.1".to_string(),
        "10.91.0.2".to_string(),
        0xD001u16,
        0x700u32,
    );
    let flows = rocemon_testkit::e2e::api_flows(&pair.ns_a, ADDR, "tc_egress");
    assert_eq!(
        flows.get(&key),
        Some(&e_out.flows[&key]),
        "the sent flow, counted exactly per flow beside the flood"
    );
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

//! The sFlow collector under hostile or careless switches: agent floods, tables filled by a
//! spoofed agent or by old flows, reordered datagrams, reboots, implausible samples. Every
//! expected figure comes from the datagrams the test builds (their count, their sequence
//! numbers), never from rocemon's own output.

use rocemon::sflow::collector::{Collector, Direction, Limits, PortKey};
use rocemon_testkit::sflow::{self, Datagram, Sample};
use rocemon_testkit::{frames, TempDir};
use serde_json::Value;
use std::net::IpAddr;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A sampled RoCE header of flow `i` (sport and destination QP from `i`).
fn roce_header(src: &str, i: u32) -> Vec<u8> {
    let mut r = frames::Roce::new(
        src.parse().unwrap(),
        "10.9.0.2".parse().unwrap(),
        0xC000 + (i % 16_000) as u16,
        0x100 + i,
        0x0A,
    );
    r.payload = 1024;
    r.dma_len = 1024;
    let mut f = r.frame();
    f.truncate(128);
    f
}

fn flow_sample(seq: u32, header: Vec<u8>, output: u32, rate: u32, frame_length: u32) -> Sample {
    Sample::Flow {
        expanded: false,
        sequence: seq,
        source_index: 1,
        sampling_rate: rate,
        sample_pool: seq.wrapping_mul(rate),
        drops: 0,
        input: 10,
        output,
        frame_length,
        header,
        switch: false,
    }
}

fn datagram(agent: IpAddr, sequence: u32, uptime_ms: u32, samples: Vec<Sample>) -> Vec<u8> {
    Datagram {
        agent,
        sub_agent: 0,
        sequence,
        uptime_ms,
        samples,
    }
    .encode()
}

/// A collector fed `datagrams` (sequence numbers 1, 2, ... from one agent, in the order
/// given) at 10 ms apart.
fn sequence_run(order: &[u32], uptimes: Option<&[u32]>) -> Collector {
    let agent: IpAddr = "192.0.2.10".parse().unwrap();
    let mut c = Collector::default();
    for (k, &seq) in order.iter().enumerate() {
        let up = uptimes.map_or(1_000 + 10 * k as u32, |u| u[k]);
        c.datagram(&datagram(agent, seq, up, vec![]), k as u64 * 10_000_000);
    }
    c
}

#[test]
fn reordered_datagrams_are_not_lost() {
    let c = sequence_run(&[1, 2, 4, 3, 5, 6, 8, 7, 9], None);
    assert_eq!(c.lost_datagrams(), 0);
    assert_eq!(c.datagrams, 9);
}

#[test]
fn a_gap_is_lost() {
    let c = sequence_run(&[1, 2, 3, 7, 8], None);
    assert_eq!(c.lost_datagrams(), 3, "4, 5 and 6");
}

/// The reboot of the issue: sequence 3,000,000,001 at uptime 4e9 ms, then 1 at 500 ms.
#[test]
fn a_switch_reboot_after_2_pow_31_loses_nothing() {
    let c = sequence_run(
        &[3_000_000_000, 3_000_000_001, 1, 2, 3],
        Some(&[3_999_999_990, 4_000_000_000, 500, 510, 520]),
    );
    assert_eq!(c.lost_datagrams(), 0);
    let (_, a) = c.agents.iter().next().unwrap();
    assert_eq!(a.restarts, 1);
}

/// A sample claiming a frame of 2^32-1 bytes at a rate of 2^32-1: counted as implausible,
/// and no estimate saturates.
#[test]
fn an_implausible_sample_is_counted_and_not_estimated_from() {
    let agent: IpAddr = "192.0.2.10".parse().unwrap();
    let mut c = Collector::default();
    let bomb = flow_sample(1, roce_header("10.9.0.1", 1), 2, u32::MAX, u32::MAX);
    let fine = flow_sample(2, roce_header("10.9.0.1", 1), 2, 1000, 1090);
    c.datagram(&datagram(agent, 1, 10, vec![bomb, fine]), 0);
    assert_eq!(c.implausible_samples, 1);
    assert_eq!(c.estimated.bytes, 1090 * 1000);
    assert!(c
        .ports
        .iter()
        .all(|(_, p)| p.estimated.bytes == 1090 * 1000));
}

/// 10,000 agents (one datagram each) into a collector holding 100: it holds 100, the rest
/// are summed, nothing is lost from the totals.
#[test]
fn agents_beyond_the_bound_are_summed_not_held() {
    let mut c = Collector::new(Limits {
        max_agents: 100,
        ..Limits::default()
    });
    for i in 0..10_000u32 {
        let agent = IpAddr::from([10, 200, (i >> 8) as u8, i as u8]);
        c.datagram(&datagram(agent, 1, 10, vec![]), u64::from(i));
    }
    assert_eq!(c.agents.len(), 100);
    let held: u64 = c.agents.iter().map(|(_, a)| a.datagrams).sum();
    assert_eq!(held + c.agents.gone.datagrams, 10_000);
    let s = c.agents.stats();
    assert_eq!(s.evicted + s.dropped, 9_900, "{s:?}");
}

#[test]
fn datagrams_from_agents_outside_the_allowed_networks_are_counted_and_dropped() {
    let mut c = Collector::new(Limits {
        allow: vec!["192.0.2.0/24".parse().unwrap()],
        ..Limits::default()
    });
    for (k, a) in ["192.0.2.10", "198.51.100.7", "192.0.2.99", "2001:db8::1"]
        .iter()
        .enumerate()
    {
        c.datagram(&datagram(a.parse().unwrap(), 1, 10, vec![]), k as u64);
    }
    assert_eq!((c.datagrams, c.denied_datagrams), (2, 2));
    assert_eq!(c.agents.len(), 2);
}

/// Entries idle for longer than the timeout expire, and their places are free again.
#[test]
fn idle_ports_and_flows_expire() {
    let agent: IpAddr = "192.0.2.10".parse().unwrap();
    let mut c = Collector::new(Limits {
        idle_timeout_ns: 10_000_000_000,
        ..Limits::default()
    });
    let s = |seq, i| flow_sample(seq, roce_header("10.9.0.1", i), 2, 100, 1090);
    c.datagram(
        &datagram(agent, 1, 10, vec![s(1, 1), s(2, 2)]),
        1_000_000_000,
    );
    assert_eq!(c.flows.len(), 2);
    c.datagram(&datagram(agent, 2, 30_000, vec![s(3, 3)]), 30_000_000_000);
    c.datagram(&datagram(agent, 3, 40_000, vec![s(4, 3)]), 40_000_000_000);
    assert_eq!(c.flows.len(), 1, "flows 1 and 2 expired");
    assert_eq!(c.flows.stats().expired, 2);
}

/// Flows crossing a configured group's uplinks are the switch's traffic, not configuration:
/// they stay within `max_flows` and expire when idle; the group's ports stay.
#[test]
fn flows_on_a_group_uplink_stay_bounded_and_expire() {
    let agent: IpAddr = REAL.parse().unwrap();
    let mut c = Collector::new(Limits {
        max_flows: 100,
        idle_timeout_ns: 10_000_000_000,
        protected: vec![(agent, vec![49, 50])],
        ..Limits::default()
    });
    for k in 0..1_000u32 {
        let s = flow_sample(k, roce_header("10.9.0.1", k), 49, 100, 1090);
        c.datagram(
            &datagram(agent, k + 1, k, vec![s]),
            u64::from(k) * 1_000_000,
        );
    }
    assert_eq!(c.flows.len(), 100, "{:?}", c.flows.stats());
    assert_eq!(c.port_flows.len(), 200, "{:?}", c.port_flows.stats());
    let s = flow_sample(1_000, roce_header("10.9.0.1", 5_000), 49, 100, 1090);
    c.datagram(&datagram(agent, 1_001, 60_000, vec![s]), 60_000_000_000);
    assert_eq!(
        c.flows.len(),
        1,
        "the old flows expired: {:?}",
        c.flows.stats()
    );
    assert_eq!(c.port_flows.len(), 1, "{:?}", c.port_flows.stats());
    let uplink = |direction| PortKey {
        agent,
        if_index: 49,
        direction,
    };
    assert!(
        c.ports.contains_key(&uplink(Direction::Egress)),
        "the uplink stays"
    );
}

/// The fabric view reads each flow's bytes on the groups' uplinks, outward; the collector
/// keeps those and no other port's.
#[test]
fn flows_per_port_are_kept_for_the_groups_uplinks_only() {
    let agent: IpAddr = REAL.parse().unwrap();
    let mut c = Collector::new(Limits {
        protected: vec![(agent, vec![49])],
        ..Limits::default()
    });
    // Out of uplink 49 (in from port 10), and out of port 7 (not an uplink).
    let on_uplink = flow_sample(1, roce_header("10.9.0.1", 1), 49, 100, 1090);
    let elsewhere = flow_sample(2, roce_header("10.9.0.1", 2), 7, 100, 1090);
    c.datagram(&datagram(agent, 1, 1, vec![on_uplink, elsewhere]), 0);
    let kept: Vec<PortKey> = c.port_flows.iter().map(|((p, _), _)| *p).collect();
    assert_eq!(
        kept,
        [PortKey {
            agent,
            if_index: 49,
            direction: Direction::Egress
        }]
    );
    assert_eq!(c.flows.len(), 2);
    assert_eq!(c.ports.len(), 3, "port 10 in, ports 49 and 7 out");
}

const REAL: &str = "192.0.2.10";
const SPOOF: &str = "198.51.100.7";

/// The case: a configured group (leaf-a, agent 192.0.2.10, uplinks 49-51) with two
/// elephants on uplink 49 and a mouse on 50, after `flood` datagrams of 10 one-sample flows
/// on ports of their own from `flood_agent` (140,000 samples). Returns analyze's JSON.
fn group_after_flood(flood_agent: &str, flood_gap_ms: u64, allow: Option<&str>) -> Value {
    let real: IpAddr = REAL.parse().unwrap();
    let flooder: IpAddr = flood_agent.parse().unwrap();
    let mut timed = Vec::new();
    let mut seq = 0u32;
    for k in 0..14_000u32 {
        let samples = (0..10)
            .map(|j| {
                let i = k * 10 + j;
                flow_sample(i, roce_header("10.66.0.1", i), 100 + i % 20_000, 1, 1090)
            })
            .collect();
        seq += 1;
        timed.push((u64::from(k) * 10_000, datagram(flooder, seq, k, samples)));
    }
    let start_ns = 140_000_000 + flood_gap_ms * 1_000_000;
    let s = |seq: u32, flow: u32, output: u32| {
        flow_sample(seq, roce_header("10.9.0.1", flow), output, 1000, 1090)
    };
    let mut rseq = if flood_agent == REAL { seq } else { 0 };
    for k in 0..200u32 {
        let mut samples = vec![s(3 * k, 1, 49), s(3 * k + 1, 2, 49)];
        if k % 20 == 0 {
            samples.push(s(3 * k + 2, 3, 50));
        }
        rseq += 1;
        timed.push((
            start_ns + u64::from(k) * 100_000_000,
            datagram(real, rseq, 1_000_000 + k * 100, samples),
        ));
    }
    let dir = TempDir::new("rocemon-sflow-flood").unwrap();
    let cap = sflow::capture_timed("sflow_flood", &timed)
        .write(dir.path())
        .unwrap();
    let cfg = dir.path().join("group.toml");
    let allow = allow.map_or(String::new(), |a| format!("agents = [\"{a}\"]\n"));
    std::fs::write(
        &cfg,
        format!(
            "rate_window_seconds = 1.0\n[elephant]\nthreshold_bytes_per_second = 1000000.0\nmin_duration_seconds = 1.0\n\
             [sflow]\n{allow}idle_timeout_seconds = 60\n\
             [[sflow.groups]]\nname = \"leaf-a\"\nagent = \"{REAL}\"\nuplinks = [49, 50, 51]\n"
        ),
    )
    .unwrap();
    rocemon_testkit::analyze_json(
        env!("CARGO_BIN_EXE_rocemon"),
        &["--config", cfg.to_str().unwrap()],
        &[&cap],
    )
}

/// What the group must show whatever came before: two elephants colliding on uplink 49,
/// the real flows among the flows.
fn assert_group_seen(j: &Value) {
    let g = &j["sflow"]["fabric"]["groups"][0];
    assert_eq!(g["name"], "leaf-a", "{g}");
    assert_eq!(g["members"][0]["member"], format!("{REAL}/49"));
    assert_eq!(u(&g["members"][0]["elephants"]), 2, "{g}");
    assert_eq!(g["members"][0]["colliding"], true, "{g}");
    assert_eq!(u(&g["colliding_members"]), 1, "{g}");
    let flows = j["sflow"]["flows"].as_array().unwrap();
    let real = flows.iter().filter(|f| f["src"] == "10.9.0.1").count();
    assert_eq!(real, 3, "the switch's three flows are held");
}

#[test]
fn a_spoofed_agent_flood_does_not_hide_a_configured_group() {
    let j = group_after_flood(SPOOF, 0, None);
    assert_group_seen(&j);
    let t = &j["sflow"]["tables"];
    assert!(
        u(&t["flows"]["evicted"]) + u(&t["flows"]["dropped"]) > 0,
        "{t}"
    );
}

#[test]
fn an_allow_list_drops_the_spoofed_agent_before_it_takes_any_place() {
    let j = group_after_flood(SPOOF, 0, Some("192.0.2.0/24"));
    assert_group_seen(&j);
    assert_eq!(u(&j["sflow"]["denied_datagrams"]), 14_000);
    assert_eq!(u(&j["sflow"]["tables"]["flows"]["entries"]), 3);
}

/// 140,000 old flows of the switch itself, then two minutes of silence: the old flows expire
/// and the group's flows find their places.
#[test]
fn old_flows_expire_and_make_room() {
    let j = group_after_flood(REAL, 120_000, None);
    assert_group_seen(&j);
    let t = &j["sflow"]["tables"]["flows"];
    assert!(u(&t["expired"]) > 60_000, "{t}");
}

/// The live collector: 10,000 agent addresses (one counter sample each) sent to `rocemon
/// run --sflow-listen` with `max_agents = 100`: the scrape holds at most 101 agent series
/// (100 and "other"), the datagrams add up to what was sent, and the table's counters say
/// what was pushed out.
#[test]
fn the_live_collector_bounds_its_series_under_an_agent_flood() {
    use rocemon_testkit::netns::{try_metric_sum, udp_send_in, Agent, LoopNs};
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let dir = TempDir::new("rocemon-sflow-agents").unwrap();
    let cfg = dir.path().join("bounded.toml");
    std::fs::write(&cfg, "[sflow]\nmax_agents = 100\nmax_ports = 200\n").unwrap();
    let datagrams: Vec<Vec<u8>> = (0..10_000u32)
        .map(|i| {
            let agent = IpAddr::from([10, 200, (i >> 8) as u8, i as u8]);
            datagram(
                agent,
                1,
                10,
                vec![Sample::Counters {
                    expanded: false,
                    sequence: 1,
                    if_index: 7,
                    speed: 400_000_000_000,
                    in_octets: 1 << 30,
                    out_octets: 1 << 31,
                    ethernet: false,
                }],
            )
        })
        .collect();
    let ns = LoopNs::new("rcsfa").unwrap();
    const HTTP: &str = "127.0.0.1:9442";
    let mut agent = Agent::sflow_collector_with(
        &ns.0,
        env!("CARGO_BIN_EXE_rocemon"),
        HTTP,
        "100",
        &["--config", cfg.to_str().unwrap()],
    )
    .unwrap();
    agent.wait_ready(&ns.0, HTTP).unwrap();
    // In rounds of 1,000, each waited for, so that the socket's buffer never overflows and
    // every datagram is read: the sum is then exact.
    for (round, chunk) in datagrams.chunks(1_000).enumerate() {
        udp_send_in(&ns.0, "127.0.0.1:6343", chunk).unwrap();
        let want = (round as u64 + 1) * 1_000;
        agent
            .wait_metrics(&ns.0, HTTP, std::time::Duration::from_secs(60), |b| {
                let got =
                    try_metric_sum(b, "rocemon_sflow_datagrams_total", &[]).unwrap_or(0.0) as u64;
                let dropped = try_metric_sum(b, "rocemon_sflow_dropped_datagrams_total", &[])
                    .unwrap_or(0.0) as u64;
                got + dropped >= want
            })
            .unwrap();
    }
    // Settled: one more poll after the last datagram was counted.
    let body = agent
        .wait_metrics(&ns.0, HTTP, std::time::Duration::from_secs(30), |b| {
            try_metric_sum(
                b,
                "rocemon_sflow_table_entries_removed_total",
                &[("table", "agents"), ("reason", "evicted")],
            )
            .unwrap_or(0.0)
                + try_metric_sum(
                    b,
                    "rocemon_sflow_table_entries_removed_total",
                    &[("table", "agents"), ("reason", "dropped")],
                )
                .unwrap_or(0.0)
                >= 9_900.0
        })
        .unwrap();
    let series = body
        .lines()
        .filter(|l| l.starts_with("rocemon_sflow_datagrams_total{"))
        .count();
    assert!((2..=101).contains(&series), "{series} agent series");
    let dropped = try_metric_sum(&body, "rocemon_sflow_dropped_datagrams_total", &[]).unwrap();
    let got = try_metric_sum(&body, "rocemon_sflow_datagrams_total", &[]).unwrap();
    assert_eq!(got + dropped, 10_000.0, "every datagram counted once");
    let port_series = body
        .lines()
        .filter(|l| l.starts_with("rocemon_sflow_port_speed_bits_per_second{"))
        .count();
    assert!(port_series <= 200, "{port_series} port series");
    assert!(body.contains("rocemon_sflow_datagrams_total{agent=\"other\"}"));
    // An sFlow-only agent has no programs to leave pinned, and says so.
    let log = agent.stop_ok();
    assert!(log.contains("no programs were attached"), "{log}");
    assert!(!log.contains("stay attached"), "{log}");
}

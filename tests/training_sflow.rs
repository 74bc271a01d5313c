//! The training rhythm per switch port from sFlow samples: the datagrams' uptime clock is the
//! series' time, so a generated stream carries a known rhythm (the generator's parameters are
//! the truth), whatever the pace it is sent or read at.

use rocemon_testkit::sflow::{self, Datagram, Sample};
use rocemon_testkit::{frames, TempDir};
use serde_json::Value;
use std::net::IpAddr;

const AGENT: &str = "192.0.2.10";
/// Bursts of 30 ms every 200 ms for 40 steps on the port pair 3 -> 7; steady traffic with
/// random gaps on 20 -> 21.
const PERIOD_MS: u32 = 200;
const BURST_MS: u32 = 30;
const STEPS: u32 = 40;

fn header(sport: u16) -> Vec<u8> {
    let mut r = frames::Roce::new(
        "10.9.0.1".parse().unwrap(),
        "10.9.0.2".parse().unwrap(),
        sport,
        0x100,
        0x0A,
    );
    r.payload = 1024;
    r.dma_len = 1024;
    let mut f = r.frame();
    f.truncate(128);
    f
}

fn sample(seq: u32, input: u32, output: u32) -> Sample {
    Sample::Flow {
        expanded: false,
        sequence: seq,
        source_index: input,
        sampling_rate: 1000,
        sample_pool: seq * 1000,
        drops: 0,
        input,
        output,
        frame_length: 1024 + 66,
        header: header(0xC000 + (seq % 64) as u16),
        switch: false,
    }
}

/// One datagram per millisecond that has samples, in uptime order.
fn datagrams() -> Vec<Vec<u8>> {
    let agent: IpAddr = AGENT.parse().unwrap();
    let mut by_ms: std::collections::BTreeMap<u32, Vec<Sample>> = Default::default();
    let mut seq = 0;
    for s in 0..STEPS {
        for ms in 0..BURST_MS {
            seq += 1;
            by_ms
                .entry(10_000 + s * PERIOD_MS + ms)
                .or_default()
                .push(sample(seq, 3, 7));
        }
    }
    let (mut t, mut rng) = (10_000u32, 7u64);
    while t < 10_000 + STEPS * PERIOD_MS {
        seq += 1;
        by_ms.entry(t).or_default().push(sample(seq, 20, 21));
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        t += 1 + ((rng >> 33) % 19) as u32;
    }
    by_ms
        .into_iter()
        .enumerate()
        .map(|(i, (uptime_ms, samples))| {
            Datagram {
                agent,
                sub_agent: 0,
                sequence: i as u32 + 1,
                uptime_ms,
                samples,
            }
            .encode()
        })
        .collect()
}

fn port(rhythms: &Value, ifindex: u64) -> &Value {
    rhythms
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["agent"] == AGENT && r["ifindex"] == ifindex)
        .unwrap_or_else(|| panic!("port {ifindex} in {rhythms}"))
}

#[test]
fn analyze_finds_each_switch_port_s_rhythm() {
    let dir = TempDir::new("rocemon-training-sflow").unwrap();
    let cap = sflow::capture("sflow_rhythm", &datagrams())
        .write(dir.path())
        .unwrap();
    let j = rocemon_testkit::analyze_json(env!("CARGO_BIN_EXE_rocemon"), &[], &[&cap]);
    let r = &j["sflow"]["rhythms"];
    for ifindex in [3, 7] {
        let p = port(r, ifindex)["period_seconds"]
            .as_f64()
            .unwrap_or_else(|| panic!("no period on port {ifindex}: {r}"));
        assert!((p - 0.2).abs() < 0.005, "port {ifindex}: {p}");
        let d = port(r, ifindex)["duty_ratio"].as_f64().unwrap();
        assert!((d - 0.15).abs() < 0.03, "port {ifindex} duty {d}");
    }
    for ifindex in [20, 21] {
        assert_eq!(
            port(r, ifindex)["period_seconds"],
            Value::Null,
            "steady port {ifindex}: no rhythm, no period"
        );
    }
}

#[test]
fn the_live_collector_exports_each_switch_port_s_rhythm() {
    use rocemon_testkit::metrics::metric_value;
    use rocemon_testkit::netns::{udp_send_in, Agent, LoopNs};
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let ns = LoopNs::new("rctsf").unwrap();
    const HTTP: &str = "127.0.0.1:9442";
    let mut agent =
        Agent::sflow_collector(&ns.0, env!("CARGO_BIN_EXE_rocemon"), HTTP, "200").unwrap();
    agent.wait_ready(&ns.0, HTTP).unwrap();
    udp_send_in(&ns.0, "127.0.0.1:6343", &datagrams()).unwrap();
    let period = |b: &str, ifindex: &str| {
        metric_value(
            b,
            "rocemon_training_step_period_seconds",
            &[("agent", AGENT), ("ifindex", ifindex)],
        )
    };
    let body = agent
        .wait_metrics(&ns.0, HTTP, std::time::Duration::from_secs(20), |b| {
            period(b, "7").is_some()
        })
        .unwrap();
    let p = period(&body, "7").unwrap();
    assert!((p - 0.2).abs() < 0.005, "{p}");
    assert!(
        period(&body, "21").is_none(),
        "steady port: no period\n{body}"
    );
    let duty = metric_value(
        &body,
        "rocemon_training_comm_duty_ratio",
        &[("agent", AGENT), ("ifindex", "7")],
    )
    .unwrap();
    assert!((duty - 0.15).abs() < 0.03, "{duty}");
    agent.stop_ok();
}

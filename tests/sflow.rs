//! The sFlow collector offline: `rocemon analyze` over captures of sFlow datagrams, from pmacct
//! (a real exporter, `pmacctd` + `sfprobe`, replaying fixture captures) and from the test
//! encoder (what pmacct does not send), against tshark's decode of the same datagrams.

use rocemon_testkit::sflow::{self, roce_header, Datagram, Sample};
use rocemon_testkit::tshark_sflow::{self, SflowExpected, Totals};
use rocemon_testkit::{fixtures, may_run, require_tshark, TempDir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;

fn analyze(path: &std::path::Path) -> Value {
    rocemon_testkit::analyze_json(env!("CARGO_BIN_EXE_rocemon"), &[], &[path])
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn totals(v: &Value) -> Totals {
    Totals {
        packets: u(&v["packets"]),
        bytes: u(&v["bytes"]),
        cnp: u(&v["cnp"]),
        ecn: [
            u(&v["ecn"]["not_ect"]),
            u(&v["ecn"]["ect1"]),
            u(&v["ecn"]["ect0"]),
            u(&v["ecn"]["ce"]),
        ],
        opcodes: v["opcodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (u(&o["opcode"]) as u8, u(&o["packets"])))
            .collect(),
    }
}

/// The `"sflow"` section against tshark.
fn assert_equal(j: &Value, e: &SflowExpected, what: &str) {
    let s = &j["sflow"];
    assert!(s.is_object(), "{what}: no sflow section in {j}");
    assert_eq!(u(&s["datagrams"]), e.datagrams, "{what}: datagrams");
    assert_eq!(u(&s["lost_datagrams"]), e.lost_datagrams, "{what}: lost");
    assert_eq!(
        u(&s["flow_samples"]),
        e.flow_samples,
        "{what}: flow samples"
    );
    assert_eq!(
        u(&s["counter_samples"]),
        e.counter_samples,
        "{what}: counter samples"
    );
    let agents: BTreeMap<(String, u32), u64> = s["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                (
                    a["agent"].as_str().unwrap().to_string(),
                    u(&a["sub_agent"]) as u32,
                ),
                u(&a["datagrams"]),
            )
        })
        .collect();
    assert_eq!(agents, e.agents, "{what}: agents");
    assert_eq!(totals(&s["samples"]), e.samples, "{what}: RoCE samples");
    assert_eq!(totals(&s["estimated"]), e.estimated, "{what}: estimates");
}

fn pmacct_case(fx: fixtures::Fixture, rate: u32) {
    if !may_run(
        sflow::pmacct_available(),
        "pmacct is not installed (Debian package pmacct; `cargo xtask setup`)",
    ) {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-sflow").unwrap();
    let pcap = fx.write(dir.path()).unwrap();
    let datagrams = sflow::pmacct(&pcap, rate, dir.path(), None).unwrap();
    let cap = sflow::capture("sflow_pmacct", &datagrams)
        .write(dir.path())
        .unwrap();
    let e = tshark_sflow::expected(&cap).unwrap();
    assert!(e.samples.packets > 0, "pmacct sampled RoCE");
    if rate == 1 {
        assert_eq!(e.samples, e.estimated);
    } else {
        assert!(e.estimated.packets > e.samples.packets);
    }
    assert_equal(&analyze(&cap), &e, &format!("{} 1/{rate}", fx.name));
}

#[test]
fn pmacct_rate_1_rc_ipv4_equals_tshark() {
    pmacct_case(fixtures::rc_ipv4(), 1);
}

#[test]
fn pmacct_rate_1_ipv6_and_vlans_equals_tshark() {
    pmacct_case(fixtures::mixed_ipv6_vlan(), 1);
}

#[test]
fn pmacct_rate_4_estimates_equal_tshark_weighted() {
    pmacct_case(fixtures::many_flows(), 4);
}

fn flow(expanded: bool, seq: u32, rate: u32, i: u32) -> Sample {
    Sample::Flow {
        expanded,
        sequence: seq,
        source_index: 7,
        sampling_rate: rate,
        sample_pool: seq * rate,
        drops: 0,
        input: 3,
        output: 7 + i % 2,
        frame_length: 1024 + 66,
        header: roce_header(i),
        switch: true,
    }
}

/// Counter samples, expanded samples, IPv4 and IPv6 agents, sub-agents, sequence gaps.
fn generated() -> Vec<Vec<u8>> {
    let v4: IpAddr = "192.0.2.10".parse().unwrap();
    let v6: IpAddr = "2001:db8::10".parse().unwrap();
    let mut out = Vec::new();
    for (agent, sub, seqs) in [
        (v4, 0, vec![1u32, 2, 3, 7, 8]),
        (v4, 1, vec![10, 11, 14]),
        (v6, 0, vec![100, 101, 102, 103]),
    ] {
        for (k, seq) in seqs.into_iter().enumerate() {
            let k = k as u32;
            out.push(
                Datagram {
                    agent,
                    sub_agent: sub,
                    sequence: seq,
                    uptime_ms: seq * 1000,
                    samples: vec![
                        flow(k % 2 == 1, seq * 3, 1000, k),
                        flow(false, seq * 3 + 1, 512, k + 1),
                        Sample::Counters {
                            expanded: k.is_multiple_of(2),
                            sequence: seq,
                            if_index: 7,
                            speed: 400_000_000_000,
                            in_octets: 1 << 40,
                            out_octets: 1 << 41,
                            ethernet: true,
                        },
                    ],
                }
                .encode(),
            );
        }
    }
    out
}

#[test]
fn counter_and_expanded_samples_ipv6_agents_and_gaps_equal_tshark() {
    require_tshark();
    let dir = TempDir::new("rocemon-sflow-gen").unwrap();
    let cap = sflow::capture("sflow_generated", &generated())
        .write(dir.path())
        .unwrap();
    let e = tshark_sflow::expected(&cap).unwrap();
    assert_eq!(e.lost_datagrams, 3 + 2, "the generator's gaps");
    assert_eq!(e.counter_samples, 12);
    let j = analyze(&cap);
    assert_equal(&j, &e, "generated");
    // The port view: samples on input 3 and outputs 7/8 of each agent, counters on port 7.
    let ports = j["sflow"]["ports"].as_array().unwrap();
    let port = |agent: &str, ifindex: u64, dir: &str| {
        ports
            .iter()
            .find(|p| p["agent"] == agent && u(&p["ifindex"]) == ifindex && p["direction"] == dir)
            .unwrap_or_else(|| panic!("no port {agent} {ifindex} {dir} in {ports:?}"))
    };
    let p = port("192.0.2.10", 3, "ingress");
    assert_eq!(u(&p["roce_samples"]), 16);
    assert!(p["few_samples"].as_bool().unwrap());
    let c = port("2001:db8::10", 7, "port");
    assert_eq!(u(&c["counters"]["speed"]), 400_000_000_000);
    assert_eq!(u(&c["counters"]["in_octets"]), 1 << 40);
}

/// Broken datagrams and samples are counted by reason; nothing crashes, the good samples
/// around a broken one still count.
#[test]
fn malformed_datagrams_are_counted_by_reason() {
    let agent: IpAddr = "192.0.2.20".parse().unwrap();
    let good = |seq: u32, samples: Vec<Sample>| {
        Datagram {
            agent,
            sub_agent: 0,
            sequence: seq,
            uptime_ms: 0,
            samples,
        }
        .encode()
    };
    let mut set = Vec::new();
    // version 4
    let mut v = good(1, vec![flow(false, 1, 10, 1)]);
    v[3] = 4;
    set.push(v);
    // unknown agent address type
    let mut v = good(2, vec![]);
    v[7] = 9;
    set.push(v);
    // header cut short
    set.push(good(3, vec![])[..12].to_vec());
    // a sample length past the datagram (the sample before it counts)
    let mut v = good(4, vec![flow(false, 4, 10, 1), flow(false, 5, 10, 2)]);
    let second = 28 + 8 + flow(false, 4, 10, 1).encode().1.len();
    v[second + 4..second + 8].copy_from_slice(&100_000u32.to_be_bytes());
    set.push(v);
    // zero sampling rate (with a good sample after it)
    set.push(good(5, vec![flow(false, 6, 0, 1), flow(false, 7, 10, 3)]));
    // a record length past its sample
    let (f, mut body) = flow(false, 8, 10, 1).encode();
    let rec = 4 * 8 + 8 + 16; // fixed fields, the switch record
    body[rec + 4..rec + 8].copy_from_slice(&4096u32.to_be_bytes());
    set.push(good(6, vec![Sample::Raw { format: f, body }]));
    // an unknown sample format, skipped by length
    set.push(good(
        7,
        vec![
            Sample::Raw {
                format: (9 << 12) | 5,
                body: vec![1, 2, 3, 4],
            },
            flow(false, 9, 10, 4),
        ],
    ));
    // fewer samples than announced
    let mut v = good(8, vec![flow(false, 10, 10, 5)]);
    v[27] = 3;
    set.push(v);
    let dir = TempDir::new("rocemon-sflow-bad").unwrap();
    let cap = sflow::capture("sflow_malformed", &set)
        .write(dir.path())
        .unwrap();
    let j = analyze(&cap);
    let s = &j["sflow"];
    let m = &s["malformed"];
    for (reason, n) in [
        ("version", 1),
        ("agent_address_type", 1),
        ("truncated_header", 1),
        ("sample_length", 1),
        ("zero_sampling_rate", 1),
        ("record_length", 1),
        ("missing_samples", 1),
    ] {
        assert_eq!(u(&m[reason]), n, "{reason} in {m}");
    }
    assert_eq!(u(&s["unknown_samples"]), 1);
    // Datagrams 4 to 8 were read (5 datagrams); their good samples count: 4 (first of 4),
    // 7 (after the zero rate), 9 (after the unknown one), 10.
    assert_eq!(u(&s["datagrams"]), 5);
    assert_eq!(u(&s["samples"]["packets"]), 4);
}

/// The live collector: `rocemon run --sflow-listen` alone (no interface) in a namespace of its
/// own, pmacct's datagrams sent to it; `/api/v1/sflow` and `/metrics` equal tshark's decode of
/// the same datagrams.
#[test]
fn the_live_collector_equals_tshark_on_what_pmacct_sent() {
    use rocemon_testkit::netns::{
        http_get_in, metric_sum, try_metric_sum, udp_send_in, Agent, LoopNs,
    };
    if !rocemon_testkit::netns::can_run_e2e()
        || !may_run(
            sflow::pmacct_available(),
            "pmacct is not installed (Debian package pmacct; `cargo xtask setup`)",
        )
    {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-sflow-live").unwrap();
    let pcap = fixtures::rc_ipv4().write(dir.path()).unwrap();
    let mut datagrams = sflow::pmacct(&pcap, 2, dir.path(), None).unwrap();
    // and the generator's counter samples, IPv6 agent and gaps
    datagrams.extend(generated());
    let cap = sflow::capture("sflow_live", &datagrams)
        .write(dir.path())
        .unwrap();
    let e = tshark_sflow::expected(&cap).unwrap();
    let ns = LoopNs::new("rcsfl").unwrap();
    const HTTP: &str = "127.0.0.1:9442";
    let mut agent =
        Agent::sflow_collector(&ns.0, env!("CARGO_BIN_EXE_rocemon"), HTTP, "100").unwrap();
    agent.wait_ready(&ns.0, HTTP).unwrap();
    udp_send_in(&ns.0, "127.0.0.1:6343", &datagrams).unwrap();
    let body = agent
        .wait_metrics(&ns.0, HTTP, std::time::Duration::from_secs(20), |b| {
            try_metric_sum(b, "rocemon_sflow_datagrams_total", &[]).unwrap_or(0.0) as u64
                >= e.datagrams
        })
        .unwrap();
    let empty: Vec<&str> = body.lines().filter(|l| l.contains("=\"\"")).collect();
    assert!(empty.is_empty(), "series with an empty label: {empty:#?}");
    // The API view is rebuilt at each poll: wait until it holds every datagram too.
    let t = std::time::Instant::now();
    let doc = loop {
        let (status, doc) = http_get_in(&ns.0, HTTP, "/api/v1/sflow").unwrap();
        assert_eq!(status, 200, "{doc}");
        let doc: Value = serde_json::from_str(&doc).unwrap();
        if doc["datagrams"].as_u64() == Some(e.datagrams) {
            break doc;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(30),
            "the API never showed {} datagrams: {doc}",
            e.datagrams
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_equal(&serde_json::json!({ "sflow": doc }), &e, "live API");
    let m = |name: &str, f: &[(&str, &str)]| metric_sum(&body, name, f) as u64;
    assert_eq!(m("rocemon_sflow_datagrams_total", &[]), e.datagrams);
    assert_eq!(
        m("rocemon_sflow_lost_datagrams_total", &[]),
        e.lost_datagrams
    );
    assert_eq!(
        m("rocemon_sflow_samples_total", &[("kind", "flow")]),
        e.flow_samples
    );
    assert_eq!(
        m("rocemon_sflow_samples_total", &[("kind", "counter")]),
        e.counter_samples
    );
    assert_eq!(
        m("rocemon_sflow_packets_estimated_total", &[]),
        e.estimated.packets
    );
    assert_eq!(
        m(
            "rocemon_sflow_ecn_packets_estimated_total",
            &[("codepoint", "ce")]
        ),
        e.estimated.ecn[3]
    );
    assert_eq!(
        m("rocemon_sflow_cnp_packets_estimated_total", &[]),
        e.estimated.cnp
    );
    assert_eq!(
        m(
            "rocemon_sflow_port_speed_bits_per_second",
            &[("agent", "2001:db8::10")]
        ),
        400_000_000_000
    );
    assert_eq!(m("rocemon_sflow_dropped_datagrams_total", &[]), 0);
    // `rocemon top` shows the switches' view.
    let top = ns
        .output(
            env!("CARGO_BIN_EXE_rocemon"),
            &["top", "--addr", HTTP, "--iterations", "1"],
        )
        .unwrap();
    let screen = String::from_utf8_lossy(&top.stdout);
    assert!(
        screen.contains(&format!(
            "SFLOW {} datagrams from {} agents ({} lost)",
            e.datagrams,
            e.agents.len(),
            e.lost_datagrams
        )),
        "{screen}"
    );
    agent.stop_ok();
}

/// The committed fuzz seeds (pmacct's datagrams and the encoder's) replay cleanly: pmacct's
/// decode to RoCE samples, and nothing in the fuzz regressions panics.
#[test]
fn fuzz_seeds_and_regressions_replay() {
    use rocemon::sflow::collector::Collector;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut c = Collector::default();
    let mut n = 0;
    for dir in ["seeds/sflow", "regressions/sflow"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().ends_with(".md") {
                continue;
            }
            let d = std::fs::read(e.path()).unwrap();
            c.datagram(&d, 0);
            // As the fuzz target does: the same datagram twice into a fresh collector (an
            // input may break only once the totals grow).
            let mut twice = Collector::default();
            twice.datagram(&d, 0);
            twice.datagram(&d, 0);
            n += 1;
        }
    }
    assert!(n >= 8, "{n} seeds");
    assert!(c.samples.packets > 0, "pmacct's seeds hold RoCE samples");
}

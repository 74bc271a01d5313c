//! The catalog's conventions and the counters' arithmetic.
use super::*;
use agent_common::{parse_record, LinkType, SliceReader, TrafficClasses};
use rocemon_testkit::frames::Roce;

#[test]
fn counters_follow_kernel_totals_and_names_follow_conventions() {
    let mut m = Metrics::new().unwrap();
    m.set_attached("veth0", Hook::Xdp, "native");
    let mut c = HookCounters::ZERO;
    let mut r = Roce::new(
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        0xC000,
        5,
        0x0A,
    );
    r.ecn = 3;
    let f = r.frame();
    for _ in 0..3 {
        c.record(
            &parse_record(&SliceReader(&f), LinkType::Ethernet),
            f.len() as u64,
            &TrafficClasses::DEFAULT,
        );
    }
    m.observe_counters("veth0", Hook::Xdp, &c);
    m.observe_counters("veth0", Hook::Xdp, &c); // no change, no double count
    let text = m.encode().unwrap();
    assert!(text.contains(r#"rocemon_packets_total{direction="ingress",hook="xdp",iface="veth0",opcode="RC_RDMA_WRITE_ONLY"} 3"#), "{text}");
    assert!(text.contains(r#"rocemon_ecn_packets_total{codepoint="ce",direction="ingress",hook="xdp",iface="veth0"} 3"#));
    assert!(text.contains(
        r#"rocemon_parse_outcomes_total{hook="xdp",iface="veth0",kind="roce",outcome="roce"} 3"#
    ));
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
    for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
        let mut p = line.split_whitespace().skip(2);
        let (name, ty) = (p.next().unwrap(), p.next().unwrap());
        // Ours carry the prefix; the process collector's are the standard process_* set.
        assert!(
            name.starts_with("rocemon_") || name.starts_with("process_"),
            "{name}"
        );
        assert_eq!(
            ty == "counter",
            name.ends_with("_total"),
            "{name} is a {ty}"
        );
    }
}

/// A port's series are written at each scrape from the ports the collector holds: they follow
/// its figures and go when it no longer holds the port.
#[test]
fn sflow_port_series_are_read_from_the_collector_at_scrape_and_go_with_their_port() {
    use crate::sflow::collector::{Collector, Limits};
    use rocemon_testkit::sflow::{roce_header, Datagram, Sample};
    use std::sync::{Arc, Mutex};
    let flow = |sequence| Sample::Flow {
        expanded: false,
        sequence,
        source_index: 3,
        sampling_rate: 100,
        sample_pool: 100 * sequence,
        drops: 0,
        input: 3,
        output: 7,
        frame_length: 1090,
        header: roce_header(sequence),
        switch: false,
    };
    let counters = Sample::Counters {
        expanded: false,
        sequence: 1,
        if_index: 7,
        speed: 100_000_000_000,
        in_octets: 5,
        out_octets: 9,
        ethernet: false,
    };
    let datagram = |sequence, samples| {
        Datagram {
            agent: "192.0.2.1".parse().unwrap(),
            sub_agent: 0,
            sequence,
            uptime_ms: 1000,
            samples,
        }
        .encode()
    };
    let c = Arc::new(Mutex::new(Collector::new(Limits {
        idle_timeout_ns: 1_000_000_000,
        ..Limits::default()
    })));
    let mut m = Metrics::new().unwrap();
    m.attach_sflow(c.clone());
    let port = r#"rocemon_sflow_port_roce_samples_total{agent="192.0.2.1",direction="egress",ifindex="7"}"#;
    let bytes = r#"rocemon_sflow_port_roce_bytes_estimated_total{agent="192.0.2.1",direction="ingress",ifindex="3"}"#;
    let octets =
        r#"rocemon_sflow_port_octets_total{agent="192.0.2.1",direction="out",ifindex="7"}"#;
    let speed = r#"rocemon_sflow_port_speed_bits_per_second{agent="192.0.2.1",ifindex="7"}"#;
    c.lock()
        .unwrap()
        .datagram(&datagram(1, vec![flow(1), counters]), 0);
    let text = m.encode().unwrap();
    assert!(text.contains(&format!("{port} 1\n")), "{text}");
    assert!(text.contains(&format!("{bytes} 109000\n")), "{text}");
    assert!(text.contains(&format!("{octets} 9\n")), "{text}");
    assert!(text.contains(&format!("{speed} 100000000000\n")), "{text}");
    assert_eq!(
        text.matches("# TYPE rocemon_sflow_port_octets_total counter\n")
            .count(),
        1
    );
    c.lock()
        .unwrap()
        .datagram(&datagram(2, vec![flow(2), flow(3)]), 100_000_000);
    let text = m.encode().unwrap();
    assert!(text.contains(&format!("{port} 3\n")), "{text}");
    // Two sweeps (the second after the idle timeout) remove every entry of the agent's.
    c.lock()
        .unwrap()
        .datagram(&datagram(3, vec![]), 400_000_000);
    c.lock()
        .unwrap()
        .datagram(&datagram(4, vec![]), 10_000_000_000);
    let text = m.encode().unwrap();
    assert!(
        !text.contains("rocemon_sflow_port_roce_samples_total{"),
        "{text}"
    );
    assert!(!text.contains("rocemon_sflow_port_octets_total{"), "{text}");
    assert!(
        !text.contains("rocemon_sflow_port_speed_bits_per_second{"),
        "{text}"
    );
}

/// The text a scrape writes out parses as Prometheus' exposition format (promtool's parser
/// is the oracle in `tests/`; here: every series line is `name{labels} integer`).
#[test]
fn sflow_port_series_lines_are_well_formed() {
    use crate::sflow::collector::Collector;
    let mut c = Collector::default();
    let d = rocemon_testkit::sflow::Datagram {
        agent: "2001:db8::1".parse().unwrap(),
        sub_agent: 0,
        sequence: 1,
        uptime_ms: 1,
        samples: vec![rocemon_testkit::sflow::Sample::Counters {
            expanded: true,
            sequence: 1,
            if_index: 4,
            speed: u64::MAX,
            in_octets: 1,
            out_octets: 2,
            ethernet: true,
        }],
    };
    c.datagram(&d.encode(), 0);
    let mut text = String::new();
    super::sflow::write_port_series(&c, &mut text);
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = l.rsplit_once(' ').unwrap();
        assert!(value.parse::<u64>().is_ok(), "{l}");
        assert!(
            series.ends_with('}') && series.contains("{agent=\"2001:db8::1\""),
            "{l}"
        );
    }
    assert!(
        text.contains(&format!("ifindex=\"4\"}} {}\n", i64::MAX)),
        "{text}"
    );
}

/// The flow cache's modes per interface: one series per mode, every mode present.
#[test]
fn flow_cache_modes_are_a_gauge_per_mode() {
    let m = Metrics::new().unwrap();
    m.set_flow_cache_modes("veth0", [3, 0, 1]);
    let text = m.encode().unwrap();
    for (mode, n) in [("on", 3), ("draining", 0), ("off", 1)] {
        let line = format!(r#"rocemon_flow_cache_cpus{{iface="veth0",mode="{mode}"}} {n}"#);
        assert!(text.contains(&line), "{line}\n{text}");
    }
}

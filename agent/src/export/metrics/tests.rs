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

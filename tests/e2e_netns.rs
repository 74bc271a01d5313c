//! End to end in network namespaces: the real `rocemon run` attached to one end of a veth
//! pair (XDP native, XDP skb, tc ingress, tc egress), fixture traffic replayed with tcpreplay,
//! `/metrics` scraped over HTTP, counts equal tshark's for what was sent, clean detach.

use rocemon_testkit::netns::{http_get_in, metric_labels, metric_sum, run, Agent, VethPair};
use rocemon_testkit::{fixtures, is_root, require_tshark, tshark, TempDir};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

fn can_run() -> bool {
    if !is_root() {
        eprintln!("SKIPPED: namespace end-to-end tests need root (ip netns, BPF)");
        return false;
    }
    if run("tcpreplay", &["--version"]).is_err() {
        panic!("tcpreplay is not installed; run `cargo xtask setup`");
    }
    true
}

fn scrape(ns: &str) -> Option<String> {
    match http_get_in(ns, ADDR, "/metrics") {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

fn wait_ready(ns: &str, agent: &mut Agent) -> String {
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(30), |_| true)
        .unwrap()
}

struct Case {
    name: &'static str,
    hooks: &'static str,
    xdp_mode: &'static str,
    /// Watch the sender's interface (tc egress) instead of the receiver's.
    on_sender: bool,
    hook_label: &'static str,
}

#[test]
fn rocemon_run_counts_equal_tshark_for_every_hook() {
    if !can_run() {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-e2e").unwrap();
    let mut sent = Vec::new();
    let mut expected = tshark::Expected::default();
    for fx in [
        fixtures::rc_ipv4(),
        fixtures::mixed_ipv6_vlan(),
        fixtures::many_flows(),
    ] {
        assert!(fx.replayable);
        let p = fx.write(dir.path()).unwrap();
        let e = tshark::expected(&p).unwrap();
        expected.roce_packets += e.roce_packets;
        expected.roce_bytes += e.roce_bytes;
        expected.cnp += e.cnp;
        for i in 0..4 {
            expected.ecn[i] += e.ecn[i];
        }
        for (op, (n, b)) in e.opcodes {
            let x = expected.opcodes.entry(op).or_default();
            x.0 += n;
            x.1 += b;
        }
        expected.flows.extend(e.flows);
        sent.push(p);
    }
    let cases = [
        Case {
            name: "xdp native",
            hooks: "xdp",
            xdp_mode: "native",
            on_sender: false,
            hook_label: "xdp",
        },
        Case {
            name: "xdp skb",
            hooks: "xdp",
            xdp_mode: "skb",
            on_sender: false,
            hook_label: "xdp",
        },
        Case {
            name: "tc ingress",
            hooks: "tc-ingress",
            xdp_mode: "auto",
            on_sender: false,
            hook_label: "tc_ingress",
        },
        Case {
            name: "tc egress",
            hooks: "tc-egress",
            xdp_mode: "auto",
            on_sender: true,
            hook_label: "tc_egress",
        },
    ];
    for c in cases {
        let pair = VethPair::new("rce2e").unwrap();
        let (ns, ifn) = if c.on_sender {
            (&pair.ns_b, &pair.b_if)
        } else {
            (&pair.ns_a, &pair.a_if)
        };
        let mut agent = Agent::start(
            ns,
            BIN,
            &[
                "run",
                "--iface",
                ifn,
                "--hooks",
                c.hooks,
                "--xdp-mode",
                c.xdp_mode,
                "--listen",
                ADDR,
                "--poll-interval-ms",
                "100",
                "--top-k",
                "5",
            ],
        )
        .unwrap();
        wait_ready(ns, &mut agent);
        if c.hooks == "xdp" {
            let link = String::from_utf8(
                run("ip", &["-n", ns, "-d", "link", "show", ifn])
                    .unwrap()
                    .stdout,
            )
            .unwrap();
            let first = link.lines().next().unwrap_or_default();
            let want = if c.xdp_mode == "native" {
                " xdp "
            } else {
                " xdpgeneric "
            };
            assert!(
                first.contains(want),
                "{}: expected {want:?} in {link}",
                c.name
            );
        }
        for p in &sent {
            pair.replay_from_b(p).unwrap();
        }
        let want = expected.roce_packets as f64;
        let t = Instant::now();
        let body = loop {
            let b = scrape(ns).unwrap_or_default();
            if metric_sum(&b, "rocemon_packets_total", &[("hook", c.hook_label)]) >= want
                || t.elapsed() > Duration::from_secs(20)
            {
                break b;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let f = |name: &str, extra: &[(&str, &str)]| {
            let mut l = vec![("hook", c.hook_label), ("iface", ifn.as_str())];
            l.extend_from_slice(extra);
            metric_sum(&body, name, &l) as u64
        };
        assert_eq!(
            f("rocemon_packets_total", &[]),
            expected.roce_packets,
            "{}: packets",
            c.name
        );
        assert_eq!(
            f("rocemon_bytes_total", &[]),
            expected.roce_bytes,
            "{}: bytes",
            c.name
        );
        assert_eq!(
            f("rocemon_cnp_packets_total", &[]),
            expected.cnp,
            "{}: CNPs",
            c.name
        );
        for (i, cp) in ["not_ect", "ect1", "ect0", "ce"].iter().enumerate() {
            assert_eq!(
                f("rocemon_ecn_packets_total", &[("codepoint", cp)]),
                expected.ecn[i],
                "{}: ECN {cp}",
                c.name
            );
        }
        let by_op: BTreeMap<String, f64> = metric_labels(&body, "rocemon_packets_total", "opcode")
            .into_iter()
            .fold(BTreeMap::new(), |mut m, (k, v)| {
                *m.entry(k).or_default() += v;
                m
            });
        for (op, (n, _)) in &expected.opcodes {
            let name = agent_common::opcode::name(*op);
            assert_eq!(
                by_op.get(&name).copied().unwrap_or(0.0) as u64,
                *n,
                "{}: opcode {name}",
                c.name
            );
        }
        assert_eq!(
            f("rocemon_flows", &[]),
            0,
            "rocemon_flows has no hook label"
        );
        assert_eq!(
            metric_sum(&body, "rocemon_flows", &[("iface", ifn.as_str())]) as usize,
            expected.flows.len(),
            "{}: flows",
            c.name
        );
        let top = metric_labels(&body, "rocemon_flow_rate_bytes_per_second", "dest_qp");
        assert_eq!(top.len(), 5, "{}: top-K series", c.name);
        assert_eq!(f("rocemon_map_update_errors_total", &[]), 0);
        assert!(body.contains("rocemon_build_info{"));
        assert!(body.contains("rocemon_poll_duration_seconds_count"));

        let (status, stderr) = agent.stop().unwrap();
        assert!(status.success(), "{}: exit {status}: {stderr}", c.name);
        let link = String::from_utf8(
            run("ip", &["-n", ns, "-d", "link", "show", ifn])
                .unwrap()
                .stdout,
        )
        .unwrap();
        assert!(
            !link.contains("prog/xdp"),
            "{}: XDP still attached after SIGTERM",
            c.name
        );
        let links = String::from_utf8(run("bpftool", &["link", "show"]).unwrap().stdout).unwrap();
        assert!(
            !links.contains("rocemon_"),
            "{}: a link is left after SIGTERM:\n{links}",
            c.name
        );
    }
}

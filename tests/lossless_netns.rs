//! The lossless fabric live: the real `rocemon run` on one end of a veth pair (XDP and tc
//! ingress; AF_XDP capture), the lossless fixture (PFC storms, XON, PAUSE, mirrored PFC, RoCE
//! and CNPs in right and wrong classes) replayed with tcpreplay, `/metrics` equal to tshark's
//! decode.

use rocemon_testkit::netns::{http_get_in, metric_sum, run_args, try_metric_sum, Agent, VethPair};
use rocemon_testkit::{lossless, require_tshark, tshark, TempDir};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

/// The lossless fixture replayed into `rocemon run ARGS` on one end of a fresh veth pair; waits
/// until every hook in `hooks` counted tshark's PFC frames and RoCE packets. Returns what the
/// test needs to look further (the pair and agent stay alive with it).
struct Replayed {
    _dir: TempDir,
    pair: VethPair,
    agent: Agent,
    e: tshark::Expected,
    body: String,
}

fn replayed(prefix: &str, args: &[&str], hooks: &[&str], config: Option<&str>) -> Replayed {
    require_tshark();
    let dir = TempDir::new("rocemon-lossless-live").unwrap();
    let path = lossless::lossless().write(dir.path()).unwrap();
    let e = tshark::expected(&path).unwrap();
    let pair = VethPair::new(prefix).unwrap();
    let cfg = dir.path().join("rocemon.toml");
    let mut full = run_args(&pair.a_if, ADDR, "100");
    if let Some(text) = config {
        std::fs::write(&cfg, text).unwrap();
        full.extend(["--config", cfg.to_str().unwrap()]);
    }
    full.extend_from_slice(args);
    let mut agent = Agent::start(&pair.ns_a, BIN, &full).unwrap();
    agent.wait_ready(&pair.ns_a, ADDR).unwrap();
    pair.replay_from_b(&path).unwrap();
    let t = Instant::now();
    let body = loop {
        let b = match http_get_in(&pair.ns_a, ADDR, "/metrics") {
            Ok((200, b)) => b,
            _ => String::new(),
        };
        let at_least = |name: &str, h: &str, n: u64| {
            try_metric_sum(&b, name, &[("hook", h)]).unwrap_or(0.0) as u64 >= n
        };
        let done = hooks.iter().all(|h| {
            at_least("rocemon_pfc_frames_total", h, e.pfc_frames)
                && at_least("rocemon_packets_total", h, e.roce_packets)
        });
        if done || t.elapsed() > Duration::from_secs(20) {
            break b;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    Replayed {
        _dir: dir,
        pair,
        agent,
        e,
        body,
    }
}

#[test]
fn pfc_pause_and_traffic_classes_live_equal_tshark_on_xdp_and_tc() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let r = replayed(
        "rcpfc",
        &["--hooks", "xdp,tc-ingress"],
        &["xdp", "tc_ingress"],
        None,
    );
    let (e, body, pair, agent) = (&r.e, &r.body, &r.pair, r.agent);
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    for hook in ["xdp", "tc_ingress"] {
        let f = |name: &str, extra: &[(&str, &str)]| {
            let mut l = vec![("hook", hook), ("iface", ifn.as_str())];
            l.extend_from_slice(extra);
            metric_sum(body, name, &l) as u64
        };
        assert_eq!(
            f("rocemon_pfc_frames_total", &[]),
            e.pfc_frames,
            "{hook}: PFC"
        );
        for p in 0..8 {
            let pr = p.to_string();
            assert_eq!(
                (
                    f(
                        "rocemon_pfc_priority_frames_total",
                        &[("priority", &pr), ("type", "xoff")]
                    ),
                    f(
                        "rocemon_pfc_priority_frames_total",
                        &[("priority", &pr), ("type", "xon")]
                    ),
                    f("rocemon_pfc_pause_quanta_total", &[("priority", &pr)]),
                ),
                (e.pfc[p].xoff, e.pfc[p].xon, e.pfc[p].quanta),
                "{hook}: PFC priority {p} (xoff, xon, quanta)"
            );
        }
        assert_eq!(
            (
                f("rocemon_pause_frames_total", &[]),
                f("rocemon_pause_frames_total", &[("type", "xon")]),
                f("rocemon_pause_quanta_total", &[]),
                f("rocemon_mac_control_other_frames_total", &[]),
            ),
            (
                e.pause_frames,
                e.pause_xon,
                e.pause_quanta,
                e.mac_control_other
            ),
            "{hook}: PAUSE and other MAC control"
        );
        for (d, (n, b)) in &e.dscp {
            let ds = d.to_string();
            let l = [("dscp", ds.as_str()), ("class", "roce")];
            assert_eq!(
                (
                    f("rocemon_dscp_packets_total", &l),
                    f("rocemon_dscp_bytes_total", &l)
                ),
                (*n, *b),
                "{hook}: DSCP {d}"
            );
        }
        for (p, (n, _)) in &e.pcp {
            let pr = p.to_string();
            assert_eq!(
                f(
                    "rocemon_priority_packets_total",
                    &[("priority", &pr), ("class", "roce")]
                ),
                *n,
                "{hook}: priority {p}"
            );
        }
        assert_eq!(
            (
                f("rocemon_lossy_roce_packets_total", &[]),
                f("rocemon_lossy_roce_bytes_total", &[]),
                f("rocemon_cnp_out_of_class_packets_total", &[]),
            ),
            (e.lossy_roce.0, e.lossy_roce.1, e.cnp_out_of_class),
            "{hook}: lossy RoCE"
        );
    }
    // The JSON API: the same totals per hook, and no NIC counters for a veth.
    let (status, doc) = http_get_in(ns, ADDR, "/api/v1/lossless").unwrap();
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    for hook in ["xdp", "tc_ingress"] {
        let h = doc["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["hook"] == hook)
            .unwrap_or_else(|| panic!("{hook} missing from {doc}"));
        assert_eq!(h["pfc"]["frames"].as_u64(), Some(e.pfc_frames), "{hook}");
        assert_eq!(
            h["pfc"]["priorities"][3]["xoff"].as_u64(),
            Some(e.pfc[3].xoff),
            "{hook}"
        );
        assert_eq!(
            h["pause"]["quanta"].as_u64(),
            Some(e.pause_quanta),
            "{hook}"
        );
        assert_eq!(
            h["lossy"]["packets"].as_u64(),
            Some(e.lossy_roce.0),
            "{hook}"
        );
    }
    assert_eq!(doc["nic"].as_array().map(Vec::len), Some(0));
    // `rocemon top` shows it.
    let top = pair
        .exec(ns, BIN, &["top", "--addr", ADDR, "--iterations", "1"])
        .unwrap();
    let screen = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{}",
        String::from_utf8_lossy(&top.stderr)
    );
    let storm = format!("p3 xoff {} xon {}", e.pfc[3].xoff, e.pfc[3].xon);
    assert!(
        screen.contains(&format!("LOSSLESS {ifn} xdp: PFC {}", e.pfc_frames))
            && screen.contains(&storm)
            && screen.contains(&format!("lossy RoCE {} packets", e.lossy_roce.0)),
        "{screen}"
    );
    // veth has neither DCB nor driver pause statistics: no NIC series.
    assert!(
        !body.contains("rocemon_nic_pfc_frames_total{"),
        "a veth has no NIC pause counters"
    );
    agent.stop_ok();
}

/// AF_XDP capture: MAC control frames stay with the kernel program (counted there), RoCE goes
/// to the socket and is counted in userspace with the same classes; together they equal
/// tshark, with a configured class expectation applied on both sides.
#[test]
fn pfc_in_the_kernel_and_classes_in_userspace_under_afxdp_equal_tshark() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    // Everything the fixture sends on DSCP 26 or 34, any priority, is in class.
    let r = replayed(
        "rcpfx",
        &["--capture", "afxdp"],
        &["afxdp"],
        Some("[classes]\nroce_dscp = [26, 34]\nroce_priority = \"any\"\ncnp_dscp = [48]\n"),
    );
    let (e, body, agent) = (&r.e, &r.body, r.agent);
    let ifn = &r.pair.a_if;
    let f = |name: &str, extra: &[(&str, &str)]| {
        let mut l = vec![("hook", "afxdp"), ("iface", ifn.as_str())];
        l.extend_from_slice(extra);
        metric_sum(body, name, &l) as u64
    };
    assert_eq!(f("rocemon_pfc_frames_total", &[]), e.pfc_frames, "PFC");
    assert_eq!(
        f(
            "rocemon_pfc_priority_frames_total",
            &[("priority", "3"), ("type", "xoff")]
        ),
        e.pfc[3].xoff
    );
    assert_eq!(f("rocemon_pause_quanta_total", &[]), e.pause_quanta);
    for (d, (n, _)) in &e.dscp {
        let ds = d.to_string();
        assert_eq!(
            f(
                "rocemon_dscp_packets_total",
                &[("dscp", &ds), ("class", "roce")]
            ),
            *n,
            "DSCP {d}"
        );
    }
    // tshark's RoCE that is neither a CNP nor on DSCP 26 or 34.
    let cnp: u64 = e.cnp_dscp.values().map(|(n, _)| n).sum();
    let in_class: u64 = [26u8, 34]
        .iter()
        .map(|d| e.dscp.get(d).map_or(0, |x| x.0) - e.cnp_dscp.get(d).map_or(0, |x| x.0))
        .sum();
    let lossy = e.roce_packets - cnp - in_class;
    assert!(lossy > 0 && lossy < e.lossy_roce.0, "the classes matter");
    assert_eq!(f("rocemon_lossy_roce_packets_total", &[]), lossy);
    assert_eq!(
        f("rocemon_cnp_out_of_class_packets_total", &[]),
        e.cnp_out_of_class
    );
    agent.stop_ok();
}

//! tc ingress with jumbo frames in network namespaces: the real `rocemon run` on one end of a
//! veth pair, RoCE frames of 4 KiB payloads replayed with tcpreplay from the other, whose
//! headers the kernel leaves outside the skb's linear part; counts equal tshark's, and the
//! fast path, not the slow program, counted them.

use rocemon_testkit::e2e::{assert_totals_equal, wait_api_flows};
use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::frames::Roce;
use rocemon_testkit::netns::{metric_sum, run_args, try_metric_sum, Agent, VethPair};
use rocemon_testkit::{require_tshark, tshark, TempDir};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

/// tc ingress with jumbo frames whose headers the sender's raw socket leaves outside the skb's
/// linear part (a frame of a page or more carries only its Ethernet header there, as a driver
/// that splits headers from data leaves the BTH outside): counted on the fast path, from a
/// copy of the frame's first bytes, equal to tshark per flow, and none through the slow
/// program (every one of them was, before the copy).
#[test]
fn tc_counts_jumbo_frames_with_headers_outside_the_linear_part_on_the_fast_path() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-tc-jumbo").unwrap();
    let mut frames = Vec::new();
    for i in 0..24u32 {
        let (src, dst) = if i % 3 == 0 {
            ("fd00:77::1", "fd00:77::2")
        } else {
            ("10.77.9.1", "10.77.9.2")
        };
        let r = Roce::jumbo(src, dst, i, 4);
        frames.push((1_764_460_800_000_000_000 + u64::from(i) * 1000, r.frame()));
    }
    let fx = whole("tc-jumbo", Format::PcapMicros, frames, true);
    let path = fx.write(dir.path()).unwrap();
    let e = tshark::expected(&path).unwrap();
    assert_eq!(e.roce_packets, 24);

    let pair = VethPair::new("rctcj").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    pair.without_ipv6().unwrap();
    let mut args = run_args(ifn, ADDR, "100");
    args.extend(["--hooks", "tc-ingress"]);
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    agent.wait_ready(ns, ADDR).unwrap();
    pair.replay_from_b(&path).unwrap();
    let hook = [("hook", "tc_ingress"), ("iface", ifn.as_str())];
    let body = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(20), |b| {
            try_metric_sum(b, "rocemon_packets_total", &hook).unwrap_or(0.0) >= 24.0
        })
        .unwrap();
    assert_totals_equal(&body, &hook, &e);
    assert_eq!(
        metric_sum(&body, "rocemon_slow_path_frames_total", &hook),
        0.0,
        "jumbo frames through the slow program"
    );
    let got = wait_api_flows(ns, ADDR, "tc_ingress", &e.flows);
    assert_eq!(got, e.flows, "jumbo frames per flow vs tshark");
    agent.stop_ok();
}

//! The flow cache stepping aside in the running agent (`agent_common::cache_mode`): 10,000
//! RoCE flows taking turns through a veth pair, the real `rocemon run` on the receiving end,
//! its polls judge the cache and `rocemon_flow_cache_cpus` shows it off on the CPU that
//! counts them while every flow is in its flow table; with the traffic gone it comes back
//! on. (The counts through every mode are checked against the host's in
//! `kernel_cache_mode.rs` and by the kernel differential fuzzer.)

use rocemon_testkit::frames::Roce;
use rocemon_testkit::netns::{run_args, try_metric_sum, Agent, VethPair};
use rocemon_testkit::sender::Sender;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9446";
/// More flows than the cache's 4,096 slots a CPU.
const FLOWS: u32 = 10_000;

/// CPUs in `mode` on `iface` in a scrape.
fn cpus(body: &str, iface: &str, mode: &str) -> f64 {
    try_metric_sum(
        body,
        "rocemon_flow_cache_cpus",
        &[("iface", iface), ("mode", mode)],
    )
    .unwrap_or(0.0)
}

/// One packet of each flow in turn (flows by destination QP).
fn round(pair: &VethPair) -> Vec<(u64, Vec<u8>)> {
    let (src, dst) = (pair.b_ip.parse().unwrap(), pair.a_ip.parse().unwrap());
    (0..FLOWS)
        .map(|i| {
            let mut r = Roce::new(src, dst, 0xC001, 0x100 + i, 0x0A);
            r.payload = 64;
            r.dma_len = 64;
            (0, r.frame())
        })
        .collect()
}

#[test]
fn with_more_flows_than_slots_the_agent_turns_the_cache_off_and_back_on() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let pair = VethPair::new("rcfc").unwrap();
    let (ns, iface) = (&pair.ns_a, &pair.a_if);
    let mut args = run_args(iface, ADDR, "100");
    args.extend(["--hooks", "xdp"]);
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    agent.wait_ready(ns, ADDR).unwrap();
    let frames = round(&pair);
    let sender = Sender::start(
        &pair.ns_b,
        &pair.b_if,
        Some(20_000),
        Duration::from_millis(500),
        move |_| frames.clone(),
    )
    .unwrap();
    // Off on a CPU while every flow has been seen (a round sent whole).
    let flows = |b: &str| try_metric_sum(b, "rocemon_flows", &[("iface", iface)]).unwrap_or(0.0);
    let off = agent.wait_metrics(ns, ADDR, Duration::from_secs(60), |b| {
        cpus(b, iface, "off") >= 1.0 && flows(b) >= f64::from(FLOWS)
    });
    sender.finish().unwrap();
    let off = off.unwrap();
    let online = cpus(&off, iface, "on") + cpus(&off, iface, "draining") + cpus(&off, iface, "off");
    assert!(online >= 1.0, "every online CPU in one mode:\n{off}");
    // Off for 16 polls, then tried again: every CPU on.
    let back = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(60), |b| {
            cpus(b, iface, "on") == online
        })
        .unwrap();
    assert!(
        flows(&back) >= f64::from(FLOWS),
        "every flow still held once the cache is back:\n{back}"
    );
    agent.stop_ok();
}

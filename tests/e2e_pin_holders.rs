//! Pinned links that another process holds open: removing a link's pin does not take the
//! link off its device while any descriptor of it is open (and even without one, the kernel
//! releases it from a work queue, a moment later). rocemon detaches such links itself
//! (`BPF_LINK_DETACH`) before it removes their pins, so a mode change attaches in the new
//! mode and `rocemon detach` leaves no program running, whoever else holds the link.

#[path = "support/pins.rs"]
mod pins;

use pins::{own_bpffs, pinned_args, wait_ready, ADDR, BIN, XDP_AND_TC};
use rocemon_testkit::bpf_links::{hold_pinned, link_details};
use rocemon_testkit::fixtures;
use rocemon_testkit::netns::{run, try_metric_sum, Agent, VethPair};
use std::time::Duration;

/// The XDP link pinned in native mode is held open elsewhere when the agent is started again
/// in skb mode: the agent takes the old link off the device and attaches in skb mode
/// (before, the kernel refused: native and generic XDP cannot run at once, and the agent
/// exited with status 2), and counts every packet of a replay there.
#[test]
fn a_mode_change_replaces_a_link_held_open_elsewhere() {
    let Some((_dir, _fs, pin_dir, path, e)) = own_bpffs("rocemon-holdmode", &fixtures::rc_ipv4())
    else {
        return;
    };
    let pin = pin_dir.to_str().unwrap();
    let pair = VethPair::new("rchmode").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let mut agent = Agent::start(ns, BIN, &pinned_args(ifn, pin, "xdp", "native")).unwrap();
    wait_ready(ns, &mut agent);
    agent.stop_ok();
    let _holder = hold_pinned(&pin_dir.join(ifn.as_str()).join("link_xdp@native")).unwrap();

    let mut agent = Agent::start(ns, BIN, &pinned_args(ifn, pin, "xdp", "skb")).unwrap();
    let skb = |b: &str| {
        try_metric_sum(
            b,
            "rocemon_attached",
            &[("hook", "xdp"), ("mode", "skb"), ("iface", ifn.as_str())],
        ) == Some(1.0)
    };
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(30), skb)
        .unwrap();
    let link = link_details(ns, ifn).unwrap();
    assert!(link.contains("xdpgeneric"), "XDP in skb mode: {link}");
    pair.replay_from_b(&path).unwrap();
    let packets = |b: &str| {
        try_metric_sum(
            b,
            "rocemon_packets_total",
            &[("hook", "xdp"), ("iface", ifn.as_str())],
        )
        .unwrap_or(0.0) as u64
    };
    let body = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(30), |b| {
            packets(b) >= e.roce_packets
        })
        .unwrap();
    assert_eq!(packets(&body), e.roce_packets, "counted in skb mode");
    let log = agent.stop_ok();
    assert!(log.contains("XDP mode changes from native to skb"), "{log}");
    run(BIN, &["detach", "--pin-dir", pin]).unwrap();
}

/// Both links of a stopped agent are held open elsewhere when `rocemon detach` runs: no
/// XDP or tc program of rocemon's is left on the device afterwards (before, both kept
/// running until the holder closed them), and the pins are gone.
#[test]
fn detach_takes_programs_off_links_held_open_elsewhere() {
    let Some((_dir, _fs, pin_dir, _path, _e)) =
        own_bpffs("rocemon-holddetach", &fixtures::rc_ipv4())
    else {
        return;
    };
    let pin = pin_dir.to_str().unwrap();
    let pair = VethPair::new("rchdet").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let mut agent = Agent::start(ns, BIN, &pinned_args(ifn, pin, XDP_AND_TC, "native")).unwrap();
    wait_ready(ns, &mut agent);
    agent.stop_ok();
    let iface_pins = pin_dir.join(ifn.as_str());
    let holders = [
        hold_pinned(&iface_pins.join("link_xdp@native")).unwrap(),
        hold_pinned(&iface_pins.join("link_tc_ingress@tcx")).unwrap(),
    ];
    for h in &holders {
        assert_ne!(link_ifindex(h), 0, "attached before the detach");
    }

    run(BIN, &["detach", "--pin-dir", pin]).unwrap();
    assert!(!pin_dir.exists(), "pins left after detach");
    let link = link_details(ns, ifn).unwrap();
    assert!(!link.contains("prog/xdp"), "XDP left after detach: {link}");
    // The kernel's word for both links, XDP and TCX alike: a link off its device reads
    // interface index 0 (bpftool 7.1 does not list TCX links by device).
    for (h, name) in holders.iter().zip(["xdp", "tc_ingress"]) {
        assert_eq!(
            link_ifindex(h),
            0,
            "{name} still on its device after detach"
        );
    }
}

/// The interface index the link behind descriptor `fd` is attached to (its fdinfo), 0 once
/// it is off its device.
fn link_ifindex(fd: &std::os::fd::OwnedFd) -> u32 {
    use std::os::fd::AsRawFd;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("ifindex:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ifindex in the link's fdinfo: {info}"))
}

//! End to end with pins, in network namespaces: counting goes on across agent restarts and
//! while no agent runs (maps, links and the slow program's arrays pinned on a bpffs of the
//! test's own), `rocemon detach` leaves nothing, and interfaces that go and come back are
//! counted again.

#[path = "support/pins.rs"]
mod pins;

use pins::{own_bpffs, pinned_args, wait_ready, PinnedLab, ADDR, BIN, XDP_AND_TC};
use rocemon_testkit::bpf_links::{link_details, links_alive, pinned_links, wait_links_gone};
use rocemon_testkit::fixtures;
use rocemon_testkit::netns::{http_get_in, metric_sum, run, try_metric_sum, Agent, VethPair};
use std::time::Duration;

/// Counters survive a restart: maps and links pinned on a bpffs of the test's own (mounted in a
/// temporary directory, so nothing touches the host's /sys/fs/bpf), traffic sent while no
/// agent runs is still counted, Prometheus counters continue from where they were, and
/// `rocemon detach` leaves no program, link or pin behind.
#[test]
fn pinned_counters_survive_a_restart_and_detach_removes_everything() {
    let Some((_dir, fs, pin_dir, path, e)) = own_bpffs("rocemon-pin", &fixtures::rc_ipv4()) else {
        return;
    };
    let bpffs = fs.path().to_path_buf();
    let pin = pin_dir.to_str().unwrap();

    let pair = VethPair::new("rcpin").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let args = pinned_args(ifn, pin, XDP_AND_TC, "native");
    // Zero before the first packet is counted (the series appear with their opcode label).
    let packets = |body: &str, hook: &str| {
        try_metric_sum(
            body,
            "rocemon_packets_total",
            &[("hook", hook), ("iface", ifn.as_str())],
        )
        .unwrap_or(0.0) as u64
    };
    let wait_for = |agent: &mut Agent, want: u64| {
        agent
            .wait_metrics(ns, ADDR, Duration::from_secs(20), |b| {
                packets(b, "xdp") >= want && packets(b, "tc_ingress") >= want
            })
            .unwrap()
    };

    // Run 1: one replay.
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    wait_ready(ns, &mut agent);
    pair.replay_from_b(&path).unwrap();
    let body = wait_for(&mut agent, e.roce_packets);
    assert_eq!(packets(&body, "xdp"), e.roce_packets);
    let stderr = agent.stop_ok();
    assert!(stderr.contains("stay attached"), "{stderr}");
    let iface_pins = pin_dir.join(ifn.as_str());
    let run1 = pinned_links(&iface_pins).unwrap();
    assert_eq!(
        run1.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["link_tc_ingress@tcx", "link_xdp@native"]
    );

    // No agent: the pinned programs keep counting into the pinned maps.
    let link = link_details(ns, ifn).unwrap();
    assert!(
        link.contains("prog/xdp"),
        "XDP must stay attached between runs: {link}"
    );
    pair.replay_from_b(&path).unwrap();

    // Run 2: takes over the links and maps; Prometheus counters continue (3 replays so far
    // after the next one), nothing sent while no agent ran is missing.
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    let body = wait_for(&mut agent, 2 * e.roce_packets);
    assert_eq!(
        packets(&body, "xdp"),
        2 * e.roce_packets,
        "counted while no agent ran"
    );
    assert_eq!(packets(&body, "tc_ingress"), 2 * e.roce_packets);
    // Per flow too: what the old programs counted while no agent ran sat in the flow cache's
    // slots (pinned with the flow maps); the new agent flushed them into the maps.
    let (_, doc) = http_get_in(ns, ADDR, "/api/v1/flows?limit=100000").unwrap();
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    let got: std::collections::BTreeMap<(String, String, u16, u32), u64> = doc["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["hook"] == "xdp")
        .map(|f| {
            (
                (
                    f["src"].as_str().unwrap().to_string(),
                    f["dst"].as_str().unwrap().to_string(),
                    f["sport"].as_u64().unwrap() as u16,
                    f["dest_qp"].as_u64().unwrap() as u32,
                ),
                f["packets"].as_u64().unwrap(),
            )
        })
        .collect();
    // Each flow twice what tshark sees in the capture (two replays).
    let want: std::collections::BTreeMap<_, _> = e
        .flows
        .iter()
        .map(|(k, f)| (k.clone(), 2 * f.packets))
        .collect();
    assert_eq!(got, want, "XDP flows after the restart");
    pair.replay_from_b(&path).unwrap();
    let body = wait_for(&mut agent, 3 * e.roce_packets);
    assert_eq!(packets(&body, "xdp"), 3 * e.roce_packets);
    assert_eq!(
        metric_sum(
            &body,
            "rocemon_ecn_packets_total",
            &[("hook", "xdp"), ("codepoint", "ce")]
        ) as u64,
        3 * e.ecn[3]
    );
    assert_eq!(
        metric_sum(
            &body,
            "rocemon_attached",
            &[("hook", "xdp"), ("mode", "native")]
        ),
        1.0
    );
    let stderr = agent.stop_ok();
    assert!(stderr.contains("took over the link"), "{stderr}");
    // The same two links (same ids), each now running a program of run 2 (a new prog_id
    // from the kernel, not the agent's word).
    let run2 = pinned_links(&iface_pins).unwrap();
    assert_eq!(run2.len(), 2, "{run2:?}");
    for ((n1, l1), (n2, l2)) in run1.iter().zip(&run2) {
        assert_eq!(n1, n2, "n1 {n1:?}, l1 {l1:?}, n2 {n2:?}, l2 {l2:?}");
        assert_eq!(l1.id, l2.id, "{n1}: the link itself stays");
        assert_ne!(
            l1.prog_id, l2.prog_id,
            "{n1}: the link runs the new program"
        );
        assert_eq!(
            l1.prog_name, l2.prog_name,
            "n1 {n1:?}, l1 {l1:?}, n2 {n2:?}, l2 {l2:?}"
        );
    }

    // Run 3, reconfigured: XDP in skb mode only. The tc link goes (it is no longer
    // configured), the XDP link is replaced in the new mode, and the maps (so the counts) stay.
    let args3 = pinned_args(ifn, pin, "xdp", "skb");
    let mut agent = Agent::start(ns, BIN, &args3).unwrap();
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(20), |b| {
            packets(b, "xdp") >= 3 * e.roce_packets
        })
        .unwrap();
    pair.replay_from_b(&path).unwrap();
    let body = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(20), |b| {
            packets(b, "xdp") >= 4 * e.roce_packets
        })
        .unwrap();
    assert_eq!(packets(&body, "xdp"), 4 * e.roce_packets);
    assert_eq!(
        metric_sum(
            &body,
            "rocemon_attached",
            &[("hook", "xdp"), ("mode", "skb")]
        ),
        1.0
    );
    let link = link_details(ns, ifn).unwrap();
    assert!(link.contains("xdpgeneric"), "XDP now in skb mode: {link}");
    let stderr = agent.stop_ok();
    assert!(
        stderr.contains("XDP mode changes from native to skb"),
        "{stderr}"
    );
    assert!(stderr.contains("detaching tc_ingress"), "{stderr}");
    let run3 = pinned_links(&iface_pins).unwrap();
    assert_eq!(
        run3.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["link_xdp@skb"],
        "the tc link is gone, XDP has a new link in skb mode"
    );
    let mut all: Vec<u64> = run1
        .iter()
        .chain(&run2)
        .chain(&run3)
        .map(|(_, l)| l.id)
        .collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        links_alive(&all).unwrap(),
        [run3[0].1.id],
        "only the new XDP link is left of this test's links"
    );

    // --no-pin while pins exist: refused, naming the fix.
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, BIN, "run", "--no-pin", "--iface", ifn])
        .args(["--listen", ADDR, "--pin-dir", pin])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rocemon detach"));

    // Detach: no program, link or pin left.
    let out = run(BIN, &["detach", "--pin-dir", pin]).unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(ifn.as_str()));
    assert!(
        !pin_dir.exists(),
        "pins left: {:?}",
        std::fs::read_dir(&bpffs).map(|d| d.count())
    );
    let link = link_details(ns, ifn).unwrap();
    assert!(!link.contains("prog/xdp"), "XDP left after detach: {link}");
    // Links are freed once their last reference (the pin) is gone; give the kernel a moment.
    let left = wait_links_gone(&all, Duration::from_secs(30)).unwrap();
    assert!(left.is_empty(), "links left after detach: {left:?}");
}

/// The slow program outlives the agent too: the program arrays that hold it are pinned with
/// the maps (the kernel empties a program array when its last user reference closes, which
/// would leave the pinned fast programs without their slow path). Mirror and tunnel frames
/// sent while no agent runs are counted by the slow program: the next agent shows them all,
/// through the slow path and none unreachable, equal to tshark.
#[test]
fn the_slow_path_keeps_counting_while_no_agent_runs() {
    let fx = fixtures::tunnels();
    let Some((_dir, _fs, pin_dir, path, e)) = own_bpffs("rocemon-slowpin", &fx) else {
        return;
    };
    let pin = pin_dir.to_str().unwrap();
    // The frames the fast path hands on, by the host's own fast path.
    let slow = fx
        .records()
        .filter(|(_, _, f)| agent_common::fast::parse_fast(&agent_common::SliceReader(f)).is_none())
        .count() as u64;
    assert!(slow > 0, "the tunnel fixture must exercise the slow path");

    let pair = VethPair::new("rcslow").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    pair.without_ipv6().unwrap();
    let args = pinned_args(ifn, pin, XDP_AND_TC, "native");
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    wait_ready(ns, &mut agent);
    agent.stop_ok();

    // No agent: only the pinned links, maps and program arrays are left.
    pair.replay_from_b(&path).unwrap();

    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    let sum = |b: &str, m: &str, hook: &str| {
        try_metric_sum(b, m, &[("hook", hook), ("iface", ifn.as_str())]).unwrap_or(0.0) as u64
    };
    let body = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(20), |b| {
            sum(b, "rocemon_packets_total", "xdp") >= e.roce_packets
                && sum(b, "rocemon_packets_total", "tc_ingress") >= e.roce_packets
        })
        .unwrap();
    for hook in ["xdp", "tc_ingress"] {
        assert_eq!(
            sum(&body, "rocemon_packets_total", hook),
            e.roce_packets,
            "{hook}: RoCE packets counted while no agent ran"
        );
        assert_eq!(
            sum(&body, "rocemon_slow_path_frames_total", hook),
            slow,
            "{hook}: frames through the slow program"
        );
        assert_eq!(
            sum(&body, "rocemon_slow_path_unreachable_total", hook),
            0,
            "{hook}: the slow program must stay reachable"
        );
    }
    agent.stop_ok();
    run(BIN, &["detach", "--pin-dir", pin]).unwrap();
    assert!(!pin_dir.exists(), "pins left after detach");
}

/// An interface that goes away and comes back under the same name (deleted and re-created:
/// a driver reset, a re-created VF) is attached again and counted over the pinned maps (the
/// counts continue); while it is gone the agent says so. An MTU change keeps counting, and an
/// interface renamed away and back is followed by name.
#[test]
fn interfaces_that_go_and_come_back_are_counted_again() {
    let Some(mut lab) = PinnedLab::start("rocemon-relink", "rcrelink") else {
        return;
    };
    let (ns, ifn) = (lab.pair.ns_a.clone(), lab.pair.a_if.clone());
    let (ns, ifn) = (&ns, &ifn);
    let up = |b: &str| try_metric_sum(b, "rocemon_interface_up", &[("iface", ifn.as_str())]);
    let attached =
        |b: &str| try_metric_sum(b, "rocemon_attached", &[("iface", ifn.as_str())]).unwrap_or(-1.0);
    let send_and_count = |lab: &mut PinnedLab, step: &str| {
        let body = lab.send_and_count(step);
        assert_eq!(up(&body), Some(1.0), "{step}");
        assert_eq!(attached(&body), 2.0, "{step}: both programs attached");
    };
    send_and_count(&mut lab, "first attach");

    // Deleted: the agent notices (link events), says so, and marks it down.
    lab.pair.delete_link().unwrap();
    let body = lab
        .agent
        .wait_metrics(ns, ADDR, Duration::from_secs(10), |b| up(b) == Some(0.0))
        .unwrap();
    assert_eq!(attached(&body), 0.0, "no program attached while it is gone");
    // Re-created under the same names (new interface indexes): attached and counted again,
    // on top of the pinned counts.
    lab.pair.create_link(1).unwrap();
    lab.agent
        .wait_metrics(ns, ADDR, Duration::from_secs(10), |b| up(b) == Some(1.0))
        .unwrap();
    send_and_count(&mut lab, "after re-creation");

    // MTU change: counting continues.
    run("ip", &["-n", ns, "link", "set", ifn, "mtu", "4000"]).unwrap();
    send_and_count(&mut lab, "after an MTU change");

    // Renamed away: gone (programs detached from the renamed device); renamed back: counted.
    let other = format!("{ifn}x");
    run("ip", &["-n", ns, "link", "set", ifn, "down"]).unwrap();
    run("ip", &["-n", ns, "link", "set", ifn, "name", &other]).unwrap();
    lab.agent
        .wait_metrics(ns, ADDR, Duration::from_secs(10), |b| up(b) == Some(0.0))
        .unwrap();
    let link = link_details(ns, &other).unwrap();
    assert!(
        !link.contains("prog/xdp"),
        "XDP left on the renamed device: {link}"
    );
    run("ip", &["-n", ns, "link", "set", &other, "name", ifn]).unwrap();
    run("ip", &["-n", ns, "link", "set", ifn, "up"]).unwrap();
    lab.agent
        .wait_metrics(ns, ADDR, Duration::from_secs(10), |b| up(b) == Some(1.0))
        .unwrap();
    // Wait for the link to carry (operationally up on both ends) before replaying.
    let t = std::time::Instant::now();
    while !link_details(ns, ifn).unwrap().contains("state UP") {
        assert!(t.elapsed() < Duration::from_secs(30), "{ifn} never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    send_and_count(&mut lab, "after a rename away and back");

    let log = lab.agent.stop_ok();
    assert!(log.contains("is gone"), "{log}");
    assert!(log.contains("is back"), "{log}");
    assert!(log.contains("MTU of"), "{log}");
    let out = std::process::Command::new(BIN)
        .args(["detach", "--pin-dir", lab.pin_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
}

/// The interface index of `ifn` in namespace `ns`.
fn ifindex_in(ns: &str, ifn: &str) -> u32 {
    let out = run("ip", &["-n", ns, "-o", "link", "show", ifn]).unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split(':')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no index in {text:?}"))
}

/// An interface deleted and created again under the same index while the agent was stopped
/// (SIGSTOP): comparing indexes cannot tell the new device from the old one, which had taken
/// rocemon's programs with it (3 of 500 frames were counted, `rocemon_attached` stayed 1).
/// The agent sees that its BPF links lost their device, says so and attaches again; the
/// counts continue over the pinned maps.
#[test]
fn an_interface_re_created_under_the_same_index_is_attached_again() {
    let Some(mut lab) = PinnedLab::start("rocemon-sameidx", "rcsame") else {
        return;
    };
    let (ns, ifn) = (lab.pair.ns_a.clone(), lab.pair.a_if.clone());
    let (ns, ifn) = (ns.as_str(), ifn.as_str());
    lab.send_and_count("first attach");
    let index = ifindex_in(ns, ifn);
    let iface_pins = lab.pin_dir.join(ifn);
    let before = pinned_links(&iface_pins).unwrap();
    assert_eq!(before.len(), 2, "{before:?}");
    let pid = lab.agent.pid().unwrap().to_string();
    run("kill", &["-STOP", &pid]).unwrap();
    lab.pair.delete_link().unwrap();
    lab.pair.create_link_indexed(1, Some(index)).unwrap();
    assert_eq!(
        ifindex_in(ns, ifn),
        index,
        "re-created under the same index"
    );
    run("kill", &["-CONT", &pid]).unwrap();
    // Attached again: both link pins are new links (the old ones lost their device).
    let old: Vec<u64> = before.iter().map(|(_, l)| l.id).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = pinned_links(&iface_pins).unwrap_or_default();
        if now.len() == 2 && now.iter().all(|(_, l)| !old.contains(&l.id)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not attached again: links {now:?}, before {before:?}"
        );
        assert!(lab.agent.try_wait().is_none(), "rocemon exited");
        std::thread::sleep(Duration::from_millis(100));
    }
    lab.send_and_count("after re-creation under the same index");
    let link = link_details(ns, ifn).unwrap();
    assert!(link.contains("prog/xdp"), "XDP attached again: {link}");
    let log = lab.agent.stop_ok();
    assert!(
        log.contains("no longer runs rocemon's programs"),
        "the agent says what happened: {log}"
    );
    // Stopping names the command that removes the pins as this agent was run.
    assert!(
        log.contains(&format!(
            "`rocemon detach --pin-dir {}` removes them",
            lab.pin_dir.display()
        )),
        "{log}"
    );
    let out = std::process::Command::new(BIN)
        .args(["detach", "--pin-dir", lab.pin_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
}

//! End to end in network namespaces: the real `rocemon run` attached to one end of a veth
//! pair (XDP native, XDP skb, tc ingress, tc egress), fixture traffic replayed with tcpreplay,
//! `/metrics` scraped over HTTP, counts equal tshark's for what was sent, clean detach.

use rocemon_testkit::netns::{
    http_get_in, link_details, links_alive, metric_labels, metric_sum, pinned_links, run,
    try_metric_sum, wait_links_gone, Agent, BpfFs, VethPair,
};
use rocemon_testkit::{fixtures, require_root, require_tshark, tshark, TempDir};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

fn can_run() -> bool {
    if !require_root("a namespace end-to-end test (ip netns, BPF)") {
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
    /// `rocemon run` arguments besides the interface, address and polling.
    args: &'static [&'static str],
    /// Watch the sender's interface (tc egress) instead of the receiver's.
    on_sender: bool,
    hook_label: &'static str,
}

/// The fixtures every hook case replays, written once per test binary, and tshark's sums.
fn hook_fixtures() -> &'static (Vec<std::path::PathBuf>, tshark::Expected) {
    static F: std::sync::OnceLock<(Vec<std::path::PathBuf>, tshark::Expected)> =
        std::sync::OnceLock::new();
    F.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-hooks");
        std::fs::create_dir_all(&dir).unwrap();
        let mut sent = Vec::new();
        let mut expected = tshark::Expected::default();
        for fx in [
            fixtures::rc_ipv4(),
            fixtures::mixed_ipv6_vlan(),
            fixtures::many_flows(),
            fixtures::tunnels(),
        ] {
            assert!(fx.replayable);
            let p = fx.write(&dir).unwrap();
            let e = tshark::expected(&p).unwrap();
            expected.frames += e.frames;
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
            for (k, f) in e.flows {
                let x = expected.flows.entry(k).or_default();
                x.packets += f.packets;
                x.bytes += f.bytes;
                x.ecn_ce += f.ecn_ce;
                x.cnp += f.cnp;
            }
            for (k, n) in e.sessions {
                *expected.sessions.entry(k).or_default() += n;
            }
            expected.port_4791_without_bth += e.port_4791_without_bth;
            sent.push(p);
        }
        (sent, expected)
    })
}

#[test]
fn counts_equal_tshark_xdp_native() {
    hook_case(Case {
        name: "xdp native",
        args: &["--hooks", "xdp", "--xdp-mode", "native"],
        on_sender: false,
        hook_label: "xdp",
    });
}

#[test]
fn counts_equal_tshark_xdp_skb() {
    hook_case(Case {
        name: "xdp skb",
        args: &["--hooks", "xdp", "--xdp-mode", "skb"],
        on_sender: false,
        hook_label: "xdp",
    });
}

#[test]
fn counts_equal_tshark_tc_ingress() {
    hook_case(Case {
        name: "tc ingress",
        args: &["--hooks", "tc-ingress"],
        on_sender: false,
        hook_label: "tc_ingress",
    });
}

#[test]
fn counts_equal_tshark_tc_egress() {
    hook_case(Case {
        name: "tc egress",
        args: &["--hooks", "tc-egress"],
        on_sender: true,
        hook_label: "tc_egress",
    });
}

#[test]
fn counts_equal_tshark_afxdp_copy_xdp_native() {
    hook_case(Case {
        name: "afxdp copy (xdp native)",
        args: &[
            "--capture",
            "afxdp",
            "--afxdp-mode",
            "copy",
            "--xdp-mode",
            "native",
        ],
        on_sender: false,
        hook_label: "afxdp",
    });
}

#[test]
fn counts_equal_tshark_afxdp_auto_xdp_skb() {
    hook_case(Case {
        name: "afxdp auto (xdp skb)",
        args: &["--capture", "afxdp", "--xdp-mode", "skb"],
        on_sender: false,
        hook_label: "afxdp",
    });
}

/// One hook: the real agent on a veth, every fixture replayed, `/metrics` equal to tshark,
/// nothing attached after SIGTERM.
fn hook_case(c: Case) {
    if !can_run() {
        return;
    }
    require_tshark();
    let (sent, expected) = hook_fixtures();
    let pair = VethPair::new("rce2e").unwrap();
    let (ns, ifn) = if c.on_sender {
        (&pair.ns_b, &pair.b_if)
    } else {
        (&pair.ns_a, &pair.a_if)
    };
    // --no-pin: everything must end with the process (checked below).
    let mut args = vec![
        "run",
        "--no-pin",
        "--iface",
        ifn,
        "--listen",
        ADDR,
        "--poll-interval-ms",
        "100",
        "--top-k",
        "5",
    ];
    args.extend_from_slice(c.args);
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    let ready = wait_ready(ns, &mut agent);
    let xdp_mode = c
        .args
        .iter()
        .position(|a| *a == "--xdp-mode")
        .map(|i| c.args[i + 1]);
    if let Some(mode) = xdp_mode {
        let link = link_details(ns, ifn).unwrap();
        let first = link.lines().next().unwrap_or_default();
        let want = if mode == "native" {
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
    if c.hook_label == "afxdp" {
        // Veth has no zero-copy AF_XDP: auto must have chosen copy mode.
        assert_eq!(
            metric_sum(
                &ready,
                "rocemon_afxdp_socket",
                &[("mode", "copy"), ("queue", "0")]
            ),
            1.0,
            "{}: one copy-mode socket on queue 0:\n{ready}",
            c.name
        );
        // Everything that is not RoCE still reaches the stack.
        let ping = pair
            .exec(
                &pair.ns_b,
                "ping",
                &["-c", "2", "-W", "2", "-i", "0.2", &pair.a_ip],
            )
            .unwrap();
        assert!(
            ping.status.success(),
            "{}: ping through the capture program failed",
            c.name
        );
    }
    for p in sent.iter() {
        pair.replay_from_b(p).unwrap();
    }
    let want = expected.roce_packets as f64;
    let t = Instant::now();
    let body = loop {
        let b = scrape(ns).unwrap_or_default();
        if try_metric_sum(&b, "rocemon_packets_total", &[("hook", c.hook_label)]).unwrap_or(0.0)
            >= want
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
    // Per flow, from the JSON API: packets, bytes, CE marks and CNPs equal tshark's. The API
    // view is rebuilt at every poll (and AF_XDP's queue readers hand over their flows at
    // their own pace): wait for it to hold every flow, then compare.
    let api_flows = || -> BTreeMap<(String, String, u16, u32), tshark::FlowExpect> {
        let (status, flows_json) = http_get_in(ns, ADDR, "/api/v1/flows").unwrap();
        assert_eq!(status, 200);
        let doc: serde_json::Value = serde_json::from_str(&flows_json).unwrap();
        doc["flows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["hook"] == c.hook_label)
            .map(|f| {
                let n = |k: &str| f[k].as_u64().unwrap();
                (
                    (
                        f["src"].as_str().unwrap().to_string(),
                        f["dst"].as_str().unwrap().to_string(),
                        n("sport") as u16,
                        n("dest_qp") as u32,
                    ),
                    tshark::FlowExpect {
                        packets: n("packets"),
                        bytes: n("bytes"),
                        ecn_ce: n("ecn_ce"),
                        cnp: n("cnp"),
                    },
                )
            })
            .collect()
    };
    let t = Instant::now();
    let got = loop {
        let got = api_flows();
        if got == expected.flows || t.elapsed() > Duration::from_secs(10) {
            break got;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if got != expected.flows {
        let missing: Vec<_> = expected
            .flows
            .keys()
            .filter(|k| !got.contains_key(*k))
            .take(5)
            .collect();
        let (_, log) = agent.stop().unwrap();
        panic!(
            "{}: per-flow counts vs tshark: {} flows from the API, {} from tshark (missing e.g. {missing:?}); agent log:\n{log}",
            c.name,
            got.len(),
            expected.flows.len()
        );
    }
    let top = metric_labels(&body, "rocemon_flow_rate_bytes_per_second", "dest_qp");
    assert_eq!(top.len(), 5, "{}: top-K series", c.name);
    assert_eq!(f("rocemon_map_update_errors_total", &[]), 0);
    // Mirror sessions / tunnel ids, against tshark's decode of the outer headers.
    for ((kind, id), n) in &expected.sessions {
        let id = id.to_string();
        assert_eq!(
            f(
                "rocemon_session_packets_total",
                &[("tunnel", kind), ("session", &id)]
            ),
            *n,
            "{}: session {kind} {id}",
            c.name
        );
    }
    if c.hook_label == "afxdp" {
        let a = |name: &str, extra: &[(&str, &str)]| {
            let mut l = vec![("iface", ifn.as_str())];
            l.extend_from_slice(extra);
            metric_sum(&body, name, &l) as u64
        };
        // The sockets got the RoCE frames (tshark), the frames to port 4791 whose BTH is cut
        // (tshark) and the broken mirror encapsulations (their reasons), and nothing else.
        let broken_mirrors: u64 = ["bad_gre", "bad_vxlan", "truncated_erspan"]
            .iter()
            .map(|r| f("rocemon_parse_outcomes_total", &[("outcome", r)]))
            .sum();
        assert_eq!(
            a("rocemon_afxdp_frames_total", &[]),
            expected.roce_packets + expected.port_4791_without_bth + broken_mirrors,
            "{}: AF_XDP frames",
            c.name
        );
        assert_eq!(
            a("rocemon_afxdp_dropped_frames_total", &[]),
            0,
            "{}: drops",
            c.name
        );
        assert_eq!(
            a("rocemon_afxdp_redirect_failures_total", &[]),
            0,
            "{}: redirect failures",
            c.name
        );
        assert!(
            f("rocemon_parse_outcomes_total", &[("kind", "not_roce")]) > 0,
            "{}: the kernel side counted the ping and neighbour frames",
            c.name
        );
    }
    assert!(body.contains("rocemon_build_info{"));
    assert!(body.contains("rocemon_poll_duration_seconds_count"));
    // The kernel's own statistics of the program (rocemon turned them on): at least one run
    // per frame replayed, and time spent.
    let program = [("hook", c.hook_label)];
    let runs = metric_sum(&body, "rocemon_program_runs_total", &program) as u64;
    assert!(
        runs >= expected.frames,
        "{}: {runs} program runs for {} frames",
        c.name,
        expected.frames
    );
    assert!(metric_sum(&body, "rocemon_program_run_seconds_total", &program) > 0.0);

    // This agent's own links (other tests attach theirs in parallel).
    let own = agent.link_ids().unwrap();
    assert!(!own.is_empty(), "{}: the agent holds no BPF link", c.name);
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{}: exit {status}: {stderr}", c.name);
    let link = link_details(ns, ifn).unwrap();
    assert!(
        !link.contains("prog/xdp"),
        "{}: XDP still attached after SIGTERM",
        c.name
    );
    let left = wait_links_gone(&own, Duration::from_secs(5)).unwrap();
    assert!(
        left.is_empty(),
        "{}: links left after SIGTERM: {left:?}",
        c.name
    );
}

/// AF_XDP with jumbo frames (4 KiB RDMA payloads, plain and inside ERSPAN): every frame spans
/// several buffers, arrives as several descriptors, and must count as one frame of its full
/// length, equal to tshark. Then zero-copy forced on veth (which has none): a clear usage
/// error, exit status 2.
#[test]
fn afxdp_counts_jumbo_frames_and_refuses_zero_copy_where_the_driver_has_none() {
    use rocemon_testkit::fixtures::{whole, Format};
    use rocemon_testkit::frames::{tunnel, Roce};
    if !can_run() {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-afxdp").unwrap();
    let mut frames = Vec::new();
    for i in 0..20u32 {
        let mut r = Roce::new(
            "10.77.9.1".parse().unwrap(),
            "10.77.9.2".parse().unwrap(),
            0xD000 + (i % 2) as u16,
            0x90 + i % 2,
            0x0A,
        );
        r.psn = i;
        r.payload = 4096 + 512 * (i as usize % 4);
        r.dma_len = r.payload as u32;
        r.ecn = (i % 4) as u8;
        let f = r.frame();
        let f = if i % 3 == 0 {
            tunnel::erspan2(&f, 42, i)
        } else {
            f
        };
        frames.push((1_764_460_800_000_000_000 + u64::from(i) * 1000, f));
    }
    let fx = whole("jumbo", Format::PcapMicros, frames, true);
    let path = fx.write(dir.path()).unwrap();
    let e = tshark::expected(&path).unwrap();
    assert_eq!(e.roce_packets, 20);

    // Two receive queues: one socket each, the counts summed over them.
    let pair = VethPair::with_queues("rcxsk", 2).unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let mut agent = Agent::start(
        ns,
        BIN,
        &[
            "run",
            "--iface",
            ifn,
            "--listen",
            ADDR,
            "--poll-interval-ms",
            "100",
            "--capture",
            "afxdp",
            "--xdp-mode",
            "native",
        ],
    )
    .unwrap();
    wait_ready(ns, &mut agent);
    pair.replay_from_b(&path).unwrap();
    let t = Instant::now();
    let body = loop {
        let b = scrape(ns).unwrap_or_default();
        if try_metric_sum(&b, "rocemon_packets_total", &[("hook", "afxdp")]).unwrap_or(0.0) >= 20.0
            || t.elapsed() > Duration::from_secs(20)
        {
            break b;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let f = |name: &str, extra: &[(&str, &str)]| {
        let mut l = vec![("hook", "afxdp"), ("iface", ifn.as_str())];
        l.extend_from_slice(extra);
        metric_sum(&body, name, &l) as u64
    };
    assert_eq!(f("rocemon_packets_total", &[]), e.roce_packets);
    assert_eq!(f("rocemon_bytes_total", &[]), e.roce_bytes);
    for (i, cp) in ["not_ect", "ect1", "ect0", "ce"].iter().enumerate() {
        assert_eq!(
            f("rocemon_ecn_packets_total", &[("codepoint", cp)]),
            e.ecn[i]
        );
    }
    assert_eq!(
        f(
            "rocemon_session_packets_total",
            &[("tunnel", "erspan2"), ("session", "42")]
        ),
        e.sessions[&("erspan2".to_string(), 42)]
    );
    assert_eq!(
        metric_sum(&body, "rocemon_flows", &[("iface", ifn.as_str())]) as usize,
        e.flows.len()
    );
    assert_eq!(
        metric_sum(&body, "rocemon_afxdp_dropped_frames_total", &[]),
        0.0
    );
    for q in ["0", "1"] {
        assert_eq!(
            metric_sum(
                &body,
                "rocemon_afxdp_socket",
                &[("queue", q), ("mode", "copy")]
            ),
            1.0,
            "a socket on queue {q}"
        );
    }
    // Many flows spread over both queues (the sender's transmit hash picks the queue).
    let many = fixtures::many_flows().write(dir.path()).unwrap();
    let m = tshark::expected(&many).unwrap();
    pair.replay_from_b(&many).unwrap();
    let want = (e.roce_packets + m.roce_packets) as f64;
    let body = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(20), |b| {
            try_metric_sum(b, "rocemon_packets_total", &[("hook", "afxdp")]).unwrap_or(0.0) >= want
        })
        .unwrap();
    assert_eq!(
        metric_sum(&body, "rocemon_packets_total", &[("hook", "afxdp")]),
        want
    );
    let per_queue = metric_labels(&body, "rocemon_afxdp_frames_total", "queue");
    eprintln!("AF_XDP frames per queue: {per_queue:?}");
    assert_eq!(per_queue.len(), 2, "one socket per queue: {per_queue:?}");
    assert!(
        per_queue.iter().all(|(_, n)| *n > 0.0),
        "both queues' sockets received frames: {per_queue:?}"
    );
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "exit {status}: {stderr}");

    // Zero-copy forced: veth has no zero-copy AF_XDP support.
    let out = std::process::Command::new("ip")
        .args([
            "netns", "exec", ns, BIN, "run", "--iface", ifn, "--listen", ADDR,
        ])
        .args(["--capture", "afxdp", "--afxdp-mode", "zerocopy"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "zero-copy on veth: {stderr}");
    assert!(
        stderr.contains("zero-copy is not available") && stderr.contains("--afxdp-mode copy"),
        "zero-copy on veth must be a usage error naming the fix, got: {stderr}"
    );
    let link = link_details(ns, ifn).unwrap();
    assert!(
        !link.contains("prog/xdp"),
        "nothing stays attached after the refusal"
    );
}

/// A temporary directory with a bpffs of the test's own in it, and the pin directory on it.
fn own_bpffs(prefix: &str) -> (TempDir, BpfFs, std::path::PathBuf) {
    let dir = TempDir::new(prefix).unwrap();
    let fs = BpfFs::mount(&dir.path().join("bpffs")).unwrap();
    let pin_dir = fs.path().join("rocemon");
    (dir, fs, pin_dir)
}

/// `rocemon run` with XDP (native) and tc ingress on `ifn`, pinned under `pin`, fast polls.
fn pinned_args<'a>(ifn: &'a str, pin: &'a str) -> [&'a str; 13] {
    [
        "run",
        "--iface",
        ifn,
        "--hooks",
        "xdp,tc-ingress",
        "--xdp-mode",
        "native",
        "--listen",
        ADDR,
        "--poll-interval-ms",
        "100",
        "--pin-dir",
        pin,
    ]
}

/// Counters survive a restart: maps and links pinned on a bpffs of the test's own (mounted in a
/// temporary directory, so nothing touches the host's /sys/fs/bpf), traffic sent while no
/// agent runs is still counted, Prometheus counters continue from where they were, and
/// `rocemon detach` leaves no program, link or pin behind.
#[test]
fn pinned_counters_survive_a_restart_and_detach_removes_everything() {
    if !can_run() {
        return;
    }
    require_tshark();
    let (dir, fs, pin_dir) = own_bpffs("rocemon-pin");
    let bpffs = fs.path().to_path_buf();
    let pin = pin_dir.to_str().unwrap();
    let fx = fixtures::rc_ipv4();
    let path = fx.write(dir.path()).unwrap();
    let e = tshark::expected(&path).unwrap();

    let pair = VethPair::new("rcpin").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let args = pinned_args(ifn, pin);
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
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{stderr}");
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
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("took over the link"), "{stderr}");
    // The same two links (same ids), each now running a program of run 2 (a new prog_id
    // from the kernel, not the agent's word).
    let run2 = pinned_links(&iface_pins).unwrap();
    assert_eq!(run2.len(), 2, "{run2:?}");
    for ((n1, l1), (n2, l2)) in run1.iter().zip(&run2) {
        assert_eq!(n1, n2);
        assert_eq!(l1.id, l2.id, "{n1}: the link itself stays");
        assert_ne!(
            l1.prog_id, l2.prog_id,
            "{n1}: the link runs the new program"
        );
        assert_eq!(l1.prog_name, l2.prog_name);
    }

    // Run 3, reconfigured: XDP in skb mode only. The tc link goes (it is no longer
    // configured), the XDP link is replaced in the new mode, and the maps (so the counts) stay.
    let args3 = [
        "run",
        "--iface",
        ifn,
        "--hooks",
        "xdp",
        "--xdp-mode",
        "skb",
        "--listen",
        ADDR,
        "--poll-interval-ms",
        "100",
        "--pin-dir",
        pin,
    ];
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
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{stderr}");
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
    let left = wait_links_gone(&all, Duration::from_secs(5)).unwrap();
    assert!(left.is_empty(), "links left after detach: {left:?}");
}

/// The slow program outlives the agent too: the program arrays that hold it are pinned with
/// the maps (the kernel empties a program array when its last user reference closes, which
/// would leave the pinned fast programs without their slow path). Mirror and tunnel frames
/// sent while no agent runs are counted by the slow program: the next agent shows them all,
/// through the slow path and none unreachable, equal to tshark.
#[test]
fn the_slow_path_keeps_counting_while_no_agent_runs() {
    if !can_run() {
        return;
    }
    require_tshark();
    let (dir, _fs, pin_dir) = own_bpffs("rocemon-slowpin");
    let pin = pin_dir.to_str().unwrap();
    let fx = fixtures::tunnels();
    let path = fx.write(dir.path()).unwrap();
    let e = tshark::expected(&path).unwrap();
    // The frames the fast path hands on, by the host's own fast path.
    let slow = fx
        .records()
        .filter(|(_, _, f)| agent_common::fast::parse_fast(&agent_common::SliceReader(f)).is_none())
        .count() as u64;
    assert!(slow > 0, "the tunnel fixture must exercise the slow path");

    let pair = VethPair::new("rcslow").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    // The namespaces' own IPv6 (MLD reports carry a hop-by-hop header: slow path) would add
    // frames that are not the fixture's.
    for (n, i) in [(&pair.ns_a, &pair.a_if), (&pair.ns_b, &pair.b_if)] {
        for key in [
            "net.ipv6.conf.all.disable_ipv6=1".to_string(),
            format!("net.ipv6.conf.{i}.disable_ipv6=1"),
        ] {
            run("ip", &["netns", "exec", n, "sysctl", "-qw", &key]).unwrap();
        }
    }
    let args = pinned_args(ifn, pin);
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    wait_ready(ns, &mut agent);
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{stderr}");

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
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{stderr}");
    run(BIN, &["detach", "--pin-dir", pin]).unwrap();
    assert!(!pin_dir.exists(), "pins left after detach");
}

/// An interface that goes away and comes back under the same name (deleted and re-created:
/// a driver reset, a re-created VF) is attached again and counted over the pinned maps (the
/// counts continue); while it is gone the agent says so. An MTU change keeps counting, and an
/// interface renamed away and back is followed by name.
#[test]
fn interfaces_that_go_and_come_back_are_counted_again() {
    if !can_run() {
        return;
    }
    require_tshark();
    let (dir, _fs, pin_dir) = own_bpffs("rocemon-relink");
    let path = fixtures::rc_ipv4().write(dir.path()).unwrap();
    let e = tshark::expected(&path).unwrap();
    let pair = VethPair::new("rcrelink").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let mut agent = Agent::start(ns, BIN, &pinned_args(ifn, pin_dir.to_str().unwrap())).unwrap();
    wait_ready(ns, &mut agent);
    let packets = |b: &str, hook: &str| {
        try_metric_sum(b, "rocemon_packets_total", &[("hook", hook)]).unwrap_or(0.0) as u64
    };
    let up = |b: &str| try_metric_sum(b, "rocemon_interface_up", &[("iface", ifn.as_str())]);
    let attached =
        |b: &str| try_metric_sum(b, "rocemon_attached", &[("iface", ifn.as_str())]).unwrap_or(-1.0);
    let mut want = 0;
    let mut send_and_count = |agent: &mut Agent, step: &str| {
        pair.replay_from_b(&path).unwrap();
        want += e.roce_packets;
        let body = agent
            .wait_metrics(ns, ADDR, Duration::from_secs(20), |b| {
                packets(b, "xdp") >= want && packets(b, "tc_ingress") >= want
            })
            .unwrap_or_else(|err| panic!("{step}: {err}"));
        assert_eq!(packets(&body, "xdp"), want, "{step}: xdp");
        assert_eq!(packets(&body, "tc_ingress"), want, "{step}: tc_ingress");
        assert_eq!(up(&body), Some(1.0), "{step}");
        assert_eq!(attached(&body), 2.0, "{step}: both programs attached");
    };
    send_and_count(&mut agent, "first attach");

    // Deleted: the agent notices (link events), says so, and marks it down.
    pair.delete_link().unwrap();
    let body = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(10), |b| up(b) == Some(0.0))
        .unwrap();
    assert_eq!(attached(&body), 0.0, "no program attached while it is gone");
    // Re-created under the same names (new interface indexes): attached and counted again,
    // on top of the pinned counts.
    pair.create_link(1).unwrap();
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(10), |b| up(b) == Some(1.0))
        .unwrap();
    send_and_count(&mut agent, "after re-creation");

    // MTU change: counting continues.
    run("ip", &["-n", ns, "link", "set", ifn, "mtu", "4000"]).unwrap();
    send_and_count(&mut agent, "after an MTU change");

    // Renamed away: gone (programs detached from the renamed device); renamed back: counted.
    let other = format!("{ifn}x");
    run("ip", &["-n", ns, "link", "set", ifn, "down"]).unwrap();
    run("ip", &["-n", ns, "link", "set", ifn, "name", &other]).unwrap();
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(10), |b| up(b) == Some(0.0))
        .unwrap();
    let link = link_details(ns, &other).unwrap();
    assert!(
        !link.contains("prog/xdp"),
        "XDP left on the renamed device: {link}"
    );
    run("ip", &["-n", ns, "link", "set", &other, "name", ifn]).unwrap();
    run("ip", &["-n", ns, "link", "set", ifn, "up"]).unwrap();
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(10), |b| up(b) == Some(1.0))
        .unwrap();
    // The peer's neighbour entry may point at the old state: wait for the link to carry.
    std::thread::sleep(Duration::from_millis(200));
    send_and_count(&mut agent, "after a rename away and back");

    let (status, log) = agent.stop().unwrap();
    assert!(status.success(), "{log}");
    assert!(log.contains("is gone"), "{log}");
    assert!(log.contains("is back"), "{log}");
    assert!(log.contains("MTU of"), "{log}");
    let out = std::process::Command::new(BIN)
        .args(["detach", "--pin-dir", pin_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
}

//! End to end in network namespaces: the real `rocemon run` attached to one end of a veth
//! pair (XDP native, XDP skb, tc ingress, tc egress), fixture traffic replayed with tcpreplay,
//! `/metrics` scraped over HTTP, counts equal tshark's for what was sent, clean detach.

use rocemon_testkit::bpf_links::{link_details, wait_links_gone};
use rocemon_testkit::e2e::{api_flows, assert_totals_equal, wait_api_flows};
use rocemon_testkit::netns::{
    http_get_in, metric_labels, metric_sum, run_args, try_metric_sum, Agent, VethPair,
};
use rocemon_testkit::{fixtures, require_tshark, tshark, TempDir};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";

fn can_run() -> bool {
    rocemon_testkit::netns::can_run_e2e()
}

fn scrape(ns: &str) -> Option<String> {
    match http_get_in(ns, ADDR, "/metrics") {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

fn wait_ready(ns: &str, agent: &mut Agent) -> String {
    agent.wait_ready(ns, ADDR).unwrap()
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
            expected.add(tshark::expected(&p).unwrap());
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
    let tmp = TempDir::new("rocemon-e2e-chunks").unwrap();
    let pair = VethPair::new("rce2e").unwrap();
    let (ns, ifn) = if c.on_sender {
        (&pair.ns_b, &pair.b_if)
    } else {
        (&pair.ns_a, &pair.a_if)
    };
    // --no-pin: everything must end with the process (checked below).
    let mut args = run_args(ifn, ADDR, "100");
    args.extend(["--top-k", "5"]);
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
    if c.hook_label == "afxdp" {
        // Chunk by chunk, each taken by the socket before the next is sent: the ring never
        // holds more than a chunk, whatever the machine's load (its speed is the bench's).
        let chunks = rocemon_testkit::e2e::afxdp_chunks(sent, tmp.path());
        let mut taken = 0;
        for (part, captured) in chunks {
            pair.replay_from_b(&part).unwrap();
            taken += captured;
            let t = Instant::now();
            loop {
                let b = scrape(ns).unwrap_or_default();
                let got = try_metric_sum(&b, "rocemon_afxdp_frames_total", &[]).unwrap_or(0.0);
                let dropped =
                    try_metric_sum(&b, "rocemon_afxdp_dropped_frames_total", &[]).unwrap_or(0.0);
                if got + dropped >= taken as f64 {
                    break;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "{}: the socket took {got} of {taken} frames",
                    c.name
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    } else {
        for p in sent.iter() {
            pair.replay_from_b(p).unwrap();
        }
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
    if c.hook_label == "afxdp" {
        // A drop before the socket is its own failure, named as such.
        let dropped = try_metric_sum(&body, "rocemon_afxdp_dropped_frames_total", &[]);
        assert_eq!(
            dropped.unwrap_or(0.0),
            0.0,
            "{}: frames dropped before the socket:\n{body}",
            c.name
        );
    }
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
    let t = Instant::now();
    let got = loop {
        let got = api_flows(ns, ADDR, c.hook_label);
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
        // The sockets got the RoCE frames, the frames to port 4791 whose BTH is cut and the
        // mirror encapsulations cut in their own header (all three by tshark), and nothing
        // else.
        assert!(
            expected.broken_mirrors > 0,
            "the tunnels fixture has a cut ERSPAN"
        );
        assert_eq!(
            a("rocemon_afxdp_frames_total", &[]),
            expected.roce_packets + expected.port_4791_without_bth + expected.broken_mirrors,
            "{}: AF_XDP frames",
            c.name
        );
        let broken_mirrors: u64 = ["bad_gre", "bad_vxlan", "truncated_erspan"]
            .iter()
            .map(|r| f("rocemon_parse_outcomes_total", &[("outcome", r)]))
            .sum();
        assert_eq!(
            broken_mirrors, expected.broken_mirrors,
            "{}: broken mirrors",
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
    let left = wait_links_gone(&own, Duration::from_secs(30)).unwrap();
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
        let f = Roce::jumbo("10.77.9.1", "10.77.9.2", i, 2).frame();
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
    let mut args = run_args(ifn, ADDR, "100");
    args.extend(["--capture", "afxdp", "--xdp-mode", "native"]);
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
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
    let hook = [("hook", "afxdp"), ("iface", ifn.as_str())];
    assert_totals_equal(&body, &hook, &e);
    assert_eq!(
        metric_sum(
            &body,
            "rocemon_session_packets_total",
            &[hook[0], hook[1], ("tunnel", "erspan2"), ("session", "42")]
        ) as u64,
        e.sessions[&("erspan2".to_string(), 42)]
    );
    assert_eq!(
        metric_sum(&body, "rocemon_flows", &[("iface", ifn.as_str())]) as usize,
        e.flows.len()
    );
    // Per flow too (the queue readers hand their flows over at their own pace: wait for the
    // API to hold them all, then compare with tshark's).
    let got = wait_api_flows(ns, ADDR, "afxdp", &e.flows);
    assert_eq!(got, e.flows, "jumbo frames per flow vs tshark");
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
    agent.stop_ok();

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

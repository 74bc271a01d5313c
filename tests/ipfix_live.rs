//! IPFIX flow records from a live agent: the real `rocemon run` on one end of a veth pair,
//! fixture traffic replayed into it, its export received by pmacct's nfacctd and by a plain
//! UDP socket whose datagrams tshark decodes, both equal to tshark's count of what was sent;
//! a restarted agent starts a new session (sequence from 0, templates first) and counts
//! nothing twice.

use rocemon_testkit::e2e::api_flows;
use rocemon_testkit::ipfix::{self, Nfacctd};
use rocemon_testkit::netns::{enter_netns, http_get_in, run_args, Agent, VethPair};
use rocemon_testkit::{fixtures, metrics, require_tshark, tshark, TempDir};
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";
const NFACCTD_PORT: u16 = 4739;
const SOCKET: &str = "127.0.0.1:4740";

/// A UDP collector inside `ns`: every datagram it got.
struct Receiver {
    stop: Arc<AtomicBool>,
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Receiver {
    fn start(ns: &str) -> Receiver {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let (ns, flag, into) = (ns.to_string(), stop.clone(), got.clone());
        let thread = std::thread::spawn(move || {
            enter_netns(&ns).unwrap();
            let s = UdpSocket::bind(SOCKET).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = vec![0u8; 65_536];
            loop {
                match s.recv(&mut buf) {
                    Ok(n) => into.lock().unwrap().push(buf[..n].to_vec()),
                    // Stopped, and nothing more queued in the socket.
                    Err(_) if flag.load(Ordering::Relaxed) => break,
                    Err(_) => {}
                }
            }
        });
        ready.recv().unwrap();
        Receiver { stop, got, thread }
    }

    /// Datagrams so far, once none came for half a second (what an agent that exited sent).
    fn settled(&self) -> usize {
        let mut n = self.got.lock().unwrap().len();
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let now = self.got.lock().unwrap().len();
            if now == n {
                return n;
            }
            n = now;
        }
    }

    fn stop(self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        std::mem::take(&mut *self.got.lock().unwrap())
    }
}

/// Replays `paths` into the agent and waits until its API shows every flow of `want`.
fn replay_and_wait(
    pair: &VethPair,
    paths: &[std::path::PathBuf],
    want: &BTreeMap<(String, String, u16, u32), tshark::FlowExpect>,
) {
    for p in paths {
        pair.replay_from_b(p).unwrap();
    }
    let start = Instant::now();
    loop {
        let got = api_flows(&pair.ns_a, ADDR, "xdp");
        if &got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the agent's flows never equalled tshark's: {} of {} flows",
            got.len(),
            want.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What records add up to per flow (QP included), as tshark counts a flow.
fn flow_sums<'a>(
    records: impl IntoIterator<Item = &'a ipfix::Record>,
) -> BTreeMap<(String, String, u16, u32), tshark::FlowExpect> {
    let mut got: BTreeMap<_, tshark::FlowExpect> = BTreeMap::new();
    for r in records {
        let g = got
            .entry((r.src.clone(), r.dst.clone(), r.sport, r.roce(1) as u32))
            .or_default();
        g.packets += r.packets;
        g.bytes += r.octets;
        g.ecn_ce += r.roce(9);
        g.cnp += r.roce(10);
    }
    got
}

fn expected_of(paths: &[std::path::PathBuf]) -> tshark::Expected {
    let mut e = tshark::Expected::default();
    for p in paths {
        e.add(tshark::expected(p).unwrap());
    }
    e
}

#[test]
fn a_live_agents_records_equal_tshark_at_nfacctd_and_in_tsharks_decode_across_a_restart() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    require_tshark();
    assert!(
        ipfix::nfacctd_available(),
        "pmacct's nfacctd is not installed (Debian package pmacct; `cargo xtask setup`)"
    );
    let dir = TempDir::new("rocemon-ipfix-live").unwrap();
    let first: Vec<_> = [
        fixtures::rc_ipv4(),
        fixtures::mixed_ipv6_vlan(),
        fixtures::many_flows(),
    ]
    .into_iter()
    .map(|f| f.write(dir.path()).unwrap())
    .collect();
    let second = vec![fixtures::psn_health().write(dir.path()).unwrap()];
    let pair = VethPair::new("rcipfx").unwrap();
    let ns = pair.ns_a.clone();
    let collector = Nfacctd::start(Some(&ns), NFACCTD_PORT, dir.path()).unwrap();
    let receiver = Receiver::start(&ns);
    let mut args = run_args(&pair.a_if, ADDR, "100");
    let nf = collector.addr.clone();
    args.extend([
        "--hooks",
        "xdp",
        "--ipfix",
        &nf,
        "--ipfix",
        SOCKET,
        "--ipfix-active-timeout-seconds",
        "1",
    ]);

    // The first agent: records every second while the flows go on, the rest at its stop.
    let mut agent = Agent::start(&ns, BIN, &args).unwrap();
    agent.wait_ready(&ns, ADDR).unwrap();
    let e1 = expected_of(&first);
    replay_and_wait(&pair, &first, &e1.flows);
    let sent = |text: &str| {
        metrics::try_metric_sum(
            text,
            "rocemon_ipfix_records_total",
            &[("collector", "udp://127.0.0.1:4740"), ("result", "sent")],
        )
        .unwrap_or(0.0)
    };
    let start = Instant::now();
    loop {
        let (_, text) = http_get_in(&ns, ADDR, "/metrics").unwrap();
        if sent(&text) > 0.0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no record sent while the agent runs:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    agent.stop_ok();
    let first_session = receiver.settled();

    // A second agent (nothing pinned: new maps) and more traffic.
    let mut agent = Agent::start(&ns, BIN, &args).unwrap();
    agent.wait_ready(&ns, ADDR).unwrap();
    let e2 = expected_of(&second);
    replay_and_wait(&pair, &second, &e2.flows);
    agent.stop_ok();

    let mut want = e1;
    want.add(e2);
    // nfacctd, per 5-tuple and destination QP (rocemon's enterprise element).
    let want_totals: ipfix::Totals = want
        .flows
        .iter()
        .map(|(k, e)| (k.clone(), (e.packets, e.bytes)))
        .collect();
    assert_eq!(collector.totals().unwrap(), want_totals, "nfacctd's totals");

    // tshark's decode of every datagram, per flow (QP included), with CE marks and CNPs; each
    // agent's session decoded on its own (as a collector sees two sessions).
    let datagrams = receiver.stop();
    let (one, two) = datagrams.split_at(first_session);
    let sessions = [
        ipfix::decode_messages(one, &dir.path().join("one")).unwrap(),
        ipfix::decode_messages(two, &dir.path().join("two")).unwrap(),
    ];
    let messages: Vec<ipfix::Message> = sessions.concat();
    let got = flow_sums(messages.iter().flat_map(|m| &m.records));
    assert_eq!(got, want.flows, "the records' sums");
    // Two sessions, one per agent: each opens with the templates at sequence 0, and each
    // message's number counts the records before it in its session.
    for (n, session) in sessions.iter().enumerate() {
        assert!(session[0].templates, "session {n}: templates first");
        let mut seq = 0u32;
        for (i, m) in session.iter().enumerate() {
            assert_eq!(m.sequence, seq, "session {n}, message {i}");
            seq = seq.wrapping_add(m.records.len() as u32);
        }
        assert!(seq > 0, "session {n} sent records");
    }
    assert!(
        messages.iter().all(|m| m.domain == messages[0].domain),
        "one observation domain per agent, the same across its restarts"
    );
}

/// The records the receiver holds now, decoded (each call writes its own capture).
fn decoded_now(r: &Receiver, dir: &std::path::Path, n: usize) -> Vec<ipfix::Message> {
    let got = r.got.lock().unwrap().clone();
    if got.is_empty() {
        return Vec::new();
    }
    ipfix::decode_messages(&got, &dir.join(format!("now-{n}"))).unwrap()
}

#[test]
fn the_flows_of_an_interface_that_goes_away_give_their_last_records_at_once() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    require_tshark();
    let dir = TempDir::new("rocemon-ipfix-gone").unwrap();
    let path = fixtures::rc_ipv4().write(dir.path()).unwrap();
    let want = tshark::expected(&path).unwrap();
    let pair = VethPair::new("rcipfg").unwrap();
    let ns = pair.ns_a.clone();
    let receiver = Receiver::start(&ns);
    let mut args = run_args(&pair.a_if, ADDR, "100");
    args.extend(["--hooks", "xdp", "--ipfix", SOCKET]);
    let mut agent = Agent::start(&ns, BIN, &args).unwrap();
    agent.wait_ready(&ns, ADDR).unwrap();
    replay_and_wait(&pair, std::slice::from_ref(&path), &want.flows);
    // Nothing yet: the active timeout is a minute away.
    let before = decoded_now(&receiver, dir.path(), 0);
    assert_eq!(
        before.iter().map(|m| m.records.len()).sum::<usize>(),
        0,
        "no record before the flows end"
    );
    pair.delete_link().unwrap();
    let start = Instant::now();
    let mut n = 1;
    let records = loop {
        let got = decoded_now(&receiver, dir.path(), n);
        n += 1;
        let records: Vec<ipfix::Record> = got.into_iter().flat_map(|m| m.records).collect();
        if records.len() >= want.flows.len() {
            break records;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the gone interface's flows gave {} of {} records",
            records.len(),
            want.flows.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        records.iter().all(|r| r.end_reason == 4),
        "forced end: {records:?}"
    );
    assert_eq!(flow_sums(&records), want.flows);
    agent.stop_ok();
    receiver.stop();
}

/// A collector the agent has no route to stops it at start with the fix (status 2), in a
/// namespace with only loopback: nothing is attached, nothing is sent.
#[test]
fn a_collector_without_a_route_stops_the_agent_with_the_fix() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let ns = rocemon_testkit::netns::LoopNs::new("rcipfxr").unwrap();
    let out = ns
        .output(
            BIN,
            &[
                "run",
                "--sflow-listen",
                "127.0.0.1:0",
                "--listen",
                "127.0.0.1:0",
                "--ipfix",
                "192.0.2.1:4739",
            ],
        )
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("udp://192.0.2.1:4739") && err.contains("a route to it"),
        "{err}"
    );
}

//! Kernel tests through BPF_PROG_TEST_RUN: every fixture frame through the XDP program and both
//! tc programs; the kernel maps must equal the host parser's result for the same frames
//! (differential), and tshark's numbers for the same capture (oracle).

use agent_common::{parse, FlowKey, FlowStats, Hook, HookCounters, LinkType, Outcome, SliceReader};
use rocemon::loader;
use rocemon::sources::tally::{self, Tally};
use rocemon::testrun::test_run;
use rocemon_testkit::fixtures::{self, Link};
use rocemon_testkit::{is_root, require_tshark, tshark, TempDir};
use std::collections::BTreeMap;

const XDP_PASS: u32 = 2;
const TC_ACT_PIPE: u32 = 3;

fn skip() -> bool {
    if !is_root() {
        eprintln!("SKIPPED: kernel tests need root (CAP_BPF) to load programs; run `cargo xtask test` as root");
        return true;
    }
    false
}

/// Flow stats without the clock fields, which only the kernel sets.
fn comparable(s: &FlowStats) -> FlowStats {
    FlowStats {
        first_seen_ns: 0,
        last_seen_ns: 0,
        ..*s
    }
}

#[test]
fn every_fixture_frame_through_every_program_matches_the_host_parser_and_tshark() {
    if skip() {
        return;
    }
    require_tshark();
    loader::raise_memlock();
    let dir = TempDir::new("rocemon-kernel").unwrap();
    let mut checked = 0;
    let mut refused = 0;
    for fx in fixtures::all() {
        if fx.link != Link::Ethernet {
            continue; // the kernel sees Ethernet frames only
        }
        let mut ebpf = loader::load_object(65_536).unwrap();
        loader::load_programs(&mut ebpf, &Hook::ALL).unwrap();
        let mut host = Hook::ALL.map(|h| Tally::new(h, usize::MAX));
        for (_, _, data) in fx.records() {
            // BPF_PROG_TEST_RUN refuses frames without an Ethernet header, and for tc (skb)
            // programs frames beyond one page; the fixtures keep frames under 3500 bytes.
            assert!(
                data.len() <= 3500,
                "{}: fixture frame of {} bytes",
                fx.name,
                data.len()
            );
            if data.len() < 14 {
                continue;
            }
            for hook in Hook::ALL {
                let prog = ebpf.program(hook.program()).unwrap();
                let r = match test_run(prog.fd().unwrap(), &data, 1) {
                    Ok(r) => r,
                    // The skb test harness refuses runts whose IP header is cut (the stack
                    // never hands such frames to tc); they are never RoCE.
                    Err(_)
                        if !matches!(hook, Hook::Xdp | Hook::AfXdp)
                            && matches!(
                                parse(&SliceReader(&data), LinkType::Ethernet),
                                Err(Outcome::TruncatedIpv4 | Outcome::TruncatedIpv6)
                            ) =>
                    {
                        refused += 1;
                        continue;
                    }
                    Err(e) => panic!("{} {} len {}: {e}", fx.name, hook.name(), data.len()),
                };
                let want = if matches!(hook, Hook::Xdp | Hook::AfXdp) {
                    XDP_PASS
                } else {
                    TC_ACT_PIPE
                };
                assert_eq!(
                    r.retval,
                    want,
                    "{}: {} must never drop or change traffic",
                    fx.name,
                    hook.name()
                );
                let p = parse(&SliceReader(&data), LinkType::Ethernet);
                let t = &mut host[hook as usize];
                t.record(&p, data.len() as u64, 0);
                // No socket is bound in a test run: the capture program counts what it meant
                // to redirect itself, as a redirect failure.
                if hook == Hook::AfXdp && agent_common::parse::captured(&p) {
                    t.counters.capture_redirect_failures += 1;
                }
            }
        }
        let mut host_flows: BTreeMap<FlowKey, FlowStats> = BTreeMap::new();
        let mut host_sessions = rustc_hash::FxHashMap::default();
        for t in &host {
            host_flows.extend(t.flows.iter().map(|(k, s)| (*k, *s)));
            tally::merge_sessions(&mut host_sessions, &t.sessions);
        }
        assert_eq!(
            loader::read_sessions(&ebpf).unwrap(),
            host_sessions,
            "{}: mirror sessions differ from the host parser",
            fx.name
        );
        let kernel = loader::read_counters(&ebpf).unwrap();
        for hook in Hook::ALL {
            // Every frame is accounted for exactly once: RoCE, not RoCE, or malformed.
            let k = &kernel[hook as usize];
            assert_eq!(
                k.outcomes.iter().sum::<u64>(),
                k.frames,
                "{}: {} accounting",
                fx.name,
                hook.name()
            );
        }
        for hook in Hook::ALL {
            assert_eq!(
                kernel[hook as usize],
                host[hook as usize].counters,
                "{}: {} counters differ from the host parser",
                fx.name,
                hook.name()
            );
        }
        let (flows, errors) = loader::read_flows(&ebpf).unwrap();
        assert_eq!(errors, 0);
        let kernel_flows: BTreeMap<FlowKey, FlowStats> = flows
            .into_iter()
            .map(|(k, s)| (k, comparable(&s)))
            .collect();
        let host_flows: BTreeMap<FlowKey, FlowStats> = host_flows
            .iter()
            .map(|(k, s)| (*k, comparable(s)))
            .collect();
        assert_eq!(
            kernel_flows.len(),
            host_flows.len(),
            "{}: flow counts differ",
            fx.name
        );
        for (k, h) in &host_flows {
            assert_eq!(
                kernel_flows.get(k),
                Some(h),
                "{}: flow {k:?} differs",
                fx.name
            );
        }

        // Oracle: fixtures recorded whole (no snapshot cut) give tshark's numbers.
        if fx.snaplen == 65535 {
            let path = fx.write(dir.path()).unwrap();
            let e = tshark::expected(&path).unwrap();
            for hook in Hook::ALL {
                let k = &kernel[hook as usize];
                assert_eq!(
                    k.roce_packets(),
                    e.roce_packets,
                    "{}: {} roce packets vs tshark",
                    fx.name,
                    hook.name()
                );
                assert_eq!(
                    k.roce_bytes(),
                    e.roce_bytes,
                    "{}: {} roce bytes vs tshark",
                    fx.name,
                    hook.name()
                );
                assert_eq!(
                    k.cnp_packets,
                    e.cnp,
                    "{}: {} CNPs vs tshark",
                    fx.name,
                    hook.name()
                );
                assert_eq!(
                    k.ecn_packets,
                    e.ecn,
                    "{}: {} ECN vs tshark",
                    fx.name,
                    hook.name()
                );
                for (op, (n, b)) in &e.opcodes {
                    assert_eq!(
                        (k.opcode_packets[*op as usize], k.opcode_bytes[*op as usize]),
                        (*n, *b),
                        "{}: opcode {op:#x}",
                        fx.name
                    );
                }
                let mut sessions = BTreeMap::new();
                for (k, st) in &host_sessions {
                    if k.hook == hook as u8 {
                        sessions.insert((k.kind_name().to_string(), k.id), st.packets);
                    }
                }
                assert_eq!(
                    sessions,
                    e.sessions,
                    "{}: {} sessions vs tshark",
                    fx.name,
                    hook.name()
                );
                let flows = kernel_flows.keys().filter(|f| f.hook == hook as u8).count();
                assert_eq!(
                    flows,
                    e.flows.len(),
                    "{}: {} flows vs tshark",
                    fx.name,
                    hook.name()
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 5);
    eprintln!("{refused} runt frames (IP header cut) refused by the skb test harness");
}

#[test]
fn full_flow_map_keeps_global_counters_exact() {
    if skip() {
        return;
    }
    loader::raise_memlock();
    // A tiny flow map: flows beyond it are evicted (LRU), global counters stay exact.
    let mut ebpf = loader::load_object(16).unwrap();
    loader::load_programs(&mut ebpf, &[Hook::Xdp]).unwrap();
    let fx = fixtures::many_flows();
    let mut host = HookCounters::ZERO;
    for (_, _, data) in fx.records() {
        let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
        assert_eq!(
            test_run(prog.fd().unwrap(), &data, 1).unwrap().retval,
            XDP_PASS
        );
        host.record(
            &parse(&SliceReader(&data), LinkType::Ethernet),
            data.len() as u64,
        );
    }
    let k = loader::read_counters(&ebpf).unwrap();
    assert_eq!(k[Hook::Xdp as usize].roce_packets(), host.roce_packets());
    assert_eq!(k[Hook::Xdp as usize].opcode_bytes, host.opcode_bytes);
    let (flows, _) = loader::read_flows(&ebpf).unwrap();
    assert!(
        flows.len() <= 16 * 2,
        "LRU map holds about its size, got {}",
        flows.len()
    );
    assert!(!flows.is_empty());
}

/// The verifier's budget is one million instructions per program; each program must verify
/// in under half of it, so a change that doubles the cost fails here, with the numbers, before
/// it makes a program unloadable.
#[test]
fn every_program_verifies_within_half_the_kernel_budget() {
    if skip() {
        return;
    }
    loader::raise_memlock();
    let mut costs = Vec::new();
    for h in Hook::ALL {
        let mut ebpf = loader::load_object(1024).unwrap();
        loader::load_programs(&mut ebpf, &[h]).unwrap();
        let p = ebpf.program(h.program()).unwrap();
        let n = p.info().unwrap().verified_instruction_count().unwrap_or(0);
        costs.push((h.program(), n));
    }
    eprintln!("verified instructions: {costs:?}");
    for (name, n) in costs {
        assert!(n > 0 && n < 500_000, "{name}: {n} verified instructions");
    }
}

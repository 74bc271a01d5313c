//! Kernel tests through BPF_PROG_TEST_RUN: every fixture frame through the XDP program and both
//! tc programs; the kernel maps must equal the host parser's result for the same frames
//! (differential), and tshark's numbers for the same capture (oracle).

use agent_common::flow_cache::PROG_FLOW_FLUSH;
use agent_common::{parse, FlowKey, FlowStats, Hook, LinkType, Outcome, SliceReader};
#[path = "support/kernel.rs"]
mod support;
#[path = "support/testrun.rs"]
mod testrun;

use rocemon::config::FlowMapSizes;
use rocemon::kernel::loader;
use rocemon::sources::tally::{self, Tally};
use rocemon_testkit::fixtures::{self, Link};
use rocemon_testkit::{require_tshark, tshark, TempDir};
use std::collections::BTreeMap;
use support::{comparable, ready, xdp_object};
use testrun::{record_as_kernel, test_run};

const XDP_PASS: u32 = 2;
const TC_ACT_PIPE: u32 = 3;

/// Runs the XDP program once over `data`; it must pass the frame.
fn run_xdp(ebpf: &aya::Ebpf, data: &[u8]) {
    let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
    let r = test_run(prog.fd().unwrap(), data, 1).unwrap();
    assert_eq!(r.retval, XDP_PASS, "XDP must pass every frame");
}

#[test]
fn every_fixture_frame_through_every_program_matches_the_host_parser_and_tshark() {
    if !ready(false) {
        return;
    }
    require_tshark();
    testrun::pin_to_one_cpu().unwrap();
    let dir = TempDir::new("rocemon-kernel").unwrap();
    let mut checked = 0;
    let mut refused = 0;
    for fx in fixtures::all() {
        if fx.link != Link::Ethernet {
            continue; // the kernel sees Ethernet frames only
        }
        let mut ebpf = loader::load_object(65_536).unwrap();
        loader::load_programs(&mut ebpf, &Hook::ALL).unwrap();
        let mut host =
            Hook::ALL.map(|h| Tally::new(h, rocemon::sources::tally::FlowLimits::UNBOUNDED));
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
                record_as_kernel(&mut host[hook as usize], &data, 0);
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
        // No socket is bound in a test run: the capture program counts what it meant to
        // redirect as redirect failures. What it redirects is the contract written out here
        // (RoCE, RoCE cut in its headers or BTH, broken mirror encapsulations), checked against
        // the outcome counters rather than through the program's own `captured()`.
        {
            let k = &kernel[Hook::AfXdp as usize];
            let want: u64 = Outcome::ALL
                .iter()
                .filter(|o| rocemon_testkit::AFXDP_CAPTURED_OUTCOMES.contains(&o.name()))
                .map(|o| k.outcomes[*o as usize])
                .sum();
            assert_eq!(
                k.capture_redirect_failures, want,
                "{}: AF_XDP program redirects",
                fx.name
            );
            host[Hook::AfXdp as usize]
                .counters
                .capture_redirect_failures = want;
            for hook in Hook::ALL.into_iter().filter(|h| *h != Hook::AfXdp) {
                assert_eq!(
                    kernel[hook as usize].capture_redirect_failures, 0,
                    "{}, hook {hook:?}",
                    fx.name
                );
            }
        }
        for hook in Hook::ALL {
            let (k, h) = (&kernel[hook as usize], &host[hook as usize].counters);
            assert_eq!(
                (k.slow_path_frames, k.slow_path_unreachable),
                (h.slow_path_frames, 0),
                "{}: {}: frames through the slow program (the fast path must answer the rest)",
                fx.name,
                hook.name()
            );
            assert_eq!(
                kernel[hook as usize],
                host[hook as usize].counters,
                "{}: {} counters differ from the host parser",
                fx.name,
                hook.name()
            );
        }
        let (flows, errors) = loader::read_flows(&ebpf).unwrap();
        assert_eq!(errors, 0, "{}", fx.name);
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
                assert_lossless(k, &e, &format!("{} {}", fx.name, hook.name()));
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
                // Per flow (addresses, source port, destination QP): packets, bytes, CE
                // marks and CNPs, each against tshark's own decode.
                let flows: BTreeMap<(String, String, u16, u32), tshark::FlowExpect> = kernel_flows
                    .iter()
                    .filter(|(f, _)| f.hook == hook as u8)
                    .map(|(f, st)| {
                        (
                            (
                                rocemon::pipeline::flows::addr(f.ip_version, &f.src).to_string(),
                                rocemon::pipeline::flows::addr(f.ip_version, &f.dst).to_string(),
                                f.sport,
                                f.dest_qp,
                            ),
                            tshark::FlowExpect {
                                packets: st.packets,
                                bytes: st.bytes,
                                ecn_ce: st.ecn_ce,
                                cnp: st.cnp,
                            },
                        )
                    })
                    .collect();
                assert_eq!(
                    flows,
                    e.flows,
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

/// Each family's flow map takes its own size: the maps are created so, and a 16-entry IPv6 map
/// does not bound the IPv4 flows.
#[test]
fn each_flow_map_takes_its_own_size() {
    if !ready(false) {
        return;
    }
    let sizes = FlowMapSizes {
        ipv4: 4096,
        ipv6: 16,
    };
    let mut ebpf = loader::load_object_sized(sizes, loader::Switches::default()).unwrap();
    for (name, want) in [
        (agent_common::MAP_FLOWS4, 4096),
        (agent_common::MAP_FLOWS, 16),
    ] {
        let Some(aya::maps::Map::PerCpuLruHashMap(m)) = ebpf.map(name) else {
            panic!("{name}: no per-CPU hash map")
        };
        assert_eq!(m.info().unwrap().max_entries(), want, "{name}");
    }
    loader::load_programs(&mut ebpf, &[Hook::Xdp]).unwrap();
    let mut host = Tally::new(Hook::Xdp, rocemon::sources::tally::FlowLimits::UNBOUNDED);
    for (_, _, data) in fixtures::many_flows().records() {
        run_xdp(&ebpf, &data);
        record_as_kernel(&mut host, &data, 0);
    }
    let (flows, errors) = loader::read_flows(&ebpf).unwrap();
    assert_eq!(errors, 0);
    assert!(host.flows.len() > 16, "{} flows", host.flows.len());
    assert_eq!(flows.len(), host.flows.len(), "every IPv4 flow held");
    for (key, got) in &flows {
        assert_eq!(comparable(got), comparable(&host.flows[key]), "{key:?}");
    }
}

/// The verifier's budget is one million instructions per program; rocemon's own is 100,000
/// each (the fast/slow split keeps the entries near 15,000 and the slow programs under
/// 50,000), so a change that multiplies the paths the verifier explores fails here, with the
/// numbers, long before it makes a program unloadable.
#[test]
fn every_program_verifies_within_100000_instructions() {
    if !ready(false) {
        return;
    }
    let mut costs = Vec::new();
    for h in Hook::ALL {
        let mut ebpf = loader::load_object(1024).unwrap();
        loader::load_programs(&mut ebpf, &[h]).unwrap();
        for name in [h.program(), h.slow_path().2, PROG_FLOW_FLUSH] {
            let p = ebpf.program(name).unwrap();
            let n = p.info().unwrap().verified_instruction_count().unwrap_or(0);
            costs.push((name, n));
        }
    }
    eprintln!("verified instructions: {costs:?}");
    for (name, n) in costs {
        assert!(n > 0 && n < 100_000, "{name}: {n} verified instructions");
    }
}

/// The load-time switches: with PSN tracking and session counters off, the programs count
/// everything else exactly as before, no PSN event and no session, and the verifier has less
/// to check (the switched-off code is pruned).
#[test]
fn switched_off_psn_tracking_and_session_counters_count_nothing_of_theirs() {
    if !ready(true) {
        return;
    }
    let off = loader::Switches {
        psn_tracking: false,
        session_counters: false,
        ..loader::Switches::default()
    };
    let ebpf = xdp_object(65_536, off);
    let mut host = Tally::new(Hook::Xdp, rocemon::sources::tally::FlowLimits::UNBOUNDED);
    let mut frames = 0;
    for fx in [fixtures::psn_health(), fixtures::tunnels()] {
        for (_, _, data) in fx.records() {
            run_xdp(&ebpf, &data);
            record_as_kernel(&mut host, &data, 0);
            frames += 1;
        }
    }
    assert!(frames > 100);
    // What the switches leave out, the host counted: the fixtures do exercise it.
    assert!(host.counters.psn_gaps > 0 && host.counters.retransmits > 0);
    assert!(!host.sessions.is_empty());
    let mut want = host.counters;
    want.psn_gaps = 0;
    want.retransmits = 0;
    let k = loader::read_counters(&ebpf).unwrap();
    assert_eq!(
        k[Hook::Xdp as usize],
        want,
        "everything else counted as before"
    );
    assert!(loader::read_sessions(&ebpf).unwrap().is_empty());
    let (flows, _) = loader::read_flows(&ebpf).unwrap();
    assert_eq!(flows.len(), host.flows.len());
    for (key, got) in &flows {
        assert_eq!((got.psn_gaps, got.retransmits), (0, 0), "{key:?}");
        assert_eq!(got.packets, host.flows[key].packets, "{key:?}");
    }
    // Pruned: fewer instructions to verify than with both switches on.
    let count = |e: &aya::Ebpf, name: &str| {
        e.program(name)
            .unwrap()
            .info()
            .unwrap()
            .verified_instruction_count()
            .unwrap_or(0)
    };
    let mut on = loader::load_object(65_536).unwrap();
    loader::load_programs(&mut on, &[Hook::Xdp]).unwrap();
    for name in [agent_common::PROG_XDP, agent_common::PROG_XDP_SLOW] {
        assert!(
            count(&ebpf, name) < count(&on, name),
            "{name}: {} verified with the switches off, {} on",
            count(&ebpf, name),
            count(&on, name)
        );
    }
}

/// A counter array as tshark's map shape (non-zero entries).
fn nonzero(packets: &[u64], bytes: &[u64]) -> BTreeMap<u8, (u64, u64)> {
    packets
        .iter()
        .zip(bytes)
        .enumerate()
        .filter(|(_, (p, _))| **p > 0)
        .map(|(i, (p, b))| (i as u8, (*p, *b)))
        .collect()
}

/// PFC, PAUSE, other MAC control, RoCE by DSCP and priority, lossy RoCE: against tshark.
fn assert_lossless(k: &agent_common::HookCounters, e: &tshark::Expected, what: &str) {
    assert_eq!(k.pfc_frames, e.pfc_frames, "{what}: PFC frames vs tshark");
    for p in 0..8 {
        assert_eq!(
            (k.pfc_xoff[p], k.pfc_xon[p], k.pfc_quanta[p]),
            (e.pfc[p].xoff, e.pfc[p].xon, e.pfc[p].quanta),
            "{what}: PFC priority {p} (xoff, xon, quanta) vs tshark"
        );
    }
    assert_eq!(
        (
            k.pause_frames,
            k.pause_xon,
            k.pause_quanta,
            k.mac_control_other
        ),
        (
            e.pause_frames,
            e.pause_xon,
            e.pause_quanta,
            e.mac_control_other
        ),
        "{what}: PAUSE (frames, xon, quanta) and other MAC control vs tshark"
    );
    for (series, packets, bytes, expected) in [
        (
            "RoCE by DSCP",
            &k.roce_dscp_packets[..],
            &k.roce_dscp_bytes[..],
            &e.dscp,
        ),
        (
            "CNPs by DSCP",
            &k.cnp_dscp_packets,
            &k.cnp_dscp_bytes,
            &e.cnp_dscp,
        ),
        (
            "RoCE by priority",
            &k.roce_pcp_packets,
            &k.roce_pcp_bytes,
            &e.pcp,
        ),
        (
            "CNPs by priority",
            &k.cnp_pcp_packets,
            &k.cnp_pcp_bytes,
            &e.cnp_pcp,
        ),
    ] {
        assert_eq!(
            nonzero(packets, bytes),
            *expected,
            "{what}: {series} vs tshark"
        );
    }
    assert_eq!(
        (k.lossy_roce_packets, k.lossy_roce_bytes, k.cnp_out_of_class),
        (e.lossy_roce.0, e.lossy_roce.1, e.cnp_out_of_class),
        "{what}: lossy RoCE and CNPs out of class vs tshark"
    );
}

/// The configured traffic classes reach the kernel programs (load-time globals): with RoCE
/// expected on DSCP 0 / any priority and CNPs on DSCP 26, the lossy counts follow, equal to
/// the host's counting with the same classes.
#[test]
fn configured_traffic_classes_decide_what_the_kernel_counts_as_lossy() {
    if !ready(true) {
        return;
    }
    let classes = agent_common::TrafficClasses {
        roce_dscp: 1,
        roce_priority: agent_common::classes::ANY_PRIORITY,
        cnp_dscp: 1 << 26,
    };
    let sw = loader::Switches {
        classes,
        ..loader::Switches::default()
    };
    let ebpf = xdp_object(65_536, sw);
    let mut host = Tally::with_switches(
        Hook::Xdp,
        rocemon::sources::tally::FlowLimits::UNBOUNDED,
        sw,
    );
    let mut default_host = Tally::new(Hook::Xdp, rocemon::sources::tally::FlowLimits::UNBOUNDED);
    for (_, _, data) in rocemon_testkit::lossless::lossless().records() {
        run_xdp(&ebpf, &data);
        record_as_kernel(&mut host, &data, 0);
        record_as_kernel(&mut default_host, &data, 0);
    }
    let k = loader::read_counters(&ebpf).unwrap()[Hook::Xdp as usize];
    assert_eq!(k, host.counters);
    // The fixture's RoCE on DSCP 0 is the only RoCE in class: everything else is lossy.
    let roce_not_cnp = k.roce_packets() - k.cnp_packets;
    assert_eq!(k.lossy_roce_packets, roce_not_cnp - k.roce_dscp_packets[0]);
    assert_eq!(k.cnp_out_of_class, k.cnp_packets - k.cnp_dscp_packets[26]);
    assert_ne!(
        (k.lossy_roce_packets, k.cnp_out_of_class),
        (
            default_host.counters.lossy_roce_packets,
            default_host.counters.cnp_out_of_class
        ),
        "the classes must change the counts"
    );
}

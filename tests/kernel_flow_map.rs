//! A full flow map under a flood of new flows, through BPF_PROG_TEST_RUN: the LRU map admits
//! every new flow, and flows that come after the pressure are held with exact counts (the
//! host's count of the same frames).

use agent_common::{FlowKey, FlowStats, Hook};
#[path = "support/kernel.rs"]
mod support;
#[path = "support/testrun.rs"]
mod testrun;

use rocemon::kernel::loader;
use rocemon::sources::tally::Tally;
use rocemon_testkit::fixtures;
use std::collections::BTreeMap;
use support::{comparable, ready, xdp_object};
use testrun::{record_as_kernel, test_run};

const XDP_PASS: u32 = 2;

/// Runs the XDP program once over `data`; it must pass the frame.
fn run_xdp(ebpf: &aya::Ebpf, data: &[u8]) {
    let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
    let r = test_run(prog.fd().unwrap(), data, 1).unwrap();
    assert_eq!(r.retval, XDP_PASS, "XDP must pass every frame");
}

/// The online CPUs, when the kernel tests can run and at least two CPUs are online (None:
/// skipped, said why).
fn two_cpus() -> Option<Vec<u32>> {
    if !ready(false) {
        return None;
    }
    let online = aya::util::online_cpus().map_err(|(_, e)| e).unwrap();
    if online.len() < 2 {
        eprintln!("skipped: one CPU online");
        return None;
    }
    Some(online)
}

/// The flows created so far, over the hooks and CPUs.
fn created_on_every_cpu(ebpf: &aya::Ebpf) -> u64 {
    loader::read_counters(ebpf)
        .unwrap()
        .iter()
        .map(|c| c.flows_created)
        .sum()
}

/// The flows of `ebpf`'s maps under `keys`, comparable.
fn held_of(ebpf: &aya::Ebpf, keys: &[FlowKey]) -> BTreeMap<FlowKey, FlowStats> {
    let (flows, _) = loader::read_flows(ebpf).unwrap();
    flows
        .iter()
        .filter(|(k, _)| keys.contains(k))
        .map(|(k, s)| (*k, comparable(s)))
        .collect()
}

/// A tiny flow map under a flood of new flows (the 400 flows of `many_flows` into 16 entries)
/// admits every new flow (an LRU map: nothing is refused), and the policy's guarantee holds:
/// flows that come after the pressure are admitted within one poll and held with exact
/// counts from then on (eight later flows, after a poll read the flooded maps, equal the
/// host's count of the same frames), and the global counters are exact throughout.
#[test]
fn a_full_flow_map_admits_new_flows_and_holds_the_survivors_exactly() {
    if !ready(true) {
        return;
    }
    testrun::pin_to_one_cpu().unwrap();
    let ebpf = xdp_object(16, loader::Switches::default());
    let fx = fixtures::many_flows();
    let mut host = Tally::new(Hook::Xdp, rocemon::sources::tally::FlowLimits::both(16));
    for (_, _, data) in fx.records() {
        run_xdp(&ebpf, &data);
        record_as_kernel(&mut host, &data, 0);
    }
    let mut k = loader::read_counters(&ebpf).unwrap()[Hook::Xdp as usize];
    assert_eq!(k.flow_update_errors, 0, "a full LRU map refuses nothing");
    assert!(
        k.flows_created > 16,
        "every flow admitted: {}",
        k.flows_created
    );
    // A poll: the agent reads the maps (the flow cache is flushed into them) between the
    // flood and the later flows.
    loader::read_flows(&ebpf).unwrap();
    // Eight later flows, taking turns packet by packet: the first round admits them, the
    // rounds after it are counted exactly.
    let later: Vec<Vec<u8>> = (0..8u32)
        .map(|i| {
            let mut r = rocemon_testkit::frames::Roce::new(
                "10.90.0.1".parse().unwrap(),
                "10.90.0.2".parse().unwrap(),
                0xD000 + i as u16,
                0x700 + i,
                0x0A,
            );
            r.payload = 64 + 8 * i as usize;
            r.frame()
        })
        .collect();
    // The host's count of the later flows alone, from their first packet.
    let mut fresh = Tally::new(Hook::Xdp, rocemon::sources::tally::FlowLimits::UNBOUNDED);
    let round = |ebpf: &aya::Ebpf, host: &mut Tally, fresh: &mut Tally| {
        for f in &later {
            run_xdp(ebpf, f);
            record_as_kernel(host, f, 0);
            record_as_kernel(fresh, f, 0);
        }
    };
    round(&ebpf, &mut host, &mut fresh);
    let keys: Vec<FlowKey> = fresh.flows.keys().copied().collect();
    assert_eq!(keys.len(), 8);
    assert_eq!(
        held_of(&ebpf, &keys).len(),
        8,
        "every later flow admitted at once"
    );
    for _ in 0..20 {
        round(&ebpf, &mut host, &mut fresh);
    }
    let want: BTreeMap<FlowKey, FlowStats> = fresh
        .flows
        .iter()
        .map(|(k, s)| (*k, comparable(s)))
        .collect();
    assert_eq!(
        held_of(&ebpf, &keys),
        want,
        "held and counted exactly since their admission"
    );
    // The global counters are exact whatever the map held (flows created and failed updates
    // follow the map's policy, which the host's table only approximates).
    k = loader::read_counters(&ebpf).unwrap()[Hook::Xdp as usize];
    let mut want = host.counters;
    want.flows_created = k.flows_created;
    want.flow_update_errors = k.flow_update_errors;
    assert_eq!(
        k, want,
        "the whole counter block but the flow map's own counts"
    );
}

/// A new flow whose first packets come on two CPUs before any flush (a veth or tc egress
/// sender that moves) takes a cache slot on each, and is created once: the flows created
/// equal the flows held, so the agent counts no push-out where the map is nearly empty (the
/// demo once said "95 flows pushed out" of a map 1% full). Its packets are all held.
#[test]
fn a_new_flow_on_two_cpus_at_once_is_created_once() {
    let Some(online) = two_cpus() else {
        return;
    };
    let ebpf = xdp_object(1024, loader::Switches::default());
    let frames = rocemon_testkit::frames::writes("10.0.0.1", "10.0.0.2", (0xC001, 9), 0..4, 64);
    for (i, f) in frames.iter().enumerate() {
        testrun::pin_to_cpu(online[i % 2] as usize).unwrap();
        run_xdp(&ebpf, f);
    }
    testrun::pin_to_one_cpu().unwrap();
    let created = created_on_every_cpu(&ebpf);
    let (flows, _) = loader::read_flows(&ebpf).unwrap();
    assert_eq!(created, 1, "created once, whichever CPU inserted it");
    assert_eq!(flows.len(), 1);
    assert_eq!(flows[0].1.packets, 4);
}

/// A flow that owns its cache slot is counted without touching its map element, so under a
/// flood of new flows the LRU map would take the element for unused and push it out, and
/// with it whatever the element held that no poll had read yet (another CPU's packets, a
/// write-back between polls). Its hits look the element up again as its hook creates flows
/// (`agent_common::flow_cache::ref_every`). The flood: four times the map's size in flows,
/// each seen on one CPU and then on another (which looks it up: the LRU takes it for used),
/// the cached flow's packets on the first CPU after every 16 of them. The flow keeps the
/// element it had before the flood (the same first packet) with every packet in it. (Without
/// the lookups the element was pushed out: the flow came back with a later first packet and
/// only its counts since the last flush.)
#[test]
fn a_cached_flow_keeps_its_element_through_a_flood_of_new_flows() {
    let Some(online) = two_cpus() else {
        return;
    };
    let (home, other) = (online[0] as usize, online[1] as usize);
    const ENTRIES: u32 = 2_048;
    let ebpf = xdp_object(ENTRIES, loader::Switches::default());
    let flow =
        rocemon_testkit::frames::writes("10.90.0.1", "10.90.0.2", (0xD001, 0x700), 0..600, 64);
    let held = |ebpf: &aya::Ebpf| {
        let (flows, _) = loader::read_flows(ebpf).unwrap();
        flows
            .into_iter()
            .find(|(k, _)| k.dest_qp == 0x700 && k.sport == 0xD001)
            .map(|(_, s)| s)
            .expect("the flow is held")
    };
    testrun::pin_to_cpu(home).unwrap();
    let mut sent = flow.iter();
    for f in sent.by_ref().take(2) {
        run_xdp(&ebpf, f);
    }
    // A poll: the flow's first two packets go into its element.
    let before = held(&ebpf);
    assert_eq!(before.packets, 2);
    let mut n = 2;
    for i in 0..ENTRIES * 4 {
        let spoofed = rocemon_testkit::frames::Roce::new(
            format!("10.66.{}.{}", (i / 250) % 250, 1 + i % 250)
                .parse()
                .unwrap(),
            "10.67.0.1".parse().unwrap(),
            0xC000 | (i % 0x3FFF) as u16,
            0x100 + i,
            0x0A,
        )
        .frame();
        testrun::pin_to_cpu(home).unwrap();
        run_xdp(&ebpf, &spoofed);
        if i % 16 == 0 {
            if let Some(f) = sent.next() {
                run_xdp(&ebpf, f);
                n += 1;
            }
        }
        testrun::pin_to_cpu(other).unwrap();
        run_xdp(&ebpf, &spoofed);
    }
    testrun::pin_to_one_cpu().unwrap();
    let created = created_on_every_cpu(&ebpf);
    assert!(
        created > u64::from(ENTRIES) * 4,
        "the flood went through the map: {created} flows created"
    );
    let after = held(&ebpf);
    assert_eq!(
        (after.first_seen_ns, after.packets),
        (before.first_seen_ns, n),
        "the element the flow had before the flood, with every packet"
    );
}

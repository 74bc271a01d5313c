//! The kernel's per-CPU flow cache (`agent_common::flow_cache`) through BPF_PROG_TEST_RUN:
//! the flow maps the agent reads (after the flush) hold exactly what the host counts for the
//! same frames, whether packets hit their slot, swap it with another flow, or the cache is
//! switched off; and the flush is what brings a cached flow's packets into the maps.

#[path = "support/flow_cache.rs"]
mod cached;
#[path = "support/kernel.rs"]
mod support;
#[path = "support/testrun.rs"]
mod testrun;

use agent_common::flow_cache::{FLOW_CACHE_SLOTS, FLUSH_CHUNK};
use agent_common::{FlowKey, FlowKey4, FlowStats, Hook};
use cached::{compare, raw_packets, run, run_and_compare, slot, write_only};
use rocemon::kernel::loader;
use rocemon_testkit::fixtures;
use support::{comparable, ready, xdp_object};
use testrun::test_run;

/// Two flows in one slot, their packets in pairs (A A B B A A ...): the second packet of a
/// pair misses in a slot that had no hit since the last miss, so it writes the other flow
/// back and loads its own (with its PSN state); the first misses in a referenced slot and is
/// counted in the map. The counts stay exact.
#[test]
fn flows_that_share_a_cache_slot_are_counted_exactly() {
    if !ready(true) {
        return;
    }
    let first = write_only(0xC000, 0);
    let sport = (0xC001..=0xFFFF)
        .find(|&s| slot(&write_only(s, 0)) == slot(&first))
        .expect("a source port whose flow shares the slot");
    let mut frames = Vec::new();
    for pair in 0..20 {
        // A gap in the second flow's sequence: its PSN state must survive the swaps.
        let (a, b) = (2 * pair, if pair < 10 { 2 * pair } else { 2 * pair + 3 });
        frames.extend([write_only(0xC000, a), write_only(0xC000, a + 1)]);
        frames.extend([write_only(sport, b), write_only(sport, b + 1)]);
    }
    let ebpf = xdp_object(1024, loader::Switches::default());
    let host = run(&ebpf, &frames);
    // Before any flush: the last pair (B B) swapped B into the slot and wrote A back, so
    // the raw map holds all 40 of A's packets, and fewer of B's (its last are in the slot).
    assert_eq!(
        raw_flow_packets(&ebpf, 0xC000),
        40,
        "A written back by a swap"
    );
    assert!(
        raw_flow_packets(&ebpf, sport) < 40,
        "B's last packets are in the slot, not yet in the map"
    );
    compare(&ebpf, &host, "two flows in one slot");
}

/// This CPU's packets of the flow with source port `sport` in the raw IPv4 flow map.
fn raw_flow_packets(ebpf: &aya::Ebpf, sport: u16) -> u64 {
    let map = ebpf.map(agent_common::MAP_FLOWS4).unwrap();
    let m: aya::maps::PerCpuHashMap<_, FlowKey4, FlowStats> =
        aya::maps::PerCpuHashMap::try_from(map).unwrap();
    m.iter()
        .map(|r| r.unwrap())
        .filter(|(k, _)| k.sport == sport)
        .map(|(_, v)| v.iter().map(|s| s.packets).sum::<u64>())
        .sum()
}

/// Many flows (more than the slots hold), with and without the cache: the same flows, the
/// same counts, equal to the host's.
#[test]
fn the_cache_on_and_off_count_the_same() {
    if !ready(true) {
        return;
    }
    let frames: Vec<Vec<u8>> = fixtures::many_flows()
        .records()
        .map(|(_, _, f)| f)
        .collect();
    for flow_cache in [true, false] {
        let sw = loader::Switches {
            flow_cache,
            ..loader::Switches::default()
        };
        let ebpf = xdp_object(65_536, sw);
        run_and_compare(&ebpf, &frames, &format!("flow cache {flow_cache}"));
    }
}

/// Five packets of one flow through the XDP program of an object loaded with `switches`.
fn five_packets(flow_cache: bool) -> aya::Ebpf {
    let sw = loader::Switches {
        flow_cache,
        ..loader::Switches::default()
    };
    let ebpf = xdp_object(1024, sw);
    let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
    for psn in 0..5 {
        test_run(prog.fd().unwrap(), &write_only(0xC000, psn), 1).unwrap();
    }
    ebpf
}

/// Packets are counted in the slot, not in the map, until the flush writes the slot back: the
/// raw map lags, the agent's read (which flushes) does not.
#[test]
fn a_cached_flow_reaches_its_map_at_the_flush() {
    if !ready(true) {
        return;
    }
    let ebpf = five_packets(true);
    // The first packet took the slot (a flow the map does not hold takes it at once, its
    // element inserted empty): the map holds no packet before the flush.
    assert_eq!(raw_packets(&ebpf), 0, "the map before the flush");
    let (flows, _) = loader::read_flows(&ebpf).unwrap();
    let key: FlowKey = flows[0].0;
    assert_eq!((flows.len(), flows[0].1.packets), (1, 5), "{key:?}");
    assert_eq!(raw_packets(&ebpf), 5, "the map after the flush");
}

/// The flush runs in chunks of slots (the verifier walks each iteration of its loop): flows
/// cached in the first chunk, a middle one and the last all reach their maps at one read.
#[test]
fn every_chunk_of_slots_is_flushed() {
    if !ready(true) {
        return;
    }
    let chunks = FLOW_CACHE_SLOTS / FLUSH_CHUNK;
    let wanted = [0, chunks / 2, chunks - 1];
    let sports: Vec<u16> = wanted
        .iter()
        .map(|&c| {
            (0xC000..=0xFFFF)
                .find(|&s| slot(&write_only(s, 0)) / FLUSH_CHUNK == c)
                .expect("a source port whose flow's slot is in the chunk")
        })
        .collect();
    let ebpf = xdp_object(1024, loader::Switches::default());
    let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
    for &sport in &sports {
        for psn in 0..3 {
            test_run(prog.fd().unwrap(), &write_only(sport, psn), 1).unwrap();
        }
    }
    assert_eq!(raw_packets(&ebpf), 0, "the map before the flush");
    let (flows, errors) = loader::read_flows(&ebpf).unwrap();
    assert_eq!((flows.len(), errors), (3, 0));
    for &sport in &sports {
        assert_eq!(raw_flow_packets(&ebpf, sport), 3, "source port {sport:#x}");
    }
}

/// With the switch off the programs take it: every packet is in the map at once.
#[test]
fn with_the_cache_off_the_map_holds_every_packet_at_once() {
    if !ready(true) {
        return;
    }
    assert_eq!(raw_packets(&five_packets(false)), 5);
}

/// A CPU that is offline at a poll runs no flush: its cached flows are read from its slots
/// instead (pretended here: the read is told the online CPUs without this test's own), so
/// the agent's flows equal the host's at once; the map itself still lags (the slots stay
/// changed), and the next read with every CPU online flushes them and agrees.
#[test]
fn an_offline_cpu_s_cached_flows_are_read_from_its_slots() {
    if !ready(true) {
        return;
    }
    let online = aya::util::online_cpus().map_err(|(_, e)| e).unwrap();
    // SAFETY: sched_getcpu has no preconditions (`ready` pinned this thread to one CPU).
    let here = unsafe { libc::sched_getcpu() } as u32;
    let others: Vec<u32> = online.iter().copied().filter(|&c| c != here).collect();
    // Four flows in four slots (no swap writes one back before the flush).
    let mut ports: Vec<u16> = Vec::new();
    for sport in 0xC000..=0xFFFF {
        let s = slot(&write_only(sport, 0));
        if ports.iter().all(|&p| slot(&write_only(p, 0)) != s) {
            ports.push(sport);
        }
        if ports.len() == 4 {
            break;
        }
    }
    let frames: Vec<Vec<u8>> = (0..6)
        .flat_map(|psn| ports.iter().map(move |&p| write_only(p, psn)))
        .collect();
    let ebpf = xdp_object(1024, loader::Switches::default());
    let host = run(&ebpf, &frames);
    let check = |flows: &[(FlowKey, FlowStats)], what: &str| {
        assert_eq!(flows.len(), host.flows.len(), "{what}: flows");
        for (key, got) in flows {
            let want = host.flows.get(key).expect("a flow the host never saw");
            assert_eq!(comparable(got), comparable(want), "{what}: {key:?}");
        }
    };
    let (flows, errors) = rocemon::sources::maps::read_flows_with(&ebpf, &others).unwrap();
    assert_eq!(errors, 0);
    check(&flows, "this CPU offline");
    assert_eq!(
        raw_packets(&ebpf),
        0,
        "the map before any flush on this CPU"
    );
    let (flows, errors) = loader::read_flows(&ebpf).unwrap();
    assert_eq!(errors, 0);
    check(&flows, "every CPU online");
    assert_eq!(
        raw_packets(&ebpf),
        frames.len() as u64,
        "the map after the flush"
    );
}

/// A flow the agent deletes as idle does not come back from the cache with its old totals:
/// the flush empties every slot not counted in since the flush before, so after two reads
/// without a packet the flow is in no slot; deleted then, its next packet starts it afresh
/// (one packet, counted as a new flow), as the host's tally does after its own expiry.
#[test]
fn a_flow_deleted_as_idle_starts_afresh_at_its_next_packet() {
    if !ready(true) {
        return;
    }
    let mut ebpf = five_packets(true);
    let (flows, _) = loader::read_flows(&ebpf).unwrap();
    assert_eq!(flows.len(), 1);
    // The second read: no packet since the first, so the slot is emptied.
    loader::read_flows(&ebpf).unwrap();
    let key = flows[0].0;
    let (deleted, failed) = rocemon::sources::maps::delete_flows(&mut ebpf, &[key]).unwrap();
    assert_eq!((deleted, failed), (1, 0));
    assert_eq!(raw_packets(&ebpf), 0, "the map after the delete");
    let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
    test_run(prog.fd().unwrap(), &write_only(0xC000, 5), 1).unwrap();
    let (flows, _) = loader::read_flows(&ebpf).unwrap();
    assert_eq!(flows.len(), 1);
    assert_eq!(flows[0].1.packets, 1, "afresh, not 5 old + 1");
    let k = loader::read_counters(&ebpf).unwrap()[Hook::Xdp as usize];
    assert_eq!(k.flows_created, 2, "created again");
    // Deleting a flow that is gone already is no error (another poll's delete, say).
    let (deleted, failed) = rocemon::sources::maps::delete_flows(&mut ebpf, &[key]).unwrap();
    assert_eq!((deleted, failed), (1, 0));
    let (deleted, failed) = rocemon::sources::maps::delete_flows(&mut ebpf, &[key]).unwrap();
    assert_eq!((deleted, failed), (0, 0));
}

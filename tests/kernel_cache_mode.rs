//! The flow cache steps aside where flows outnumber its slots (`agent_common::cache_mode`),
//! through BPF_PROG_TEST_RUN on one CPU: the flush judges the cache over each poll's interval,
//! drains it, turns it off and tries it again, and at every step the flows the agent reads
//! hold exactly what the host counts; a poll walks an off cache's first chunk only.

#[path = "support/flow_cache.rs"]
mod cached;
#[path = "support/kernel.rs"]
mod support;
#[path = "support/testrun.rs"]
mod testrun;

use agent_common::cache_mode::{FlushState, CACHE_DRAINING, CACHE_OFF, CACHE_ON, OFF_PASSES};
use agent_common::flow_cache::{FLOW_CACHE_SLOTS, FLUSH_CHUNK, MAP_FLOW_FLUSHING, PROG_FLOW_FLUSH};
use cached::{compare, feed, raw_packets, run, write_only};
use rocemon::kernel::loader;
use std::os::fd::AsFd;
use support::{ready, xdp_object};

/// Flows (by source port) that outnumber the cache's 4,096 slots.
const MANY: u16 = 10_000;

/// One packet of each of `flows` flows in turn, `rounds` times (PSNs from `psn`).
fn taking_turns(flows: u16, rounds: u32, psn: u32) -> Vec<Vec<u8>> {
    (0..rounds)
        .flat_map(|r| (0..flows).map(move |i| write_only(0xC000 + i, psn + r)))
        .collect()
}

/// The CPU this test runs on (`ready(true)` pinned it).
fn here() -> u32 {
    // SAFETY: sched_getcpu has no preconditions.
    unsafe { libc::sched_getcpu() as u32 }
}

/// This CPU's flush state, as the flush left it.
fn flush_state(ebpf: &aya::Ebpf) -> FlushState {
    let m: aya::maps::PerCpuArray<_, FlushState> =
        aya::maps::PerCpuArray::try_from(ebpf.map(MAP_FLOW_FLUSHING).unwrap()).unwrap();
    m.get(&0, 0).unwrap()[here() as usize]
}

/// This CPU's flow cache mode, as the flush left it.
fn mode(ebpf: &aya::Ebpf) -> u32 {
    flush_state(ebpf).mode
}

/// Every flow's packets as the host counted them.
fn host_packets(host: &rocemon::sources::tally::Tally) -> u64 {
    host.flows.values().map(|s| s.packets).sum()
}

/// The agent's read (a flush pass on every CPU) `n` times.
fn polls(ebpf: &aya::Ebpf, n: u32) {
    for _ in 0..n {
        loader::read_flows(ebpf).unwrap();
    }
}

#[test]
fn where_flows_outnumber_the_slots_the_cache_steps_aside_and_back_with_exact_counts() {
    if !ready(true) {
        return;
    }
    let ebpf = xdp_object(65_536, loader::Switches::default());
    let mut host = run(&ebpf, &taking_turns(MANY, 2, 0));
    assert_eq!(mode(&ebpf), CACHE_ON, "judged at the next pass");
    compare(&ebpf, &host, "on, many flows");
    assert_eq!(mode(&ebpf), CACHE_DRAINING, "most packets missed");

    // The flows that held slots are taken out at their next packet; the flush empties the
    // rest, and a pass that finds every slot empty turns the cache off.
    feed(&ebpf, &mut host, &taking_turns(MANY, 1, 2));
    compare(&ebpf, &host, "draining");
    assert_eq!(mode(&ebpf), CACHE_OFF, "drained");
    let modes = rocemon::sources::maps::cache_modes(&ebpf).unwrap();
    assert_eq!(
        modes[CACHE_OFF as usize], 1,
        "what the agent exports: {modes:?}"
    );

    // Off: every packet goes straight to the map.
    feed(&ebpf, &mut host, &taking_turns(MANY, 1, 3));
    assert_eq!(
        raw_packets(&ebpf),
        host_packets(&host),
        "the map before any flush"
    );
    compare(&ebpf, &host, "off");

    // Tried again after its passes off; few flows then use it.
    polls(&ebpf, OFF_PASSES);
    assert_eq!(mode(&ebpf), CACHE_ON, "tried again");
    let one: Vec<Vec<u8>> = (4..200).map(|psn| write_only(0xC000, psn)).collect();
    feed(&ebpf, &mut host, &one);
    assert!(
        raw_packets(&ebpf) < host_packets(&host),
        "the flow's packets are in its slot until the flush"
    );
    compare(&ebpf, &host, "on again");
    assert_eq!(mode(&ebpf), CACHE_ON, "one flow hits");
}

/// A flow whose slot changed since the flush comes back while the cache drains: its slot is
/// written back before it is emptied, so the map then holds every packet without a flush.
#[test]
fn a_changed_slot_is_written_back_when_its_flow_comes_back_while_draining() {
    if !ready(true) {
        return;
    }
    let ebpf = xdp_object(65_536, loader::Switches::default());
    let mut host = run(&ebpf, &taking_turns(MANY, 2, 0));
    // The first chunk of a pass only: the cache drains from here, the other chunks' slots
    // are still changed.
    let flush = ebpf.program(PROG_FLOW_FLUSH).unwrap().fd().unwrap();
    rocemon::sources::prog_run::run_on_cpu(flush.as_fd(), here(), 0).unwrap();
    assert_eq!(mode(&ebpf), CACHE_DRAINING);
    feed(&ebpf, &mut host, &taking_turns(MANY, 1, 2));
    assert_eq!(
        raw_packets(&ebpf),
        host_packets(&host),
        "every slot taken out by its flow"
    );
    compare(&ebpf, &host, "draining");
}

/// A cache that mostly hits is never drained, however many packets it counts.
#[test]
fn a_cache_that_mostly_hits_stays_on() {
    if !ready(true) {
        return;
    }
    let ebpf = xdp_object(65_536, loader::Switches::default());
    let host = run(&ebpf, &taking_turns(500, 10, 0));
    compare(&ebpf, &host, "500 flows");
    assert_eq!(mode(&ebpf), CACHE_ON);
}

/// The chunks the last pass walked on this CPU, a bit each.
fn chunks_walked(ebpf: &aya::Ebpf) -> u32 {
    flush_state(ebpf).chunks
}

/// An off cache holds no flow and takes none: the agent's poll walks its first chunk only
/// (which counts the passes off), not all 16, until the pass that tries it again, which
/// walks them all. The counts stay exact throughout.
#[test]
fn an_off_cache_costs_one_chunk_a_poll_until_it_is_tried_again() {
    if !ready(true) {
        return;
    }
    let all = (1u32 << (FLOW_CACHE_SLOTS / FLUSH_CHUNK)) - 1;
    let ebpf = xdp_object(65_536, loader::Switches::default());
    let mut host = run(&ebpf, &taking_turns(MANY, 2, 0));
    compare(&ebpf, &host, "on, many flows");
    assert_eq!(chunks_walked(&ebpf), all, "on: every chunk");
    feed(&ebpf, &mut host, &taking_turns(MANY, 1, 2));
    compare(&ebpf, &host, "draining");
    assert_eq!(mode(&ebpf), CACHE_OFF, "drained");
    assert_eq!(
        chunks_walked(&ebpf),
        all,
        "the draining pass walked every chunk"
    );

    feed(&ebpf, &mut host, &taking_turns(MANY, 1, 3));
    for pass in 1..OFF_PASSES {
        compare(&ebpf, &host, "off");
        assert_eq!(mode(&ebpf), CACHE_OFF, "pass {pass}");
        assert_eq!(
            chunks_walked(&ebpf),
            1,
            "off, pass {pass}: the first chunk only"
        );
    }
    polls(&ebpf, 1);
    assert_eq!(mode(&ebpf), CACHE_ON, "tried again");
    assert_eq!(
        chunks_walked(&ebpf),
        all,
        "the pass that tries it again walks every chunk"
    );
    let one: Vec<Vec<u8>> = (4..200).map(|psn| write_only(0xC000, psn)).collect();
    feed(&ebpf, &mut host, &one);
    compare(&ebpf, &host, "on again");
}

/// Runs the flush program's chunk from slot `start` on this CPU, as the agent's poll does.
fn flush_chunk(ebpf: &aya::Ebpf, start: u32) {
    let flush = ebpf.program(PROG_FLOW_FLUSH).unwrap().fd().unwrap();
    rocemon::sources::prog_run::run_on_cpu(flush.as_fd(), here(), u64::from(start)).unwrap();
}

/// Sets the XDP hook's copy of the cache mode on this CPU (what its packets read).
fn set_hook_mode(ebpf: &mut aya::Ebpf, mode: u32) {
    let map = ebpf.map_mut(agent_common::MAP_COUNTERS).unwrap();
    let mut m: aya::maps::PerCpuArray<_, agent_common::HookSlot> =
        aya::maps::PerCpuArray::try_from(map).unwrap();
    let index = agent_common::Hook::Xdp as u32;
    let mut all: Vec<agent_common::HookSlot> = m.get(&index, 0).unwrap().iter().copied().collect();
    all[here() as usize].cache.mode = mode;
    m.set(index, aya::maps::PerCpuValues::try_from(all).unwrap(), 0)
        .unwrap();
}

/// A packet that read the mode as on just before the pass that starts the drain, and was
/// interrupted there by that pass's first chunk (an IPI from the agent's flush), takes a slot
/// of the first chunk after the walk. That pass must not turn the cache off even though every
/// slot it saw was empty: the next pass, draining from its start, walks the slot, and the
/// counts stay exact. The interruption is played from here: the hook's copy of the mode set
/// back to on for that one packet.
#[test]
fn a_slot_taken_as_the_drain_starts_is_walked_before_the_cache_is_off() {
    if !ready(true) {
        return;
    }
    const ENTRIES: u16 = 256;
    // Room for every flow: the LRU map admits each new flow anyway, and what it would push
    // out is no part of this case.
    let mut ebpf = xdp_object(8_192, loader::Switches::default());
    let limits = rocemon::sources::tally::FlowLimits::UNBOUNDED;
    let mut host = rocemon::sources::tally::Tally::new(agent_common::Hook::Xdp, limits);
    // A flow whose slot is in the first chunk, then 255 more.
    let sport = (0xC000u16..)
        .find(|&p| cached::slot(&write_only(p, 0)) < FLUSH_CHUNK)
        .unwrap();
    let full: Vec<Vec<u8>> = std::iter::once(write_only(sport, 0))
        .chain((1..ENTRIES).map(|i| write_only(0x1000 + i, 0)))
        .collect();
    feed(&ebpf, &mut host, &full);
    // Two polls: every slot written back, then emptied (too few packets to judge).
    compare(&ebpf, &host, "the map full");
    compare(&ebpf, &host, "slots emptied");
    // Misses, none of them in the first chunk's slots: the next pass drains, and its first
    // chunk sees only empty slots.
    let misses: Vec<Vec<u8>> = (0x2000u16..)
        .map(|p| write_only(p, 0))
        .filter(|f| cached::slot(f) >= FLUSH_CHUNK)
        .take(2_048)
        .collect();
    feed(&ebpf, &mut host, &misses);
    flush_chunk(&ebpf, 0);
    assert_eq!(
        mode(&ebpf),
        CACHE_DRAINING,
        "the first chunk starts the drain"
    );
    // The interrupted packet: it read the mode as on, and takes its slot after the walk.
    set_hook_mode(&mut ebpf, CACHE_ON);
    feed(&ebpf, &mut host, &[write_only(sport, 1)]);
    set_hook_mode(&mut ebpf, CACHE_DRAINING);
    for start in agent_common::flow_cache::flush_starts().skip(1) {
        flush_chunk(&ebpf, start);
    }
    assert_eq!(
        mode(&ebpf),
        CACHE_DRAINING,
        "the pass that started the drain must not turn the cache off"
    );
    // Its flow's next packet takes the slot out (written back, emptied); the pass after
    // finds every slot empty.
    feed(&ebpf, &mut host, &[write_only(sport, 2)]);
    compare(&ebpf, &host, "the slot walked");
    compare(&ebpf, &host, "drained");
    assert_eq!(
        mode(&ebpf),
        CACHE_OFF,
        "off once a whole draining pass found it empty"
    );
    feed(&ebpf, &mut host, &[write_only(sport, 3)]);
    compare(&ebpf, &host, "off");
}

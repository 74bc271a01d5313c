//! The flow cache tests' shared parts (`kernel_flow_cache.rs`, `kernel_cache_mode.rs`): their
//! frames, the host's count of them, and the comparison of the flows the agent reads.
// Each including crate uses a part of it.
#![allow(dead_code)]

use crate::support::comparable;
use crate::testrun::{record_as_kernel, test_run};
use agent_common::flow_cache::{slot_of, KeyWords};
use agent_common::{parse_record, FlowKey4, FlowStats, Hook, LinkType, SliceReader};
use rocemon::kernel::loader;
use rocemon::sources::tally::Tally;
use rocemon_testkit::frames::Roce;

/// An RDMA WRITE_ONLY of 256 bytes from 10.1.0.1 to 10.2.0.1, source port `sport`.
pub fn write_only(sport: u16, psn: u32) -> Vec<u8> {
    let mut r = Roce::new(
        "10.1.0.1".parse().unwrap(),
        "10.2.0.1".parse().unwrap(),
        sport,
        0x123,
        0x0A,
    );
    r.psn = psn;
    r.payload = 256;
    r.dma_len = 256;
    r.frame()
}

/// The cache slot of a frame's flow as the XDP hook counts it.
pub fn slot(frame: &[u8]) -> u32 {
    let mut rec = parse_record(&SliceReader(frame), LinkType::Ethernet);
    rec.key.hook = Hook::Xdp as u8;
    slot_of(&rec.key_words() as &KeyWords)
}

/// Runs frames through the XDP program and the host's counting, then checks the flows the
/// agent reads and the counter block against the host's.
pub fn run_and_compare(ebpf: &aya::Ebpf, frames: &[Vec<u8>], what: &str) {
    let host = run(ebpf, frames);
    compare(ebpf, &host, what);
}

/// Runs frames through the XDP program and the host's counting.
pub fn run(ebpf: &aya::Ebpf, frames: &[Vec<u8>]) -> Tally {
    let mut host = Tally::new(Hook::Xdp, rocemon::sources::tally::FlowLimits::UNBOUNDED);
    feed(ebpf, &mut host, frames);
    host
}

/// Runs more frames through the XDP program and into the host's count.
pub fn feed(ebpf: &aya::Ebpf, host: &mut Tally, frames: &[Vec<u8>]) {
    let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
    for f in frames {
        test_run(prog.fd().unwrap(), f, 1).unwrap();
        record_as_kernel(host, f, 0);
    }
}

/// The flows the agent reads (a flush first) and the counter block, against the host's.
pub fn compare(ebpf: &aya::Ebpf, host: &Tally, what: &str) {
    let (flows, errors) = loader::read_flows(ebpf).unwrap();
    assert_eq!(errors, 0, "{what}: read errors");
    assert_eq!(flows.len(), host.flows.len(), "{what}: flows");
    for (key, got) in &flows {
        let want = host.flows.get(key).expect("a flow the host never saw");
        assert_eq!(comparable(got), comparable(want), "{what}: {key:?}");
    }
    let k = loader::read_counters(ebpf).unwrap();
    assert_eq!(
        k[Hook::Xdp as usize],
        host.counters,
        "{what}: counter block"
    );
}

/// This CPU's packets of every flow in the raw IPv4 flow map, without a flush.
pub fn raw_packets(ebpf: &aya::Ebpf) -> u64 {
    let map = ebpf.map(agent_common::MAP_FLOWS4).unwrap();
    let m: aya::maps::PerCpuHashMap<_, FlowKey4, FlowStats> =
        aya::maps::PerCpuHashMap::try_from(map).unwrap();
    m.iter()
        .map(|r| r.unwrap().1.iter().map(|s| s.packets).sum::<u64>())
        .sum()
}

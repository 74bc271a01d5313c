//! The bench's flow floor (`rocemon_flow_floor_xdp` and `rocemon_flow_floor_tc`, the least an
//! exact per-flow counter costs) counts what it stands for: every packet and byte of every IPv4 RoCE flow, in its
//! own map entry, and nothing else. A floor that skipped its flows would be cheap for nothing,
//! and the traffic shapes' comparison with it would lie.

#[path = "support/kernel.rs"]
mod support;
#[path = "support/testrun.rs"]
mod testrun;

use agent_common::{FlowKey4, MAP_FLOW_FLOOR, PROG_FLOW_FLOOR_TC, PROG_FLOW_FLOOR_XDP};
use aya::maps::PerCpuHashMap;
use aya::programs::{SchedClassifier, Xdp};
use rocemon::kernel::loader;
use rocemon_testkit::frames::Roce;
use support::ready;
use testrun::test_run;

/// The flow floor `program` loaded with a map of `entries` (as the bench loads it), not
/// attached.
fn floor(entries: u32, program: &str) -> aya::Ebpf {
    let mut ebpf = aya::EbpfLoader::new()
        .map_max_entries(MAP_FLOW_FLOOR, entries)
        .load(loader::EBPF_OBJECT)
        .unwrap();
    let p = ebpf.program_mut(program).unwrap();
    if program == PROG_FLOW_FLOOR_TC {
        let p: &mut SchedClassifier = p.try_into().unwrap();
        p.load().unwrap();
    } else {
        let p: &mut Xdp = p.try_into().unwrap();
        p.load().unwrap();
    }
    ebpf
}

/// What the program returns for every frame: XDP_PASS, or TC_ACT_PIPE at tc.
fn passes(program: &str) -> u32 {
    if program == PROG_FLOW_FLOOR_TC {
        3
    } else {
        2
    }
}

/// Flow `qp`'s WRITE_ONLY frame (destination QP `qp`).
fn frame(qp: u32) -> Vec<u8> {
    let mut r = Roce::new(
        "10.1.0.1".parse().unwrap(),
        "10.2.0.1".parse().unwrap(),
        0xC001,
        qp,
        0x0A,
    );
    r.payload = 64;
    r.dma_len = 64;
    r.frame()
}

/// Packets and bytes per destination QP over all CPUs.
fn counted(ebpf: &aya::Ebpf) -> std::collections::BTreeMap<u32, [u64; 2]> {
    let map: PerCpuHashMap<_, FlowKey4, [u64; 2]> =
        PerCpuHashMap::try_from(ebpf.map(MAP_FLOW_FLOOR).unwrap()).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for e in map.iter() {
        let (k, per_cpu) = e.unwrap();
        assert_eq!(
            (k.src, k.dst, k.sport),
            ([10, 1, 0, 1], [10, 2, 0, 1], 0xC001),
            "the key as rocemon's IPv4 flow key"
        );
        let v: &mut [u64; 2] = out.entry(k.dest_qp).or_default();
        for c in per_cpu.iter() {
            v[0] += c[0];
            v[1] += c[1];
        }
    }
    out
}

/// Three rounds of 1,000 flows through `program`: each flow in its own entry, every packet
/// and byte counted.
fn counts_every_packet_of_every_flow(program: &str) {
    let ebpf = floor(4096, program);
    let fd = ebpf.program(program).unwrap().fd().unwrap();
    let len = frame(0x100).len() as u64;
    for round in 0..3 {
        for qp in 0x100..0x100 + 1000 {
            let r = test_run(fd, &frame(qp), 1).unwrap();
            assert_eq!(
                r.retval,
                passes(program),
                "passed (round {round}, QP {qp:#x})"
            );
        }
    }
    let got = counted(&ebpf);
    assert_eq!(got.len(), 1000, "one entry per flow");
    for (qp, v) in got {
        assert_eq!(v, [3, 3 * len], "QP {qp:#x}: packets and bytes");
    }
}

/// UDP to another port, IPv6 and a frame cut short pass through `program` uncounted.
fn counts_nothing_but_roce(program: &str) {
    let ebpf = floor(16, program);
    let fd = ebpf.program(program).unwrap().fd().unwrap();
    let mut other_port = frame(0x100);
    other_port[36..38].copy_from_slice(&4790u16.to_be_bytes());
    let mut not_ip = frame(0x100);
    not_ip[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
    for f in [other_port, not_ip, frame(0x100)[..40].to_vec()] {
        assert_eq!(
            test_run(fd, &f, 1).unwrap().retval,
            passes(program),
            "passed"
        );
    }
    assert!(counted(&ebpf).is_empty());
}

#[test]
fn the_flow_floor_counts_every_packet_of_every_flow_in_its_own_entry() {
    if !ready(true) {
        return;
    }
    counts_every_packet_of_every_flow(PROG_FLOW_FLOOR_XDP);
}

#[test]
fn the_flow_floor_counts_nothing_but_roce() {
    if !ready(true) {
        return;
    }
    counts_nothing_but_roce(PROG_FLOW_FLOOR_XDP);
}

#[test]
fn the_tc_flow_floor_counts_every_packet_of_every_flow_in_its_own_entry() {
    if !ready(true) {
        return;
    }
    counts_every_packet_of_every_flow(PROG_FLOW_FLOOR_TC);
}

#[test]
fn the_tc_flow_floor_counts_nothing_but_roce() {
    if !ready(true) {
        return;
    }
    counts_nothing_but_roce(PROG_FLOW_FLOOR_TC);
}

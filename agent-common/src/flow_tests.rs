//! Tests of [`super::FlowStats`]: the layout, recording, merging.
use super::*;
use crate::headers::bth::Bth;
use crate::info::RoceInfo;
use crate::outcome::Outcome;

fn info(opcode: u8, ecn: u8, psn: u32) -> RoceInfo {
    RoceInfo {
        outcome: Outcome::Roce,
        ip_version: 4,
        ecn,
        src: [0; 16],
        dst: [0; 16],
        sport: 1,
        udp_len: 40,
        vlan_tags: 0,
        dscp: 26,
        pcp: None,
        tunnel: Default::default(),
        bth: Bth {
            opcode,
            psn,
            becn: opcode == 0x81,
            ..Bth::default()
        },
        reth_dma_len: None,
        aeth: None,
        deth: None,
    }
}

#[test]
fn a_packets_writes_land_in_the_first_line() {
    assert_eq!(
        core::mem::offset_of!(FlowStats, first_seen_ns),
        64,
        "the fields every packet writes fill the first 64 bytes"
    );
    assert_eq!(core::mem::offset_of!(FlowStats, send_progress), 40);
    assert_eq!(core::mem::offset_of!(FlowStats, main_message_bytes), 56);
}

#[test]
fn layout() {
    assert_eq!(core::mem::size_of::<FlowKey>(), 40);
    assert_eq!(
        core::mem::size_of::<FlowStats>(),
        8 * (8 + 4 + OpClass::COUNT + 2 * MsgOp::COUNT + 2 + 2) + 4 * NAK_SLOTS
    );
    assert_eq!(core::mem::size_of::<FlowStats>(), 256, "four cache lines");
}

/// A plain RDMA WRITE_ONLY, the shape of most RoCE traffic, writes nothing past the first
/// line once its flow has a packet: the rest of the value is untouched.
#[test]
fn a_common_packet_writes_only_the_first_line() {
    let mut w = info(0x0A, 0, 1);
    w.reth_dma_len = Some(4096);
    let mut s = FlowStats::default();
    s.record(&w.into(), 4200, 10);
    let cold = |s: &FlowStats| {
        // SAFETY: `FlowStats` is `#[repr(C)]` plain integers without implicit padding.
        let b: [u8; core::mem::size_of::<FlowStats>()] = unsafe { core::mem::transmute(*s) };
        b[64..].to_vec()
    };
    let before = cold(&s);
    w.bth.psn = 2;
    s.record(&w.into(), 4200, 20);
    assert_eq!(cold(&s), before);
    assert_eq!(s.class_packets()[OpClass::Write as usize], 2);
    assert_eq!(s.messages()[MsgOp::RdmaWrite as usize], 2);
    assert_eq!(s.message_bytes()[MsgOp::RdmaWrite as usize], 8192);
}

/// A flow's common packets, with the hardware as the judge: the value's lines past the first
/// sit on a read-only page, so any store there faults, even of the value the field holds (a
/// store takes the line all the same: where many flows take turns, a cache miss a packet,
/// which comparing bytes before and after cannot see). A child process records the packets
/// after the first (which sets `first_seen_ns`, further out); the test fails if it died.
fn stores_only_in_the_first_line(packets: &[PacketRecord]) {
    let (first, rest) = packets.split_first().expect("packets");
    // SAFETY: an anonymous mapping of two pages of this process, unmapped at the end; the
    // value lies in it, `FlowStats` needs 8-byte alignment (a page offset minus 64 has it);
    // the child only records into the value (no allocation: the records are made before the
    // fork) and leaves with `_exit`.
    unsafe {
        let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
        let base = libc::mmap(
            core::ptr::null_mut(),
            2 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(base, libc::MAP_FAILED);
        let s = base.cast::<u8>().add(page - 64).cast::<FlowStats>();
        s.write(FlowStats::default());
        (*s).record(first, 4200, 10);
        assert_eq!(
            libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_READ),
            0
        );
        let pid = libc::fork();
        if pid == 0 {
            for (i, p) in rest.iter().enumerate() {
                (*s).record(p, 4200, 20 + i as u64);
            }
            libc::_exit(0);
        }
        assert!(pid > 0, "fork");
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        libc::munmap(base, 2 * page);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a packet stored past the value's first line (the recording child died: status {status:#x})"
        );
    }
}

#[test]
fn write_only_packets_store_nothing_past_the_first_line() {
    let packets: Vec<PacketRecord> = (1..64)
        .map(|psn| {
            let mut w = info(0x0A, 2, psn);
            w.reth_dma_len = Some(4096);
            w.into()
        })
        .collect();
    stores_only_in_the_first_line(&packets);
}

#[test]
fn multi_packet_writes_store_nothing_past_the_first_line() {
    let packets: Vec<PacketRecord> = (0..60u32)
        .map(|i| {
            // WRITE FIRST, MIDDLE, MIDDLE, LAST: 4 KiB messages of 1 KiB packets.
            let op = [0x06, 0x07, 0x07, 0x08][(i % 4) as usize];
            let mut w = info(op, 2, 1 + i);
            if op == 0x06 {
                w.reth_dma_len = Some(4096);
            }
            w.into()
        })
        .collect();
    stores_only_in_the_first_line(&packets);
}

#[test]
fn acks_store_nothing_past_the_first_line() {
    // Positive ACKs (syndrome 0: credit count 0), one per request.
    let packets: Vec<PacketRecord> = (1..64)
        .map(|psn| {
            let mut a = info(0x11, 0, psn);
            a.aeth = Some(crate::info::Aeth {
                syndrome: 0,
                msn: psn,
            });
            a.into()
        })
        .collect();
    stores_only_in_the_first_line(&packets);
}

/// Every class and operation counts right whichever came first, and merges of values whose
/// main classes differ add up.
#[test]
fn every_class_counts_whichever_came_first() {
    let ops = [0x04u8, 0x0A, 0x0C, 0x10, 0x11, 0x14, 0x81, 0x06, 0x08];
    for first in 0..ops.len() {
        let mut order: Vec<u8> = ops[first..].to_vec();
        order.extend_from_slice(&ops[..first]);
        let mut s = FlowStats::default();
        let mut want = [0u64; OpClass::COUNT];
        for (i, op) in order.iter().enumerate() {
            let mut p = info(*op, 0, i as u32);
            p.reth_dma_len = Some(100);
            s.record(&p.into(), 100, 1 + i as u64);
            want[class(*op) as usize] += 1;
        }
        assert_eq!(s.class_packets(), want, "first opcode {:#x}", order[0]);
        let mut m = FlowStats::default();
        let mut t = FlowStats::default();
        t.record(&info(0x11, 0, 0).into(), 60, 0);
        m.merge(&t);
        m.merge(&s);
        want[OpClass::Ack as usize] += 1;
        assert_eq!(m.class_packets(), want);
        assert_eq!(m.messages(), s.messages());
        assert_eq!(m.message_bytes(), s.message_bytes());
    }
}

#[test]
fn record_and_merge() {
    let mut a = FlowStats::default();
    a.record(&info(0x04, 3, 7).into(), 100, 10);
    a.record(&info(0x81, 2, 0).into(), 60, 20);
    assert_eq!(
        (a.packets, a.bytes, a.ecn_ce, a.cnp, a.becn),
        (2, 160, 1, 1, 1)
    );
    assert_eq!((a.first_seen_ns, a.last_seen_ns, a.last_psn), (10, 20, 0));
    assert_eq!(a.class_packets()[OpClass::Send as usize], 1);
    assert_eq!(a.class_packets()[OpClass::Other as usize], 1);
    let mut b = FlowStats::default();
    b.record(&info(0x0A, 0, 9).into(), 1000, 5);
    b.record(&info(0x0A, 0, 10).into(), 1000, 30);
    let mut m = FlowStats::default();
    m.merge(&a);
    m.merge(&b);
    assert_eq!((m.packets, m.bytes), (4, 2160));
    assert_eq!((m.first_seen_ns, m.last_seen_ns, m.last_psn), (5, 30, 10));

    assert_eq!(m.class_packets()[OpClass::Write as usize], 2);
}

/// The flow cache's write-back: a slot counts from its flow's state, its counts go into
/// the map's value (merged) and are cleared, and it counts on. The map's value ends equal
/// to one record of every packet, counts, times and sequence state alike.
#[test]
fn counts_cleared_and_merged_back_equal_one_record() {
    let packets = [
        info(0x06, 0, 1),
        info(0x07, 3, 2),
        info(0x08, 0, 3),
        info(0x0A, 0, 5),
        info(0x81, 0, 0),
        info(0x0A, 3, 6),
    ];
    let mut whole = FlowStats::default();
    let (mut map, mut slot) = (FlowStats::default(), FlowStats::default());
    for (i, p) in packets.iter().enumerate() {
        let t = 100 + i as u64 * 10;
        whole.record(&(*p).into(), 90, t);
        slot.record(&(*p).into(), 90, t);
        if i % 2 == 1 {
            map.merge(&slot);
            slot.clear_counts();
        }
    }
    assert_eq!(slot.packets, 0);
    assert_eq!(slot.psn, whole.psn, "the slot keeps the sequence state");
    assert_eq!(map, whole);
}

#[test]
fn a_torn_value_without_its_first_time_never_makes_a_flow_older() {
    let mut m = FlowStats::default();
    let a = FlowStats {
        packets: 1,
        first_seen_ns: 0,
        last_seen_ns: 0,
        ..FlowStats::default()
    };
    let b = FlowStats {
        packets: 2,
        first_seen_ns: 7,
        last_seen_ns: 9,
        ..FlowStats::default()
    };
    m.merge(&a);
    m.merge(&b);
    assert_eq!(m.first_seen_ns, 7);
    let mut n = FlowStats::default();
    n.merge(&FlowStats {
        first_seen_ns: 0,
        ..b
    });
    assert_eq!(n.first_seen_ns, 9, "its last seen stands in");
}

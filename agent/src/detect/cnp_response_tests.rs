//! The CE/CNP pairing and the senders' reaction, packet by packet.
use super::*;
use agent_common::Hook;
use rocemon_testkit::frames::Roce;

/// A packet's record and key from the test kit's frame.
fn pkt(r: &Roce) -> (PacketRecord, FlowKey) {
    let f = r.frame();
    let rec = agent_common::parse_record(
        &agent_common::SliceReader(&f),
        agent_common::LinkType::Ethernet,
    );
    assert!(rec.is_roce());
    let key = rec.flow_key(Hook::Xdp);
    (rec, key)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A CE-marked RDMA WRITE from 10.0.0.1 to 10.0.0.2 on `sport` to `qp`: its record and key.
fn ce_write(qp: u32, sport: u16) -> (PacketRecord, FlowKey) {
    let mut w = Roce::new(ip("10.0.0.1"), ip("10.0.0.2"), sport, qp, 0x0A);
    w.ecn = 3;
    pkt(&w)
}

/// `n` connections of one host pair, each one CE-marked WRITE answered by its CNP 10 us
/// later, one connection after another; `reverse`: each connection's ACK comes back on
/// its port first (the exact rule), else none does (the waiting rule).
fn many(n: u32, reverse: bool) -> CnpResponse {
    let mut c = CnpResponse::default();
    let mut seen = std::collections::HashSet::new();
    let mut feed = |c: &mut CnpResponse, r: &Roce, t: u64| {
        let (rec, key) = pkt(r);
        let new = seen.insert(key);
        c.packet(&rec, &key, 100, t, new);
    };
    for i in 0..n {
        let t = u64::from(i) * 100_000;
        let sport = 0xC000 + (i % 0x3FFF) as u16;
        let (qa, qb) = (0x10_0000 + i, 0x20_0000 + i);
        if reverse {
            let ack = Roce::new(ip("10.0.0.2"), ip("10.0.0.1"), sport, qa, 0x11);
            feed(&mut c, &ack, t);
        }
        let mut w = Roce::new(ip("10.0.0.1"), ip("10.0.0.2"), sport, qb, 0x0A);
        w.ecn = 3;
        feed(&mut c, &w, t + 1_000);
        let cnp = Roce::cnp(ip("10.0.0.2"), ip("10.0.0.1"), 0xC777, qa);
        feed(&mut c, &cnp, t + 11_000);
    }
    c
}

/// The port index is bounded as the connections are: a million new flows on their own
/// ports index `--max-flows` of them and count the rest.
#[test]
fn the_port_index_holds_max_flows_ports() {
    let mut c = CnpResponse::bounded(100);
    for i in 0..10_000u32 {
        let w = Roce::new(
            ip("10.0.0.1"),
            ip("10.0.0.2"),
            i as u16,
            0x20_0000 + i,
            0x0A,
        );
        let (rec, key) = pkt(&w);
        c.packet(&rec, &key, 100, u64::from(i) * 1_000, true);
    }
    assert_eq!((c.reverse_qp.len(), c.ports_by_qp.len()), (100, 100));
    assert_eq!(c.report().flows_not_indexed, 9_900);
}

/// CE marks that no CNP answers, on flows without reverse packets, keep the host pair's
/// queue of waiting flows to those still waiting: a flow whose wait ran out leaves it
/// when the next one joins, so a capture of CE marks alone cannot grow it.
#[test]
fn unanswered_ce_marks_keep_the_waiting_queue_to_the_flows_waiting() {
    let mut c = CnpResponse::default();
    for i in 0..10_000u32 {
        let mut w = Roce::new(
            ip("10.0.0.1"),
            ip("10.0.0.2"),
            0xC000,
            0x20_0000 + i % 3,
            0x0A,
        );
        w.ecn = 3;
        let (rec, key) = pkt(&w);
        // Every 2 ms: each CE mark finds its flow's last wait over.
        c.packet(&rec, &key, 100, u64::from(i) * 2 * ANSWER_WINDOW_NS, i < 3);
    }
    let waiting: usize = c.waiting.values().map(WaitQueue::len).sum();
    assert!(waiting <= 3, "{waiting} queued");
    assert_eq!(c.report().unanswered_ce, 10_000);
}

/// One flow alone, CE-marked every 2 ms and never answered: each mark begins a new wait,
/// and the wait it ends leaves the queue (it grew by one entry per mark before).
#[test]
fn one_flow_renewing_its_wait_keeps_one_entry_queued() {
    let mut c = CnpResponse::default();
    let (rec, key) = ce_write(0x20_0000, 0xC000);
    for i in 0..10_000u64 {
        c.packet(&rec, &key, 100, i * 2 * ANSWER_WINDOW_NS, i == 0);
    }
    let waiting: usize = c.waiting.values().map(WaitQueue::len).sum();
    assert_eq!(waiting, 1);
    assert_eq!(c.report().unanswered_ce, 10_000);
}

/// A flow whose wait expired and began anew queues behind the flows that waited since:
/// the CNP answers the flow that has waited longest (B since 0.5 ms), not the renewed one
/// (A, waiting again since 1.2 ms).
#[test]
fn a_renewed_wait_queues_behind_the_flows_already_waiting() {
    let mut c = CnpResponse::default();
    let (a, b) = (ce_write(0x20_0000, 0xC000), ce_write(0x20_0001, 0xC001));
    c.packet(&a.0, &a.1, 100, 0, true);
    c.packet(&b.0, &b.1, 100, 500_000, true);
    c.packet(&a.0, &a.1, 100, 1_200_000, false);
    let (rec, key) = pkt(&Roce::cnp(
        ip("10.0.0.2"),
        ip("10.0.0.1"),
        0xC777,
        0x10_0000,
    ));
    c.packet(&rec, &key, 100, 1_300_000, true);
    let (_, all) = c.report_and_all();
    let cnps = |qp: u32| all.iter().find(|x| x.dest_qp == qp).map(|x| x.cnps);
    assert_eq!((cnps(0x20_0000), cnps(0x20_0001)), (Some(0), Some(1)));
}

#[test]
fn every_ce_of_many_connections_is_answered_by_its_own_cnp() {
    let c = many(5_000, true);
    let r = c.report();
    assert_eq!(
        (r.ce_packets, r.answered_ce, r.unanswered_ce),
        (5_000, 5_000, 0)
    );
    assert!(r.connections.iter().all(|x| x.cnps == 1));
}

#[test]
fn without_reverse_packets_each_cnp_answers_the_flow_waiting_longest() {
    let c = many(5_000, false);
    let r = c.report();
    assert_eq!(
        (r.ce_packets, r.answered_ce, r.unanswered_ce),
        (5_000, 5_000, 0)
    );
    assert!(r.connections.iter().all(|x| x.cnps == 1), "one CNP each");
}

/// The pairing's work grows with the packets, not with connections times CNPs (10,000
/// connections of one host pair cost 6.4 s before; 40,000 did not end).
/// 5,000 connections through a bound of 100: 100 paired, the others' CE packets counted;
/// the report's list bounded too.
#[test]
fn the_pairing_state_is_bounded_and_counts_what_it_leaves() {
    let mut c = CnpResponse::bounded(100);
    let mut seen = std::collections::HashSet::new();
    for i in 0..5_000u32 {
        let mut w = Roce::new(ip("10.0.0.1"), ip("10.0.0.2"), 0xC000, 0x20_0000 + i, 0x0A);
        w.ecn = 3;
        let (rec, key) = pkt(&w);
        let new = seen.insert(key);
        c.packet(&rec, &key, 100, u64::from(i) * 1_000, new);
    }
    assert_eq!(c.conns.len(), 100);
    let r = c.report();
    assert_eq!((r.ce_packets, r.untracked_ce_packets), (100, 4_900));
    assert_eq!(r.connections_total, 100);
    let big = many(1_500, true).report();
    assert_eq!(big.connections_total, 1_500);
    assert_eq!(big.connections.len(), LISTED_CONNECTIONS);
}

#[test]
fn the_pairing_is_linear_in_the_packets() {
    for reverse in [true, false] {
        let c = many(20_000, reverse);
        assert!(
            c.visits <= 3 * 20_000,
            "{} index entries looked at for 20,000 CNPs (reverse packets: {reverse})",
            c.visits
        );
    }
}

/// One connection answered 100,000 times (a CE mark, its CNP 10 us later, every 100 us):
/// its latencies stay bounded (they were a vector of every one), and the figures stay
/// right: every CE answered, the latency 10 us.
#[test]
fn a_connection_answered_without_end_keeps_its_latencies_bounded() {
    let mut c = CnpResponse::default();
    let (ce, ce_key) = ce_write(0x20_0000, 0xC000);
    let (cnp, cnp_key) = pkt(&Roce::cnp(
        ip("10.0.0.2"),
        ip("10.0.0.1"),
        0xC777,
        0x10_0000,
    ));
    for i in 0..100_000u64 {
        let t = i * 100_000;
        c.packet(&ce, &ce_key, 100, t, i == 0);
        c.packet(&cnp, &cnp_key, 100, t + 10_000, i == 0);
    }
    let kept: usize = c
        .conns
        .values()
        .filter_map(|s| s.answers.as_ref())
        .map(|a| a.latencies.kept().len())
        .sum();
    assert_eq!(kept, crate::detect::latency_sample::KEPT);
    let r = c.report();
    assert_eq!((r.ce_packets, r.answered_ce), (100_000, 100_000));
    assert_eq!(r.latency_seconds.p50, Some(10e-6));
    assert_eq!(r.connections[0].latency_p50_seconds, Some(10e-6));
}

/// What a CE packet touches stays small: a connection's entry (key and hot state) fits two
/// cache lines; the CNPs' side is boxed.
#[test]
fn a_connection_entry_fits_two_cache_lines() {
    assert!(std::mem::size_of::<(FlowKey, ConnState)>() <= 128);
}

/// The wait queue keeps its order across its inline first entry and the rest.
#[test]
fn a_wait_queue_is_first_in_first_out() {
    let k = |qp: u32| FlowKey {
        dest_qp: qp,
        ..FlowKey::default()
    };
    let mut q = WaitQueue::default();
    assert!(q.front().is_none());
    for i in 0..5 {
        q.push_back((k(i), u64::from(i)));
    }
    assert_eq!(q.front().map(|w| w.1), Some(0));
    let mut order = Vec::new();
    while let Some((_, t)) = q.pop_front() {
        order.push(t);
        if t == 1 {
            q.push_back((k(9), 9));
        }
    }
    assert_eq!(order, vec![0, 1, 2, 3, 4, 9]);
    assert!(q.pop_front().is_none());
    assert_eq!(q.len(), 0);
}

//! The flow table: rates, ticks, top-K, eviction and elephants.
use super::*;
use crate::detect::elephant::Transition;

fn key(qp: u32) -> FlowKey {
    FlowKey {
        ip_version: 4,
        dest_qp: qp,
        ..FlowKey::default()
    }
}

fn stats(bytes: u64) -> FlowStats {
    FlowStats {
        bytes,
        packets: bytes / 100,
        ..FlowStats::default()
    }
}

#[test]
fn rates_top_k_and_eviction() {
    let mut t = FlowTable::new(vec!["a".into()]);
    let cfg = ElephantConfig {
        threshold_bytes_per_second: 500_000.0,
        min_duration_seconds: 3.0,
        ..Default::default()
    };
    t.begin_poll();
    t.update(0, key(1), stats(0));
    t.update(0, key(2), stats(0));
    t.end_poll(&[(0, u64::MAX)]);
    let mut events = vec![];
    for i in 1..=50u64 {
        t.begin_poll();
        t.update(0, key(1), stats(i * 1_000_000));
        t.update(0, key(2), stats(i * 1_000));
        t.end_poll(&[(0, u64::MAX)]);
        events.extend(t.tick(1.0, &cfg, &[500_000.0]));
    }
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].key.dest_qp, 1);
    assert_eq!(events[0].transition, Transition::Started);
    assert_eq!(events[0].at_s, 3.0);
    assert_eq!(t.elephants_for(0), 1);
    let top = t.top_k(1);
    assert_eq!(top[0].key.dest_qp, 1);
    // converged near 1 MB/s
    assert!(
        (top[0].rate_bytes - 1e6).abs() < 1e4,
        "{}",
        top[0].rate_bytes
    );
    t.begin_poll();
    t.update(0, key(1), stats(51_000_000));
    assert_eq!(t.end_poll(&[(0, u64::MAX)]), vec![1]);
    assert_eq!(t.len(), 1);
    assert_eq!(t.count_for(0), 1);
}

/// CE marks and CNPs get a per-second rate as bytes and packets do (`top` shows them beside
/// the rates): 40 CE and 5 CNPs a second converge to 40/s and 5/s, and a flow that stops
/// marking decays towards 0.
#[test]
fn ce_and_cnp_rates_follow_their_totals() {
    let mut t = FlowTable::new(vec!["a".into()]);
    let cfg = ElephantConfig::default();
    let at = |i: u64, ce: u64, cnp: u64| FlowStats {
        ecn_ce: ce,
        cnp,
        ..stats(i * 100_000)
    };
    for i in 0..=20u64 {
        t.begin_poll();
        t.update(0, key(1), at(i, i * 40, i * 5));
        t.end_poll(&[(0, u64::MAX)]);
        t.tick(1.0, &cfg, &[f64::MAX]);
    }
    let e = &t.top_k(1)[0];
    assert!((e.rate_ce - 40.0).abs() < 0.5, "{}", e.rate_ce);
    assert!((e.rate_cnp - 5.0).abs() < 0.1, "{}", e.rate_cnp);
    for i in 21..=40u64 {
        t.begin_poll();
        t.update(0, key(1), at(i, 800, 100));
        t.end_poll(&[(0, u64::MAX)]);
        t.tick(1.0, &cfg, &[f64::MAX]);
    }
    let e = &t.top_k(1)[0];
    assert!(
        e.rate_ce < 1.0 && e.rate_cnp < 0.2,
        "{} {}",
        e.rate_ce,
        e.rate_cnp
    );
}

/// After a restart over pinned maps, the first poll finds totals of unknown age: they are a
/// baseline, not a burst (no spurious elephant, no rate spike).
#[test]
fn totals_found_at_the_first_poll_are_a_baseline() {
    let mut t = FlowTable::new(vec!["a".into()]);
    let cfg = ElephantConfig {
        threshold_bytes_per_second: 5_000_000.0,
        min_duration_seconds: 0.0,
        ..Default::default()
    };
    let mut events = vec![];
    for i in 0..10u64 {
        t.begin_poll();
        t.update(0, key(1), stats(50_000_000_000 + i * 1_000_000));
        t.end_poll(&[(0, u64::MAX)]);
        events.extend(t.tick(1.0, &cfg, &[5_000_000.0]));
        let r = t.top_k(1)[0].rate_bytes;
        assert!(r <= 1_000_001.0, "poll {i}: rate {r}");
    }
    assert!(events.is_empty(), "{events:?}");
    assert!((t.top_k(1)[0].rate_bytes - 1e6).abs() < 1.0);
}

#[test]
fn addresses() {
    let mut k = key(1);
    k.src[..4].copy_from_slice(&[10, 0, 0, 1]);
    assert_eq!(addr(4, &k.src).to_string(), "10.0.0.1");
    let mut b = [0u8; 16];
    b[0] = 0xfd;
    b[15] = 1;
    assert_eq!(addr(6, &b).to_string(), "fd00::1");
}

/// A RoCE packet (the independent frame builder of the tests) and a wire length.
/// Counts one packet of flow `qp` (interface 0).
fn record(t: &mut FlowTable, qp: u32, info: &agent_common::PacketRecord, len: u64, ts_ns: u64) {
    let k = key(qp);
    let (s, _) = t.stats_hashed(t.hash(0, &k), 0, k);
    let mut c = agent_common::HookCounters::ZERO;
    agent_common::count::flow_step(s, info, &mut c, len, ts_ns, true);
}

fn roce(bytes_each: u64) -> (agent_common::PacketRecord, u64) {
    let ip = |s: &str| s.parse().unwrap();
    let f = rocemon_testkit::frames::Roce::new(ip("10.0.0.1"), ip("10.0.0.2"), 1, 1, 0x04).frame();
    let info = agent_common::parse_record(
        &agent_common::SliceReader(&f),
        agent_common::LinkType::Ethernet,
    );
    assert!(info.is_roce());
    (info, bytes_each)
}

/// Ticks cost what moved: flows that went quiet leave the active list, and their rates
/// decay lazily to what every skipped tick would have made of them.
#[test]
fn quiet_flows_leave_the_ticks_and_decay_lazily() {
    let cfg = ElephantConfig::default();
    let (info, len) = roce(1000);
    let mut lazy = FlowTable::new(vec!["c".into()]);
    for q in 0..1000 {
        record(&mut lazy, q, &info, len, 0);
    }
    assert_eq!(lazy.active_len(), 1000);
    lazy.tick(1.0, &cfg, &[1e12]);
    assert_eq!(lazy.active_len(), 1000, "they moved in this interval");
    lazy.tick(1.0, &cfg, &[1e12]);
    assert_eq!(lazy.active_len(), 0, "nothing moved: none is visited again");
    for _ in 0..20 {
        lazy.tick(0.5, &cfg, &[1e12]);
    }
    lazy.settle();
    // What ticking every flow every time gives: 1000 B/s seeded, then decayed by
    // exp(-dt/tau) per tick over 1 + 20 x 0.5 = 11 s.
    let want = 1000.0 * (-11.0 / lazy.tau_s).exp();
    for e in lazy.iter() {
        assert!(
            (e.rate_bytes - want).abs() <= want * 1e-9,
            "{} vs {want}",
            e.rate_bytes
        );
    }
    // A quiet flow that moves again is ticked again, from its decayed rate.
    record(&mut lazy, 7, &info, len, 0);
    assert_eq!(lazy.active_len(), 1);
    lazy.tick(1.0, &cfg, &[1e12]);
    let e = lazy.iter().find(|e| e.key == key(7)).unwrap();
    let alpha = 1.0 - (-1.0 / lazy.tau_s).exp();
    let decayed = 1000.0 * (-11.0 / lazy.tau_s).exp();
    assert!((e.rate_bytes - (decayed + alpha * (1000.0 - decayed))).abs() < 1e-6);
}

/// A table of one interface holding at most `max` flows.
fn bounded(max: usize) -> FlowTable {
    let mut t = FlowTable::new(vec!["c".into()]);
    t.max_flows = Some(max);
    t
}

/// A table of at most `max` flows after `flows` new flows of one packet each, flow `q` at
/// `q` ns.
fn flooded(max: usize, flows: u32) -> FlowTable {
    let (info, len) = roce(100);
    let mut t = bounded(max);
    for q in 0..flows {
        record(&mut t, q, &info, len, u64::from(q));
    }
    t
}

/// A bounded table: when full, the flows quiet longest leave and their totals are kept;
/// held + evicted accounts for every packet.
#[test]
fn a_bounded_table_evicts_the_longest_quiet_and_keeps_their_totals() {
    let (info, len) = roce(100);
    let mut t = bounded(64);
    for q in 0..1000u32 {
        for _ in 0..3 {
            record(&mut t, q, &info, len, u64::from(q) * 1000);
        }
    }
    assert!(t.len() <= 64, "{} flows held", t.len());
    let held: u64 = t.iter().map(|e| e.stats.packets).sum();
    assert_eq!(held + t.evicted.packets, 3000);
    assert_eq!(t.len() as u64 + t.evicted.flows, 1000);
    // The newest flows stay.
    assert!(t.iter().any(|e| e.key == key(999)));
    assert!(!t.iter().any(|e| e.key == key(0)));
}

/// Elephants stay in a full table, even when more of them are among the quietest than the
/// eviction first looks past: the quietest flows that are no elephants leave instead.
#[test]
fn a_full_table_keeps_its_elephants_however_many_are_quiet() {
    let (info, len) = roce(100);
    let mut t = flooded(64, 64);
    // The 40 quietest are elephants (more than the eviction spares for at first).
    for e in t.entries.values_mut() {
        if e.key.dest_qp < 40 {
            e.elephant.elephant = true;
        }
    }
    record(&mut t, 1000, &info, len, 1000);
    let held: Vec<u32> = t.iter().map(|e| e.key.dest_qp).collect();
    assert!(
        (0..40).all(|q| held.contains(&q)),
        "an elephant left: {held:?}"
    );
    // An eighth of the table left: the 8 quietest of the others.
    assert!((40..48).all(|q| !held.contains(&q)), "{held:?}");
    assert!((48..64).all(|q| held.contains(&q)), "{held:?}");
    assert!(held.contains(&1000));
    assert_eq!(t.evicted.flows, 8);
}

/// Flows last seen at the same time leave by key order (the documented order: quiet time,
/// then key), whichever way the table holds them.
#[test]
fn ties_of_quiet_time_leave_by_key() {
    let (info, len) = roce(100);
    let mut t = bounded(16);
    // Sixteen flows inserted in a scrambled order, all last seen at the same time.
    for q in [9u32, 3, 14, 0, 7, 12, 5, 1, 15, 8, 2, 11, 6, 13, 4, 10] {
        record(&mut t, q, &info, len, 500);
    }
    record(&mut t, 100, &info, len, 600);
    let held: Vec<u32> = t.iter().map(|e| e.key.dest_qp).collect();
    assert!(!held.contains(&0) && !held.contains(&1), "{held:?}");
    assert!((2..16).all(|q| held.contains(&q)), "{held:?}");
}

/// A flood of new flows within one tick: the active list stays within twice the table (it
/// held every key that came, a million in the hostile capture, until the next tick).
#[test]
fn a_flood_of_new_flows_keeps_the_active_list_to_the_table() {
    let t = flooded(64, 100_000);
    assert!(t.len() <= 64, "{} flows held", t.len());
    assert!(
        t.active_len() <= 2 * 64 + 8,
        "{} keys listed",
        t.active_len()
    );
}

/// A flow evicted and back within one tick is listed once after a compaction, so the tick
/// moves its rates once.
#[test]
fn the_compacted_active_list_holds_each_flow_once() {
    let (info, len) = roce(100);
    let mut t = bounded(64);
    for round in 0..4u64 {
        for q in 0..200u32 {
            record(&mut t, q, &info, len, round * 1000 + u64::from(q));
        }
    }
    t.compact_active();
    let mut listed = t.active.clone();
    listed.sort_by_key(|k| (k.0, k.1.dest_qp));
    listed.dedup();
    assert_eq!(listed.len(), t.active_len());
    assert_eq!(t.active_len(), t.len());
}

/// The compacted list holds the held flows that moved since they went quiet, and no other:
/// the quiet ones stay off it (a tick would only visit them for nothing), as do the
/// evicted ones.
#[test]
fn the_compacted_active_list_holds_the_moving_flows_only() {
    let cfg = ElephantConfig::default();
    let (info, len) = roce(100);
    let mut t = bounded(64);
    for q in 0..64u32 {
        record(&mut t, q, &info, len, u64::from(q));
    }
    t.tick(1.0, &cfg, &[1e12]);
    t.tick(1.0, &cfg, &[1e12]);
    assert_eq!(t.active_len(), 0, "all quiet");
    // Five of them move again; then ten new flows fill the table, which pushes out the
    // quietest (listed before, but the ticks took them off) to make room.
    for q in [1u32, 2, 40, 50, 60] {
        record(&mut t, q, &info, len, 1_000 + u64::from(q));
    }
    for q in 100..110u32 {
        record(&mut t, q, &info, len, 2_000 + u64::from(q));
    }
    assert!(t.evicted.flows > 0);
    t.compact_active();
    let mut listed: Vec<u32> = t.active.iter().map(|k| k.1.dest_qp).collect();
    listed.sort_unstable();
    let mut want: Vec<u32> = t
        .iter()
        .filter(|e| e.stats.last_seen_ns >= 1_000)
        .map(|e| e.key.dest_qp)
        .collect();
    want.sort_unstable();
    assert!(want.len() >= 10 + 3, "{want:?}");
    assert_eq!(listed, want);
}

/// A kernel-map snapshot of `packets` packets, first seen at `first`, last at `last` (ns).
fn life(packets: u64, first: u64, last: u64) -> FlowStats {
    FlowStats {
        packets,
        bytes: packets * 100,
        first_seen_ns: first,
        last_seen_ns: last,
        ..FlowStats::default()
    }
}

/// One poll of interface 0 that reads `flows`, with idle cut-off `idle_before`: how many
/// flows left the table.
fn poll(t: &mut FlowTable, flows: &[(u32, FlowStats)], idle_before: u64) -> usize {
    t.begin_poll();
    for &(qp, s) in flows {
        t.update(0, key(qp), s);
    }
    t.end_poll(&[(0, idle_before)])[0]
}

/// A flow the full map pushed out (absent from the read, heard since the idle cut-off) is
/// held at its totals, and leaves once it idles out.
#[test]
fn a_flow_pushed_out_of_the_map_is_held_at_its_totals() {
    let mut t = FlowTable::new(vec!["a".into()]);
    t.hold_pushed_out = 8;
    poll(
        &mut t,
        &[(1, life(10, 100, 500)), (2, life(3, 100, 200))],
        50,
    );
    assert_eq!(poll(&mut t, &[], 300), 1, "the idle one leaves");
    let held: Vec<u64> = t.iter().map(|e| e.stats.packets).collect();
    assert_eq!(held, vec![10], "the pushed-out one is held");
    assert_eq!(poll(&mut t, &[], 600), 1, "and leaves once idle");
    assert!(t.is_empty());
}

/// A flow that comes back afresh (fewer packets, or a later first packet) adds its new
/// life to the totals of the earlier ones, and the rates see only the new packets.
#[test]
fn a_flow_admitted_again_adds_its_new_life_to_its_totals() {
    let mut t = FlowTable::new(vec!["a".into()]);
    t.hold_pushed_out = 8;
    let cfg = ElephantConfig::default();
    poll(&mut t, &[(1, life(10, 100, 500))], 50);
    t.tick(1.0, &cfg, &[f64::MAX]);
    poll(&mut t, &[], 50);
    poll(&mut t, &[(1, life(4, 900, 950))], 50);
    let e = t.iter().next().unwrap();
    assert_eq!((e.stats.packets, e.stats.bytes), (14, 1400));
    assert_eq!((e.stats.first_seen_ns, e.stats.last_seen_ns), (100, 950));
    t.tick(1.0, &cfg, &[f64::MAX]);
    // The same life again, grown: one more packet.
    poll(&mut t, &[(1, life(5, 900, 990))], 50);
    assert_eq!(t.iter().next().unwrap().stats.packets, 15);
    // A third life with more packets than the second had: told by its later first packet.
    poll(&mut t, &[(1, life(30, 2_000, 2_100))], 50);
    let e = t.iter().next().unwrap();
    assert_eq!((e.stats.packets, e.stats.first_seen_ns), (45, 100));
    t.tick(1.0, &cfg, &[f64::MAX]);
    let rate = t.iter().next().unwrap().rate_packets;
    assert!(rate <= 31.0, "the rate counts only new packets: {rate}");
}

/// A flood cannot grow the table past its bound: flows seen once are not held once pushed
/// out, and of the others only the most recently heard `hold_pushed_out`.
#[test]
fn pushed_out_flows_are_held_within_a_bound() {
    let mut t = FlowTable::new(vec!["a".into()]);
    t.hold_pushed_out = 2;
    let mut flows: Vec<(u32, FlowStats)> = (0..100)
        .map(|qp| (qp, life(1, 100, 100 + u64::from(qp))))
        .collect();
    flows.extend((100..104).map(|qp| (qp, life(5, 100, 300 + u64::from(qp)))));
    poll(&mut t, &flows, 50);
    assert_eq!(poll(&mut t, &[], 50), 102);
    let mut held: Vec<u32> = t.iter().map(|e| e.key.dest_qp).collect();
    held.sort_unstable();
    assert_eq!(held, vec![102, 103]);
}

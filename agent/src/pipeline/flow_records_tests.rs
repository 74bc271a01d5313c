//! Flow records over a live-style table (cumulative totals each poll): deltas that add up,
//! the active timeout, and each way a flow ends.
use super::*;
use agent_common::FlowStats;
use std::sync::Mutex;

const S: u64 = 1_000_000_000;

fn key(qp: u32) -> FlowKey {
    FlowKey {
        ip_version: 4,
        src: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        dst: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        sport: 49152,
        dest_qp: qp,
        ..FlowKey::default()
    }
}

/// A flow's totals: `packets` of 100 bytes, from 1 s to `last_s` of the store's clock.
fn stats(packets: u64, last_s: u64) -> FlowStats {
    FlowStats {
        packets,
        bytes: packets * 100,
        ecn_ce: packets / 10,
        first_seen_ns: S,
        last_seen_ns: last_s * S,
        dscp: 26,
        ..FlowStats::default()
    }
}

type Got = Arc<Mutex<Vec<FlowRecord>>>;

fn recorder(active_s: u64) -> (Recorder, Got) {
    let got: Got = Arc::default();
    let sink = got.clone();
    let r = Recorder::new(RecordSettings {
        active_timeout_ns: active_s * S,
        idle_timeout_ns: 60 * S,
        sink: RecordSink(Arc::new(move |v| sink.lock().unwrap().extend(v))),
    });
    (r, got)
}

/// A table past the agent's first poll (whose totals are a baseline, not exported).
fn table() -> FlowTable {
    let mut t = FlowTable::new(vec!["eth0".into()]);
    t.record_ends = true;
    t.begin_poll();
    t.end_poll(&[(0, u64::MAX)]);
    t
}

/// One poll at `now_s` with these flows (the others are gone), then the records' round.
fn poll(t: &mut FlowTable, r: &mut Recorder, now_s: u64, flows: &[(u32, FlowStats)]) {
    t.begin_poll();
    for (qp, s) in flows {
        t.update(0, key(*qp), *s);
    }
    t.end_poll(&[(0, u64::MAX)]);
    r.round(t, now_s * S, 0, None);
}

fn sum(recs: &[FlowRecord]) -> (u64, u64, u64) {
    recs.iter().fold((0, 0, 0), |a, r| {
        (
            a.0 + r.counts.packets,
            a.1 + r.counts.bytes,
            a.2 + r.counts.ecn_ce,
        )
    })
}

#[test]
fn a_flow_that_goes_on_gives_a_delta_every_active_timeout() {
    let (mut r, got) = recorder(10);
    let mut t = table();
    // Polls 1..=25 s, 100 packets a second, then the flow leaves (idle).
    for now in 1..=25 {
        poll(&mut t, &mut r, now, &[(1, stats(now * 100, now))]);
    }
    // Two active-timeout records so far: at 11 s and at 21 s.
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs.iter().all(|x| x.reason == EndReason::ActiveTimeout));
    assert_eq!(recs[0].counts.packets, 1100);
    assert_eq!(recs[1].counts.packets, 1000);
    assert_eq!((recs[0].start_ms, recs[0].end_ms), (1000, 11_000));
    assert_eq!((recs[1].start_ms, recs[1].end_ms), (11_000, 21_000));
    assert_eq!(recs[0].dscp, 26);
    poll(&mut t, &mut r, 26, &[]);
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[2].reason, EndReason::IdleTimeout);
    assert_eq!(recs[2].counts.packets, 400);
    // The records add up to the flow's totals.
    assert_eq!(sum(&recs), (2500, 250_000, 250));
    assert_eq!(
        r.queued(),
        1,
        "the left flow's queue entry is dropped when it is due"
    );
}

#[test]
fn a_quiet_flow_gives_no_record_until_it_leaves() {
    let (mut r, got) = recorder(10);
    let mut t = table();
    for now in 1..=40 {
        poll(&mut t, &mut r, now, &[(1, stats(50, 5))]);
    }
    let recs = got.lock().unwrap().clone();
    assert_eq!(
        recs.len(),
        1,
        "one record of its packets, none of nothing: {recs:?}"
    );
    assert_eq!(recs[0].counts.packets, 50);
    poll(&mut t, &mut r, 41, &[]);
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1].reason, EndReason::IdleTimeout);
    assert_eq!(recs[1].counts, FlowCounts::default());
}

#[test]
fn a_short_flow_gives_one_record_with_all_of_it() {
    let (mut r, got) = recorder(60);
    let mut t = table();
    poll(&mut t, &mut r, 1, &[(1, stats(7, 1)), (2, stats(3, 1))]);
    poll(&mut t, &mut r, 2, &[(2, stats(3, 1))]);
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].key.dest_qp, 1);
    assert_eq!(recs[0].counts.packets, 7);
    assert_eq!(recs[0].reason, EndReason::IdleTimeout);
}

#[test]
fn a_flow_pushed_out_of_a_full_table_ends_for_lack_of_resources() {
    let (mut r, got) = recorder(60);
    let mut t = table();
    t.max_flows = Some(2);
    poll(&mut t, &mut r, 1, &[(1, stats(1, 1)), (2, stats(2, 2))]);
    t.update(0, key(3), stats(3, 3));
    r.round(&mut t, 3 * S, 0, None);
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].reason, EndReason::LackOfResources);
    assert_eq!(recs[0].key.dest_qp, 1, "the flow quiet the longest");
}

/// A flood of one-poll flows, each gone by the next poll: every one gives its record, and
/// the queue stays near the table's size, not the flood's (50,000 flows in 50 polls).
#[test]
fn a_flood_of_short_flows_keeps_the_queue_bounded_and_loses_no_record() {
    let (mut r, got) = recorder(60);
    let mut t = table();
    let mut peak = 0;
    for now in 1..=50u32 {
        let flows: Vec<(u32, FlowStats)> = (0..1_000)
            .map(|i| (now * 1_000 + i, stats(1, u64::from(now))))
            .collect();
        poll(&mut t, &mut r, u64::from(now), &flows);
        peak = peak.max(r.queued());
    }
    poll(&mut t, &mut r, 51, &[]);
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 50_000, "every flow's record");
    assert_eq!(sum(&recs).0, 50_000);
    assert!(
        peak <= COMPACT_MIN + 2 * 1_000,
        "the queue held {peak} entries for a table of 1,000 flows"
    );
}

/// Compaction keeps the one entry of each flow held: a flow that goes on past it still
/// gives its active-timeout records.
#[test]
fn a_flow_that_goes_on_through_a_flood_keeps_its_active_records() {
    let (mut r, got) = recorder(10);
    let mut t = table();
    for now in 1..=25u32 {
        let mut flows: Vec<(u32, FlowStats)> = (0..1_000)
            .map(|i| (100_000 + now * 1_000 + i, stats(1, u64::from(now))))
            .collect();
        flows.push((1, stats(u64::from(now) * 100, u64::from(now))));
        poll(&mut t, &mut r, u64::from(now), &flows);
    }
    let long: Vec<FlowRecord> = got
        .lock()
        .unwrap()
        .iter()
        .filter(|x| x.key.dest_qp == 1)
        .cloned()
        .collect();
    assert_eq!(long.len(), 2, "at 11 s and 21 s: {long:?}");
    assert!(long.iter().all(|x| x.reason == EndReason::ActiveTimeout));
    assert_eq!(sum(&long).0, 2100);
}

#[test]
fn an_interface_that_goes_ends_its_flows() {
    let (mut r, got) = recorder(60);
    let mut t = table();
    poll(&mut t, &mut r, 1, &[(1, stats(4, 1))]);
    r.end_iface(&mut t, 0, 2 * S, 0, None);
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].reason, EndReason::ForcedEnd);
    assert_eq!(recs[0].counts.packets, 4);
    // It comes back over its pinned maps: the counts go on, and only what is new is recorded.
    for now in 3..=70 {
        poll(&mut t, &mut r, now, &[(1, stats(4 + now, now))]);
    }
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(recs[1].reason, EndReason::ActiveTimeout);
    assert_eq!(
        recs[1].counts.packets, 62,
        "what was counted after the end, up to 62 s"
    );
}

#[test]
fn the_stop_gives_every_flows_last_record() {
    let (mut r, got) = recorder(10);
    let mut t = table();
    for now in 1..=15 {
        poll(
            &mut t,
            &mut r,
            now,
            &[(1, stats(now * 10, now)), (2, stats(5, 1))],
        );
    }
    // Flow 1 gave its active-timeout record at 11 s, flow 2 at 11 s (its 5 packets).
    assert_eq!(got.lock().unwrap().len(), 2);
    r.finish(&mut t, 70 * S, 0, None, EndReason::ForcedEnd);
    let recs = got.lock().unwrap().clone();
    assert_eq!(recs.len(), 4);
    let last = |qp| recs[2..].iter().find(|x| x.key.dest_qp == qp).unwrap();
    assert_eq!(
        last(1).reason,
        EndReason::ForcedEnd,
        "last packet 55 s before"
    );
    assert_eq!(last(1).counts.packets, 40);
    assert_eq!(last(2).reason, EndReason::IdleTimeout, "69 s quiet");
    assert_eq!(sum(&recs).0, 155);
    assert_eq!(r.queued(), 0);
}

#[test]
fn a_baseline_found_at_the_first_poll_is_not_exported() {
    let (mut r, got) = recorder(10);
    let mut t = FlowTable::new(vec!["eth0".into()]);
    t.record_ends = true;
    // The agent starts over pinned maps that already counted 1,000 packets.
    poll(&mut t, &mut r, 100, &[(1, stats(1000, 100))]);
    for now in 101..=115 {
        poll(
            &mut t,
            &mut r,
            now,
            &[(1, stats(1000 + (now - 100) * 10, now))],
        );
    }
    let recs = got.lock().unwrap().clone();
    assert!(!recs.is_empty());
    assert_eq!(recs[0].counts.packets, 10 * (recs[0].end_ms / 1000 - 100));
    assert_eq!(recs[0].start_ms, 100_000, "from the baseline on");
}

#[test]
fn records_name_the_predicted_ecmp_path() {
    let (mut r, got) = recorder(60);
    let mut t = table();
    let model: HashModel = toml::from_str("function = \"crc16-8005\"\npaths = 4").unwrap();
    poll(&mut t, &mut r, 1, &[(1, stats(1, 1))]);
    t.begin_poll();
    t.end_poll(&[(0, u64::MAX)]);
    r.round(&mut t, 2 * S, 0, Some(&model));
    let recs = got.lock().unwrap().clone();
    let want = model.path(&ecmp::fields(&key(1)));
    assert_eq!(recs[0].ecmp_path, Some(want));
    assert!(want < 4);
}

use super::*;
use agent_common::message::MsgOp;

const MS: u64 = 1_000_000;

/// An IPv4 source as `FlowKey` holds it.
fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&a);
    b
}

/// `n` hosts of 10.9.0.0/24 in distinct lanes (the first found, in address order), and the
/// lane of each.
fn hosts_in_distinct_lanes(n: usize) -> Vec<([u8; 16], usize)> {
    let mut out: Vec<([u8; 16], usize)> = Vec::new();
    for last in 1..=254u8 {
        let a = v4([10, 9, 0, last]);
        let l = lane_of(&a);
        if out.iter().all(|&(_, m)| m != l) {
            out.push((a, l));
        }
        if out.len() == n {
            break;
        }
    }
    assert_eq!(out.len(), n);
    out
}

/// A flow's counts: 3 RDMA WRITEs of 4 KiB and a SEND of 1 KiB.
static STATS: std::sync::LazyLock<agent_common::FlowStats> = std::sync::LazyLock::new(|| {
    let mut s = agent_common::FlowStats::default();
    s.count_messages(MsgOp::RdmaWrite, 3, 3 * 4096);
    s.count_messages(MsgOp::Send, 1, 1024);
    s
});

/// A flow from `src` to 10.9.1.1, seen at `at_ms`.
fn flow(src: [u8; 16], at_ms: u64) -> FlowEnds<'static> {
    FlowEnds {
        ip_version: 4,
        src,
        dst: v4([10, 9, 1, 1]),
        last_seen_ns: at_ms * MS,
        stats: &STATS,
    }
}

/// Lane units per millisecond of a job's burst and of a steady tenant (a 4 KiB frame is 16).
const BURST: u64 = 256;
const STEADY: u64 = 8;

/// Milliseconds `0..ms` of lanes: jobs (lane, period ms, burst ms, slow step indexes, phase
/// ms) and steady lanes.
fn feed(
    j: &mut LiveJobs,
    from: u64,
    ms: u64,
    jobs: &[(usize, u64, u64, &[u64], u64)],
    steady: &[usize],
) {
    for t in from..from + ms {
        let mut lanes = [0u64; LANES];
        for &(lane, period, burst, slow, phase) in jobs {
            // Step k starts at phase + k * period, plus one period per slow step before it.
            let mut start = phase;
            let mut k = 0;
            while start + period <= t {
                start += if slow.contains(&k) {
                    2 * period
                } else {
                    period
                };
                k += 1;
            }
            if t >= start && t - start < burst {
                lanes[lane] += BURST;
            }
        }
        for &l in steady {
            lanes[l] += STEADY;
        }
        j.push(t, &lanes);
    }
}

#[test]
fn two_jobs_and_a_steady_tenant_on_one_link_are_two_jobs_named_by_their_hosts() {
    let h = hosts_in_distinct_lanes(5);
    let mut j = LiveJobs::default();
    // Job A: hosts 0 and 1, 100 ms steps; job B: host 2 and 3, 170 ms steps; host 4 steady.
    feed(
        &mut j,
        10_000,
        8_000,
        &[
            (h[0].1, 100, 20, &[], 10_000),
            (h[1].1, 100, 20, &[], 10_001),
            (h[2].1, 170, 30, &[], 10_040),
            (h[3].1, 170, 30, &[], 10_040),
        ],
        &[h[4].1],
    );
    let flows: Vec<FlowEnds> = h.iter().map(|&(a, _)| flow(a, 17_000)).collect();
    j.detect(&flows);
    assert_eq!(j.jobs.len(), 2, "{:#?}", j.jobs);
    let name = |a: [u8; 16]| agent_common::flow_key::addr(4, &a).to_string();
    let mut got: Vec<(Vec<String>, f64)> = j
        .jobs
        .iter()
        .map(|x| (x.sources.clone(), x.period_seconds.unwrap()))
        .collect();
    got.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut a = vec![name(h[0].0), name(h[1].0)];
    a.sort();
    let mut b = vec![name(h[2].0), name(h[3].0)];
    b.sort();
    assert_eq!(got[0].0, a);
    assert!((got[0].1 - 0.1).abs() < 0.003, "{got:?}");
    assert_eq!(got[1].0, b);
    assert!((got[1].1 - 0.17).abs() < 0.003, "{got:?}");
    for x in &j.jobs {
        assert_eq!(x.id, format!("job-{}", x.sources[0]));
        assert!(
            !x.sources.contains(&name(h[4].0)),
            "the steady tenant is in no job"
        );
        assert!(x.hosts.contains(&"10.9.1.1".to_string()), "{x:?}");
        assert_eq!(x.flows, 2);
        assert_eq!(x.slow_steps, 0);
        let m = |op: &str| {
            let m = x.messages.iter().find(|m| m.op == op).unwrap();
            (m.messages, m.bytes)
        };
        assert_eq!(
            m("rdma_write"),
            (6, 6 * 4096),
            "its two flows' messages added"
        );
        assert_eq!(m("rdma_read"), (0, 0));
        assert_eq!(m("send"), (2, 2048));
    }
}

#[test]
fn a_job_s_slow_steps_are_counted_once_across_detections() {
    let h = hosts_in_distinct_lanes(2);
    let mut j = LiveJobs::default();
    let job: &[(usize, u64, u64, &[u64], u64)] =
        &[(h[0].1, 100, 20, &[30], 0), (h[1].1, 100, 20, &[30], 0)];
    feed(&mut j, 0, 5_000, job, &[]);
    let flows = [flow(h[0].0, 4_000), flow(h[1].0, 4_000)];
    let first = j.detect(&flows);
    assert_eq!(first.len(), 1, "{first:?}");
    // Numbered by its place among the steps the lanes' rhythm found (30), not among the
    // slow steps (it would be 1): `analyze` numbers a capture's steps that way, and the
    // live/offline differential holds the two equal. The same series in two detections
    // numbers it the same.
    assert_eq!(first[0].index, 30);
    let mut halves = LiveJobs::default();
    feed(&mut halves, 0, 2_500, job, &[]);
    let early = halves.detect(&flows);
    feed(&mut halves, 2_500, 2_500, job, &[]);
    let late = halves.detect(&flows);
    let got: Vec<u64> = early.iter().chain(&late).map(|s| s.index).collect();
    assert_eq!(got, vec![first[0].index]);
    assert!(
        (first[0].step.seconds - 0.2).abs() < 0.003,
        "{:?}",
        first[0].step
    );
    assert_eq!(first[0].job, j.jobs[0].id);
    // Two more seconds on time: nothing new, the count holds.
    let mut more = LiveJobs::default();
    std::mem::swap(&mut more, &mut j);
    feed(
        &mut more,
        5_000,
        2_000,
        &[(h[0].1, 100, 20, &[], 5_000), (h[1].1, 100, 20, &[], 5_000)],
        &[],
    );
    assert!(more.detect(&flows).is_empty());
    assert_eq!(more.jobs[0].slow_steps, 1);
}

#[test]
fn a_job_whose_sources_the_flow_table_has_not_seen_is_named_by_its_lane() {
    let h = hosts_in_distinct_lanes(1);
    let mut j = LiveJobs::default();
    feed(&mut j, 0, 3_000, &[(h[0].1, 100, 20, &[], 0)], &[]);
    j.detect(&[]);
    assert_eq!(j.jobs.len(), 1);
    assert_eq!(j.jobs[0].id, format!("job-lane-{}", h[0].1));
    assert!(j.jobs[0].sources.is_empty());
}

#[test]
fn a_flow_that_ended_before_the_job_s_steps_is_not_the_job_s() {
    let h = hosts_in_distinct_lanes(1);
    let mut j = LiveJobs::default();
    feed(
        &mut j,
        20_000,
        3_000,
        &[(h[0].1, 100, 20, &[], 20_000)],
        &[],
    );
    // The same lane's source, last seen long before the steps, and the job's own.
    let old = (0..=255u8)
        .map(|x| v4([10, 9, 2, x]))
        .find(|a| lane_of(a) == h[0].1)
        .unwrap();
    let flows = [
        flow(h[0].0, 22_000),
        FlowEnds {
            src: old,
            ..flow(old, 1_000)
        },
    ];
    j.detect(&flows);
    assert_eq!(j.jobs[0].flows, 1);
    assert_eq!(j.jobs[0].sources.len(), 1);
}

#[test]
fn steady_lanes_alone_are_no_job() {
    let mut j = LiveJobs::default();
    feed(&mut j, 0, 5_000, &[], &[0, 3, 7]);
    j.detect(&[]);
    assert!(j.jobs.is_empty(), "{:?}", j.jobs);
}

/// A steady tenant whose packets a busy sender (or a queue behind the job's bursts) held
/// back during each burst and let go right after: its lane falls silent with the job's
/// bursts and catches up after them. It keeps no step of its own and is in no job.
#[test]
fn a_steady_tenant_held_back_during_the_bursts_is_in_no_job() {
    let h = hosts_in_distinct_lanes(3);
    let mut j = LiveJobs::default();
    let (period, burst) = (100u64, 20u64);
    for t in 0..6_000u64 {
        let mut lanes = [0u64; LANES];
        let at = t % period;
        if at < burst {
            lanes[h[0].1] += BURST;
            lanes[h[1].1] += BURST;
        } else if at < burst + 5 {
            // The 20 ms held back, sent in the next 5.
            lanes[h[2].1] += 4 * 5;
        } else {
            lanes[h[2].1] += 4;
        }
        j.push(t, &lanes);
    }
    let flows: Vec<FlowEnds> = h.iter().map(|&(a, _)| flow(a, 5_900)).collect();
    j.detect(&flows);
    assert_eq!(j.jobs.len(), 1, "{:#?}", j.jobs);
    let tenant = agent_common::flow_key::addr(4, &h[2].0).to_string();
    assert!(!j.jobs[0].sources.contains(&tenant), "{:#?}", j.jobs[0]);
    assert_eq!(j.jobs[0].sources.len(), 2);
}

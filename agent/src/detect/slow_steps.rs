//! Why a step was slow: the attribution shared by `analyze` (a capture's pause intervals and
//! per-millisecond trouble) and the live agent (an interface's counters around the step).
//!
//! The time the job's priority was paused within the step explains that much of its extra
//! time over the typical step (the median period). The rest goes in equal shares to the other
//! causes the step shows (they are evidence, not measured time): `congestion` (CE marks on 1%
//! of its packets and at least 10), `retransmission` (a PSN gap, a retransmitted packet or a
//! NAK), `lossy_class` (RoCE outside the lossless class on 1% of its packets and at least
//! 10), `ecmp_collision` (the job's flows on a path where elephants collide). What no cause
//! takes is `unexplained`; then the host whose burst started or ended last is named (the
//! straggler), when it stands out.

use super::findings::{CONGESTION_CE_SHARE, MIN_CE_PACKETS};
use super::rhythm::{Cause, Straggler};

/// What happened on the RoCE of a span of time that can make a step slow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trouble {
    pub packets: u64,
    /// CE-marked packets.
    pub ce: u64,
    /// Loss recovery: PSN gaps, retransmitted packets, NAKs.
    pub recoveries: u64,
    /// RoCE packets outside the lossless class.
    pub lossy: u64,
}

impl Trouble {
    pub fn add(&mut self, t: &Trouble) {
        self.packets += t.packets;
        self.ce += t.ce;
        self.recoveries += t.recoveries;
        self.lossy += t.lossy;
    }
}

/// One host's burst within a step: its first and last millisecond with traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct BurstEdges {
    pub src: String,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// The causes other than the pause that a step's trouble shows, and whether the job's flows
/// were on a colliding path.
pub fn evidence(t: &Trouble, colliding: bool) -> Vec<&'static str> {
    let share_of =
        |n: u64| n >= MIN_CE_PACKETS && n as f64 >= CONGESTION_CE_SHARE * t.packets as f64;
    let mut seen = Vec::new();
    if share_of(t.ce) {
        seen.push("congestion");
    }
    if t.recoveries > 0 {
        seen.push("retransmission");
    }
    if share_of(t.lossy) {
        seen.push("lossy_class");
    }
    if colliding {
        seen.push("ecmp_collision");
    }
    seen
}

/// The ranked causes of a step's `extra_s` over the typical step, given the seconds the
/// job's priority was paused within it and the other causes seen.
pub fn causes(extra_s: f64, paused_s: f64, seen: Vec<&'static str>) -> Vec<Cause> {
    let extra = extra_s.max(1e-9);
    let pause = (paused_s / extra).clamp(0.0, 1.0);
    let rest = 1.0 - pause;
    let mut out = vec![Cause {
        kind: "pfc_pause",
        share: pause,
        basis: "measured",
    }];
    if seen.is_empty() {
        out.push(Cause {
            kind: "unexplained",
            share: rest,
            basis: "remainder",
        });
    } else {
        let each = rest / seen.len() as f64;
        out.extend(seen.into_iter().map(|kind| Cause {
            kind,
            share: each,
            basis: "shared",
        }));
    }
    out.retain(|c| c.share > 1e-6);
    out.sort_by(|x, y| y.share.total_cmp(&x.share));
    out
}

/// The host whose burst ended (or started) last, if it was later than the others by a tenth
/// of the step's extra time (and at least 2 ms, two buckets): with one host, or hosts that
/// kept together, nobody is named.
pub fn straggler(bursts: &[BurstEdges], extra_s: f64) -> Option<Straggler> {
    if bursts.len() < 2 {
        return None;
    }
    let late = |i: usize, f: fn(&BurstEdges) -> u64| {
        let others = bursts
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, b)| f(b))
            .max()
            .unwrap_or(0);
        f(&bursts[i]).saturating_sub(others) as f64 / 1e9
    };
    let (i, end_late, start_late) = (0..bursts.len())
        .map(|i| (i, late(i, |b| b.last_ns), late(i, |b| b.first_ns)))
        .max_by(|x, y| x.1.total_cmp(&y.1).then(x.2.total_cmp(&y.2)))?;
    let bar = (0.1 * extra_s).max(0.002);
    (end_late >= bar || start_late >= bar).then(|| Straggler {
        host: bursts[i].src.clone(),
        started_late_seconds: start_late,
        ended_late_seconds: end_late,
    })
}

/// The priorities that carry the job (bit p: priority p): the configured RoCE priority, or
/// every priority on a DSCP-only fabric.
pub fn job_priorities(c: &agent_common::TrafficClasses) -> u8 {
    if c.roce_priority == agent_common::classes::ANY_PRIORITY {
        0xFF
    } else {
        1u8.checked_shl(u32::from(c.roce_priority)).unwrap_or(0xFF)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_covering_the_extra_time_takes_all_of_it() {
        let c = causes(0.1, 0.25, vec!["congestion"]);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].kind, "pfc_pause");
        assert!((c[0].share - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_rest_is_shared_equally_by_what_was_seen() {
        let c = causes(0.1, 0.04, vec!["congestion", "retransmission"]);
        let share = |k: &str| c.iter().find(|x| x.kind == k).map(|x| x.share);
        assert!((share("pfc_pause").unwrap() - 0.4).abs() < 1e-9, "{c:?}");
        assert!((share("congestion").unwrap() - 0.3).abs() < 1e-9, "{c:?}");
        assert!(
            (share("retransmission").unwrap() - 0.3).abs() < 1e-9,
            "{c:?}"
        );
        assert_eq!(share("unexplained"), None);
    }

    #[test]
    fn nothing_seen_is_unexplained() {
        let c = causes(0.1, 0.0, vec![]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].kind, "unexplained");
    }

    #[test]
    fn a_few_ce_marks_are_no_congestion() {
        let t = Trouble {
            packets: 10_000,
            ce: 9,
            ..Trouble::default()
        };
        assert!(evidence(&t, false).is_empty());
        let t = Trouble { ce: 100, ..t };
        assert_eq!(evidence(&t, false), ["congestion"]);
    }

    fn edges(src: &str, first_ms: u64, last_ms: u64) -> BurstEdges {
        BurstEdges {
            src: src.into(),
            first_ns: first_ms * 1_000_000,
            last_ns: last_ms * 1_000_000,
        }
    }

    #[test]
    fn the_late_host_is_named_with_its_lateness() {
        let b = [edges("a", 0, 19), edges("b", 0, 19), edges("c", 15, 119)];
        let s = straggler(&b, 0.1).expect("c is late");
        assert_eq!(s.host, "c");
        assert!((s.ended_late_seconds - 0.1).abs() < 1e-9);
        assert!((s.started_late_seconds - 0.015).abs() < 1e-9);
    }

    #[test]
    fn hosts_that_kept_together_name_nobody() {
        let b = [edges("a", 0, 19), edges("b", 0, 20)];
        assert_eq!(straggler(&b, 0.1), None);
        assert_eq!(straggler(&b[..1], 0.1), None);
    }

    #[test]
    fn the_job_priority_mask() {
        let mut c = agent_common::TrafficClasses::DEFAULT;
        c.roce_priority = 3;
        assert_eq!(job_priorities(&c), 0x08);
        c.roce_priority = agent_common::classes::ANY_PRIORITY;
        assert_eq!(job_priorities(&c), 0xFF);
    }
}

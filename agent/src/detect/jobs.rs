//! Training jobs from traffic: the source hosts whose bursts share a period and a phase are
//! one job. A job's hosts talk in the same steps (each collective starts on every host at
//! once), so their step starts line up; another job on the same link or mirror port has a
//! period or a phase of its own, and a steady tenant has no rhythm at all and joins none.
//! Each job's rhythm is then looked for again on the sum of its hosts' series, so that its
//! steps and slow steps are the job's own and not the link's.

use super::rhythm::{self, Rhythm, Series, BUCKET_NS};
use agent_common::message::MsgOp;

/// Periods within this share of each other can be one job's.
const SAME_PERIOD: f64 = 0.05;
/// A step start of one host lines up with one of another's within this share of the period
/// (and at least [`MIN_ALIGN_NS`]).
const ALIGN_SHARE: f64 = 0.1;
const MIN_ALIGN_NS: u64 = 3_000_000;
/// The share of step starts that must line up, both ways.
const ALIGNED_SHARE: f64 = 0.5;

/// Whether two hosts' rhythms are one job's: periods alike, step starts lined up.
pub fn one_job(a: &Rhythm, b: &Rhythm) -> bool {
    let (Some(pa), Some(pb)) = (a.period_seconds, b.period_seconds) else {
        return false;
    };
    if (pa - pb).abs() > SAME_PERIOD * pa.min(pb) {
        return false;
    }
    let tol = ((ALIGN_SHARE * pa.min(pb) * 1e9) as u64).max(MIN_ALIGN_NS);
    aligned(a, b, tol) >= ALIGNED_SHARE && aligned(b, a, tol) >= ALIGNED_SHARE
}

/// The share of `a`'s step starts (within the span both cover) with a start of `b` within
/// `tol` ns. Both lists are in time order: one merge.
fn aligned(a: &Rhythm, b: &Rhythm, tol: u64) -> f64 {
    let starts = |r: &Rhythm| -> Vec<u64> { r.steps.iter().map(|s| s.start_ns).collect() };
    let (sa, sb) = (starts(a), starts(b));
    let (Some(&b0), Some(&b1)) = (sb.first(), sb.last()) else {
        return 0.0;
    };
    let within: Vec<u64> = sa
        .into_iter()
        .filter(|&t| t + tol >= b0 && t <= b1 + tol)
        .collect();
    if within.is_empty() {
        return 0.0;
    }
    let mut j = 0;
    let mut hits = 0;
    for &t in &within {
        while j < sb.len() && sb[j] + tol < t {
            j += 1;
        }
        if j < sb.len() && sb[j] <= t + tol {
            hits += 1;
        }
    }
    hits as f64 / within.len() as f64
}

/// The hosts grouped into jobs: indexes into `rhythms`, each group in input order; hosts
/// without a rhythm are in none. Groups are ordered by their first host.
pub fn group(rhythms: &[Rhythm]) -> Vec<Vec<usize>> {
    let n = rhythms.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let with: Vec<usize> = (0..n)
        .filter(|&i| rhythms[i].period_seconds.is_some())
        .collect();
    for (k, &i) in with.iter().enumerate() {
        for &j in &with[k + 1..] {
            if one_job(&rhythms[i], &rhythms[j]) {
                let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
                parent[ri.max(rj)] = ri.min(rj);
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut at: Vec<Option<usize>> = vec![None; n];
    for &i in &with {
        let r = root(&mut parent, i);
        match at[r] {
            Some(g) => groups[g].push(i),
            None => {
                at[r] = Some(groups.len());
                groups.push(vec![i]);
            }
        }
    }
    groups
}

/// The sum of several series, bucket by bucket on their common clock (unbounded: a window).
pub fn combined(series: &[&Series]) -> Series {
    let Some(start) = series
        .iter()
        .filter(|s| !s.buckets.is_empty())
        .map(|s| s.start_ns)
        .min()
    else {
        return Series::default();
    };
    let end = series
        .iter()
        .map(|s| s.start_ns + s.buckets.len() as u64 * BUCKET_NS)
        .max()
        .unwrap_or(start);
    let mut buckets = vec![0u64; ((end - start) / BUCKET_NS) as usize];
    for s in series {
        let off = ((s.start_ns.saturating_sub(start)) / BUCKET_NS) as usize;
        for (i, &v) in s.buckets.iter().enumerate() {
            if let Some(b) = buckets.get_mut(off + i) {
                *b += v;
            }
        }
    }
    Series {
        start_ns: start,
        buckets,
        max: 0,
    }
}

/// A job's RDMA messages of one operation (its flows' together).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OpMessages {
    pub op: &'static str,
    pub messages: u64,
    pub bytes: u64,
}

/// The messages of a job's flows added up (the flows' own counts: WRITE and READ by their
/// RETH length, SEND by their payloads, `agent_common::message`).
#[derive(Clone, Copy, Debug, Default)]
pub struct MessageSum {
    messages: [u64; MsgOp::COUNT],
    bytes: [u64; MsgOp::COUNT],
}

impl MessageSum {
    pub fn add(&mut self, s: &agent_common::FlowStats) {
        let (messages, bytes) = (s.messages(), s.message_bytes());
        for i in 0..MsgOp::COUNT {
            self.messages[i] += messages[i];
            self.bytes[i] += bytes[i];
        }
    }

    /// By operation, every operation listed.
    pub fn report(&self) -> Vec<OpMessages> {
        MsgOp::ALL
            .iter()
            .map(|&op| OpMessages {
                op: op.name(),
                messages: self.messages[op as usize],
                bytes: self.bytes[op as usize],
            })
            .collect()
    }
}

/// A job found among several sources' series: its members (indexes into the sources) and
/// the rhythm of their traffic together.
#[derive(Clone, Debug)]
pub struct Found {
    pub members: Vec<usize>,
    pub rhythm: Rhythm,
}

/// The training jobs among `series`, one per source (a source host offline, a source lane of
/// the kernel's ring live): each source's rhythm, the sources grouped ([`group`]), and each
/// group's rhythm found again on its series together, where `paused` marks the buckets of
/// that series a silence does not end (PFC held the job). Groups whose steps are a trickle
/// are no job. In the order of [`group`].
pub fn find(series: &[&Series], paused: impl Fn(&Series) -> Vec<bool>) -> Vec<Found> {
    let rhythms: Vec<Rhythm> = series
        .iter()
        .map(|s| {
            if steady(s) {
                Rhythm::default()
            } else {
                rhythm::detect(s)
            }
        })
        .collect();
    group(&rhythms)
        .into_iter()
        .filter_map(|members| {
            let together = combined(&members.iter().map(|&i| series[i]).collect::<Vec<_>>());
            let r = rhythm::detect_paused(&together, &paused(&together));
            (r.period_seconds.is_some() && !trickle(&r)).then_some(Found { members, rhythm: r })
        })
        .collect()
}

/// The share of a source's bytes in its quiet milliseconds above which it is a steady
/// sender, not a job's host.
const MAX_QUIET_SHARE: f64 = 0.5;

/// Whether a source sends mostly between bursts: a job's host is silent between its bursts
/// (it computes), a steady tenant is not, even where a queue or a busy sender held its
/// packets back during the job's bursts and let them go right after (the catch-up looks like
/// a burst of its own, on the job's period, and would join the job or make one).
fn steady(s: &Series) -> bool {
    let (quiet, _) = rhythm::quiet_level(&s.buckets);
    let total: u64 = s.buckets.iter().sum();
    let in_quiet: u64 = s.buckets.iter().filter(|&&b| b <= quiet).sum();
    total > 0 && in_quiet as f64 > MAX_QUIET_SHARE * total as f64
}

/// A rhythm of steps too small to be a training job's (the typical step carries less than
/// [`super::steps::MIN_SLOW_STEP_BYTES`]): a host that only answers, a few NAKs or ACKs at
/// regular times, a heartbeat. Live, such a rhythm reports no slow step.
pub fn trickle(r: &Rhythm) -> bool {
    let mut b: Vec<u64> = r.steps.iter().map(|s| s.bytes).collect();
    if b.is_empty() {
        return true;
    }
    b.sort_unstable();
    b[b.len() / 2] < super::steps::MIN_SLOW_STEP_BYTES
}

#[cfg(test)]
mod tests {
    use super::super::rhythm::detect;
    use super::*;

    /// A host's series: `steps` steps of `period_ms`, 20 ms bursts, from `phase_ms`.
    fn host(period_ms: u64, phase_ms: u64, steps: u64) -> Series {
        let mut s = Series::new(1 << 22);
        let t0 = 1_000_000_000 + phase_ms * BUCKET_NS;
        for i in 0..steps {
            for ms in 0..20 {
                s.add(t0 + (i * period_ms + ms) * BUCKET_NS, 64 * 1024);
            }
        }
        s
    }

    /// A steady tenant: the same bytes every millisecond.
    fn steady(ms: u64) -> Series {
        let mut s = Series::new(1 << 22);
        for k in 0..ms {
            s.add(1_000_000_000 + k * BUCKET_NS, 8 * 1024);
        }
        s
    }

    #[test]
    fn hosts_in_step_are_one_job_and_a_steady_tenant_is_none() {
        let r = [
            detect(&host(100, 0, 50)),
            detect(&steady(5_000)),
            detect(&host(100, 1, 50)),
        ];
        assert_eq!(group(&r), vec![vec![0, 2]]);
    }

    /// A steady tenant held back during the job's bursts and let go after them (a busy
    /// sender, a queue behind the bursts): silent with the bursts, a catch-up after each.
    fn held_back(period_ms: u64, burst_ms: u64, ms: u64) -> Series {
        let mut s = Series::new(1 << 22);
        for k in 0..ms {
            let at = k % period_ms;
            let units = if at < burst_ms {
                0
            } else if at < burst_ms + 5 {
                5 * 1024
            } else {
                1024
            };
            if units > 0 {
                s.add(1_000_000_000 + k * BUCKET_NS, units);
            }
        }
        s
    }

    #[test]
    fn a_steady_tenant_held_back_by_the_bursts_is_in_no_job() {
        let (a, b, t) = (
            host(100, 0, 50),
            host(100, 1, 50),
            held_back(100, 20, 5_000),
        );
        let found = find(&[&a, &t, &b], |_| Vec::new());
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].members, vec![0, 2]);
    }

    #[test]
    fn another_period_is_another_job() {
        let r = [detect(&host(100, 0, 50)), detect(&host(170, 0, 30))];
        assert_eq!(group(&r), vec![vec![0], vec![1]]);
    }

    #[test]
    fn the_same_period_out_of_phase_is_another_job() {
        let r = [detect(&host(100, 0, 50)), detect(&host(100, 50, 50))];
        assert_eq!(group(&r), vec![vec![0], vec![1]]);
    }

    #[test]
    fn the_combined_series_adds_up_on_one_clock() {
        let a = Series {
            start_ns: 10 * BUCKET_NS,
            buckets: vec![1, 2, 3],
            max: 0,
        };
        let b = Series {
            start_ns: 11 * BUCKET_NS,
            buckets: vec![10, 10, 10],
            max: 0,
        };
        let c = combined(&[&a, &b]);
        assert_eq!(c.start_ns, 10 * BUCKET_NS);
        assert_eq!(c.buckets, vec![1, 12, 13, 10]);
    }
}

//! Rhythms of known parameters (the truth is the generator's), and series without one.

use super::*;

/// A job: `steps` steps of `period_ms` (± `jitter_ms`, deterministic), each opening with
/// `comm_ms` of traffic; step `slow_at` lasts `slow_factor` times longer.
fn job(period_ms: u64, comm_ms: u64, jitter_ms: u64, steps: u64, slow_at: Option<u64>) -> Series {
    let mut s = Series::new(1 << 22);
    let mut t = 1_000_000_000u64;
    let mut rng = 12345u64;
    for i in 0..steps {
        for ms in 0..comm_ms {
            s.add(t + ms * BUCKET_NS + 100, 64 * 1024);
        }
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = if jitter_ms > 0 {
            (rng >> 33) % (2 * jitter_ms + 1)
        } else {
            jitter_ms
        };
        let mut len = period_ms + j - jitter_ms;
        if slow_at == Some(i) {
            len *= 2;
        }
        t += len * BUCKET_NS;
    }
    s
}

fn close(a: f64, b: f64, share: f64) -> bool {
    (a - b).abs() <= share * b
}

#[test]
fn a_50_ms_rhythm() {
    let r = detect(&job(50, 10, 0, 100, None));
    let p = r.period_seconds.unwrap();
    assert!(close(p, 0.050, 0.03), "{p}");
    assert!(close(r.duty_ratio.unwrap(), 0.2, 0.1));
    assert_eq!(r.slow_steps, 0);
}

#[test]
fn a_2_s_rhythm() {
    let r = detect(&job(2000, 300, 0, 12, None));
    assert!(close(r.period_seconds.unwrap(), 2.0, 0.03), "{r:?}");
}

#[test]
fn jitter_does_not_hide_the_period() {
    let r = detect(&job(200, 40, 15, 60, None));
    assert!(
        close(r.period_seconds.unwrap(), 0.200, 0.05),
        "{:?}",
        r.period_seconds
    );
    assert_eq!(r.slow_steps, 0, "jitter of 7% is no slow step");
}

#[test]
fn a_slow_step_is_flagged_once() {
    let r = detect(&job(100, 20, 0, 50, Some(30)));
    assert!(close(r.period_seconds.unwrap(), 0.100, 0.03));
    assert_eq!(r.slow_steps, 1);
    let slow: Vec<usize> = r
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.slow)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(slow, [30]);
    assert!(close(r.steps[30].seconds, 0.200, 0.02));
}

#[test]
fn steps_carry_their_bytes() {
    let r = detect(&job(100, 20, 0, 20, None));
    for s in &r.steps {
        assert_eq!(s.bytes, 20 * 64 * 1024, "s {s:?}");
    }
    assert_eq!(r.steps.len(), 19);
}

#[test]
fn steady_traffic_has_no_rhythm() {
    let mut s = Series::new(1 << 20);
    for ms in 0..20_000u64 {
        s.add(ms * BUCKET_NS, 10_000);
    }
    assert_eq!(detect(&s), Rhythm::default());
}

#[test]
fn random_bursts_have_no_rhythm() {
    let mut s = Series::new(1 << 20);
    let mut rng = 7u64;
    let mut t = 0u64;
    for _ in 0..300 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let gap = 5 + (rng >> 33) % 400;
        for ms in 0..5 {
            s.add((t + ms) * BUCKET_NS, 1000);
        }
        t += gap;
    }
    assert_eq!(detect(&s).period_seconds, None);
}

#[test]
fn the_series_is_bounded_and_restarts_after_a_jump() {
    let mut s = Series::new(100);
    for ms in 0..1000u64 {
        s.add(ms * BUCKET_NS, 1);
    }
    // At least the last 100 buckets, at most an eighth more (dropped in one go).
    assert!(
        (100..=112).contains(&s.buckets.len()),
        "{}",
        s.buckets.len()
    );
    let start_ms = 1000 - s.buckets.len() as u64;
    assert_eq!(s.start_ns, start_ms * BUCKET_NS);
    assert!(s.buckets.iter().all(|&b| b == 1));
    s.add(1_000_000 * BUCKET_NS, 5);
    assert_eq!(s.buckets, [5]);
}

/// A job that slows from 100 ms to 200 ms steps: the recent period is the new one (the last
/// minute still holds the old steps).
#[test]
fn a_period_that_changes_reports_the_new_one() {
    let mut s = job(100, 20, 0, 100, None);
    let end = s.start_ns + s.buckets.len() as u64 * BUCKET_NS;
    let mut t = end + 80 * BUCKET_NS;
    for _ in 0..30 {
        for ms in 0..20 {
            s.add(t + ms * BUCKET_NS, 64 * 1024);
        }
        t += 200 * BUCKET_NS;
    }
    let p = detect(&s).period_seconds.unwrap();
    assert!(close(p, 0.200, 0.03), "{p}");
}

/// Another job's steady elephant on the same link (a mirror collector sees both): the bursts
/// stand above it, and the steps are found as without it.
#[test]
fn bursts_over_a_steady_background_keep_their_steps() {
    let mut s = job(100, 20, 0, 30, Some(20));
    let (start, n) = (s.start_ns, s.buckets.len() as u64);
    for ms in 0..n {
        s.add(start + ms * BUCKET_NS, 16 * 1024);
    }
    let r = detect(&s);
    let p = r.period_seconds.expect("a rhythm over the background");
    assert!(close(p, 0.100, 0.03), "{p}");
    assert_eq!(r.slow_steps, 1, "{:?}", r.steps);
    assert!(
        close(r.duty_ratio.unwrap(), 0.2, 0.15),
        "the background is no communication: {:?}",
        r.duty_ratio
    );
}

/// A silence under a PFC pause does not end a burst: the held step is one long step.
#[test]
fn a_paused_silence_does_not_split_a_burst() {
    let mut s = job(100, 20, 0, 30, None);
    // Step 20's burst stops after 10 ms for 100 ms (every later bucket moves on).
    let at = 20 * 100 + 10;
    let tail = s.buckets.split_off(at);
    s.buckets.extend(std::iter::repeat_n(0, 100));
    s.buckets.extend(tail);
    let mut paused = vec![false; s.buckets.len()];
    paused[at..at + 100].fill(true);
    let held = detect_paused(&s, &paused);
    assert_eq!(held.slow_steps, 1, "{:?}", held.steps);
    let unpaused = detect(&s);
    assert_eq!(unpaused.slow_steps, 0, "{:?}", unpaused.steps);
    assert_eq!(unpaused.steps.len(), held.steps.len() + 1);
}

/// A long series costs constant work per new bucket: a million milliseconds into a window of
/// 60,000 drop the old buckets about 1.1 M / 7,500 = 140 times, not a million (counted, not
/// timed).
#[test]
fn the_bounded_series_drops_old_buckets_in_batches() {
    let mut s = Series::new(60_000);
    let mut drops = 0;
    let mut start = s.start_ns;
    for ms in 0..1_000_000u64 {
        s.add(ms * BUCKET_NS, 1);
        if s.start_ns != start {
            drops += 1;
            start = s.start_ns;
        }
    }
    assert!(drops <= 1_000_000 / 7_500 + 1, "{drops} drops");
    assert!(s.buckets.len() >= 60_000 && s.buckets.len() <= 67_500);
}

/// A job of 100 ms steps with 20 ms bursts of 64 KiB a millisecond; the steps `slow(i)` picks
/// last twice as long. Returns the series and the slow steps' numbers (the truth).
fn job_slow_where(steps: u64, slow: impl Fn(u64) -> bool) -> (Series, Vec<usize>) {
    let mut s = Series::new(1 << 22);
    let mut t = 1_000_000_000u64;
    let mut truth = Vec::new();
    for i in 0..steps {
        for ms in 0..20 {
            s.add(t + ms * BUCKET_NS + 100, 64 * 1024);
        }
        let mut len = 100;
        if slow(i) {
            len *= 2;
            // A step ends where the next burst starts: the last one has no measured end.
            if i + 1 < steps {
                truth.push(i as usize);
            }
        }
        t += len * BUCKET_NS;
    }
    (s, truth)
}

/// Another tenant beside the job: packets of `packet` bytes, on average `per_ms` a
/// millisecond at random times (deterministic), over the whole series.
fn beside_a_tenant(s: &mut Series, packet: u64, per_ms: u64) {
    let (start, n) = (s.start_ns, s.buckets.len() as u64);
    let mut rng = 4791u64;
    for ms in 0..n {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = (rng >> 33) % (2 * per_ms + 1);
        for p in 0..k {
            s.add(start + ms * BUCKET_NS + p * 1_000, packet);
        }
    }
}

fn slow_of(r: &Rhythm) -> Vec<usize> {
    r.steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.slow)
        .map(|(i, _)| i)
        .collect()
}

/// A light tenant whose packets come at random (some milliseconds none, some several): the
/// job's silences are not silent, yet its rhythm, steps and slow step are found.
#[test]
fn a_light_irregular_tenant_beside_the_job_keeps_its_rhythm() {
    let (mut s, truth) = job_slow_where(60, |i| i == 40);
    beside_a_tenant(&mut s, 1500, 2);
    let r = detect(&s);
    let p = r.period_seconds.expect("a rhythm beside the tenant");
    assert!(close(p, 0.100, 0.03), "{p}");
    assert_eq!(slow_of(&r), truth, "{:?}", r.steps);
}

/// A heavier tenant (a quarter of the job's burst rate, irregular): the same.
#[test]
fn a_tenant_at_a_quarter_of_the_burst_rate_beside_the_job_keeps_its_rhythm() {
    let (mut s, truth) = job_slow_where(60, |i| i == 40);
    beside_a_tenant(&mut s, 4096, 4);
    let r = detect(&s);
    let p = r.period_seconds.expect("a rhythm beside the tenant");
    assert!(close(p, 0.100, 0.03), "{p}");
    assert_eq!(slow_of(&r), truth, "{:?}", r.steps);
    assert!(
        close(r.duty_ratio.unwrap(), 0.2, 0.15),
        "the tenant is no communication: {:?}",
        r.duty_ratio
    );
}

/// A third of the steps slow (the degraded job an operator needs to see): the period is the
/// normal step's, and every slow step is flagged.
#[test]
fn a_third_of_the_steps_slow_keeps_the_rhythm() {
    let (s, truth) = job_slow_where(60, |i| i % 3 == 1);
    let r = detect(&s);
    let p = r
        .period_seconds
        .expect("a rhythm with a third of the steps slow");
    assert!(close(p, 0.100, 0.03), "{p}");
    assert_eq!(slow_of(&r), truth, "{:?}", r.steps);
}

/// Half of the steps slow, every other one: still the normal step's period, each slow step
/// flagged.
#[test]
fn half_of_the_steps_slow_keeps_the_rhythm() {
    let (s, truth) = job_slow_where(60, |i| i % 2 == 1);
    let r = detect(&s);
    let p = r
        .period_seconds
        .expect("a rhythm with half of the steps slow");
    assert!(close(p, 0.100, 0.03), "{p}");
    assert_eq!(slow_of(&r), truth, "{:?}", r.steps);
}

/// A third slow beside an irregular tenant: both at once.
#[test]
fn a_third_slow_beside_a_tenant_keeps_the_rhythm() {
    let (mut s, truth) = job_slow_where(60, |i| i % 3 == 2);
    beside_a_tenant(&mut s, 1500, 3);
    let r = detect(&s);
    let p = r.period_seconds.expect("a rhythm");
    assert!(close(p, 0.100, 0.03), "{p}");
    assert_eq!(slow_of(&r), truth, "{:?}", r.steps);
}

/// A job whose link was silent for ten seconds before it, with a few outlier buckets (a
/// sender's backlog flushed at once: 50 times the burst level): the outliers are no
/// population of their own, the bursts are found (the demo's training link).
#[test]
fn a_few_outlier_buckets_do_not_hide_the_bursts() {
    let mut s = Series::new(1 << 22);
    let t0 = 1_000_000_000u64;
    s.add(t0, 1);
    let start = t0 + 10_000 * BUCKET_NS;
    for i in 0..40u64 {
        for ms in 0..20 {
            s.add(start + (i * 100 + ms) * BUCKET_NS + 100, 7_000);
        }
    }
    // The backlog of the job's start, in its first burst's first milliseconds.
    for k in 0..5u64 {
        s.add(start + k * BUCKET_NS + 100, 350_000);
    }
    let r = detect(&s);
    let p = r.period_seconds.expect("a rhythm");
    assert!(close(p, 0.100, 0.03), "{p}");
    assert_eq!(r.steps.len(), 39, "every burst a step: {:?}", r.steps);
    assert_eq!(r.slow_steps, 0);
}

/// Steps of 50 ms jittered by up to 12 ms one way and the other, with a run of short ones:
/// no step is slow that is not 1.5 times the period reported (a slow step's message names
/// that period as the typical one).
#[test]
fn no_step_is_slow_under_one_and_a_half_periods() {
    let mut s = Series::new(1 << 22);
    let mut t = 1_000_000_000u64;
    let mut rng = 99u64;
    for i in 0..200u64 {
        for ms in 0..20 {
            s.add(t + ms * BUCKET_NS + 100, 64 * 1024);
        }
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (rng >> 33) % 25;
        // A run of short steps (38 ms) before step 100.
        let len = if (90..100).contains(&i) { 38 } else { 38 + j };
        t += len * BUCKET_NS;
    }
    let r = detect(&s);
    let p = r.period_seconds.expect("a rhythm");
    for st in r.steps.iter().filter(|x| x.slow) {
        assert!(
            st.seconds > SLOW_FACTOR * p,
            "{} slow against {p}",
            st.seconds
        );
    }
}

/// The dot product in running sums agrees with the plain sum, remainder lanes included.
#[test]
fn dot_agrees_with_the_plain_sum() {
    for n in [0usize, 1, 7, 8, 9, 100, 1_001] {
        let a: Vec<f64> = (0..n).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
        let b: Vec<f64> = (0..n).map(|i| ((i * 13) % 7) as f64 * 0.5 - 1.0).collect();
        let plain: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!(
            (dot(&a, &b) - plain).abs() <= 1e-9 * plain.abs().max(1.0),
            "n = {n}"
        );
    }
}

/// Slices of unequal length are multiplied over the shorter one.
#[test]
fn dot_stops_at_the_shorter_slice() {
    assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0]), 14.0);
}

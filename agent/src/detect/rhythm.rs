//! The training rhythm: a large training job talks in steps (compute, then a burst of
//! collective communication over RoCE, then compute again). From RoCE bytes in 1 ms buckets
//! this finds whether the bursts have a rhythm (autocorrelation of the series, the smallest
//! lag whose correlation is close to the best), each step (a burst start to the next), its
//! bytes and duration, the period (the typical step, which slow steps do not move), the
//! communication duty (the share of a step with traffic), and the steps that ran markedly
//! longer than the recent typical step (slow steps). Silence is judged against the series'
//! own background, so another tenant on the link does not fill the job's silences. Traffic
//! without a rhythm (steady, or random) gives no period: the correlation peak must be clear
//! and the steps regular.

use serde::Serialize;

/// Bucket width of the series.
pub const BUCKET_NS: u64 = 1_000_000;
/// Shortest and longest period looked for.
pub const MIN_PERIOD_MS: usize = 10;
pub const MAX_PERIOD_MS: usize = 5_000;
/// The autocorrelation a period needs (of the series' variance).
const MIN_CORRELATION: f64 = 0.3;
/// A lag within this share of the best peak counts as a candidate (the smallest wins: the
/// fundamental, not a multiple of it).
const PEAK_SHARE: f64 = 0.8;
/// A step longer than this times the median of the recent steps is slow.
pub const SLOW_FACTOR: f64 = 1.5;
/// Recent steps the median is taken over.
const RECENT: usize = 16;
/// Steps needed before a rhythm is reported.
const MIN_STEPS: usize = 4;

/// One step: a communication burst start to the next.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    pub start_ns: u64,
    pub seconds: f64,
    pub bytes: u64,
    /// Longer than [`SLOW_FACTOR`] times the median of the recent steps.
    pub slow: bool,
    /// What explains a slow step's extra time, most first (empty when not slow, and live).
    pub causes: Vec<Cause>,
    /// Where nothing in the network explains a slow step: the host whose burst started or
    /// ended last (a straggler is a host, not the network).
    pub straggler: Option<Straggler>,
}

/// The host that held a slow step up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Straggler {
    pub host: String,
    /// How much later than the other hosts it started and ended its burst.
    pub started_late_seconds: f64,
    pub ended_late_seconds: f64,
}

/// A cause of a slow step and the share of its extra time it explains.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cause {
    /// pfc_pause, congestion, retransmission, ecmp_collision, lossy_class, unexplained.
    pub kind: &'static str,
    pub share: f64,
    /// How the share was reached: `measured` (the time the job's priority was paused within
    /// the step, over the step's extra time), `shared` (an equal part of the time the pause
    /// does not explain, among the causes whose evidence the job's own flows show: evidence,
    /// not measured time), `remainder` (the time nothing explains).
    pub basis: &'static str,
}

/// What the series shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Rhythm {
    pub period_seconds: Option<f64>,
    pub duty_ratio: Option<f64>,
    pub steps: Vec<Step>,
    pub slow_steps: usize,
}

/// RoCE bytes per 1 ms bucket from a start time (bounded: older buckets fall off).
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub start_ns: u64,
    pub buckets: Vec<u64>,
    /// Buckets held (0: no bound, for a window cut from another series): at least the last
    /// `max`, at most an eighth more (dropped in one go).
    pub max: usize,
}

impl Series {
    /// A series holding at most `max_buckets` (the oldest are dropped).
    pub fn new(max_buckets: usize) -> Series {
        Series {
            start_ns: 0,
            buckets: Vec::new(),
            max: max_buckets.max(1),
        }
    }

    /// Adds `bytes` at time `ts_ns` (times before the series' start are ignored).
    pub fn add(&mut self, ts_ns: u64, bytes: u64) {
        if self.buckets.is_empty() {
            self.start_ns = ts_ns - ts_ns % BUCKET_NS;
        }
        if ts_ns < self.start_ns {
            return;
        }
        let i = ((ts_ns - self.start_ns) / BUCKET_NS) as usize;
        if i >= self.buckets.len() {
            // A jump larger than the window restarts the series.
            if self.max > 0 && i - self.buckets.len() >= self.max {
                self.buckets.clear();
                self.start_ns = ts_ns - ts_ns % BUCKET_NS;
                self.buckets.push(bytes);
                return;
            }
            self.buckets.resize(i + 1, 0);
        }
        let i = ((ts_ns - self.start_ns) / BUCKET_NS) as usize;
        self.buckets[i] = self.buckets[i].saturating_add(bytes);
        // The oldest buckets go a slack's worth at a time, not one per new millisecond (that
        // moved the whole window every millisecond: a core for 64 sFlow ports, and quadratic
        // time in `analyze` of a long capture): constant work per bucket, amortized.
        if self.max > 0 && self.buckets.len() > self.max + slack(self.max) {
            let drop = self.buckets.len() - self.max;
            self.buckets.drain(..drop);
            self.start_ns += drop as u64 * BUCKET_NS;
        }
    }
}

/// Buckets a bounded series may hold beyond its bound before the oldest are dropped: an
/// eighth of it (the rhythm is looked for in the last part of a series, so a little more
/// history changes nothing).
fn slack(max: usize) -> usize {
    (max / 8).max(1)
}

/// The period in buckets, if the series has a clear one (at least [`MIN_PERIOD_MS`]).
pub fn period(x: &[u64]) -> Option<f64> {
    period_in(x, MIN_PERIOD_MS)
}

/// The period in buckets, at least `min_lag` buckets.
fn period_in(x: &[u64], min_lag: usize) -> Option<f64> {
    let n = x.len();
    let max_lag = MAX_PERIOD_MS.min(n / 3);
    if max_lag <= min_lag {
        return None;
    }
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    let d: Vec<f64> = x.iter().map(|&v| v as f64 - mean).collect();
    let var = dot(&d, &d);
    if var <= 0.0 {
        return None;
    }
    let r: Vec<f64> = (0..=max_lag + 1)
        .map(|k| {
            let s = dot(&d[..n - k], &d[k..]);
            // Unbiased for the shorter overlap.
            s / var * n as f64 / (n - k) as f64
        })
        .collect();
    // Local maxima above the floor, after the correlation first fell (the burst's own width).
    let first_low = (1..=max_lag).find(|&k| r[k] < r[0] * 0.5)?;
    let peaks: Vec<usize> = (first_low.max(min_lag)..=max_lag)
        .filter(|&k| r[k] >= r[k - 1] && r[k] >= r[k + 1] && r[k] >= MIN_CORRELATION)
        .collect();
    let best = peaks.iter().map(|&k| r[k]).fold(f64::MIN, f64::max);
    let k = *peaks.iter().find(|&&k| r[k] >= best * PEAK_SHARE)?;
    // Parabolic refinement of the peak.
    let (a, b, c) = (r[k - 1], r[k], r[k + 1]);
    let den = a - 2.0 * b + c;
    let shift = if den.abs() > 1e-12 {
        (0.5 * (a - c) / den).clamp(-0.5, 0.5)
    } else {
        0.0
    };
    Some(k as f64 + shift)
}

/// The dot product of two equally long slices, in [`LANES`] running sums: the
/// autocorrelation is a dot product per lag (up to `n / 3` lags of `n` buckets: 4.6 million
/// products for one source of a minute's capture), and one running sum waits on each add
/// (floating-point adds are not reordered for the compiler), where independent sums fill
/// the vector units. The lag 0 goes through it too, so the correlation at lag 0 is exactly 1.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..LANES {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s: f64 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Running sums of [`dot`] (two AVX registers, four SSE ones).
const LANES: usize = 8;

/// Steps of a series with period `p` buckets: a burst starts where traffic follows a silence
/// of at least a tenth of the period (and 2 ms), and at least `min_step` buckets after the
/// previous step's start (traffic sooner than that is the same step going on: a go-back
/// after a stall, a late host). A silent bucket in which the job's priority was paused
/// (`paused[i]`) is no silence: the network held the burst, the step goes on.
fn steps(s: &Series, p: f64, paused: &[bool], min_step: usize, quiet: u64) -> (Vec<Step>, f64) {
    let gap = ((p * 0.1).round() as usize).max(2);
    let x = &s.buckets;
    let mut starts: Vec<usize> = Vec::new();
    let mut idle = gap;
    for (i, &v) in x.iter().enumerate() {
        if v > quiet {
            if idle >= gap && starts.last().is_none_or(|&a| i - a >= min_step) {
                starts.push(i);
            }
            idle = 0;
        } else if !paused.get(i).copied().unwrap_or(false) {
            idle += 1;
        }
    }
    let mut out = Vec::new();
    let mut active_share = Vec::new();
    for w in starts.windows(2) {
        let (a, b) = (w[0], w[1]);
        let seg = &x[a..b];
        out.push(Step {
            start_ns: s.start_ns + a as u64 * BUCKET_NS,
            seconds: (b - a) as f64 * BUCKET_NS as f64 / 1e9,
            bytes: seg.iter().sum(),
            slow: false,
            causes: Vec::new(),
            straggler: None,
        });
        active_share.push(seg.iter().filter(|&&v| v > quiet).count() as f64 / seg.len() as f64);
    }
    let duty = if active_share.is_empty() {
        0.0
    } else {
        active_share.iter().sum::<f64>() / active_share.len() as f64
    };
    (out, duty)
}

/// Buckets and lags of the fine search (1 ms): periods up to 1.4 s in the last 4 s.
const FINE_BUCKETS: usize = 4_096;
/// The coarse search sums this many buckets into one: periods up to 5 s in the last minute.
const COARSE: usize = 10;
const COARSE_BUCKETS: usize = 6_000;

/// The level at or below which a bucket is silence between bursts. Beside another tenant
/// the job's silences are not silent: a steady elephant fills every millisecond, a light
/// flow of packets at random times some and not others. So the buckets are split into two
/// populations, background and bursts (Otsu's threshold: the split with the most variance
/// between them), and the level lies a quarter of the way from the background's 90th
/// percentile up to the bursts' median, at least an eighth above that percentile. Alone on
/// its link a job's background is nothing, and a bucket below a quarter of the burst level
/// is silent (ACKs and NAKs between bursts are no burst).
///
/// Returns the level, and the value the top thousandth of the buckets is clipped to.
pub fn quiet_level(x: &[u64]) -> (u64, u64) {
    if x.is_empty() {
        return (0, 0);
    }
    let mut v = x.to_vec();
    v.sort_unstable();
    let n = v.len();
    // A handful of outlier buckets (a sender's backlog flushed at once, a capture's
    // timestamps batched) would be a population of their own: the split is looked for
    // with the top thousandth clipped to the value below it.
    let cap = v[n - 1 - n / 1000];
    for b in &mut v[n - n / 1000..] {
        *b = cap;
    }
    let total: f64 = v.iter().map(|&b| b as f64).sum();
    let (mut best, mut split) = (0.0, 0);
    let mut below = 0.0;
    for k in 1..n {
        below += v[k - 1] as f64;
        if v[k - 1] == v[k] {
            continue;
        }
        let (w0, w1) = (k as f64, (n - k) as f64);
        let d = below / w0 - (total - below) / w1;
        let between = w0 * w1 * d * d;
        if between > best {
            (best, split) = (between, k);
        }
    }
    if split == 0 {
        // One level throughout: nothing stands above it.
        return (v[0] + v[0] / 8, cap);
    }
    let bg = v[(split - 1) * 9 / 10];
    let bursts = v[split + (n - split) / 2];
    ((bg + bg / 8).max(bg + bursts.saturating_sub(bg) / 4), cap)
}

/// The typical step of a run of step durations: the median of the steps near the shorter
/// ones (within 25% of the lower quartile), so that slow steps, up to half of them, do not
/// pull it up.
fn typical(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let q = v[v.len() / 4];
    let normal: Vec<f64> = v.into_iter().filter(|&d| d <= 1.25 * q).collect();
    normal[normal.len() / 2]
}

/// Bursts in a series (traffic above `quiet` after a silence of at least `gap` buckets).
fn bursts(x: &[u64], gap: usize, quiet: u64) -> usize {
    let mut n = 0;
    let mut idle = gap;
    for &v in x {
        if v > quiet {
            if idle >= gap {
                n += 1;
            }
            idle = 0;
        } else {
            idle += 1;
        }
    }
    n
}

/// The period (in 1 ms buckets) of the last part of the series: the fine search first, the
/// coarse one for long periods. The autocorrelation's cost is bounded (a few million
/// multiply-adds), whatever the series' length.
///
/// Buckets above `cap` count as `cap`: a few outliers would otherwise hold the series'
/// variance, and the correlation would see them and not the bursts.
fn candidates(s: &Series, cap: u64) -> Vec<(f64, usize)> {
    let x: Vec<u64> = s.buckets.iter().map(|&b| b.min(cap)).collect();
    let mut out = Vec::new();
    let fine = &x[x.len().saturating_sub(FINE_BUCKETS)..];
    if let Some(p) = period(fine) {
        out.push((p, fine.len()));
    }
    let from = x.len().saturating_sub(COARSE_BUCKETS * COARSE);
    let coarse: Vec<u64> = x[from..].chunks(COARSE).map(|c| c.iter().sum()).collect();
    if let Some(p) = period_in(&coarse, 2) {
        out.push((p * COARSE as f64, x.len() - from));
    }
    out
}

/// The rhythm of a series (see the module doc).
pub fn detect(s: &Series) -> Rhythm {
    detect_paused(s, &[])
}

/// The rhythm of a series whose bucket `i` was paused by PFC where `paused[i]` (a pause in
/// the middle of a burst does not split its step).
pub fn detect_paused(s: &Series, paused: &[bool]) -> Rhythm {
    // A series without a few separate bursts has no steps to find (cheap, before any
    // correlation).
    let (quiet, cap) = quiet_level(&s.buckets);
    if bursts(&s.buckets, 2, quiet) <= MIN_STEPS {
        return Rhythm::default();
    }
    for (p, window) in candidates(s, cap) {
        if let Some(r) = rhythm_at(s, p, window, paused, quiet) {
            return r;
        }
    }
    Rhythm::default()
}

/// The steps at period `p` (buckets), if they are regular in the last `window` buckets (where
/// the period was found: a job that changed its period has the new one there). The
/// correlation's period only says that there is a rhythm and how long a silence splits two
/// bursts; the period reported is the typical step's, which slow steps do not move (their
/// share stretches the correlation's period to the pattern of slow and normal steps).
fn rhythm_at(s: &Series, p: f64, window: usize, paused: &[bool], quiet: u64) -> Option<Rhythm> {
    let since = s.start_ns + s.buckets.len().saturating_sub(window) as u64 * BUCKET_NS;
    let recent_of = |st: &[Step]| -> Vec<f64> {
        st.iter()
            .filter(|x| x.start_ns >= since)
            .map(|x| x.seconds * 1e3)
            .collect()
    };
    // First the bursts as the silences split them, for the typical step; then again with
    // the silence the typical step asks for (a pattern of slow and normal steps gives a
    // correlation period of several steps, too long a silence to split bursts by), and no
    // step shorter than half the typical one.
    let (first, _) = steps(s, p, paused, 0, quiet);
    let first = recent_of(&first);
    if first.len() < MIN_STEPS {
        return None;
    }
    let t0 = typical(first);
    let (mut st, duty) = steps(s, p.min(t0), paused, (0.5 * t0) as usize, quiet);
    let recent = recent_of(&st);
    if recent.len() < MIN_STEPS {
        return None;
    }
    let period = typical(recent.clone());
    // Regular steps only: many step durations near the typical one, few shorter (random
    // bursts have as many shorter intervals as longer ones; slow steps are only longer).
    let n = recent.len() as f64;
    let near = recent
        .iter()
        .filter(|&&d| (d - period).abs() <= 0.25 * period)
        .count() as f64;
    let short = recent.iter().filter(|&&d| d < 0.75 * period).count() as f64;
    if near < 0.4 * n || short > 0.2 * n {
        return None;
    }
    let mut slow = 0;
    for i in 0..st.len() {
        let from = i.saturating_sub(RECENT);
        let before: Vec<f64> = st[from..i].iter().map(|x| x.seconds).collect();
        // Slow against the recent typical step, and never under the period reported: a
        // step is not called slow against a typical it does not name (a jittery run of
        // short steps would lower the local bar).
        let base = if before.len() >= 3 {
            typical(before).max(period / 1e3)
        } else {
            period / 1e3
        };
        if st[i].seconds > SLOW_FACTOR * base {
            st[i].slow = true;
            slow += 1;
        }
    }
    Some(Rhythm {
        period_seconds: Some(period / 1e3),
        duty_ratio: Some(duty),
        steps: st,
        slow_steps: slow,
    })
}

#[cfg(test)]
#[path = "rhythm_tests.rs"]
mod tests;

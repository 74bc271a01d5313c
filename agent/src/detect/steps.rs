//! The training rhythm of a live source (an interface's kernel ring, or a switch port's sFlow
//! samples): the last minute of its RoCE bytes per millisecond, the rhythm found in it
//! ([`crate::detect::rhythm`]), and the slow steps, each counted and logged once.

use crate::detect::rhythm::{self, Rhythm, Series, BUCKET_NS};

/// The series kept: the last minute (what the coarse search looks at), 480 KB.
const WINDOW_BUCKETS: usize = 60_000;
/// Recent steps the step-bytes figure is the mean of.
const RECENT_STEPS: usize = 16;
/// Slow steps are reported live only when they began this close to the newest step's end
/// (20 s): older ones are history by the time the rhythm shows them.
pub const REPORT_WINDOW_NS: u64 = 20_000_000_000;
/// A slow step carries at least this much RoCE (32 KiB) to be reported: a training step's
/// collectives move far more; a trickle with a rhythm is no job to stretch.
pub const MIN_SLOW_STEP_BYTES: u64 = 32 * 1024;
/// New slow steps reported per source and detection at most (the newest).
pub const MAX_NEW_SLOW_STEPS: usize = 20;

/// One source's rhythm.
#[derive(Clone, Debug)]
pub struct StepTracker {
    series: Series,
    /// The next millisecond to read (None before the first read).
    pub next_ms: Option<u64>,
    /// The rhythm of the last detection.
    pub rhythm: Rhythm,
    /// Slow steps counted so far.
    pub slow_steps: u64,
    /// How far the steps were looked at.
    cursor: StepCursor,
    /// Milliseconds the source could no longer give when read (the ring had moved on).
    pub lost_ms: u64,
    /// The last time added ([`Self::add_restarting`]).
    last_ns: u64,
}

impl Default for StepTracker {
    fn default() -> Self {
        StepTracker {
            series: Series::new(WINDOW_BUCKETS),
            next_ms: None,
            rhythm: Rhythm::default(),
            slow_steps: 0,
            cursor: StepCursor::default(),
            lost_ms: 0,
            last_ns: 0,
        }
    }
}

/// What the exporters show of a rhythm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepSummary {
    pub period_seconds: f64,
    pub duty_ratio: f64,
    /// Mean bytes of the recent steps.
    pub step_bytes: f64,
}

impl StepTracker {
    /// Adds bytes per millisecond from `first_ms` on (one value per millisecond).
    pub fn push(&mut self, first_ms: u64, bytes: impl IntoIterator<Item = u64>) {
        let mut ms = first_ms;
        for b in bytes {
            self.series.add(ms * BUCKET_NS, b);
            ms += 1;
        }
        self.next_ms = Some(ms);
    }

    /// Adds `bytes` at `ts_ns` of a clock that may restart (an sFlow agent's uptime: the
    /// switch rebooted): a time more than the window before the last one starts the series
    /// over. The series fills the gaps between samples with zeros.
    pub fn add_restarting(&mut self, ts_ns: u64, bytes: u64) {
        let window = WINDOW_BUCKETS as u64 * BUCKET_NS;
        if ts_ns.saturating_add(window) < self.last_ns {
            self.series = Series::new(WINDOW_BUCKETS);
            self.cursor = StepCursor::default();
        }
        self.last_ns = ts_ns;
        self.series.add(ts_ns, bytes);
    }

    /// Looks for the rhythm in the series; returns the slow steps not seen before: those of
    /// the last [`REPORT_WINDOW_NS`] (a rhythm found late, or found again after a stretch
    /// without one, does not report a minute of history at once), of at least
    /// [`MIN_SLOW_STEP_BYTES`], the newest [`MAX_NEW_SLOW_STEPS`] of them, each with its
    /// number ([`StepCursor`]).
    pub fn detect(&mut self) -> Vec<NumberedStep> {
        self.rhythm = rhythm::detect(&self.series);
        let new = new_slow_steps(&self.rhythm, &mut self.cursor);
        self.slow_steps += new.len() as u64;
        new
    }

    /// The rhythm's figures, when there is one.
    pub fn summary(&self) -> Option<StepSummary> {
        let r = &self.rhythm;
        let (period_seconds, duty_ratio) = (r.period_seconds?, r.duty_ratio?);
        let step_bytes = recent_step_bytes(r).unwrap_or(0.0);
        Some(StepSummary {
            period_seconds,
            duty_ratio,
            step_bytes,
        })
    }
}

/// How far a source's steps were looked at: the start of the last step counted, and how
/// many steps were counted (slow or not) since the source was first found. A slow step is
/// numbered by its place among them, as `analyze` numbers a capture's steps by their place
/// among all of its steps, so live and offline give a replayed capture's slow step the same
/// number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCursor {
    pub until_ns: u64,
    pub steps: u64,
}

/// A slow step and its number (from 1) among its source's steps.
#[derive(Clone, Debug)]
pub struct NumberedStep {
    pub index: u64,
    pub step: rhythm::Step,
}

/// The slow steps of `r` that began after the cursor (which moves to the last step looked
/// at, counting every step it passes): of the last [`REPORT_WINDOW_NS`] before its end, of
/// at least [`MIN_SLOW_STEP_BYTES`], the newest [`MAX_NEW_SLOW_STEPS`].
pub fn new_slow_steps(r: &Rhythm, cursor: &mut StepCursor) -> Vec<NumberedStep> {
    let end = end_of(r);
    let mut new = Vec::new();
    for s in &r.steps {
        if s.start_ns > cursor.until_ns {
            cursor.steps += 1;
            let recent = s.start_ns + REPORT_WINDOW_NS >= end;
            if s.slow && recent && s.bytes >= MIN_SLOW_STEP_BYTES {
                new.push(NumberedStep {
                    index: cursor.steps,
                    step: s.clone(),
                });
            }
            cursor.until_ns = s.start_ns;
        }
    }
    new.drain(..new.len().saturating_sub(MAX_NEW_SLOW_STEPS));
    new
}

/// The mean RoCE bytes of a rhythm's recent steps (the last [`RECENT_STEPS`]), if it has any.
pub fn recent_step_bytes(r: &Rhythm) -> Option<f64> {
    let recent = recent_steps(r);
    (!recent.is_empty())
        .then(|| recent.iter().map(|s| s.bytes as f64).sum::<f64>() / recent.len() as f64)
}

/// A rhythm's recent steps: the last [`RECENT_STEPS`].
pub fn recent_steps(r: &Rhythm) -> &[rhythm::Step] {
    &r.steps[r.steps.len().saturating_sub(RECENT_STEPS)..]
}

/// The end of a rhythm's last step (ns).
pub fn end_of(r: &Rhythm) -> u64 {
    r.steps
        .last()
        .map_or(0, |s| s.start_ns + (s.seconds * 1e9) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bursts of `burst` ms every `period` ms for `steps` steps, one step `slow_at` ran `slow`
    /// times as long.
    fn rhythm_ms(period: u64, burst: u64, steps: u64, slow_at: Option<u64>) -> Vec<u64> {
        let mut out = Vec::new();
        for s in 0..steps {
            let len = if Some(s) == slow_at {
                period * 2
            } else {
                period
            };
            for i in 0..len {
                out.push(if i < burst { 1_000_000 } else { 0 });
            }
        }
        out
    }

    #[test]
    fn finds_the_period_and_counts_a_slow_step_once() {
        let mut t = StepTracker::default();
        t.push(1_000, rhythm_ms(100, 20, 30, Some(20)));
        let slow = t.detect();
        assert_eq!(slow.len(), 1, "{:?}", t.rhythm);
        let s = t.summary().expect("a rhythm");
        assert!((s.period_seconds - 0.1).abs() < 0.005, "{s:?}");
        assert!((s.duty_ratio - 0.2).abs() < 0.03, "{s:?}");
        assert!((s.step_bytes - 20e6).abs() < 1e6, "{s:?}");
        // Read again with nothing new: the same slow step is not counted twice.
        assert!(t.detect().is_empty());
        assert_eq!(t.slow_steps, 1);
        assert_eq!(t.next_ms, Some(1_000 + 31 * 100));
    }

    /// A slow step is numbered by its place among all steps, as `analyze` numbers the
    /// steps of a whole capture, whether the series came at once or over several detections.
    #[test]
    fn a_slow_step_is_numbered_among_all_steps_however_the_series_arrives() {
        let ms = rhythm_ms(100, 20, 30, Some(20));
        let mut whole = StepTracker::default();
        whole.push(1_000, ms.iter().copied());
        let once = whole.detect();
        assert_eq!(once.len(), 1, "{:?}", whole.rhythm);
        let place = whole
            .rhythm
            .steps
            .iter()
            .position(|s| s.slow)
            .expect("a slow step");
        assert_eq!(once[0].index, place as u64 + 1, "its place among the steps");
        assert_eq!(once[0].index, 21, "the 21st burst of the series");
        // The same series in parts, a detection after each (as the agent polls).
        let mut parts = StepTracker::default();
        let mut got = Vec::new();
        for (i, chunk) in ms.chunks(700).enumerate() {
            parts.push(1_000 + (i * 700) as u64, chunk.iter().copied());
            got.extend(parts.detect().into_iter().map(|n| n.index));
        }
        assert_eq!(got, vec![once[0].index]);
    }

    #[test]
    fn steady_traffic_has_no_summary() {
        let mut t = StepTracker::default();
        t.push(0, std::iter::repeat_n(5_000, 5_000));
        assert!(t.detect().is_empty());
        assert_eq!(t.summary(), None);
    }

    /// Bursts of `burst` ms every `period` ms, steps `slow` (by index) twice as long, each
    /// burst millisecond `per_ms` bytes.
    fn job_ms(
        period: u64,
        burst: u64,
        steps: u64,
        slow: impl Fn(u64) -> bool,
        per_ms: u64,
    ) -> Vec<u64> {
        let mut out = Vec::new();
        for s in 0..steps {
            let len = if slow(s) { period * 2 } else { period };
            out.extend((0..len).map(|i| if i < burst { per_ms } else { 0 }));
        }
        out
    }

    /// A rhythm found over a long history reports only the slow steps of its last 20 s.
    #[test]
    fn slow_steps_older_than_the_report_window_are_history() {
        let mut t = StepTracker::default();
        // 50 s of 100 ms steps, one slow every 40 steps (every ~4 s), 1 MB per step.
        t.push(0, job_ms(100, 20, 500, |s| s % 40 == 39, 50_000));
        let slow = t.detect();
        assert!(!slow.is_empty());
        let end = 500 * 100 + 12 * 100;
        for s in &slow {
            assert!(
                s.step.start_ns / 1_000_000 + 20_000 >= end,
                "{} ms is history",
                s.step.start_ns / 1_000_000
            );
        }
        assert!(slow.len() <= 6, "{}", slow.len());
    }

    /// Many slow steps at once (a short period, every other step slow) are bounded.
    #[test]
    fn at_most_twenty_new_slow_steps_per_detection() {
        let mut t = StepTracker::default();
        t.push(0, job_ms(100, 20, 500, |s| s % 8 == 7, 50_000));
        let slow = t.detect();
        assert_eq!(
            slow.len(),
            MAX_NEW_SLOW_STEPS,
            "{:?}",
            t.rhythm.period_seconds
        );
        assert_eq!(t.slow_steps, slow.len() as u64);
    }

    /// A rhythm of steps too small to be a training job (a trickle: 2 KiB a step) reports no
    /// slow step.
    #[test]
    fn a_trickle_with_a_rhythm_reports_no_slow_step() {
        let mut t = StepTracker::default();
        t.push(0, job_ms(100, 2, 100, |s| s == 80, 1_024));
        assert!(t.summary().is_none() || t.detect().is_empty());
        t.detect();
        assert_eq!(t.slow_steps, 0, "{:?}", t.rhythm);
    }
}

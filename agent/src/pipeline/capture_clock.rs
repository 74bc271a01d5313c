//! Capture time as the pipeline takes it: non-decreasing, and without jumps of decades.
//!
//! A capture's timestamps are what its writer's clock said: a frame dated 30 years ahead (a
//! clock set wrong for a moment, a corrupt record) made the capture decades long (the
//! rhythm's series, the rates, the pause runs spread over it), and frames stepped back (two
//! capture queues merged, a clock corrected) broke the pause runs, which assume time moves on.
//! So: a step back of up to [`MAX_BACK_NS`] is taken as the time already reached (counted);
//! a jump back further, or forward by more than [`MAX_FORWARD_NS`], is a discontinuity: the
//! frames after it go on from the time reached, shifted by the jump, and the report lists it.

use serde::Serialize;

/// Steps back up to this long (1 s) are reordering: the frame keeps the time reached.
pub const MAX_BACK_NS: u64 = 1_000_000_000;
/// Forward gaps longer than this (1 hour) are a jump of the clock, not a quiet link.
pub const MAX_FORWARD_NS: u64 = 3_600_000_000_000;
/// The time between the last frame before a discontinuity and the first after it.
const ACROSS_NS: u64 = 1_000;

/// A jump of the capture's clock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Discontinuity {
    /// The frame (from 1) that jumped.
    pub frame: u64,
    /// Its timestamp against the frame before it, seconds (negative: back).
    pub jump_seconds: f64,
}

/// What the clock did over a capture.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CaptureTime {
    /// Frames dated before the time already reached, by up to 1 s (taken at that time).
    pub frames_stepped_back: u64,
    /// Jumps back of more than 1 s or forward of more than an hour (at most the first 16
    /// listed; `discontinuities_total` counts all).
    pub discontinuities: Vec<Discontinuity>,
    pub discontinuities_total: u64,
}

/// Keeps at most this many discontinuities in the list.
const LISTED: usize = 16;

/// Frames that must follow a jump on its clock before the clock before it is forgotten (till
/// then a frame that fits the earlier clock makes the jump a stray frame's).
const CONFIRM: u32 = 16;

#[derive(Debug, Default)]
pub struct CaptureClock {
    /// The last time handed out, and the raw timestamp it came from.
    last: Option<(u64, u64)>,
    /// The reference before the last jump (time, raw), and the frames that followed the jump
    /// on its own clock since.
    before_jump: Option<((u64, u64), u32)>,
    frames: u64,
    pub time: CaptureTime,
}

/// How far `raw` lies ahead of the reference `r` (negative: behind), when it fits the
/// bounds of one clock.
fn fits(r: (u64, u64), raw: u64) -> Option<i64> {
    let ahead = raw.wrapping_sub(r.1) as i64;
    (-(MAX_BACK_NS as i64)..=MAX_FORWARD_NS as i64)
        .contains(&ahead)
        .then_some(ahead)
}

impl CaptureClock {
    /// The pipeline's time for a frame stamped `raw` (ns).
    pub fn at(&mut self, raw: u64) -> u64 {
        self.frames += 1;
        let Some(last) = self.last else {
            self.last = Some((raw, raw));
            return raw;
        };
        // A stray frame's jump: the frames after it go on from the clock before it.
        if let Some((r, _)) = self.before_jump {
            if let Some(ahead) = fits(r, raw) {
                self.before_jump = None;
                let t = r.0.saturating_add_signed(ahead).max(last.0);
                self.last = Some((t, raw));
                return t;
            }
        }
        let Some(ahead) = fits(last, raw) else {
            // A jump: the frame goes on from the time reached.
            self.time.discontinuities_total += 1;
            if self.time.discontinuities.len() < LISTED {
                self.time.discontinuities.push(Discontinuity {
                    frame: self.frames,
                    jump_seconds: raw.wrapping_sub(last.1) as i64 as f64 / 1e9,
                });
            }
            if self.before_jump.is_none() {
                self.before_jump = Some((last, 0));
            }
            let t = last.0 + ACROSS_NS;
            self.last = Some((t, raw));
            return t;
        };
        if let Some((_, n)) = &mut self.before_jump {
            *n += 1;
            if *n >= CONFIRM {
                self.before_jump = None;
            }
        }
        if ahead < 0 {
            // Back by less than a second: the time reached; the raw clock reached stays
            // the reference, the frames after this one are measured from it.
            self.time.frames_stepped_back += 1;
            return last.0;
        }
        let t = last.0 + ahead as u64;
        self.last = Some((t, raw));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_764_547_200 * S;

    fn run(raw: &[u64]) -> (Vec<u64>, CaptureTime) {
        let mut c = CaptureClock::default();
        let t = raw.iter().map(|r| c.at(*r)).collect();
        (t, c.time)
    }

    #[test]
    fn an_ordinary_capture_keeps_its_times() {
        let raw = [T0, T0 + 5, T0 + 5, T0 + 3 * S];
        let (t, time) = run(&raw);
        assert_eq!(t, raw);
        assert_eq!(time.discontinuities_total + time.frames_stepped_back, 0);
    }

    #[test]
    fn a_frame_decades_ahead_is_a_discontinuity_not_a_span() {
        let ahead = T0 + 30 * 365 * 24 * 3600 * S;
        let (t, time) = run(&[T0, T0 + S, ahead, T0 + 2 * S, T0 + 3 * S]);
        assert_eq!(t[2], T0 + S + 1_000);
        assert_eq!(t[3], T0 + 2 * S, "the clock before the stray frame goes on");
        assert_eq!(t[4], T0 + 3 * S);
        assert_eq!(time.discontinuities_total, 1);
        assert_eq!(time.discontinuities[0].frame, 3);
        assert!(time.discontinuities[0].jump_seconds > 9e8);
    }

    #[test]
    fn a_clock_that_jumps_for_good_goes_on_from_the_jump() {
        let later = T0 + 3 * 3600 * S;
        let raw: Vec<u64> = [T0, T0 + S]
            .into_iter()
            .chain((0..40).map(|k| later + k * S))
            .collect();
        let (t, time) = run(&raw);
        assert_eq!(t[2], T0 + S + 1_000);
        assert_eq!(t[41], T0 + S + 1_000 + 39 * S);
        assert_eq!(time.discontinuities_total, 1);
    }

    #[test]
    fn a_frame_stepped_far_back_is_a_stray() {
        let (t, time) = run(&[T0 + 10 * S, T0 + 10 * S + 5, T0, T0 + 10 * S + 9]);
        assert_eq!(t[2], T0 + 10 * S + 5 + 1_000);
        assert_eq!(
            t[3],
            T0 + 10 * S + 5 + 1_000,
            "not 10 s later: the old clock goes on"
        );
        assert_eq!(time.discontinuities_total, 1);
    }

    #[test]
    fn frames_stepped_back_a_little_keep_the_time_reached() {
        let (t, time) = run(&[T0, T0 + 10 * S, T0 + 10 * S - 5_000, T0 + 10 * S + 7]);
        assert_eq!(t, [T0, T0 + 10 * S, T0 + 10 * S, T0 + 10 * S + 7]);
        assert_eq!(time.frames_stepped_back, 1);
        assert_eq!(time.discontinuities_total, 0);
    }

    #[test]
    fn a_jump_back_of_seconds_for_good_is_one_discontinuity() {
        let raw: Vec<u64> = [T0 + 100 * S, T0 + 100 * S + 1]
            .into_iter()
            .chain((0..40).map(|k| T0 + k))
            .collect();
        let (t, time) = run(&raw);
        assert_eq!(t[2], T0 + 100 * S + 1 + 1_000);
        assert_eq!(t[3], T0 + 100 * S + 2 + 1_000);
        assert_eq!(time.discontinuities_total, 1);
    }
}

//! Pause time that is true: per priority, the wall time the link was paused, as the union of
//! the pause intervals at the link's speed. A receiver reloads its pause timer with each XOFF
//! (so a refreshed XOFF extends the pause from its own arrival, it does not add its whole
//! time again) and an XON ends it. Summing every XOFF's quanta overstates a storm of refreshed
//! XOFFs by their overlap (1.7x for XOFFs refreshed every 200 us at 100G). A priority paused
//! without a break for longer than the storm threshold (SONiC's PFC watchdog detects in
//! 200 ms) is a storm, with the MAC address that sent the pauses.

use agent_common::headers::mac_control::{MacControl, PRIORITIES, QUANTUM_BITS};
use serde::Serialize;

/// PFC's MAC control opcode.
const OPCODE_PFC: u16 = 0x0101;
/// 802.3x PAUSE's opcode (every priority at once).
const OPCODE_PAUSE: u16 = 0x0001;

/// The default storm threshold: a priority paused continuously this long (the setting's).
pub const DEFAULT_STORM_NS: u64 = crate::config::thresholds::DEFAULT_PFC_STORM_NS;

/// A continuous pause of one priority.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PauseRun {
    pub priority: u8,
    pub start_ns: u64,
    pub end_ns: u64,
    /// XOFF frames that started or refreshed it.
    pub xoff_frames: u64,
    /// The MAC address that sent them (the first one's).
    pub mac: String,
}

impl PauseRun {
    pub fn seconds(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }
}

#[derive(Clone, Debug, Default)]
struct Priority {
    /// The pause under way: (start, until, xoff frames, mac).
    open: Option<(u64, u64, u64, [u8; 6])>,
    paused_ns: u64,
    longest: Option<PauseRun>,
}

/// Pause intervals per priority over a capture (or a live window).
#[derive(Clone, Debug)]
pub struct PauseTracker {
    link_speed_bps: u64,
    storm_ns: u64,
    prios: [Priority; PRIORITIES],
    /// Pauses longer than the storm threshold, as they closed.
    pub storms: Vec<PauseRun>,
    /// Every pause (the first `max_runs`), indexed as it closes: what a slow step
    /// overlapped (16 bytes a run, one copy).
    runs: super::pause_index::PauseIndex,
    max_runs: usize,
}

/// Pauses kept for overlap questions (24 bytes each).
pub const MAX_RUNS: usize = 1 << 20;

impl PauseTracker {
    pub fn new(link_speed_bps: u64, storm_ns: u64) -> PauseTracker {
        PauseTracker {
            link_speed_bps: link_speed_bps.max(1),
            storm_ns,
            prios: Default::default(),
            storms: Vec::new(),
            runs: Default::default(),
            max_runs: MAX_RUNS,
        }
    }

    /// A tracker that keeps no pauses for overlap questions (the live agent's: it asks for
    /// the pause time and the storms alone, and runs for as long as the agent does).
    pub fn without_runs(mut self) -> PauseTracker {
        self.max_runs = 0;
        self
    }

    /// Wall time priority `p` was paused up to `now_ns`, nanoseconds: the closed pauses and
    /// the one under way (up to its timer, or to now).
    pub fn paused_ns_to(&self, p: usize, now_ns: u64) -> u64 {
        let Some(pr) = self.prios.get(p) else {
            return 0;
        };
        let open = pr.open.map_or(0, |(start, until, _, _)| {
            until.min(now_ns).saturating_sub(start)
        });
        pr.paused_ns + open
    }

    /// Closes the pauses whose timers ran out by `now_ns` (the live agent, at each poll: a
    /// storm that ended between two polls is told at the next).
    pub fn close_ended(&mut self, now_ns: u64) {
        for p in 0..PRIORITIES {
            self.close(p, now_ns);
        }
    }

    /// The pauses under way at `now_ns` that are storms already (paused without a break for
    /// longer than the threshold so far), as runs ending now: a live storm is told while it
    /// lasts, not only once it ended.
    pub fn running_storms(&self, now_ns: u64) -> Vec<PauseRun> {
        self.prios
            .iter()
            .enumerate()
            .filter_map(|(p, pr)| {
                let (start, until, n, mac) = pr.open?;
                (until > now_ns && now_ns.saturating_sub(start) > self.storm_ns).then(|| PauseRun {
                    priority: p as u8,
                    start_ns: start,
                    end_ns: now_ns,
                    xoff_frames: n,
                    mac: mac_string(mac),
                })
            })
            .collect()
    }

    /// A span the counters show paused throughout (a poll interval the NIC's pause counter
    /// or the pause quanta fill): one pause over it, so that back-to-back spans are one
    /// pause and a storm is found by the same rule as from the frames.
    pub fn paused_span(&mut self, p: usize, start_ns: u64, end_ns: u64) {
        if p < PRIORITIES && end_ns > start_ns {
            // One nanosecond past the span: the next span, starting where this one ends,
            // finds the pause still under way.
            self.pause(p, start_ns, end_ns - start_ns + 1, [0; 6]);
        }
    }

    /// The storm threshold from now on (a reloaded setting).
    pub fn set_storm_ns(&mut self, storm_ns: u64) {
        self.storm_ns = storm_ns;
    }

    /// The pause time of `quanta` at the link's speed, in nanoseconds.
    fn quanta_ns(&self, quanta: u16) -> u64 {
        (u128::from(quanta) * u128::from(QUANTUM_BITS) * 1_000_000_000
            / u128::from(self.link_speed_bps)) as u64
    }

    /// A MAC control frame from `mac` at `ts_ns`.
    pub fn frame(&mut self, ts_ns: u64, m: &MacControl, mac: [u8; 6]) {
        let times: [Option<u16>; PRIORITIES] = match m.opcode {
            OPCODE_PFC => {
                std::array::from_fn(|p| (m.class_enable & (1 << p) != 0).then_some(m.times[p]))
            }
            // PAUSE stops every priority.
            OPCODE_PAUSE => [Some(m.times[0]); PRIORITIES],
            _ => return,
        };
        for (p, t) in times.into_iter().enumerate() {
            if let Some(q) = t {
                let d = self.quanta_ns(q);
                self.pause(p, ts_ns, d, mac);
            }
        }
    }

    /// Priority `p` told to pause `d` ns from `ts` (0: resume).
    fn pause(&mut self, p: usize, ts: u64, d: u64, mac: [u8; 6]) {
        let running = self.prios[p].open.filter(|(_, until, _, _)| ts < *until);
        if running.is_none() {
            self.close(p, ts);
        }
        let until = ts.saturating_add(d);
        let pr = &mut self.prios[p];
        match (&mut pr.open, d) {
            // XON (or a zero time) ends a pause at once.
            (Some((_, u, _, _)), 0) => *u = ts.min(*u),
            (None, 0) => {}
            // The timer is reloaded: the pause now ends `d` after this frame.
            (Some((_, u, n, _)), _) => {
                *u = until;
                *n += 1;
            }
            (None, _) => pr.open = Some((ts, until, 1, mac)),
        }
    }

    /// Closes priority `p`'s pause if it ended by `now`.
    fn close(&mut self, p: usize, now: u64) {
        let Some((start, until, n, mac)) = self.prios[p].open else {
            return;
        };
        if now < until {
            return;
        }
        self.prios[p].open = None;
        self.account(p, start, until, n, mac);
    }

    fn account(&mut self, p: usize, start: u64, end: u64, n: u64, mac: [u8; 6]) {
        if self.runs.len() < self.max_runs {
            self.runs.push(p as u8, start, end);
        }
        let len = end.saturating_sub(start);
        let storm = len > self.storm_ns;
        let pr = &mut self.prios[p];
        pr.paused_ns += len;
        let longest = pr
            .longest
            .as_ref()
            .is_none_or(|l| len > l.end_ns.saturating_sub(l.start_ns));
        if !longest && !storm {
            // The common run: no record built (its MAC's text is an allocation).
            return;
        }
        let run = PauseRun {
            priority: p as u8,
            start_ns: start,
            end_ns: end,
            xoff_frames: n,
            mac: mac_string(mac),
        };
        if longest {
            pr.longest = Some(run.clone());
        }
        if storm {
            self.storms.push(run);
        }
    }

    /// Closes every pause: the capture ended at `end_ns` (a pause running past the end counts
    /// up to its timer, as the link stayed paused).
    pub fn finish(&mut self) {
        for p in 0..PRIORITIES {
            if let Some((start, until, n, mac)) = self.prios[p].open.take() {
                self.account(p, start, until, n, mac);
            }
        }
        self.storms.sort_by_key(|s| (s.start_ns, s.priority));
    }

    /// Wall time priority `p` was paused (closed pauses), seconds.
    pub fn paused_seconds(&self, p: usize) -> f64 {
        self.prios.get(p).map_or(0.0, |x| x.paused_ns as f64 / 1e9)
    }

    /// The pauses indexed for overlap questions (a slow step's pause time).
    pub fn index(&self) -> &super::pause_index::PauseIndex {
        &self.runs
    }

    /// For each of `n` buckets of `width_ns` from `start_ns`: whether a priority of `mask`
    /// (bit p: priority p) was paused for at least half of it. The training steps read this:
    /// a silence under a pause is the network holding the job, not the end of a step.
    pub fn paused_buckets(&self, mask: u8, start_ns: u64, width_ns: u64, n: usize) -> Vec<bool> {
        let w = width_ns.max(1);
        let mut ns = vec![0u64; n];
        let end_all = start_ns.saturating_add(w.saturating_mul(n as u64));
        for (p, s, e) in self.runs.runs() {
            if mask & (1 << p) == 0 {
                continue;
            }
            let (s, e) = (s.max(start_ns), e.min(end_all));
            let mut i = if e > s {
                ((s - start_ns) / w) as usize
            } else {
                n
            };
            while i < n {
                let lo = start_ns + i as u64 * w;
                let (a, b) = (s.max(lo), e.min(lo + w));
                if b <= a {
                    break;
                }
                ns[i] += b - a;
                i += 1;
            }
        }
        ns.into_iter().map(|x| x * 2 >= w).collect()
    }

    /// The share of each of `n` buckets of `width_ns` from `start_ns` that each priority was
    /// paused (0 to 1): one pass over the pauses, each spread over the buckets it covers.
    pub fn series(&self, start_ns: u64, width_ns: u64, n: usize) -> Vec<[f64; PRIORITIES]> {
        let mut out = vec![[0.0; PRIORITIES]; n];
        let w = width_ns.max(1);
        let end_all = start_ns.saturating_add(w.saturating_mul(n as u64));
        for (p, s, e) in self.runs.runs() {
            let (s, e) = (s.max(start_ns), e.min(end_all));
            if e <= s {
                continue;
            }
            let mut i = ((s - start_ns) / w) as usize;
            while i < n {
                let lo = start_ns + i as u64 * w;
                let hi = lo + w;
                let ov = e.min(hi).saturating_sub(s.max(lo));
                out[i][usize::from(p)] += ov as f64 / w as f64;
                if e <= hi {
                    break;
                }
                i += 1;
            }
        }
        out
    }

    /// The longest continuous pause of priority `p`.
    pub fn longest(&self, p: usize) -> Option<&PauseRun> {
        self.prios.get(p)?.longest.as_ref()
    }
}

pub fn mac_string(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    /// 100 Gb/s: one quantum is 5.12 ns; 0xFFFF quanta 335.5 us.
    const G100: u64 = 100_000_000_000;

    fn pfc(prio: usize, quanta: u16) -> MacControl {
        let mut times = [0; PRIORITIES];
        times[prio] = quanta;
        MacControl {
            opcode: OPCODE_PFC,
            class_enable: 1 << prio,
            times,
        }
    }

    /// XOFFs of 0xFFFF quanta refreshed every 200 us for 100 ms: paused from the first to
    /// 335.5 us after the last, not 500 x 335.5 us.
    #[test]
    fn refreshed_xoffs_count_their_union_not_their_sum() {
        let mut t = PauseTracker::new(G100, DEFAULT_STORM_NS);
        let q = 0xFFFF;
        let d = (u64::from(q) * 512 * 1_000_000_000) / G100;
        for k in 0..500u64 {
            t.frame(k * 200_000, &pfc(3, q), MAC);
        }
        t.finish();
        let want = 499 * 200_000 + d;
        assert_eq!((t.paused_seconds(3) * 1e9).round() as u64, want);
        let sum = 500 * d;
        assert!(sum as f64 / want as f64 > 1.6, "the sum overstated it");
        assert_eq!(t.paused_seconds(2), 0.0);
    }

    #[test]
    fn an_xon_ends_the_pause() {
        let mut t = PauseTracker::new(G100, DEFAULT_STORM_NS);
        t.frame(1_000, &pfc(3, 0xFFFF), MAC);
        t.frame(11_000, &pfc(3, 0), MAC);
        t.finish();
        assert_eq!((t.paused_seconds(3) * 1e9).round() as u64, 10_000);
    }

    #[test]
    fn pauses_apart_add_up() {
        let mut t = PauseTracker::new(G100, DEFAULT_STORM_NS);
        // 1000 quanta at 100G: 5,120 ns each.
        t.frame(0, &pfc(1, 1000), MAC);
        t.frame(1_000_000, &pfc(1, 1000), MAC);
        t.finish();
        assert_eq!((t.paused_seconds(1) * 1e9).round() as u64, 2 * 5_120);
    }

    #[test]
    fn a_pause_refreshed_past_the_threshold_is_a_storm_with_its_mac() {
        let mut t = PauseTracker::new(G100, DEFAULT_STORM_NS);
        for k in 0..1_500u64 {
            t.frame(k * 200_000, &pfc(3, 0xFFFF), MAC);
        }
        t.finish();
        assert_eq!(t.storms.len(), 1);
        let s = &t.storms[0];
        assert_eq!((s.priority, s.xoff_frames), (3, 1_500));
        assert_eq!(s.mac, "02:00:00:00:00:01");
        assert!(s.seconds() > 0.29 && s.seconds() < 0.31, "{}", s.seconds());
    }

    #[test]
    fn the_series_spreads_each_pause_over_its_buckets() {
        let mut t = PauseTracker::new(G100, DEFAULT_STORM_NS);
        // 1000 quanta = 5,120 ns: from 2,000 to 7,120 over buckets of 4,000 ns.
        t.frame(2_000, &pfc(2, 1000), MAC);
        t.finish();
        let s = t.series(0, 4_000, 3);
        assert!((s[0][2] - 0.5).abs() < 1e-12, "{s:?}");
        assert!((s[1][2] - 3_120.0 / 4_000.0).abs() < 1e-12, "{s:?}");
        assert_eq!(s[2][2], 0.0);
        assert_eq!(s[0][3], 0.0);
    }

    #[test]
    fn short_pauses_are_no_storm() {
        let mut t = PauseTracker::new(G100, DEFAULT_STORM_NS);
        for k in 0..100u64 {
            // 1 ms apart: each 335 us pause ends before the next.
            t.frame(k * 1_000_000, &pfc(3, 0xFFFF), MAC);
        }
        t.finish();
        assert!(t.storms.is_empty());
        assert!(t.longest(3).unwrap().seconds() < 0.001);
    }

    #[test]
    fn an_8023x_pause_stops_every_priority() {
        let mut t = PauseTracker::new(G100, DEFAULT_STORM_NS);
        let m = MacControl {
            opcode: OPCODE_PAUSE,
            class_enable: 1,
            times: [1000, 0, 0, 0, 0, 0, 0, 0],
        };
        t.frame(0, &m, MAC);
        t.finish();
        for p in 0..PRIORITIES {
            assert_eq!(
                (t.paused_seconds(p) * 1e9).round() as u64,
                5_120,
                "priority {p}"
            );
        }
    }

    /// Poll intervals paused throughout, back to back, are one pause: a storm once it is
    /// longer than the threshold (under way, then ended), not one pause per interval.
    #[test]
    fn counted_spans_back_to_back_are_one_pause() {
        const S: u64 = 1_000_000_000;
        let mut t = PauseTracker::new(1, S / 5).without_runs();
        t.paused_span(3, 0, S);
        t.close_ended(S);
        assert_eq!(t.running_storms(S).len(), 1, "1 s paused > 200 ms");
        t.paused_span(3, S, 2 * S);
        t.close_ended(2 * S);
        let running = t.running_storms(2 * S);
        assert_eq!((running[0].start_ns, running[0].end_ns), (0, 2 * S));
        assert!(t.storms.is_empty(), "still under way");
        t.close_ended(3 * S);
        assert_eq!(t.storms.len(), 1);
        assert_eq!(t.storms[0].start_ns, 0);
        assert!(t.running_storms(3 * S).is_empty());
    }

    /// A pause under way but shorter than the threshold is no storm yet.
    #[test]
    fn a_short_pause_under_way_is_no_storm() {
        let mut t = PauseTracker::new(1, 200_000_000).without_runs();
        t.paused_span(1, 0, 100_000_000);
        assert!(t.running_storms(100_000_000).is_empty());
    }
}

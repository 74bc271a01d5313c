//! The live pause time: the kernel's PFC and PAUSE frames (the pause ring) through the same
//! tracker `analyze` runs over a capture ([`super::pause::PauseTracker`]), so a priority's
//! pause time is the union of its pause intervals, live as offline. Where the ring could not
//! hold all of a poll's frames it lost the oldest. The span before the first frame it kept is
//! then estimated: the pause the lost frames asked for (the counters' quanta less the kept
//! frames'), scaled by how much of what the kept frames asked they really paused (their
//! union against their quanta), at most the span. A sender that sends more bursts of XOFFs
//! than the ring holds is judged by the bursts it kept, not by their quanta's sum.

use super::pause::{PauseRun, PauseTracker};
use agent_common::headers::mac_control::{quanta_seconds, PRIORITIES};
use agent_common::pause_ring::PauseEvent;

/// One interface's pause time, from poll to poll.
#[derive(Debug, Default)]
pub struct LivePause {
    /// The tracker and the link speed it converts quanta at (a new speed starts a new one).
    tracker: Option<(u64, PauseTracker)>,
    /// Pause time per priority of the trackers before the present one, and of lossy polls.
    base_ns: [u64; PRIORITIES],
    /// The quanta counted up to the last poll (the bound of a lossy poll).
    last_quanta: Option<[u64; PRIORITIES]>,
    /// Frames the ring lost, since the agent started.
    pub lost_total: u64,
    /// When the ring was last read (kernel monotonic ns).
    last_now_ns: Option<u64>,
}

/// PFC XOFF quanta per priority of `events` (what the counters' `pfc_quanta` count).
fn pfc_quanta(events: &[PauseEvent]) -> [u64; PRIORITIES] {
    let mut q = [0u64; PRIORITIES];
    for e in events.iter().filter(|e| e.opcode == OPCODE_PFC) {
        for (p, sum) in q.iter_mut().enumerate() {
            if e.class_enable & (1 << p) != 0 {
                *sum += u64::from(e.times[p]);
            }
        }
    }
    q
}

/// PFC's MAC control opcode.
const OPCODE_PFC: u16 = 0x0101;

/// What one poll hands to [`LivePause::poll`].
#[derive(Clone, Copy, Debug)]
pub struct PausePoll<'a> {
    pub events: &'a [PauseEvent],
    /// Frames the ring overwrote before the read.
    pub lost: u64,
    /// The PFC quanta the counter blocks hold per priority (cumulative).
    pub quanta: [u64; PRIORITIES],
    /// The link's speed, bits/s (0: unknown: no pause time).
    pub speed: u64,
    /// When the ring was read (kernel monotonic ns) and how long since the last poll.
    pub now_ns: u64,
    pub dt_ns: u64,
    /// The storm threshold, ns.
    pub storm_ns: u64,
}

impl LivePause {
    /// Takes one poll's frames; returns each priority's pause time so far (cumulative, ns),
    /// or None while the link's speed is unknown.
    pub fn poll(&mut self, p: &PausePoll<'_>) -> Option<[u64; PRIORITIES]> {
        let last_quanta = self.last_quanta.replace(p.quanta);
        let last_now = self.last_now_ns.replace(p.now_ns);
        if p.speed == 0 {
            return None;
        }
        if self.tracker.as_ref().is_some_and(|(s, _)| *s != p.speed) {
            // The link came back at another speed: what was paused stands.
            if let Some((_, t)) = self.tracker.take() {
                for (prio, b) in self.base_ns.iter_mut().enumerate() {
                    *b += t.paused_ns_to(prio, p.now_ns);
                }
            }
        }
        let (_, t) = self.tracker.get_or_insert_with(|| {
            (
                p.speed,
                PauseTracker::new(p.speed, p.storm_ns).without_runs(),
            )
        });
        t.set_storm_ns(p.storm_ns);
        let before: [u64; PRIORITIES] = std::array::from_fn(|q| t.paused_ns_to(q, p.now_ns));
        for e in p.events {
            t.frame(e.ts_ns, &e.mac_control(), [0; 6]);
        }
        t.close_ended(p.now_ns);
        if p.lost > 0 {
            self.lost_total += p.lost;
            // The oldest frames are missing: the span before the first kept one is paused,
            // estimated, as the kept frames paused against what they asked, at most the span.
            let first = p.events.first().map_or(p.now_ns, |e| e.ts_ns);
            let since = last_now.unwrap_or_else(|| p.now_ns.saturating_sub(p.dt_ns));
            let span = first.saturating_sub(since);
            let kept = pfc_quanta(p.events);
            for (q, b) in self.base_ns.iter_mut().enumerate() {
                let asked = last_quanta.map_or(0, |l| p.quanta[q].saturating_sub(l[q]));
                let lost_ns = quanta_seconds(asked.saturating_sub(kept[q]), p.speed) * 1e9;
                let kept_ns = quanta_seconds(kept[q], p.speed) * 1e9;
                let union = t.paused_ns_to(q, p.now_ns).saturating_sub(before[q]) as f64;
                let ratio = if kept_ns > 0.0 {
                    (union / kept_ns).min(1.0)
                } else {
                    1.0
                };
                *b += ((lost_ns * ratio) as u64).min(span);
            }
        }
        Some(std::array::from_fn(|q| {
            self.base_ns[q] + t.paused_ns_to(q, p.now_ns)
        }))
    }
}

impl LivePause {
    /// The storms the frames showed since the last call: those that ended (each told once)
    /// and those under way (told at every poll while they last), in kernel monotonic ns.
    pub fn storms(&mut self) -> Vec<PauseRun> {
        let Some(now) = self.last_now_ns else {
            return Vec::new();
        };
        let Some((_, t)) = self.tracker.as_mut() else {
            return Vec::new();
        };
        let mut out = std::mem::take(&mut t.storms);
        out.extend(t.running_storms(now));
        out
    }

    /// When the ring was last read (kernel monotonic ns).
    pub fn read_at_ns(&self) -> Option<u64> {
        self.last_now_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBPS: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    /// An XOFF of the whole 65,535 quanta for priority 3 at `ts` (33.55 ms at 1 Gb/s).
    fn xoff(ts: u64) -> PauseEvent {
        let mut times = [0; PRIORITIES];
        times[3] = 65_535;
        PauseEvent {
            ts_ns: ts,
            opcode: 0x0101,
            class_enable: 1 << 3,
            times,
            pad: 0,
        }
    }

    fn poll(l: &mut LivePause, events: &[PauseEvent], lost: u64, quanta: u64, now_ns: u64) -> u64 {
        let mut q = [0; PRIORITIES];
        q[3] = quanta;
        l.poll(&PausePoll {
            events,
            lost,
            quanta: q,
            speed: GBPS,
            now_ns,
            dt_ns: 1_000 * MS,
            storm_ns: 200 * MS,
        })
        .unwrap()[3]
    }

    /// Ten back-to-back XOFFs every 335 ms: their quanta sum to the whole time, the link
    /// was paused a tenth of it.
    #[test]
    fn back_to_back_xoffs_pause_for_their_union_not_their_sum() {
        let mut l = LivePause::default();
        let events: Vec<PauseEvent> = (0..3u64)
            .flat_map(|burst| (0..10u64).map(move |i| xoff(burst * 335 * MS + i * 1_000)))
            .collect();
        poll(&mut l, &[], 0, 0, 0);
        let paused = poll(&mut l, &events, 0, 30 * 65_535, 1_005 * MS);
        let want = 3 * (33_553_920 + 9_000);
        assert!(paused.abs_diff(want) < 10_000, "{paused} ns, want {want}");
    }

    /// A pause under way at the poll counts up to now, and on at the next.
    #[test]
    fn a_pause_under_way_counts_up_to_now() {
        let mut l = LivePause::default();
        poll(&mut l, &[], 0, 0, 0);
        assert_eq!(
            poll(&mut l, &[xoff(100 * MS)], 0, 65_535, 110 * MS),
            10 * MS
        );
        assert_eq!(poll(&mut l, &[], 0, 65_535, 200 * MS), 33_553_920);
    }

    /// Lost frames: the span before the first kept frame counts as paused for what the lost
    /// ones asked (scaled as the kept ones paused against what they asked), at most the
    /// span; the kept frames count by their union.
    #[test]
    fn a_poll_that_lost_frames_bounds_the_span_they_came_in() {
        let mut l = LivePause::default();
        poll(&mut l, &[], 0, 0, 0);
        let paused = poll(&mut l, &[xoff(5 * MS)], 40, 41 * 65_535, 1_000 * MS);
        assert_eq!(
            paused,
            5 * MS + 33_553_920,
            "40 XOFFs ask for more than 5 ms"
        );
        assert_eq!(l.lost_total, 40);
        let mut l = LivePause::default();
        poll(&mut l, &[], 0, 0, 0);
        let paused = poll(&mut l, &[xoff(500 * MS)], 1, 2 * 65_535, 1_000 * MS);
        assert_eq!(paused, 2 * 33_553_920, "one lost XOFF asked for 33.55 ms");
    }

    /// More back-to-back bursts than the ring holds: still no more than the span of the
    /// lost ones plus the union of the kept ones, far from a storm.
    #[test]
    fn bursts_past_the_ring_are_no_storm() {
        let mut l = LivePause::default();
        poll(&mut l, &[], 0, 0, 0);
        // Ten XOFFs every 335.5 ms over 10 s; the ring kept the last 3 bursts.
        let kept: Vec<PauseEvent> = (27..30u64)
            .flat_map(|b| (0..10u64).map(move |i| xoff(b * 335_500_000 + i * 1_000)))
            .collect();
        let paused = poll(&mut l, &kept, 270, 300 * 65_535, 10_000 * MS);
        // The lost 27 bursts asked for 9.06 s, the kept ones paused a tenth of what they
        // asked: about 1 s in all, where the quanta's sum says the whole 10 s.
        assert!(paused > 900 * MS && paused < 1_100 * MS, "{paused} ns");
    }

    #[test]
    fn an_unknown_speed_gives_no_pause_time() {
        let mut l = LivePause::default();
        let p = PausePoll {
            events: &[],
            lost: 0,
            quanta: [0; PRIORITIES],
            speed: 0,
            now_ns: 0,
            dt_ns: 0,
            storm_ns: 200 * MS,
        };
        assert_eq!(l.poll(&p), None);
    }
}

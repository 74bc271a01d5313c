//! The live pause time: the kernel's PFC and PAUSE frames (the pause ring) through the same
//! tracker `analyze` runs over a capture ([`super::pause::PauseTracker`]), so a priority's
//! pause time is the union of its pause intervals, live as offline. A poll whose frames the
//! ring could not all hold takes the quanta's bound for that poll (the sum of the quanta the
//! frames asked for, at most the poll's length), said by the lost frames' count.

use super::pause::{PauseTracker, DEFAULT_STORM_NS};
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
}

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
}

impl LivePause {
    /// Takes one poll's frames; returns each priority's pause time so far (cumulative, ns),
    /// or None while the link's speed is unknown.
    pub fn poll(&mut self, p: &PausePoll<'_>) -> Option<[u64; PRIORITIES]> {
        let last_quanta = self.last_quanta.replace(p.quanta);
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
                PauseTracker::new(p.speed, DEFAULT_STORM_NS).without_runs(),
            )
        });
        let before: [u64; PRIORITIES] = std::array::from_fn(|q| t.paused_ns_to(q, p.now_ns));
        for e in p.events {
            t.frame(e.ts_ns, &e.mac_control(), [0; 6]);
        }
        t.close_ended(p.now_ns);
        t.storms.clear();
        if p.lost > 0 {
            self.lost_total += p.lost;
            // Frames are missing: this poll's union is not known. The quanta's bound stands
            // in for it (at most the poll's length), the tracker's own figure is set aside.
            for (q, b) in self.base_ns.iter_mut().enumerate() {
                let asked = last_quanta.map_or(0, |l| p.quanta[q].saturating_sub(l[q]));
                let bound = ((quanta_seconds(asked, p.speed) * 1e9) as u64).min(p.dt_ns);
                let union = t.paused_ns_to(q, p.now_ns).saturating_sub(before[q]);
                *b = (*b + bound).saturating_sub(union);
            }
        }
        Some(std::array::from_fn(|q| {
            self.base_ns[q] + t.paused_ns_to(q, p.now_ns)
        }))
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

    /// Lost frames: the poll's pause time is the quanta's bound, at most the poll.
    #[test]
    fn a_poll_that_lost_frames_takes_the_quanta_bound() {
        let mut l = LivePause::default();
        poll(&mut l, &[], 0, 0, 0);
        let paused = poll(&mut l, &[xoff(5 * MS)], 40, 41 * 65_535, 1_000 * MS);
        assert_eq!(paused, 1_000 * MS, "41 XOFFs ask for more than the poll");
        assert_eq!(l.lost_total, 40);
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
        };
        assert_eq!(l.poll(&p), None);
    }
}

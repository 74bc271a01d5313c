//! Lost-datagram accounting per sFlow agent, as collectors do it: a datagram's sequence number
//! is compared with the highest seen; the ones skipped are *missing* while they may still
//! arrive (a window of [`WINDOW`] sequence numbers for reordering), and *lost* once they fall
//! out of it. A restart (the agent's uptime going back while its sequence does not continue)
//! starts the count again, and a jump larger than the datagrams the elapsed uptime could hold
//! is a discontinuity, not a loss: without both, one switch reboot after its sequence passed
//! 2^31 read as 1.3 billion lost datagrams, and plain reordering (1, 2, 4, 3) as loss.

use serde::Serialize;

/// Sequence numbers behind the highest seen that may still arrive late.
pub const WINDOW: u32 = 64;

/// The most datagrams per millisecond of uptime an agent is believed to send (100,000 per
/// second: far above what switches export). A forward jump beyond what the elapsed uptime
/// holds at this rate is a discontinuity (a reset sequence, a second agent with the same
/// address), counted as such, never as loss.
pub const MAX_DATAGRAMS_PER_MS: u64 = 100;

/// The uptime any forward jump is allowed at least (agents that send no uptime say 0).
const MIN_ELAPSED_MS: u64 = 1_000;

/// One agent's (address, sub-agent) datagrams and sequence state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SequenceState {
    pub datagrams: u64,
    /// Missing datagrams that fell out of the reordering window: lost on the way.
    pub lost: u64,
    /// Datagrams that arrived after a later one (and were not counted lost).
    pub reordered: u64,
    /// Datagrams whose sequence number was seen before (or too late to place).
    pub duplicates: u64,
    /// Restarts of the agent (its uptime went back): the sequence starts again.
    pub restarts: u64,
    /// Jumps larger than the elapsed uptime could hold: the count starts again there.
    pub discontinuities: u64,
    #[serde(skip)]
    last: Option<(u32, u32)>,
    /// Bit i: sequence `last - 1 - i` has not arrived yet.
    #[serde(skip)]
    missing: u64,
}

impl SequenceState {
    /// One datagram with `sequence` sent at the agent's `uptime_ms`.
    pub fn datagram(&mut self, sequence: u32, uptime_ms: u32) {
        self.datagrams += 1;
        let Some((last, last_uptime)) = self.last else {
            self.last = Some((sequence, uptime_ms));
            return;
        };
        let ahead = sequence.wrapping_sub(last);
        let forward = ahead != 0 && ahead < 1 << 31;
        let continues = forward && ahead <= WINDOW;
        if uptime_ms < last_uptime && !continues {
            // The agent restarted (an uptime that wraps after 49.7 days continues its
            // sequence instead): what was missing is not counted lost, nothing more arrives.
            self.restarts += 1;
            self.restart_at(sequence, uptime_ms);
            return;
        }
        if forward {
            let elapsed = u64::from(uptime_ms.wrapping_sub(last_uptime)).max(MIN_ELAPSED_MS);
            let plausible = elapsed.saturating_mul(MAX_DATAGRAMS_PER_MS) + u64::from(WINDOW);
            if u64::from(ahead - 1) > plausible {
                self.discontinuities += 1;
                self.restart_at(sequence, uptime_ms);
                return;
            }
            self.advance(ahead);
            self.last = Some((sequence, uptime_ms));
            return;
        }
        if ahead == 0 {
            self.duplicates += 1;
            return;
        }
        // Behind the highest seen: a late datagram if its place is still open.
        let behind = last.wrapping_sub(sequence);
        let bit = behind - 1;
        if bit < WINDOW && self.missing & (1 << bit) != 0 {
            self.missing &= !(1 << bit);
            self.reordered += 1;
        } else {
            self.duplicates += 1;
        }
    }

    fn restart_at(&mut self, sequence: u32, uptime_ms: u32) {
        self.missing = 0;
        self.last = Some((sequence, uptime_ms));
    }

    /// The highest sequence moves `ahead` (at least 1) forward: the `ahead - 1` between are
    /// missing; what leaves the window still missing is lost.
    fn advance(&mut self, ahead: u32) {
        let new_missing = u64::from(ahead - 1);
        if ahead >= WINDOW {
            self.lost += u64::from(self.missing.count_ones());
            self.lost += new_missing.saturating_sub(u64::from(WINDOW));
            self.missing = low_bits(new_missing.min(u64::from(WINDOW)) as u32);
        } else {
            self.lost += u64::from((self.missing >> (WINDOW - ahead)).count_ones());
            self.missing = (self.missing << ahead) | low_bits(ahead - 1);
        }
    }

    /// Datagrams missing now that may still arrive.
    pub fn missing(&self) -> u64 {
        u64::from(self.missing.count_ones())
    }

    /// Lost as far as is known: the lost ones and those still missing (what a capture that
    /// ends here lost).
    pub fn lost_so_far(&self) -> u64 {
        self.lost + self.missing()
    }
}

/// A word with the `n` (at most 64) lowest bits set.
fn low_bits(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state after datagrams `(sequence, uptime_ms)`.
    fn after(seq: &[(u32, u32)]) -> SequenceState {
        let mut s = SequenceState::default();
        for &(n, t) in seq {
            s.datagram(n, t);
        }
        s
    }

    /// Sequences at 10 ms apart.
    fn timed(seq: &[u32]) -> Vec<(u32, u32)> {
        seq.iter()
            .enumerate()
            .map(|(i, &n)| (n, 1_000 + 10 * i as u32))
            .collect()
    }

    #[test]
    fn an_unbroken_sequence_loses_nothing() {
        let s = after(&timed(&(1..=500).collect::<Vec<_>>()));
        assert_eq!((s.datagrams, s.lost_so_far(), s.reordered), (500, 0, 0));
    }

    #[test]
    fn reordering_is_not_loss() {
        let s = after(&timed(&[1, 2, 4, 3, 5, 6, 8, 7, 9]));
        assert_eq!(s.lost_so_far(), 0, "{s:?}");
        assert_eq!(s.reordered, 2);
        assert_eq!(s.datagrams, 9);
    }

    #[test]
    fn a_gap_is_missing_then_lost_once_it_leaves_the_window() {
        let mut seq = vec![1, 2, 5];
        let s = after(&timed(&seq));
        assert_eq!((s.lost, s.missing(), s.lost_so_far()), (0, 2, 2));
        seq.extend(6..=5 + WINDOW);
        let s = after(&timed(&seq));
        assert_eq!((s.lost, s.missing(), s.lost_so_far()), (2, 0, 2));
    }

    #[test]
    fn a_late_datagram_beyond_the_window_is_not_taken_back_from_the_lost() {
        let mut seq: Vec<u32> = vec![1, 3];
        seq.extend(4..=3 + WINDOW + 5);
        seq.push(2);
        let s = after(&timed(&seq));
        assert_eq!((s.lost, s.reordered, s.duplicates), (1, 0, 1));
    }

    #[test]
    fn a_gap_wider_than_the_window_counts_every_datagram_once() {
        let s = after(&timed(&[1, 1_002, 1_003]));
        assert_eq!(s.lost_so_far(), 1_000);
        let mut seq = vec![1, 1_002];
        seq.extend(1_003..1_003 + WINDOW);
        let s = after(&timed(&seq));
        assert_eq!((s.lost, s.missing()), (1_000, 0));
    }

    #[test]
    fn a_duplicate_is_counted_as_such() {
        let s = after(&timed(&[1, 2, 2, 3, 1]));
        assert_eq!((s.duplicates, s.lost_so_far()), (2, 0));
    }

    /// The reboot of the issue: the sequence had passed 2^31 (3,000,000,001), the switch
    /// restarts (uptime 4e9 ms -> 500 ms) and counts from 1 again.
    #[test]
    fn a_restart_after_the_sequence_passed_2_pow_31_loses_nothing() {
        let s = after(&[
            (3_000_000_000, 3_999_999_990),
            (3_000_000_001, 4_000_000_000),
            (1, 500),
            (2, 510),
        ]);
        assert_eq!(
            (s.lost_so_far(), s.restarts, s.datagrams),
            (0, 1, 4),
            "{s:?}"
        );
    }

    #[test]
    fn a_restart_forgets_what_was_missing_before_it() {
        let s = after(&[(10, 50_000), (13, 50_020), (1, 100), (2, 110)]);
        assert_eq!((s.lost_so_far(), s.restarts), (0, 1), "{s:?}");
    }

    /// Uptime is a 32-bit count of milliseconds: it wraps after 49.7 days while the sequence
    /// goes on. That is no restart.
    #[test]
    fn an_uptime_that_wraps_is_no_restart() {
        let s = after(&[(100, u32::MAX - 5), (101, 4), (103, 15)]);
        assert_eq!((s.restarts, s.lost_so_far()), (0, 1), "{s:?}");
    }

    /// A jump of two billion in 10 ms of uptime is no loss: the agent's sequence started
    /// again (or another agent speaks with its address).
    #[test]
    fn a_jump_the_elapsed_time_cannot_hold_is_a_discontinuity() {
        let s = after(&[
            (5, 10_000),
            (2_000_000_005, 10_010),
            (2_000_000_006, 10_020),
        ]);
        assert_eq!((s.lost_so_far(), s.discontinuities), (0, 1), "{s:?}");
    }

    /// The bound is generous: 100,000 datagrams lost in two seconds is believed.
    #[test]
    fn a_large_loss_the_elapsed_time_can_hold_is_counted() {
        let s = after(&[(1, 10_000), (100_002, 12_000)]);
        assert_eq!((s.lost_so_far(), s.discontinuities), (100_000, 0), "{s:?}");
    }

    #[test]
    fn the_sequence_wrapping_at_2_pow_32_is_no_loss() {
        let s = after(&timed(&[u32::MAX - 1, u32::MAX, 0, 1]));
        assert_eq!((s.lost_so_far(), s.restarts, s.discontinuities), (0, 0, 0));
    }

    proptest::proptest! {
        /// Whatever the order of a stream with some datagrams dropped, the datagrams lost
        /// (once the window has passed them) are exactly the dropped ones, when every datagram
        /// arrives before the highest sequence seen has passed it by the window: swaps of at
        /// most 15 places and at most 10 drops keep every late one within 2 x (15 + 10) = 50.
        #[test]
        fn lost_equals_dropped_under_bounded_reordering(
            n in 100u32..400,
            drops in proptest::collection::btree_set(2u32..90, 0..10),
            swaps in proptest::collection::vec((1usize..300, 1usize..16), 0..40),
        ) {
            let mut order: Vec<u32> = (1..=n).filter(|s| !drops.contains(s)).collect();
            // Disjoint swaps, so that no datagram moves further than one swap takes it; the
            // first stays first (what came before it is unknown to any collector).
            let mut moved = std::collections::BTreeSet::new();
            for (at, by) in swaps {
                if at + by < order.len() && !moved.contains(&at) && !moved.contains(&(at + by)) {
                    order.swap(at, at + by);
                    moved.extend([at, at + by]);
                }
            }
            // The tail stays in order, so the window passes every drop.
            order.extend(n + 1..=n + WINDOW + 1);
            let s = after(&timed(&order));
            let dropped = drops.iter().filter(|&&d| d <= n).count() as u64;
            proptest::prop_assert_eq!(s.lost, dropped, "{:?}", s);
            proptest::prop_assert_eq!(s.lost_so_far(), dropped);
        }
    }
}

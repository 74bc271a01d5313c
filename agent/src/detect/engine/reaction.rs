//! The senders' answer to CNPs (DCQCN's reaction point), judged by one rule whatever the
//! source: a burst of CNPs is judged by the sender's rate over an interval after the burst's
//! first CNP against the interval before it. A capture's intervals are
//! [`crate::detect::cnp_response::REACTION_WINDOW_NS`] around each burst, packet by packet
//! (`cnp_response.rs`); live, the poll intervals around it (`live_reaction.rs`): each finds
//! its bursts and rates at its own resolution and hands them here.

/// A sender that keeps this share of its rate after a burst's first CNP ignored it (DCQCN's
/// first cut halves the rate; later ones cut by alpha/2).
pub const IGNORED_RATIO: f64 = 0.9;
/// Packets the interval before a burst needs for a judgement (a trickle has no rate to cut).
pub const MIN_BEFORE_PACKETS: u64 = 20;

/// A sender's judged bursts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reacted {
    pub bursts: u64,
    pub ignored: u64,
    /// The sum of the after/before rate ratios.
    pub ratio_sum: f64,
    /// The rate before the last burst judged, bytes per second.
    pub rate_before: f64,
    /// When the last burst was judged (the source's clock, seconds).
    pub at_s: f64,
}

impl Reacted {
    /// One burst at `at_s`: the sender's rate (bytes/s) and packets over the interval before
    /// its first CNP, and its rate over the interval after. A burst with too little traffic
    /// before it ([`MIN_BEFORE_PACKETS`]) says nothing and is not judged; a sender that kept
    /// [`IGNORED_RATIO`] of its rate ignored the CNPs. Returns whether it was judged.
    pub fn burst(&mut self, before: f64, before_packets: u64, after: f64, at_s: f64) -> bool {
        if before_packets < MIN_BEFORE_PACKETS || before <= 0.0 {
            return false;
        }
        let ratio = after / before;
        self.bursts += 1;
        self.ratio_sum += ratio;
        self.rate_before = before;
        self.at_s = at_s;
        if ratio >= IGNORED_RATIO {
            self.ignored += 1;
        }
        true
    }

    /// The mean after/before ratio over the bursts judged.
    pub fn mean_ratio(&self) -> Option<f64> {
        (self.bursts > 0).then(|| self.ratio_sum / self.bursts as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_that_keeps_its_rate_ignored_the_burst() {
        let mut r = Reacted::default();
        assert!(r.burst(1e6, 100, 0.95e6, 1.0));
        assert_eq!((r.bursts, r.ignored), (1, 1));
        assert_eq!(r.rate_before, 1e6);
    }

    #[test]
    fn a_sender_that_slows_down_answered() {
        let mut r = Reacted::default();
        assert!(r.burst(1e6, 100, 0.5e6, 1.0));
        assert_eq!((r.bursts, r.ignored), (1, 0));
        assert_eq!(r.mean_ratio(), Some(0.5));
    }

    #[test]
    fn too_few_packets_before_is_no_judgement() {
        let mut r = Reacted::default();
        assert!(!r.burst(1e6, MIN_BEFORE_PACKETS - 1, 1e6, 1.0));
        assert_eq!(r, Reacted::default());
    }
}

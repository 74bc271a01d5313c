//! The pause intervals of a capture indexed for overlap questions: per priority, the runs in
//! time order (a priority's pauses never overlap: a new one opens only after the last ended)
//! with prefix sums of their lengths, so that "how long was priority p paused within
//! `[from, to)`" is two binary searches, not a walk over every pause. Explaining thousands of
//! slow steps over a million pause runs stays linear in the capture.

use agent_common::headers::mac_control::PRIORITIES;

/// One priority's runs: their starts and the prefix sums of their lengths (16 bytes a run;
/// a run's end is its start and its length).
#[derive(Clone, Debug, Default)]
struct Runs {
    starts: Vec<u64>,
    /// `prefix[i]`: the runs before run `i`, summed; one longer than `starts`.
    prefix: Vec<u64>,
}

impl Runs {
    fn len(&self) -> usize {
        self.starts.len()
    }

    fn end(&self, i: usize) -> u64 {
        self.starts[i] + (self.prefix[i + 1] - self.prefix[i])
    }

    fn push(&mut self, s: u64, e: u64) {
        if self.prefix.is_empty() {
            self.prefix.push(0);
        }
        let last = self.prefix.last().copied().unwrap_or(0);
        self.starts.push(s);
        self.prefix.push(last + e.saturating_sub(s));
    }

    /// The first run that ends after `from` (ends rise with starts: runs never overlap).
    fn first_ending_after(&self, from: u64) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.end(mid) <= from {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn within(&self, from: u64, to: u64) -> u64 {
        if to <= from {
            return 0;
        }
        let i = self.first_ending_after(from);
        let j = self.starts.partition_point(|&s| s < to);
        if i >= j {
            return 0;
        }
        let mut ns = self.prefix[j] - self.prefix[i];
        ns -= from
            .saturating_sub(self.starts[i])
            .min(self.end(i) - self.starts[i]);
        ns -= self.end(j - 1).saturating_sub(to);
        ns
    }
}

/// Every priority's runs.
#[derive(Clone, Debug, Default)]
pub struct PauseIndex {
    prios: [Runs; PRIORITIES],
}

impl PauseIndex {
    /// The index of `runs` (priority, start, end), each priority's in time order.
    pub fn new(runs: &[(u8, u64, u64)]) -> PauseIndex {
        let mut ix = PauseIndex::default();
        for &(p, s, e) in runs {
            ix.push(p, s, e);
        }
        ix
    }

    /// Adds a run of priority `p`, after the priority's last.
    pub fn push(&mut self, p: u8, s: u64, e: u64) {
        if let Some(r) = self.prios.get_mut(usize::from(p)) {
            r.push(s, e);
        }
    }

    /// Runs held.
    pub fn len(&self) -> usize {
        self.prios.iter().map(Runs::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every run: (priority, start, end), priority by priority.
    pub fn runs(&self) -> impl Iterator<Item = (u8, u64, u64)> + '_ {
        self.prios
            .iter()
            .enumerate()
            .flat_map(|(p, r)| (0..r.len()).map(move |i| (p as u8, r.starts[i], r.end(i))))
    }

    /// The most time any one priority of `mask` (bit p: priority p) was paused within
    /// `[from_ns, to_ns)`, and which.
    pub fn paused_within(&self, mask: u8, from_ns: u64, to_ns: u64) -> (u64, Option<u8>) {
        let mut best = (0u64, None);
        for (p, r) in self.prios.iter().enumerate() {
            if mask & (1 << p) == 0 || r.starts.is_empty() {
                continue;
            }
            let ns = r.within(from_ns, to_ns);
            if ns > best.0 {
                best = (ns, Some(p as u8));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The walk the index replaces: every run, clipped to the window.
    fn naive(runs: &[(u8, u64, u64)], mask: u8, from: u64, to: u64) -> u64 {
        let mut per = [0u64; PRIORITIES];
        for &(p, s, e) in runs {
            if mask & (1 << p) == 0 {
                continue;
            }
            let (a, b) = (s.max(from), e.min(to));
            if b > a {
                per[usize::from(p)] += b - a;
            }
        }
        per.into_iter().max().unwrap_or(0)
    }

    #[test]
    fn a_window_inside_one_run_and_across_several() {
        let runs = [(3, 10, 20), (3, 30, 40), (3, 50, 60), (5, 0, 100)];
        let ix = PauseIndex::new(&runs);
        assert_eq!(ix.paused_within(1 << 3, 12, 18), (6, Some(3)));
        assert_eq!(ix.paused_within(1 << 3, 15, 55), (20, Some(3)));
        assert_eq!(ix.paused_within(1 << 3, 20, 30), (0, None));
        assert_eq!(ix.paused_within(1 << 3, 0, 1000), (30, Some(3)));
        assert_eq!(ix.paused_within(1 << 5 | 1 << 3, 0, 1000), (100, Some(5)));
    }

    proptest! {
        /// Equal to the walk over every run, for any runs and window.
        #[test]
        fn equals_the_walk(
            gaps in proptest::collection::vec((0u8..8, 0u64..50, 1u64..50), 0..60),
            from in 0u64..3000,
            len in 0u64..3000,
            mask in any::<u8>(),
        ) {
            // Per priority, runs in time order that never overlap.
            let mut at = [0u64; PRIORITIES];
            let runs: Vec<(u8, u64, u64)> = gaps
                .iter()
                .map(|&(p, gap, d)| {
                    let s = at[usize::from(p)] + gap;
                    at[usize::from(p)] = s + d;
                    (p, s, s + d)
                })
                .collect();
            let ix = PauseIndex::new(&runs);
            prop_assert_eq!(ix.paused_within(mask, from, from + len).0, naive(&runs, mask, from, from + len));
        }
    }
}

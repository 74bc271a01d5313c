//! A connection's CE -> CNP latencies, bounded: every latency while there are at most
//! [`KEPT`], then a uniform sample of [`KEPT`] of them (reservoir sampling, Vitter's
//! algorithm R, seeded: the same capture gives the same figures). A connection answered
//! for an hour (one CNP every 50 us is 72 million latencies, 576 MB) keeps 8 KiB, and its
//! quantiles are those of the sample; below [`KEPT`] they are exact.

/// Latencies kept per connection.
pub const KEPT: usize = 1024;

#[derive(Clone, Debug, Default)]
pub struct LatencySample {
    /// Latencies seen (kept or not).
    seen: u64,
    /// At most [`KEPT`]: all of them, or a uniform sample.
    kept: Vec<u64>,
    /// The sampler's state (xorshift64; 0 until the first draw).
    rng: u64,
}

impl LatencySample {
    pub fn push(&mut self, ns: u64) {
        self.seen += 1;
        if self.kept.len() < KEPT {
            self.kept.push(ns);
            return;
        }
        // Kept with probability KEPT / seen, in the place of a uniformly chosen one.
        let j = self.draw() % self.seen;
        if let Some(slot) = usize::try_from(j).ok().and_then(|j| self.kept.get_mut(j)) {
            *slot = ns;
        }
    }

    fn draw(&mut self) -> u64 {
        let mut x = if self.rng == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            self.rng
        };
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// The latencies kept.
    pub fn kept(&self) -> &[u64] {
        &self.kept
    }

    /// How many latencies each kept one stands for (1 until the sample is full).
    pub fn weight(&self) -> f64 {
        if self.kept.is_empty() {
            0.0
        } else {
            self.seen as f64 / self.kept.len() as f64
        }
    }

    /// The `q` quantile (seconds) of this connection's latencies.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        quantile(
            &mut self.kept.iter().map(|&v| (v, 1.0)).collect::<Vec<_>>(),
            q,
        )
    }
}

/// The `q` quantile (seconds) of weighted latencies (ns, weight). Unweighted (every weight 1:
/// no connection's sample was full) it is the exact quantile, the `ceil(q n)`-th smallest;
/// else the smallest latency whose running weight reaches `q` of the total.
pub fn quantile(v: &mut [(u64, f64)], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by_key(|&(ns, _)| ns);
    let at = if v.iter().all(|&(_, w)| w == 1.0) {
        ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1
    } else {
        let target = q * v.iter().map(|&(_, w)| w).sum::<f64>();
        let mut run = 0.0;
        v.iter()
            .position(|&(_, w)| {
                run += w;
                run >= target
            })
            .unwrap_or(v.len() - 1)
    };
    v.get(at).map(|&(ns, _)| ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact quantile of all latencies: the `ceil(q n)`-th smallest.
    fn exact(v: &[u64], q: f64) -> f64 {
        let mut v = v.to_vec();
        v.sort_unstable();
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        v[i] as f64 / 1e9
    }

    #[test]
    fn below_the_bound_every_latency_is_kept_and_the_quantiles_are_exact() {
        let mut s = LatencySample::default();
        let v: Vec<u64> = (0..KEPT as u64).map(|i| (i * 7919) % 1000 + 1).collect();
        for &x in &v {
            s.push(x);
        }
        assert_eq!(s.kept().len(), KEPT);
        for q in [0.01, 0.5, 0.99, 1.0] {
            assert_eq!(s.quantile(q), Some(exact(&v, q)), "q {q}");
        }
    }

    #[test]
    fn a_million_latencies_keep_the_bound() {
        let mut s = LatencySample::default();
        for i in 0..1_000_000u64 {
            s.push(i);
        }
        assert_eq!(s.kept().len(), KEPT);
        assert!((s.weight() - 1_000_000.0 / KEPT as f64).abs() < 1e-9);
    }

    /// The sample's quantiles stay near the whole's: a uniform sample of 1,024 of a million
    /// latencies spread evenly over 0..1 ms puts the median within 5% of the range.
    #[test]
    fn the_sample_is_uniform() {
        let mut s = LatencySample::default();
        for i in 0..1_000_000u64 {
            s.push((i * 7919) % 1_000_000);
        }
        let p50 = s.quantile(0.5).unwrap();
        assert!((p50 - 0.5e-3).abs() < 0.05e-3, "p50 {p50}");
        let p99 = s.quantile(0.99).unwrap();
        assert!((p99 - 0.99e-3).abs() < 0.02e-3, "p99 {p99}");
    }

    #[test]
    fn weights_count_what_each_kept_latency_stands_for() {
        // One latency of 10 standing for 9 more, nine of 1: the median is 10.
        let mut v = vec![(10u64, 10.0)];
        v.extend((0..9).map(|_| (1u64, 1.0)));
        assert_eq!(quantile(&mut v, 0.5), Some(10e-9));
        assert_eq!(quantile(&mut v, 0.4), Some(1e-9));
    }

    #[test]
    fn equal_weights_give_the_exact_quantile() {
        let raw: Vec<u64> = vec![5, 1, 4, 2, 3, 9, 7];
        for q in [0.0, 0.1, 0.5, 0.99, 1.0] {
            let mut v: Vec<(u64, f64)> = raw.iter().map(|&x| (x, 1.0)).collect();
            assert_eq!(quantile(&mut v, q), Some(exact(&raw, q)), "q {q}");
        }
    }

    #[test]
    fn no_latency_no_quantile() {
        assert_eq!(quantile(&mut [], 0.5), None);
        assert_eq!(LatencySample::default().quantile(0.5), None);
    }
}

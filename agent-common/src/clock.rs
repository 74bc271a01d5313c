//! The kernel's packet clock: a per-CPU cache of one clock reading, so that a packet reads
//! the clock only now and then instead of each time.
//!
//! Why: on the fast path the clock was the largest single cost (`bpf_ktime_get_ns` is a call
//! into the kernel that reads the TSC serialised and returns through the SRSO thunk: about
//! 35 ns of a plain RoCE packet's 140-190 ns on the benchmark host). The tick counter
//! (`bpf_jiffies64`) is inlined by the verifier into one load, so a packet first reads it and
//! reuses the cached reading while the tick has not moved ([`Reuse`]):
//! - the fine clock (the training ring's milliseconds, [`crate::ring`]) is reused only while
//!   this CPU's packets are dense: once more than [`FINE_REUSES`] packets in a row came less
//!   than [`DENSE_GAP_NS`] apart (and then while each reading's packets keep that average),
//!   a reading serves [`FINE_REUSES`] more packets, and once more than [`CLOSE_REUSES`]
//!   came less than [`CLOSE_GAP_NS`] apart, [`CLOSE_REUSES`] more; otherwise every packet
//!   reads the clock. At a steady dense rate a packet lands at most
//!   `FINE_REUSES x DENSE_GAP_NS` (70 us) early, at a steady close one
//!   `CLOSE_REUSES x CLOSE_GAP_NS` (62 us). Where a dense run stops, the reuses left (at
//!   most [`CLOSE_REUSES`] packets) can carry into the next burst of the same tick and land
//!   up to a tick early; a burst of more than that many packets still reads the clock in its
//!   own millisecond, and shorter bursts never enter the mode that would carry them, so
//!   every millisecond with traffic keeps some (the rhythm's duty stays true) unless a short
//!   burst follows a dense run within one tick.
//!   Sparse traffic, where the clock's cost does not matter, keeps its exact milliseconds;
//! - the coarse clock (a flow's first and last seen when the ring is off, the ring's
//!   milliseconds where a tick is one) is read once per tick: its value changes only at a
//!   tick anyway. The tick counter moves a moment before the coarse time does; a reading
//!   taken in that moment is the previous tick's and serves the whole tick (a packet then
//!   lands one tick earlier than the uncached clock would put it).
//!
//! The packet programs run with bottom halves disabled, so they do not interrupt each other
//! on a CPU; should one ever be interrupted between its writes, the reading is written
//! before its tick, so the other sees either the old tick (and reads the clock itself) or a
//! reading at least as new as the tick it matches.

use core::sync::atomic::{compiler_fence, Ordering};

/// Packets that reuse a fine reading before the clock is read again, while packets are
/// dense (so one packet in `FINE_REUSES + 1` pays for the clock); also the run of dense
/// gaps it takes to enter the dense mode (so a burst that enters it is longer than the
/// reuses it can carry into the next one).
pub const FINE_REUSES: u32 = 7;

/// The average gap between a CPU's packets below which they count as dense (10 us: 100,000
/// packets per second on that CPU).
pub const DENSE_GAP_NS: u64 = 10_000;

/// Packets that reuse a fine reading while packets are close (one in `CLOSE_REUSES + 1`
/// pays for the clock: where a CPU takes half a million packets a second or more, the
/// clock read one packet in eight was still about 5 ns a packet on the benchmark host);
/// also the run of close gaps it takes to enter that mode.
pub const CLOSE_REUSES: u32 = 31;

/// The average gap below which packets count as close (2 us: 500,000 packets per second on
/// one CPU). `CLOSE_REUSES x CLOSE_GAP_NS` stays under the dense mode's bound.
pub const CLOSE_GAP_NS: u64 = 2_000;
const _: () = assert!(CLOSE_REUSES as u64 * CLOSE_GAP_NS <= FINE_REUSES as u64 * DENSE_GAP_NS);

/// Nanoseconds per millisecond (the ring's unit).
const NS_PER_MS: u64 = 1_000_000;

/// How long a reading may serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// The whole tick (a clock that changes only at a tick).
    WithinTick,
    /// [`FINE_REUSES`] packets of the same tick, while the packets are dense (see the module
    /// doc).
    WhileDense,
}

/// One CPU's cached reading of one clock. `#[repr(C)]`, 40 bytes, no padding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ClockCache {
    /// The tick (`jiffies`) the reading was taken in, plus one (0: no reading yet).
    pub tick: u64,
    /// The reading (ns, CLOCK_MONOTONIC).
    pub ns: u64,
    /// `ns` in milliseconds (divided once per reading, not per packet).
    pub ms: u64,
    /// Packets that reused this reading.
    pub reuses: u32,
    /// Packets this reading may serve besides the one that took it.
    pub allowed: u32,
    /// Packets in a row that came less than [`DENSE_GAP_NS`] apart (on average over each
    /// reading's packets).
    pub streak: u32,
    /// The same, less than [`CLOSE_GAP_NS`] apart.
    pub close_streak: u32,
}

impl ClockCache {
    /// The cached `(ns, ms)` for a packet in tick `jiffies`, if the reading may still serve
    /// (same tick, reuses left); counts the reuse.
    #[inline(always)]
    pub fn reuse(&mut self, jiffies: u64) -> Option<(u64, u64)> {
        if self.tick != jiffies.wrapping_add(1) || self.reuses >= self.allowed {
            return None;
        }
        self.reuses += 1;
        Some((self.ns, self.ms))
    }

    /// Stores a fresh reading `ns` taken in tick `jiffies`, which may serve as `policy` says;
    /// returns `(ns, ms)`. The tick is written last (see the module doc).
    #[inline(always)]
    pub fn store(&mut self, jiffies: u64, ns: u64, policy: Reuse) -> (u64, u64) {
        let allowed = match policy {
            Reuse::WithinTick => u32::MAX,
            Reuse::WhileDense => {
                // The packets the previous reading served, and the time they spanned.
                let served = self.reuses + 1;
                let spanned = ns.wrapping_sub(self.ns);
                let dense = self.tick != 0 && spanned < DENSE_GAP_NS * u64::from(served);
                let close = self.tick != 0 && spanned < CLOSE_GAP_NS * u64::from(served);
                self.streak = if dense {
                    self.streak.saturating_add(served)
                } else {
                    0
                };
                self.close_streak = if close {
                    self.close_streak.saturating_add(served)
                } else {
                    0
                };
                if self.close_streak > CLOSE_REUSES {
                    CLOSE_REUSES
                } else if self.streak > FINE_REUSES {
                    FINE_REUSES
                } else {
                    0
                }
            }
        };
        let ms = ns / NS_PER_MS;
        self.ns = ns;
        self.ms = ms;
        self.reuses = 0;
        self.allowed = allowed;
        compiler_fence(Ordering::SeqCst);
        self.tick = jiffies.wrapping_add(1);
        (ns, ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fine cache fed packets `gap_ns` apart in tick 10 from `t0`: which packets read the
    /// clock.
    fn reads(c: &mut ClockCache, t0: u64, gap_ns: u64, packets: u64) -> Vec<u64> {
        let mut read = Vec::new();
        for i in 0..packets {
            let now = t0 + i * gap_ns;
            if c.reuse(10).is_none() {
                c.store(10, now, Reuse::WhileDense);
                read.push(i);
            }
        }
        read
    }

    #[test]
    fn an_empty_cache_serves_nothing() {
        assert_eq!(ClockCache::default().reuse(0), None);
    }

    #[test]
    fn sparse_packets_each_read_the_clock() {
        let mut c = ClockCache::default();
        assert_eq!(
            reads(&mut c, 1_000_000, DENSE_GAP_NS + 1, 6),
            vec![0, 1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn dense_packets_read_it_once_per_eight() {
        let mut c = ClockCache::default();
        // 5 us apart: dense, not close. Nine read (no history, then eight dense gaps in a
        // row); then one in eight, for good.
        let read = reads(&mut c, 1_000_000, 5_000, 66);
        assert_eq!(
            read,
            vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32, 40, 48, 56, 64],
            "a reading serves FINE_REUSES more packets"
        );
        assert_eq!(c.reuse(10), Some((1_000_000 + 64 * 5_000, 1)));
    }

    #[test]
    fn close_packets_read_it_once_per_thirty_two() {
        let mut c = ClockCache::default();
        // 100 ns apart: the dense mode first, then, once more than CLOSE_REUSES close
        // packets came in a row, one in CLOSE_REUSES + 1.
        assert_eq!(
            reads(&mut c, 1_000_000, 100, 130),
            vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32, 64, 96, 128],
        );
        assert_eq!(c.reuse(10), Some((1_000_000 + 128 * 100, 1)));
    }

    #[test]
    fn a_steady_rate_lands_packets_within_the_bound() {
        // At every steady rate, no packet is stamped earlier than 70 us before its time.
        for gap in [
            100, 1_000, 1_999, 2_000, 2_001, 5_000, 9_999, 10_000, 20_000,
        ] {
            let mut c = ClockCache::default();
            let t0 = 1_000_000;
            for i in 0..2_000u64 {
                let now = t0 + i * gap;
                let (stamp, _) = c
                    .reuse(10)
                    .unwrap_or_else(|| c.store(10, now, Reuse::WhileDense));
                assert!(
                    now - stamp <= FINE_REUSES as u64 * DENSE_GAP_NS,
                    "gap {gap} ns, packet {i}: {} ns early",
                    now - stamp
                );
            }
        }
    }

    #[test]
    fn close_packets_that_thin_out_go_back_to_reading_each_packet() {
        let mut c = ClockCache::default();
        // 33 close packets: the last enters the close mode, its reading unused yet.
        assert_eq!(reads(&mut c, 1_000_000, 100, 33).last(), Some(&32));
        // Then 20 us apart: the close reading's 31 reuses run out first (in the same
        // tick), then each packet reads.
        let thin = reads(&mut c, 2_000_000, 20_000, 34);
        assert_eq!(thin, vec![31, 32, 33]);
    }

    #[test]
    fn close_bursts_a_millisecond_apart_each_read_in_their_own() {
        // Bursts of CLOSE_REUSES + 1 packets 1 us apart: the reuses of one burst run out
        // within it, so the next burst's first packet reads the clock.
        let mut c = ClockCache::default();
        let n = u64::from(CLOSE_REUSES) + 1;
        for burst in 1..5u64 {
            let read = reads(&mut c, burst * 1_000_000, 1_000, n);
            assert_eq!(read.first(), Some(&0), "burst {burst}: {read:?}");
        }
    }

    #[test]
    fn short_bursts_read_every_packet() {
        // Bursts of FINE_REUSES + 1 packets 1 us apart, a millisecond apart: each packet
        // reads, so each burst lands in its own millisecond.
        let mut c = ClockCache::default();
        for burst in 0..4 {
            let n = u64::from(FINE_REUSES) + 1;
            assert_eq!(
                reads(&mut c, burst * 1_000_000, 1_000, n),
                (0..n).collect::<Vec<_>>(),
                "burst {burst}"
            );
        }
    }

    #[test]
    fn a_burst_that_thins_out_goes_back_to_reading_each_packet() {
        let mut c = ClockCache::default();
        // Nine dense packets: the ninth enters the dense mode, its reading unused yet.
        reads(&mut c, 1_000_000, 100, 9);
        // Eight packets 20 us apart span 160 us: more than 8 x 10 us.
        let thin = reads(&mut c, 2_000_000, 20_000, 10);
        // The dense reading's seven reuses run out first (in the same tick), then each
        // packet reads.
        assert_eq!(thin, vec![7, 8, 9]);
    }

    #[test]
    fn a_new_tick_asks_for_a_new_reading() {
        let mut c = ClockCache::default();
        c.store(10, 7_000_000, Reuse::WithinTick);
        assert_eq!(c.reuse(11), None);
        assert_eq!(c.reuse(10), Some((7_000_000, 7)));
        assert_eq!(c.reuse(10), Some((7_000_000, 7)), "the whole tick");
    }
}

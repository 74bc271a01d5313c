//! The kernel's packet clock: a per-CPU cache of one clock reading, so that a packet reads
//! the clock only now and then instead of each time.
//!
//! Why: on the fast path the clock was the largest single cost (`bpf_ktime_get_ns` is a call
//! into the kernel that reads the TSC serialised and returns through the SRSO thunk: about
//! 35 ns of a plain RoCE packet's 140-190 ns on the benchmark host). The tick counter
//! (`bpf_jiffies64`) is inlined by the verifier into one load, so a packet first reads it and
//! reuses the cached reading while the tick has not moved:
//! - the fine clock (the training ring's milliseconds, [`crate::ring`]) is read again after
//!   [`FINE_REUSES`] reuses or when the tick moved: a packet lands at most that many packets'
//!   time, and never more than one tick, before its true millisecond (a few microseconds at the
//!   rates of a training step's traffic; where a CPU sees a packet less often than every
//!   tick / [`FINE_REUSES`], up to one tick: the rhythm's periods, tens of milliseconds and
//!   more, do not feel either);
//! - the coarse clock (a flow's first and last seen when the ring is off, the ring's
//!   milliseconds where a tick is one) is read once per tick: its value changes only at a
//!   tick anyway. The tick counter moves a moment before the coarse time does; a reading
//!   taken in that moment is the previous tick's and serves the whole tick (a packet then
//!   lands one tick earlier than the uncached clock would put it).
//!
//! A BPF program can interrupt another on the same CPU (XDP in a softirq over tc egress in a
//! task); the reading is written before its tick, so an interrupting packet sees either the
//! old tick (and reads the clock itself) or a reading at least as new as the tick it matches.

use core::sync::atomic::{compiler_fence, Ordering};

/// Packets that reuse a fine reading before the clock is read again (so one packet in
/// `FINE_REUSES + 1` pays for the clock).
pub const FINE_REUSES: u32 = 7;

/// Nanoseconds per millisecond (the ring's unit).
const NS_PER_MS: u64 = 1_000_000;

/// One CPU's cached reading of one clock. `#[repr(C)]`, 32 bytes, no padding (a BPF map
/// value).
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
    _pad: u32,
}

impl ClockCache {
    /// The cached `(ns, ms)` for a packet in tick `jiffies`, if the reading may still serve
    /// (same tick, fewer than `max_reuses` reuses); counts the reuse.
    #[inline(always)]
    pub fn reuse(&mut self, jiffies: u64, max_reuses: u32) -> Option<(u64, u64)> {
        if self.tick != jiffies.wrapping_add(1) || self.reuses >= max_reuses {
            return None;
        }
        self.reuses += 1;
        Some((self.ns, self.ms))
    }

    /// Stores a fresh reading `ns` taken in tick `jiffies`; returns `(ns, ms)`. The tick is
    /// written last (see the module doc).
    #[inline(always)]
    pub fn store(&mut self, jiffies: u64, ns: u64) -> (u64, u64) {
        let ms = ns / NS_PER_MS;
        self.ns = ns;
        self.ms = ms;
        self.reuses = 0;
        compiler_fence(Ordering::SeqCst);
        self.tick = jiffies.wrapping_add(1);
        (ns, ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_cache_serves_nothing() {
        assert_eq!(ClockCache::default().reuse(0, FINE_REUSES), None);
    }

    #[test]
    fn a_reading_serves_its_tick_up_to_the_reuse_limit() {
        let mut c = ClockCache::default();
        assert_eq!(c.store(10, 5_300_000), (5_300_000, 5));
        for _ in 0..FINE_REUSES {
            assert_eq!(c.reuse(10, FINE_REUSES), Some((5_300_000, 5)));
        }
        assert_eq!(
            c.reuse(10, FINE_REUSES),
            None,
            "the limit reached: read again"
        );
        c.store(10, 5_400_000);
        assert_eq!(c.reuse(10, FINE_REUSES), Some((5_400_000, 5)));
    }

    #[test]
    fn a_new_tick_asks_for_a_new_reading() {
        let mut c = ClockCache::default();
        c.store(10, 7_000_000);
        assert_eq!(c.reuse(11, u32::MAX), None);
        assert_eq!(c.reuse(10, u32::MAX), Some((7_000_000, 7)));
    }
}

//! The kernel programs' load-time switches, which the AF_XDP tally follows too, and the clock
//! fact that picks the ring's clock by default.

use agent_common::TrafficClasses;

/// The load-time settings of the kernel programs, which the userspace counting of the AF_XDP
/// capture follows too: what the switches leave out is pruned by the verifier (and skipped
/// here); the traffic classes decide what counts as lossy RoCE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switches {
    /// PSN gaps and retransmissions per flow.
    pub psn_tracking: bool,
    /// Per mirror-session / tunnel counters.
    pub session_counters: bool,
    /// The classes RoCE and CNPs are expected in.
    pub classes: TrafficClasses,
    /// Kernel only: RoCE bytes per millisecond in the ring the training rhythm is found in
    /// ([`agent_common::ring`]).
    pub rhythm: bool,
    /// Kernel only: the ring on the coarse clock ([`agent_common::SWITCH_RING_COARSE`]); by
    /// default where the host's tick is at most a millisecond.
    pub coarse_ring_clock: bool,
    /// Kernel only: the per-CPU flow cache in front of the flow maps
    /// ([`agent_common::flow_cache`]); counts are the same with it and without.
    pub flow_cache: bool,
}

impl Default for Switches {
    fn default() -> Self {
        Switches {
            psn_tracking: true,
            session_counters: true,
            classes: TrafficClasses::DEFAULT,
            rhythm: true,
            coarse_ring_clock: coarse_clock_resolution_ns() <= 1_000_000,
            flow_cache: true,
        }
    }
}

/// The resolution of the kernel's coarse monotonic clock (`bpf_ktime_get_coarse_ns` reads the
/// same clock): one tick, 1 ms at HZ=1000, 4 ms at HZ=250. `u64::MAX` if unknown.
pub fn coarse_clock_resolution_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    if unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return u64::MAX;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

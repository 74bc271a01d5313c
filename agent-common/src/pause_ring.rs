//! Every PFC and 802.3x PAUSE frame with its time, kept by the kernel in a small per-CPU ring
//! and drained by the agent every poll: the live pause time is the union of the pause
//! intervals, worked out by the same tracker `analyze` runs over a capture
//! (`rocemon::detect::pause`), not the sum of the quanta the frames asked for (which counts a
//! burst of back-to-back XOFFs many times over: ten of them every 335 ms at 1 Gb/s sum to
//! 100% of the time, while the link was paused 10% of it).
//!
//! Slot `n % PAUSE_RING_SLOTS` holds the CPU's `n`-th frame; the head (the next `n`) is
//! written after the slot, so the agent reads only whole frames below it. A CPU that takes
//! more frames between two polls than the ring holds overwrites its oldest: the agent counts
//! them lost and takes the quanta's bound for that poll. MAC control frames are rare (a
//! storm refreshes its XOFF every few hundred microseconds: a few thousand a second), so the
//! packet path pays one branch.

use crate::headers::mac_control::{MacControl, PRIORITIES};

/// Frames each CPU's ring holds (a power of two: the slot is a mask). 32 bytes each: 64 KiB
/// per CPU per interface, as the rhythm's ring; a storm refreshing its XOFF every 200 us
/// fills it in 0.4 s.
pub const PAUSE_RING_SLOTS: u32 = 2048;
const _: () = assert!(PAUSE_RING_SLOTS.is_power_of_two());

/// Name of the per-CPU array of [`PauseEvent`].
pub const MAP_PAUSE_RING: &str = "PAUSE_RING";
/// Name of the per-CPU head: how many frames the CPU has written so far.
pub const MAP_PAUSE_HEAD: &str = "PAUSE_HEAD";

/// One MAC control frame and when it was seen (kernel monotonic ns). `#[repr(C)]`, 32 bytes,
/// no padding (BPF map value).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PauseEvent {
    pub ts_ns: u64,
    pub opcode: u16,
    pub class_enable: u16,
    pub times: [u16; PRIORITIES],
    pub pad: u32,
}

impl PauseEvent {
    /// The frame `m` seen at `ts_ns`.
    #[inline(always)]
    pub fn of(ts_ns: u64, m: &MacControl) -> PauseEvent {
        PauseEvent {
            ts_ns,
            opcode: m.opcode,
            class_enable: m.class_enable,
            times: m.times,
            pad: 0,
        }
    }

    /// The frame as the parser gave it.
    pub fn mac_control(&self) -> MacControl {
        MacControl {
            opcode: self.opcode,
            class_enable: self.class_enable,
            times: self.times,
        }
    }
}

/// The slot of a CPU's `n`-th frame.
#[inline(always)]
pub fn slot_of(n: u64) -> u32 {
    (n as u32) & (PAUSE_RING_SLOTS - 1)
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, plain integers, no padding: every bit pattern is valid.
unsafe impl aya::Pod for PauseEvent {}

const _: () = assert!(core::mem::size_of::<PauseEvent>() == 32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_gives_back_its_frame() {
        let m = MacControl {
            opcode: 0x0101,
            class_enable: 0b1000,
            times: [0, 0, 0, 65535, 0, 0, 0, 0],
        };
        let e = PauseEvent::of(42, &m);
        assert_eq!((e.ts_ns, e.mac_control()), (42, m));
    }

    #[test]
    fn frames_wrap_around_the_ring() {
        assert_eq!(slot_of(0), 0);
        assert_eq!(slot_of(u64::from(PAUSE_RING_SLOTS) + 3), 3);
    }
}

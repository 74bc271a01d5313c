//! The fine time series of an interface's RoCE traffic: packets and bytes in 1 ms buckets,
//! kept by the kernel in a small per-CPU ring indexed by time, drained by the agent every poll
//! (the training rhythm is found in it: `rocemon::detect::rhythm`).
//!
//! Slot `ms % RING_SLOTS` holds millisecond `ms`; its `lap` (`ms / RING_SLOTS`, plus one so
//! that a zeroed slot belongs to no lap) tells a current slot from a stale one. A packet costs
//! one array lookup and either an add or a reset of the slot; the agent reads the milliseconds
//! since its last poll, and a slot whose lap is not the expected one held no traffic then.
//! Memory: `RING_SLOTS` x 16 bytes per CPU per interface (64 KiB): the agent must poll at
//! least every 4 s, which the poll interval's bound (60 s) does not ensure: a longer gap
//! loses the milliseconds the ring no longer holds, and the agent counts them.

/// Milliseconds the ring holds (a power of two: the slot is a mask, the lap a shift).
pub const RING_SLOTS: u32 = 4096;
const RING_BITS: u32 = 12;
const _: () = assert!(1 << RING_BITS == RING_SLOTS);

/// Name of the per-CPU array of [`RingSlot`].
pub const MAP_RING: &str = "RING";

/// One millisecond of one CPU. `#[repr(C)]`, 16 bytes, no padding (BPF map value).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RingSlot {
    /// `ms / RING_SLOTS + 1` of the millisecond the counts belong to.
    pub lap: u32,
    pub packets: u32,
    pub bytes: u64,
}

/// The slot index of millisecond `ms`.
#[inline(always)]
pub fn slot_of(ms: u64) -> u32 {
    (ms & u64::from(RING_SLOTS - 1)) as u32
}

/// The lap tag of millisecond `ms`.
#[inline(always)]
pub fn lap_of(ms: u64) -> u32 {
    ((ms >> RING_BITS) as u32).wrapping_add(1)
}

impl RingSlot {
    /// Adds a packet of `bytes` at millisecond `ms` (whose slot this is): a slot of an older
    /// lap starts over.
    #[inline(always)]
    pub fn add(&mut self, ms: u64, bytes: u64) {
        let lap = lap_of(ms);
        if self.lap == lap {
            self.packets = self.packets.wrapping_add(1);
            self.bytes += bytes;
        } else {
            self.lap = lap;
            self.packets = 1;
            self.bytes = bytes;
        }
    }

    /// The counts of millisecond `ms`, if this slot holds it.
    #[inline(always)]
    pub fn at(&self, ms: u64) -> Option<(u64, u64)> {
        (self.lap == lap_of(ms)).then_some((u64::from(self.packets), self.bytes))
    }
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, plain integers, no padding: every bit pattern is valid.
unsafe impl aya::Pod for RingSlot {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_counts_its_millisecond_and_forgets_older_laps() {
        let mut s = RingSlot::default();
        assert_eq!(s.at(5), None, "a zeroed slot holds nothing, even in lap 0");
        s.add(5, 100);
        s.add(5, 50);
        assert_eq!(s.at(5), Some((2, 150)));
        let later = 5 + u64::from(RING_SLOTS);
        assert_eq!(slot_of(later), slot_of(5));
        assert_eq!(s.at(later), None, "stale: the slot is from the lap before");
        s.add(later, 7);
        assert_eq!(s.at(later), Some((1, 7)));
        assert_eq!(s.at(5), None);
    }

    #[test]
    fn layout() {
        assert_eq!(core::mem::size_of::<RingSlot>(), 16);
    }
}

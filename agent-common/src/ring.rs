//! The fine time series of an interface's RoCE traffic: packets and bytes in 1 ms buckets,
//! kept by the kernel in a small per-CPU ring indexed by time, drained by the agent every poll
//! (the training rhythm is found in it: `rocemon::detect::rhythm`).
//!
//! Slot `ms % RING_SLOTS` holds millisecond `ms`; its `lap` (`ms / RING_SLOTS`, plus one so
//! that a zeroed slot belongs to no lap) tells a current slot from a stale one. A packet costs
//! one array lookup and either an add or a reset of the slot; the agent reads the milliseconds
//! since its last poll, and a slot whose lap is not the expected one held no traffic then.
//! Memory: `RING_SLOTS` x 48 bytes per CPU per interface (192 KiB): the agent must poll at
//! least every 4 s, which the poll interval's bound (60 s) does not ensure: a longer gap
//! loses the milliseconds the ring no longer holds, and the agent counts them.
//!
//! **Lanes.** Beside the link's bytes, each slot splits them by source host into
//! [`LANES`] lanes ([`lane_of`]: a hash of the source address), in units of [`LANE_UNIT`]
//! bytes: the agent finds the training jobs sharing a link in them (hosts whose lanes keep
//! one step are one job, `rocemon::detect::jobs`) and learns which hosts a lane holds from
//! its flow table, through the same [`lane_of`]. A lane needs only the shape of the traffic,
//! so 16 bits of 256-byte units (16 MB per millisecond and CPU: 128 Gbit/s on one CPU before
//! it saturates) keep the slot at 48 bytes, where 32-bit byte counts would take 80.

/// Milliseconds the ring holds (a power of two: the slot is a mask, the lap a shift).
pub const RING_SLOTS: u32 = 4096;
const RING_BITS: u32 = 12;
const _: () = assert!(1 << RING_BITS == RING_SLOTS);

/// Name of the per-CPU array of [`RingSlot`].
pub const MAP_RING: &str = "RING";

/// Source-host lanes per slot (a power of two: the lane is a mask).
pub const LANES: usize = 16;
/// Bytes per lane unit (a packet counts its length rounded up to units).
pub const LANE_UNIT: u64 = 256;
const LANE_UNIT_BITS: u32 = 8;
const _: () = assert!(1 << LANE_UNIT_BITS == LANE_UNIT);

/// The lane of a source address (`FlowKey::src`, an IPv4 address in its first 4 bytes and
/// zeros after): the four 32-bit words folded and multiplied by the golden ratio (Fibonacci
/// hashing), the top bits. Hosts of one subnet that differ in their last byte spread over
/// the lanes.
#[inline(always)]
pub fn lane_of(src: &[u8; 16]) -> usize {
    let w = |i: usize| {
        u64::from_ne_bytes([
            src[i],
            src[i + 1],
            src[i + 2],
            src[i + 3],
            src[i + 4],
            src[i + 5],
            src[i + 6],
            src[i + 7],
        ])
    };
    lane_of_words(w(0), w(8))
}

/// [`lane_of`] of the source address held in two native-endian words (its bytes 0..8 and
/// 8..16): the kernel reads them from the record's 8-aligned key with two loads, where the
/// bytes one at a time took 16 loads and as many shifts (BPF has no unaligned load).
#[inline(always)]
pub fn lane_of_words(lo: u64, hi: u64) -> usize {
    let x = lo ^ hi;
    let folded = (x as u32) ^ ((x >> 32) as u32);
    (folded.wrapping_mul(0x9E37_79B1) >> 28) as usize & (LANES - 1)
}

/// One millisecond of one CPU. `#[repr(C)]`, 48 bytes, no padding (BPF map value).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RingSlot {
    /// `ms / RING_SLOTS + 1` of the millisecond the counts belong to.
    pub lap: u32,
    pub packets: u32,
    pub bytes: u64,
    /// The bytes per source lane ([`lane_of`]) in [`LANE_UNIT`]s, saturating.
    pub lanes: [u16; LANES],
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
    /// Adds a packet of `bytes` from source lane `lane` at millisecond `ms` (whose slot this
    /// is): a slot of an older lap starts over.
    #[inline(always)]
    pub fn add(&mut self, ms: u64, bytes: u64, lane: usize) {
        let lap = lap_of(ms);
        if self.lap != lap {
            self.lap = lap;
            self.packets = 0;
            self.bytes = 0;
            self.lanes = [0; LANES];
        }
        self.packets = self.packets.wrapping_add(1);
        self.bytes += bytes;
        // Without a branch (each is a path the verifier walks at every call site): a frame
        // is below 16 MiB, so its units fit 16 bits; the sum saturates by or-ing in all ones
        // when it carried past 16 bits.
        let units = ((bytes + LANE_UNIT - 1) >> LANE_UNIT_BITS) as u32 & 0xFFFF;
        let l = &mut self.lanes[lane & (LANES - 1)];
        let sum = u32::from(*l) + units;
        *l = (sum | 0u32.wrapping_sub(sum >> 16)) as u16;
    }

    /// The counts of millisecond `ms`, if this slot holds it.
    #[inline(always)]
    pub fn at(&self, ms: u64) -> Option<(u64, u64)> {
        (self.lap == lap_of(ms)).then_some((u64::from(self.packets), self.bytes))
    }

    /// The lanes of millisecond `ms` (in [`LANE_UNIT`]s), if this slot holds it.
    #[inline(always)]
    pub fn lanes_at(&self, ms: u64) -> Option<&[u16; LANES]> {
        (self.lap == lap_of(ms)).then_some(&self.lanes)
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
        s.add(5, 100, 0);
        s.add(5, 50, 0);
        assert_eq!(s.at(5), Some((2, 150)));
        let later = 5 + u64::from(RING_SLOTS);
        assert_eq!(slot_of(later), slot_of(5));
        assert_eq!(s.at(later), None, "stale: the slot is from the lap before");
        s.add(later, 7, 0);
        assert_eq!(s.at(later), Some((1, 7)));
        assert_eq!(s.at(5), None);
        assert_eq!(
            s.lanes_at(later).map(|l| l[0]),
            Some(1),
            "the old lap's lanes are gone"
        );
    }

    #[test]
    fn a_packet_adds_its_units_to_its_lane_only() {
        let mut s = RingSlot::default();
        s.add(9, 4096 + 1, 3);
        s.add(9, 64, 3);
        s.add(9, 256, 12);
        let l = s.lanes_at(9).unwrap();
        assert_eq!(l[3], 17 + 1, "4097 B is 17 units, 64 B rounds up to one");
        assert_eq!(l[12], 1);
        assert_eq!(l.iter().map(|&u| u64::from(u)).sum::<u64>(), 19);
        assert_eq!(s.lanes_at(9 + u64::from(RING_SLOTS)), None);
    }

    #[test]
    fn a_lane_saturates_instead_of_wrapping() {
        let mut s = RingSlot::default();
        for _ in 0..1000 {
            s.add(1, 64 * 1024, 0);
        }
        assert_eq!(s.lanes_at(1).unwrap()[0], u16::MAX);
        assert_eq!(
            s.at(1),
            Some((1000, 64 * 1024 * 1000)),
            "the link's bytes stay exact"
        );
    }

    #[test]
    fn the_hosts_of_a_subnet_spread_over_every_lane() {
        let mut seen = [0u32; LANES];
        for last in 1..=64u8 {
            let mut src = [0u8; 16];
            src[..4].copy_from_slice(&[10, 0, 0, last]);
            seen[lane_of(&src)] += 1;
        }
        assert!(seen.iter().all(|&n| n >= 1), "{seen:?}");
        assert!(seen.iter().all(|&n| n <= 10), "{seen:?}");
    }

    /// The lane as it was first defined (four 32-bit words folded), which the agent's lanes
    /// of earlier polls and the kernel's must keep matching.
    fn lane_by_u32_words(src: &[u8; 16]) -> usize {
        let w = |i: usize| u32::from_ne_bytes([src[i], src[i + 1], src[i + 2], src[i + 3]]);
        let folded = w(0) ^ w(4) ^ w(8) ^ w(12);
        (folded.wrapping_mul(0x9E37_79B1) >> 28) as usize & (LANES - 1)
    }

    #[test]
    fn the_lane_by_two_words_is_the_lane_by_four() {
        let mut x = 0x0123_4567_89AB_CDEFu64;
        for _ in 0..10_000 {
            // xorshift: IPv6 addresses and IPv4 ones (zeros after the first four bytes).
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut src = [0u8; 16];
            src[..8].copy_from_slice(&x.to_ne_bytes());
            src[8..].copy_from_slice(&x.rotate_left(29).to_ne_bytes());
            assert_eq!(lane_of(&src), lane_by_u32_words(&src), "{src:?}");
            src[4..].fill(0);
            assert_eq!(lane_of(&src), lane_by_u32_words(&src), "{src:?}");
        }
    }

    #[test]
    fn a_records_source_words_give_its_lane() {
        let mut r = crate::record::PacketRecord::default();
        r.key.src = [10, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let (lo, hi) = r.src_words();
        assert_eq!(lane_of_words(lo, hi), lane_of(&r.key.src));
        r.key.src = [0xfd, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
        let (lo, hi) = r.src_words();
        assert_eq!(lane_of_words(lo, hi), lane_of(&r.key.src));
    }

    #[test]
    fn layout() {
        assert_eq!(core::mem::size_of::<RingSlot>(), 48);
    }
}

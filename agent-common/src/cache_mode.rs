//! When the flow cache steps aside: where flows outnumber its slots, a packet pays for the
//! probe of a slot that holds another flow and then for the map update anyway (measured live,
//! 10,000 flows taking turns: 727-772 ns a packet with the cache, 548-572 without). The flush
//! program, which the agent runs on every CPU at each poll, judges this CPU's cache over the
//! interval since the last pass and moves it between three modes:
//!
//! - [`CACHE_ON`]: as [`crate::flow_cache`] describes; the hook slots count hits and misses.
//! - [`CACHE_DRAINING`]: no flow takes a slot; a packet whose flow holds its slot takes it out
//!   (written back when changed, the slot emptied) and is counted in the map, unless the flush
//!   runs on this CPU (then it is counted in its slot as when on: the flush may be copying
//!   that slot into the map); the flush empties the rest as it always does. A pass that
//!   began draining and finds every slot empty turns the cache off: nothing can fill a slot
//!   while draining, so none is left to miss a packet's count (a packet that read the mode as
//!   on just before the drain started may still take a slot, so the pass that starts it
//!   never turns the cache off).
//! - [`CACHE_OFF`]: packets go to the maps without looking at the cache, and after
//!   [`OFF_PASSES`] passes the cache is tried again (its slots are all empty).
//!
//! The cache drains when misses outnumber hits over a pass of at least [`JUDGE_MIN_PACKETS`]:
//! a hit saves about what a miss costs on top of the map update, so below half hits it costs
//! more than it saves (the break-even the measurements put between 1,000 flows, nine in ten
//! hits, and 10,000, under four in ten).

/// The cache is used.
pub const CACHE_ON: u32 = 0;
/// No flow takes a slot; held flows are taken out (see the module doc).
pub const CACHE_DRAINING: u32 = 1;
/// The cache is empty and not looked at.
pub const CACHE_OFF: u32 = 2;

/// Packets a pass must have counted through the cache for the flush to judge it.
pub const JUDGE_MIN_PACKETS: u64 = 1024;
/// Passes (polls) the cache stays off before it is tried again.
pub const OFF_PASSES: u32 = 16;

/// A hook's view of its CPU's cache (in its per-CPU [`crate::HookSlot`], which the packet
/// already holds: no lookup more per packet): the mode the flush set, and the misses since the
/// flush last read them (the hits are the hook's RoCE packets less its misses: a hit writes
/// nothing more than its flow).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CacheUse {
    pub misses: u64,
    pub mode: u32,
    pub pad: u32,
}

/// The flush program's own state per CPU (the `FLUSHING` map).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlushState {
    /// 1 while the flush program runs on this CPU.
    pub flushing: u32,
    /// This CPU's cache mode (the hook slots hold copies).
    pub mode: u32,
    /// Slots left holding a flow by the chunks of this pass.
    pub held: u32,
    /// The chunks of this pass walked so far, a bit each.
    pub chunks: u32,
    /// Passes since the cache's mode last changed (counted while it is off).
    pub passes_off: u32,
    /// 1 when this pass began with the cache already draining: only such a pass turns it
    /// off. A packet that read the mode as on just before the pass that starts the drain,
    /// interrupted there by its first chunk, can take a slot of that chunk after the walk;
    /// the next pass, draining from its start, walks it.
    pub began_draining: u32,
    /// This CPU's RoCE packets over its hooks at the last pass.
    pub roce_seen: u64,
    /// When this pass began and when the one before it began (monotonic ns): a slot left
    /// unchanged since before the previous pass is released by the release walk.
    pub pass_ns: u64,
    pub prev_pass_ns: u64,
}

/// Set in the flush program's argument: the release walk (after every CPU's write-back walk
/// of the same flush) instead of the write-back walk.
pub const FLUSH_RELEASE: u64 = 1 << 32;

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, explicit padding, plain integers: every bit pattern is valid.
unsafe impl aya::Pod for FlushState {}

/// The hits and misses of a pass: the RoCE packets counted since the last pass (`roce` now,
/// `roce_seen` then) and the misses among them.
#[inline(always)]
pub fn pass_use(roce: u64, roce_seen: u64, misses: u64) -> (u64, u64) {
    let packets = roce.wrapping_sub(roce_seen);
    (packets.saturating_sub(misses), misses.min(packets))
}

/// The mode at the start of a pass, from the mode before and the pass's hits and misses
/// (`passes_off` counts the passes spent off).
#[inline(always)]
pub fn mode_at_pass(mode: u32, hits: u64, misses: u64, passes_off: &mut u32) -> u32 {
    match mode {
        CACHE_ON if hits + misses >= JUDGE_MIN_PACKETS && misses > hits => CACHE_DRAINING,
        CACHE_OFF => {
            *passes_off += 1;
            if *passes_off >= OFF_PASSES {
                *passes_off = 0;
                CACHE_ON
            } else {
                CACHE_OFF
            }
        }
        m => m,
    }
}

/// The mode at the end of a pass: a draining cache whose every chunk was walked this pass,
/// a pass that began draining (see [`FlushState::began_draining`]), and left empty is off.
#[inline(always)]
pub fn mode_after_pass(mode: u32, all_chunks: bool, began_draining: bool, held: u32) -> u32 {
    if mode == CACHE_DRAINING && all_chunks && began_draining && held == 0 {
        CACHE_OFF
    } else {
        mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_s_hits_are_its_roce_packets_less_its_misses() {
        assert_eq!(pass_use(1_500, 500, 300), (700, 300));
        assert_eq!(pass_use(500, 500, 0), (0, 0));
        // A miss counted just after the packet count was read is not a hit below zero.
        assert_eq!(pass_use(510, 500, 12), (0, 10));
    }

    #[test]
    fn a_cache_that_mostly_misses_drains() {
        let mut p = 0;
        assert_eq!(
            mode_at_pass(CACHE_ON, 400, 600, &mut p),
            CACHE_ON,
            "too few"
        );
        assert_eq!(mode_at_pass(CACHE_ON, 4000, 6000, &mut p), CACHE_DRAINING);
    }

    #[test]
    fn a_cache_that_mostly_hits_stays_on() {
        let mut p = 0;
        assert_eq!(mode_at_pass(CACHE_ON, 9000, 1000, &mut p), CACHE_ON);
        assert_eq!(mode_at_pass(CACHE_ON, 5000, 5000, &mut p), CACHE_ON);
    }

    #[test]
    fn a_draining_cache_is_off_only_after_a_whole_pass_left_every_slot_empty() {
        assert_eq!(mode_after_pass(CACHE_DRAINING, true, true, 0), CACHE_OFF);
        assert_eq!(
            mode_after_pass(CACHE_DRAINING, true, true, 3),
            CACHE_DRAINING
        );
        assert_eq!(
            mode_after_pass(CACHE_DRAINING, false, true, 0),
            CACHE_DRAINING
        );
        assert_eq!(mode_after_pass(CACHE_ON, true, true, 0), CACHE_ON);
    }

    #[test]
    fn the_pass_that_starts_the_drain_never_turns_the_cache_off() {
        assert_eq!(
            mode_after_pass(CACHE_DRAINING, true, false, 0),
            CACHE_DRAINING,
            "a slot of its first chunk may have been taken after the walk"
        );
    }

    #[test]
    fn a_draining_cache_keeps_draining_whatever_it_counts() {
        let mut p = 0;
        assert_eq!(
            mode_at_pass(CACHE_DRAINING, 100_000, 0, &mut p),
            CACHE_DRAINING
        );
    }

    #[test]
    fn an_off_cache_is_tried_again_after_its_passes() {
        let mut p = 0;
        for i in 1..OFF_PASSES {
            assert_eq!(mode_at_pass(CACHE_OFF, 0, 0, &mut p), CACHE_OFF, "pass {i}");
        }
        assert_eq!(mode_at_pass(CACHE_OFF, 0, 0, &mut p), CACHE_ON);
        assert_eq!(p, 0);
    }
}

//! The kernel's per-CPU flow cache: a direct-mapped array in front of the flow hash maps.
//!
//! Every RoCE packet updates its flow. Through the hash map that is a helper call into
//! the kernel (hash the key, walk the bucket, compare): measured at
//! about 60 ns of a 230 ns packet on a host whose returns pass through the SRSO "safe RET"
//! thunk. A per-CPU array lookup is inlined by the verifier, so a packet whose flow sits in
//! its slot of this CPU's cache costs a hash of the key in BPF, a 40-byte compare and the
//! update itself: no call at all. A host carries few flows at a time per CPU (queue pairs,
//! spread by RSS), so nearly every packet finds its flow there.
//!
//! The cache is write-back. A slot holds its flow's sequence state for its CPU (PSN
//! tracking, the SEND in progress, the last packet's fields) and the flow's counts since the
//! slot was last written back. A write-back adds those counts into the map's value
//! ([`FlowStats::merge`], this CPU's value of the element, inserted again with them alone
//! if the map dropped it) and clears them in the slot, so no count ever goes into the map
//! twice, whatever happened to the element in between: the full LRU map pushed it out and
//! another CPU created it again, the agent deleted it as idle. A miss writes the slot's flow
//! back, then loads the new flow's sequence state into the slot, its counts at zero. The
//! agent runs the flush program on every CPU before it reads the flow maps, which writes each
//! changed slot back, so the maps it reads hold every packet counted up to the flush. The
//! flush also empties every slot not counted in since the flush before (it holds no counts):
//! the cache holds only flows of the last poll interval.
//!
//! The flush runs on the slot's own CPU (BPF_PROG_TEST_RUN with BPF_F_TEST_RUN_ON_CPU), so
//! the only interleaving is one program interrupting the other on that CPU, and program
//! order on one CPU is all the protocol needs (volatile accesses, compiler fences):
//! - a packet updates its slot's state, then marks it [`DIRTY`]; the flush marks a slot
//!   [`BUSY`] while it writes it back (adds its counts into the map, then clears them), and
//!   [`CLEAN`] after: a packet in between misses the busy slot and is counted in the map,
//!   never into counts about to be cleared;
//! - a miss marks the slot [`BUSY`] while it swaps flows; the flush leaves a busy slot alone
//!   (the interrupted miss writes the old flow back itself);
//! - while the flush runs (its per-CPU flag set), a packet that interrupted it and misses
//!   updates the map directly instead of swapping the slot under the flush.
//!
//! A flow earns its slot: a miss swaps the slot's flow out only when the missing flow also
//! missed there last, with no hit in between (two of its packets in a row, as far as the slot
//! sees: a burst, or a flow that now has the slot's traffic to itself); any other miss counts
//! its packet in the map and the slot keeps its flow (an empty slot too). A flow the map does
//! not hold (new, or pushed out) takes its slot at once, the slot's flow written back: its
//! first packet is counted in the slot, never in an element nobody looks up. The full LRU
//! map pushes out the elements nobody looked up first: the flows a flood sends once, written
//! back into elements no lookup marks, go before any flow seen again (each of its misses
//! looks its element up). Where more flows than slots take turns (a mirror collector's hundreds to thousands
//! of QPs interleaved packet by packet), no flow comes back to its slot before others have
//! missed there, so no slot is ever swapped and each packet costs the map update alone, not a
//! swap (two copies of the flow state) on top; a burst swaps at its second packet and hits
//! from its third; a flow that keeps coming keeps its slot against any number of one-off
//! flows. The slot remembers the last missing flow by a fingerprint of the key's hash (32
//! bits: a collision only swaps a slot early, the counts stay exact either way).
//!
//! Where flows outnumber the slots even the probe costs more than the hits save (the slot's
//! lines, then the map's): the flush then drains this CPU's cache and turns it off for a
//! while ([`crate::cache_mode`]).

use crate::flow::FlowStats;
use crate::flow_key::FlowKey;

/// Slots per CPU (a power of two: the slot is the key's hash masked). 4,096 slots of 304
/// bytes: 1.2 MiB per CPU, under a fifth of the flow maps' own per-CPU values at their default
/// size (2 x 16,384 x 256 bytes). Sized for a mirror collector's or a busy host's thousands of
/// QPs taking turns: with 1,000 flows on one CPU nine in ten own a slot (each slot keeps the
/// first of the flows that share it), so their packets are counted without the hash map's
/// lookup (measured: 1,000 flows taking turns 108-131 ns a packet in test runs, 149-161 ns
/// with 256 slots). More slots did not help 10,000 flows (16,384 slots: 321-403 ns against
/// 343-564): there the flow states (10,000 x 304 bytes) outgrow the CPU's own caches, and a
/// packet waits on its slot's lines wherever they live.
pub const FLOW_CACHE_SLOTS: u32 = 4_096;

/// Slots the flush program walks per run: the agent runs it once per chunk on each CPU, the
/// chunk's first slot in its context (the verifier walks every iteration of a loop, so one
/// run over all slots would pass its limit).
pub const FLUSH_CHUNK: u32 = 256;

/// The first slot of each chunk the flush runs over.
pub fn flush_starts() -> impl Iterator<Item = u32> {
    (0..FLOW_CACHE_SLOTS).step_by(FLUSH_CHUNK as usize)
}

/// Name of the per-CPU array of [`CachedFlow`].
pub const MAP_FLOW_CACHE: &str = "FLOW_CACHE";
/// Name of the per-CPU flag the flush program sets while it runs.
pub const MAP_FLOW_FLUSHING: &str = "FLUSHING";
/// Name of the flush program (a raw tracepoint program, never attached: the agent runs it on
/// each CPU with BPF_PROG_TEST_RUN).
pub const PROG_FLOW_FLUSH: &str = "rocemon_flow_flush";
/// Load-time switch of the cache (1 on, 0 off: every packet goes to the hash map).
pub const SWITCH_FLOW_CACHE: &str = "ROCEMON_FLOW_CACHE";

/// Load-time global: after how many flows its hook creates on its CPU a slot's hit looks
/// its flow's element up again (see [`ref_every`]).
pub const GLOBAL_REF_EVERY: &str = "ROCEMON_REF_EVERY";

/// How many flows a hook creates on a CPU (inserts into the flow maps) before a cached
/// flow's hit looks its element up again: a quarter of the smallest flow map's entries
/// (`entries`) shared among the CPUs, at least one. A flow in a slot is counted without touching its element, so the LRU map would
/// see it unused and push it out under a flood of new flows, and with it whatever the
/// element held that the agent had not read yet (another CPU's packets, an earlier
/// write-back). Looked up once per such stretch, it stays among the used flows: the map
/// turns over no faster than its entries per insert, each CPU takes about its share of the
/// inserts, and an element looked up four times per turn-over is never the least recently
/// used. Without churn (no new flows) a hit never looks anything up.
pub fn ref_every(entries: u32, cpus: u32) -> u32 {
    (entries / 4 / cpus.max(1)).max(1)
}

/// A slot that never held a flow (or whose flow could not be loaded).
pub const EMPTY: u32 = 0;
/// A slot with no counts since its last write-back (its flow's counts are all in the map).
pub const CLEAN: u32 = 1;
/// A slot counted since it was last written back.
pub const DIRTY: u32 = 2;
/// A slot whose flow is being swapped by a miss.
pub const BUSY: u32 = 3;

pub use crate::flow_key::KeyWords;

/// One slot: a flow key, the slot's state, and the flow's state on this CPU.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(8))]
pub struct CachedFlow {
    pub key: KeyWords,
    /// [`EMPTY`], [`CLEAN`], [`DIRTY`] or [`BUSY`].
    pub state: u32,
    /// The [`fingerprint`] of the flow that missed in this slot last, 0 after a hit: a miss
    /// of the same flow again swaps the slot, any other miss leaves it (see the module doc).
    pub last_miss: u32,
    /// Its hook's flows created on this CPU when the slot last looked its flow's element up
    /// (see [`ref_every`]).
    pub ref_mark: u64,
    /// The flow's state on this CPU: its sequence state, and its counts since the slot was
    /// last written back (a write-back adds them into the map's value and clears them:
    /// [`FlowStats::merge`], [`FlowStats::clear_counts`]).
    pub stats: FlowStats,
}

/// A changed slot with at least this many packets since its last write-back is written back
/// last at a flush, after every CPU's lighter slots (see the flush program): when the maps
/// are full, each insert pushes out the flow least recently touched, so the flows written
/// last are held at the read, and those are the busiest ones, not the flows of a flood.
pub const HEAVY_PACKETS: u64 = 32;

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, explicit padding, plain integers: every bit pattern is valid.
unsafe impl aya::Pod for CachedFlow {}

const _: () = assert!(core::mem::size_of::<FlowKey>() == core::mem::size_of::<KeyWords>());
const _: () = assert!(FLOW_CACHE_SLOTS.is_power_of_two());
const _: () = assert!(FLUSH_CHUNK.is_power_of_two() && FLUSH_CHUNK <= FLOW_CACHE_SLOTS);

/// A key's words (the key's bytes, native order; it is 40 bytes, no padding).
#[inline(always)]
pub fn key_words(k: &FlowKey) -> KeyWords {
    // SAFETY: both are 40 bytes of plain integers; an unaligned read needs no alignment.
    unsafe { core::ptr::read_unaligned(k as *const FlowKey as *const KeyWords) }
}

/// The key the words stand for (a copy of [`key_in`]).
#[inline(always)]
pub fn key_of(w: &KeyWords) -> FlowKey {
    *key_in(w)
}

/// The key the words stand for, in place (no copy: the kernel passes a slot's key to the flow
/// maps where it lies).
#[inline(always)]
pub fn key_in(w: &KeyWords) -> &FlowKey {
    const _: () = assert!(
        core::mem::size_of::<KeyWords>() == core::mem::size_of::<FlowKey>()
            && core::mem::align_of::<KeyWords>() >= core::mem::align_of::<FlowKey>()
    );
    // SAFETY: 40 bytes of plain integers, every bit pattern a valid `FlowKey`; the words are
    // aligned for it (checked above); the reference lives as long as the words.
    unsafe { &*(w as *const KeyWords as *const FlowKey) }
}

/// Whether two keys are the same, without a branch per word (and without `bcmp`, which BPF
/// does not have).
#[inline(always)]
pub fn same_key(a: &KeyWords, b: &KeyWords) -> bool {
    (a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) == 0
}

/// A multiplicative hash of a key's words.
#[inline(always)]
pub fn hash_of(w: &KeyWords) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = w[0].wrapping_mul(K);
    h = (h ^ w[1]).wrapping_mul(K);
    h = (h ^ w[2]).wrapping_mul(K);
    h = (h ^ w[3]).wrapping_mul(K);
    h = (h ^ w[4]).wrapping_mul(K);
    h
}

/// The slot of a key: its hash's top bits (the low bits of a product depend only on the low
/// bits of its factors).
#[inline(always)]
pub fn slot_of(w: &KeyWords) -> u32 {
    slot_of_hash(hash_of(w))
}

/// The slot of a key hashed by [`hash_of`].
#[inline(always)]
pub fn slot_of_hash(h: u64) -> u32 {
    (h >> 40) as u32 & (FLOW_CACHE_SLOTS - 1)
}

/// The fingerprint a slot remembers a missing flow by: bits of its hash other than the slot's,
/// never 0 (which stands for "none").
#[inline(always)]
pub fn fingerprint(h: u64) -> u32 {
    (h >> 8) as u32 | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> FlowKey {
        let mut k = FlowKey {
            ip_version: 4,
            sport: 0xC000 | (i % 0x4000) as u16,
            dest_qp: 0x100 + i,
            ..FlowKey::default()
        };
        k.src[..4].copy_from_slice(&[10, 0, (i >> 8) as u8, i as u8]);
        k.dst[..4].copy_from_slice(&[10, 1, 0, 1]);
        k
    }

    #[test]
    fn a_cached_flow_is_looked_up_four_times_per_turn_over_of_the_smallest_map() {
        // 16,384 entries, 8 CPUs: each CPU takes an eighth of the inserts.
        assert_eq!(ref_every(16_384, 8), 512);
        assert_eq!(ref_every(256, 2), 32);
    }

    #[test]
    fn a_tiny_map_on_many_cpus_looks_up_at_every_insert() {
        assert_eq!(ref_every(64, 256), 1);
        assert_eq!(ref_every(16_384, 0), 4_096);
    }

    #[test]
    fn a_fingerprint_is_never_the_none_value() {
        for h in [0u64, 1, 0xFF, u64::MAX, 0x0000_00FF_0000_0000] {
            assert_ne!(fingerprint(h), 0, "hash {h:#x}");
        }
    }

    #[test]
    fn the_slot_is_the_hash_s() {
        for i in 0..1000 {
            let w = key_words(&key(i));
            assert_eq!(slot_of(&w), slot_of_hash(hash_of(&w)), "key {i}");
        }
    }

    /// How many of `n` flows share a fingerprint with another flow of their slot.
    fn shared_fingerprints(n: u32, key: impl Fn(u32) -> FlowKey) -> usize {
        let mut by_slot: [std::vec::Vec<u32>; FLOW_CACHE_SLOTS as usize] =
            core::array::from_fn(|_| std::vec::Vec::new());
        for i in 0..n {
            let h = hash_of(&key_words(&key(i)));
            by_slot[slot_of_hash(h) as usize].push(fingerprint(h));
        }
        let mut shared = 0;
        for fps in by_slot.iter_mut() {
            let n = fps.len();
            fps.sort_unstable();
            fps.dedup();
            shared += n - fps.len();
        }
        shared
    }

    /// Flows of one slot taking turns differ in their fingerprints (or the slot would swap
    /// for a flow that only shares bits with the last one to miss).
    #[test]
    fn flows_of_one_slot_have_distinct_fingerprints() {
        assert_eq!(shared_fingerprints(20_000, key), 0);
    }

    /// The QPs between one pair of hosts: keys that differ only in the destination QP (the
    /// key's last bytes, the upper half of its last word) differ in their fingerprints too.
    #[test]
    fn flows_that_differ_only_in_their_qp_have_distinct_fingerprints() {
        let base = key(0);
        let qp_only = |i| FlowKey {
            dest_qp: 0x100 + i,
            ..base
        };
        assert_eq!(shared_fingerprints(20_000, qp_only), 0);
    }

    #[test]
    fn words_round_trip_to_the_key() {
        let k = key(7);
        assert_eq!(key_of(&key_words(&k)), k);
    }

    #[test]
    fn same_key_tells_every_word_apart() {
        let a = key_words(&key(1));
        assert!(same_key(&a, &a));
        for i in 0..5 {
            let mut b = a;
            b[i] ^= 1 << 63;
            assert!(!same_key(&a, &b), "word {i}");
        }
    }

    /// Queue pairs of one host differ in a few bits of the QP number and the source port:
    /// they must spread over the slots, not pile up in a few.
    #[test]
    fn neighbouring_flows_spread_over_the_slots() {
        let mut used = [0u32; FLOW_CACHE_SLOTS as usize];
        for i in 0..FLOW_CACHE_SLOTS {
            used[slot_of(&key_words(&key(i))) as usize] += 1;
        }
        let filled = used.iter().filter(|&&n| n > 0).count();
        // Random placement fills 1 - 1/e of the slots (63%); a poor hash far fewer.
        assert!(
            filled * 100 >= 55 * FLOW_CACHE_SLOTS as usize,
            "{filled} slots used"
        );
        assert!(*used.iter().max().unwrap_or(&0) <= 8, "{used:?}");
    }

    #[test]
    fn the_hook_byte_changes_the_slot_or_the_compare() {
        let a = key(3);
        let b = FlowKey { hook: 2, ..a };
        assert!(!same_key(&key_words(&a), &key_words(&b)));
    }
}

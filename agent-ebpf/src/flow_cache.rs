//! The per-CPU flow cache in front of the flow maps (the protocol is in
//! [`agent_common::flow_cache`]): the hit path inlined into the counting sequence, the miss
//! path and the write-back as global functions (verified once each, off the hot path), and
//! the flush program the agent runs on every CPU before it reads the flow maps.

use crate::flow_maps::{self, on};
use crate::{FLOWS, FLOWS4, FLOWS_OUT, FLOW_CACHE};
use agent_common::cache_mode::{
    mode_after_pass, mode_at_pass, pass_use, FlushState, CACHE_DRAINING, CACHE_ON, FLUSH_RELEASE,
};
use agent_common::flow_cache::{
    fingerprint, hash_of, key_in, same_key, slot_of, slot_of_hash, CachedFlow, KeyWords, BUSY,
    CLEAN, DIRTY, EMPTY, FLOW_CACHE_SLOTS, FLUSH_CHUNK, HEAVY_PACKETS,
};
use agent_common::{FlowKey4, FlowStats, Hook, HookSlot};
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::bpf_ktime_get_ns,
    macros::{map, raw_tracepoint},
    maps::{LruPerCpuHashMap, PerCpuArray},
    programs::RawTracePointContext,
};
use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use core::sync::atomic::{compiler_fence, Ordering};

/// Per CPU: the flush program's state ([`FlushState`]): its flag, set while it runs there (a
/// packet that interrupts it and misses goes to the map, not into a slot the flush may be
/// copying), and the cache's mode ([`agent_common::cache_mode`]).
#[map]
static FLUSHING: PerCpuArray<FlushState> = PerCpuArray::with_max_entries(1, 0);

/// Whether the flush runs on this CPU (the packet interrupted it).
#[inline(always)]
fn flushing() -> bool {
    FLUSHING.get(0).is_some_and(|f| f.flushing != 0)
}

/// The load-time switch ([`agent_common::flow_cache::SWITCH_FLOW_CACHE`]).
#[no_mangle]
static ROCEMON_FLOW_CACHE: u8 = 1;

/// Whether the cache is on (read where the code it guards starts, as the other switches).
#[inline(always)]
pub fn enabled() -> bool {
    on(&ROCEMON_FLOW_CACHE)
}

#[inline(always)]
fn state(e: *mut CachedFlow) -> u32 {
    // SAFETY: a slot of this CPU's cache.
    unsafe { read_volatile(addr_of!((*e).state)) }
}

/// Sets a slot's state after everything written before it (a compiler fence: on one CPU
/// program order is what the interrupting program sees).
#[inline(always)]
fn set_state(e: *mut CachedFlow, s: u32) {
    compiler_fence(Ordering::SeqCst);
    // SAFETY: as in `state`.
    unsafe { write_volatile(addr_of_mut!((*e).state), s) };
    compiler_fence(Ordering::SeqCst);
}

/// The packet's flow in this CPU's cache, if its slot holds it.
#[inline(always)]
pub fn hit(words: &KeyWords) -> Option<*mut CachedFlow> {
    let e = FLOW_CACHE.get_ptr_mut(slot_of(words))?;
    let s = state(e);
    // SAFETY: as in `state`.
    if (s == CLEAN || s == DIRTY) && same_key(unsafe { &(*e).key }, words) {
        Some(e)
    } else {
        None
    }
}

/// Load-time global ([`agent_common::flow_cache::GLOBAL_REF_EVERY`]): the loader sets it
/// from the maps' sizes and the CPUs ([`agent_common::flow_cache::ref_every`]); this default
/// fits the default sizes.
#[no_mangle]
static ROCEMON_REF_EVERY: u32 = 512;

/// After a hit: the flow's element is looked up (the LRU map marks it used) once its hook
/// has created [`agent_common::flow_cache::ref_every`] flows on this CPU (`created`, the
/// hook's `flows_created`: the inserts that churn the map its flows live in) since the slot
/// last looked it up. A cached flow is counted without touching its element, so under a
/// flood of new flows the map would push it out as unused, and with it what the element
/// held unread (another CPU's packets, an earlier write-back): the agent would miss those
/// counts. The check is inlined; the lookup is a global function (verified once, off the
/// hot path).
#[inline(always)]
pub fn refresh(e: *mut CachedFlow, created: u64, hook: Hook) {
    // SAFETY: a slot of this CPU's cache (only packets on this CPU touch its mark).
    let mark = unsafe { &mut (*e).ref_mark };
    // SAFETY: a valid reference to a static the loader may have rewritten.
    let every = u64::from(unsafe { read_volatile(&ROCEMON_REF_EVERY) });
    if created.wrapping_sub(*mark) < every {
        return;
    }
    *mark = created;
    rocemon_flow_look_up(hook as u32);
}

/// Looks up the element of the flow in this CPU's record of `hook` (the LRU map marks it
/// used). Takes only scalars (a global function).
#[no_mangle]
#[inline(never)]
pub extern "C" fn rocemon_flow_look_up(hook: u32) -> u32 {
    let hook = Hook::from_u32(hook);
    let Some(HookSlot { record: rec, .. }) = flow_maps::slot(hook) else {
        return 0;
    };
    u32::from(flow_maps::flow_value_of(rec, hook).is_some())
}

/// After a hit's update: the slot differs from its map value now, and its flow was hit (the
/// last miss forgotten: a flow must miss twice in a row to take the slot).
#[inline(always)]
pub fn counted(e: *mut CachedFlow) {
    // SAFETY: a slot of this CPU's cache (only a miss on this CPU reads it).
    unsafe { (*e).last_miss = 0 };
    set_state(e, DIRTY);
}

/// Writes slot `slot`'s flow back into its map: its counts since the last write-back are
/// added into this CPU's value of the element (inserted again, with them alone, if the map
/// dropped it), then cleared in the slot. Returns [`STORED`] or [`INSERTED`] when the map
/// took them (an insert is a flow created again: the caller counts it), 0 when not.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rocemon_flow_write_back(slot: u32) -> u32 {
    let Some(e) = FLOW_CACHE.get_ptr_mut(slot) else {
        return 0;
    };
    // SAFETY: a slot of this CPU's cache; no other program runs on this CPU meanwhile. The
    // maps take the key where the slot holds it (a map value is a valid key argument): no
    // copy on the stack, whose 512 bytes the calls into here share.
    let (key, stats) = unsafe { (key_in(&(*e).key), &mut (*e).stats) };
    let r = if Hook::sends(key.hook) {
        store(&FLOWS_OUT, key, stats)
    } else if key.ip_version == 4 {
        store(&FLOWS4, &FlowKey4::of(key), stats)
    } else {
        store(&FLOWS, key, stats)
    };
    if r != 0 {
        stats.clear_counts();
    }
    r
}

/// [`store`]: the element was there and took the counts.
pub const STORED: u32 = 1;
/// [`store`]: the element was gone and was inserted with the counts.
pub const INSERTED: u32 = 2;

/// Counts a flow a write-back inserted again (the agent reconciles the flows it
/// reads with the flows created, to count what the full map pushed out).
#[inline(always)]
fn created_again(c: &mut agent_common::HookCounters, r: u32) {
    if r == INSERTED {
        c.flows_created += 1;
    }
}

/// Adds a slot's counts (`stats`, since its last write-back) into this CPU's value of `key`
/// in `map`, inserting the element with them alone if it is gone (the agent deleted it as
/// idle, or the full map pushed it out: what the element held then was read by the agent
/// or is lost, never counted twice; another CPU may insert it in between). An element
/// created again starts with a later first-seen time, so the agent sees it start afresh.
#[inline(always)]
fn store<K>(map: &LruPerCpuHashMap<K, FlowStats>, key: &K, stats: &FlowStats) -> u32 {
    for _ in 0..2 {
        if let Some(v) = map.get_ptr_mut(key) {
            // SAFETY: this CPU's value of an element of the map.
            unsafe { (*v).merge(stats) };
            return STORED;
        }
        if map.insert(key, stats, BPF_NOEXIST as u64).is_ok() {
            // A flow seen more than once is marked used (a lookup): the LRU map pushes out
            // unmarked elements first, so a flood's flows seen once go before it.
            if stats.packets > 1 {
                let _ = map.get_ptr(key);
            }
            return INSERTED;
        }
    }
    0
}

/// A packet whose flow is not in its slot: unless the packet's flow has earned the slot (see
/// [`keeps`]; else the slot keeps its flow and this packet is counted in the map), the slot's
/// flow goes back to its map and the packet's flow comes into the slot (its sequence state
/// from the map, or nothing for a flow the map does not hold), then the packet is counted
/// there. While the flush runs on this CPU, the packet is counted in the map as without the
/// cache. Takes only scalars (a global function): the packet is in this CPU's record.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rocemon_flow_miss(hook: u32, frame_len: u64, now: u64) -> u32 {
    let hook = Hook::from_u32(hook);
    let Some(HookSlot {
        counters: c,
        record: rec,
        ..
    }) = flow_maps::slot(hook)
    else {
        return 0;
    };
    let words = rec.key_words();
    let hash = hash_of(&words);
    let slot = slot_of_hash(hash);
    let e = if flushing() {
        None
    } else {
        FLOW_CACHE.get_ptr_mut(slot)
    };
    let Some(e) = e else {
        return u32::from(flow_maps::flow_to_map(rec, hook, c, frame_len, now));
    };
    // A flow the map holds (the lookup marks it used) earns the slot (see `keeps`); until
    // then its packet is counted there. A flow the map does not hold (new, or pushed out)
    // takes the slot at once: its first packet is never counted in an element nobody looks
    // up, which a full map would push out before the agent reads it.
    let known = flow_maps::flow_value_of(rec, hook);
    if let Some(v) = known {
        if keeps(e, fingerprint(hash)) {
            // SAFETY: this CPU's value of an element of the map.
            flow_maps::flow_record(unsafe { &mut *v }, rec, c, frame_len, now);
            return 0;
        }
    }
    let was = state(e);
    set_state(e, BUSY);
    if was == DIRTY {
        match rocemon_flow_write_back(slot) {
            0 => c.flow_update_errors += 1,
            r => created_again(c, r),
        }
    }
    // The write-back may have pushed the flow out: looked up again.
    let v = if known.is_some() {
        flow_maps::flow_value_of(rec, hook)
    } else {
        None
    };
    // SAFETY: this CPU's slot and this CPU's value of the flow's element: the slot takes the
    // flow's sequence state, and counts from zero. A flow the map does not hold starts from
    // nothing, its element inserted empty (created once, whichever CPU inserts it first) and
    // never looked up (see `flow_maps::flow_new`).
    unsafe {
        match v {
            Some(v) => {
                core::ptr::copy_nonoverlapping(v, addr_of_mut!((*e).stats), 1);
                (*e).stats.clear_counts();
            }
            None => {
                core::ptr::write_bytes(addr_of_mut!((*e).stats), 0, 1);
                flow_maps::flow_new(rec, hook, c, &(*e).stats);
            }
        }
        (*e).key = words;
        (*e).last_miss = 0;
        (*e).ref_mark = c.flows_created;
        flow_maps::flow_record(&mut (*e).stats, rec, c, frame_len, now);
    }
    set_state(e, DIRTY);
    0
}

/// A packet whose flow holds its slot while this CPU's cache drains
/// ([`agent_common::cache_mode`]): the slot is written back (when changed) and emptied, and
/// the caller counts the packet in the map (returns 1). The slot stays, and the caller counts
/// the packet there as when the cache is on (returns 0), while the flush runs on this CPU (it
/// may be copying that slot into the map) or when the map refuses the write-back (the flush
/// tries again). Takes only scalars (a global function): the packet is in this CPU's record.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rocemon_flow_take_out(hook: u32) -> u32 {
    if flushing() {
        return 0;
    }
    let Some(HookSlot {
        counters: c,
        record: rec,
        ..
    }) = flow_maps::slot(Hook::from_u32(hook))
    else {
        return 0;
    };
    let slot = slot_of(&rec.key_words());
    let Some(e) = FLOW_CACHE.get_ptr_mut(slot) else {
        return 0;
    };
    let s = state(e);
    set_state(e, BUSY);
    if s == DIRTY {
        match rocemon_flow_write_back(slot) {
            0 => {
                set_state(e, DIRTY);
                c.flow_update_errors += 1;
                return 0;
            }
            r => created_again(c, r),
        }
    }
    set_state(e, EMPTY);
    1
}

/// Whether a slot keeps its flow (or stays empty) at a miss of the flow with fingerprint
/// `fp`: not when the same flow missed there last with no hit in between; else it keeps it
/// and remembers `fp` (see [`agent_common::flow_cache`]). Asked only for a flow the map
/// holds: one it does not hold takes the slot at once (see [`rocemon_flow_miss`]).
#[inline(always)]
fn keeps(e: *mut CachedFlow, fp: u32) -> bool {
    // SAFETY: a slot of this CPU's cache.
    let last = unsafe { &mut (*e).last_miss };
    if *last == fp {
        return false;
    }
    *last = fp;
    true
}

/// The flush, in two walks the agent runs one after the other on every CPU: the write-back
/// walk writes every changed slot of this CPU's cache back into its map; the release walk
/// ([`FLUSH_RELEASE`] in the argument, after every CPU's write-back walk) writes back the
/// busy slots the first walk left and empties every slot unchanged since before the previous
/// pass. A slot holds only the counts since its last write-back (a write-back adds them into
/// the map and clears them), so an unchanged slot holds none and emptying it loses nothing,
/// and a slot never puts counts into the map twice, whatever the map did to the element in
/// between (pushed out, deleted as idle, created again by another CPU).
/// Never attached; the agent runs it on each CPU (BPF_PROG_TEST_RUN, BPF_F_TEST_RUN_ON_CPU)
/// before it reads the flow maps, once per [`FLUSH_CHUNK`] slots, the chunk's first slot in the
/// context's first argument. The first chunk of a pass judges the cache's mode over the
/// interval, the last turns a drained cache off ([`agent_common::cache_mode`]). Returns the
/// slots the maps refused (they stay changed and are tried again at the next flush; each
/// refusal is a flow update error of the flow's hook).
#[raw_tracepoint(tracepoint = "rocemon_flow_flush")]
pub fn rocemon_flow_flush(ctx: RawTracePointContext) -> i32 {
    let arg = ctx.arg::<u64>(0);
    let start = (arg as u32) & (FLOW_CACHE_SLOTS - 1) & !(FLUSH_CHUNK - 1);
    let Some(f) = FLUSHING.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's state; packets that interrupt the flush read only its flag.
    let f = unsafe { &mut *f };
    // SAFETY: this CPU's flag.
    unsafe { write_volatile(addr_of_mut!(f.flushing), 1) };
    compiler_fence(Ordering::SeqCst);
    if arg & FLUSH_RELEASE != 0 {
        // A cache that drains (or went off at this pass) lets every unchanged slot go.
        let before = if f.mode == CACHE_ON {
            f.prev_pass_ns
        } else {
            u64::MAX
        };
        release_chunk(start, before);
        compiler_fence(Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { write_volatile(addr_of_mut!(f.flushing), 0) };
        return 0;
    }
    if start == 0 {
        f.prev_pass_ns = f.pass_ns;
        // SAFETY: the helper has no preconditions.
        f.pass_ns = unsafe { bpf_ktime_get_ns() };
        let (hits, misses) = take_use(f);
        let before = f.mode;
        let mode = mode_at_pass(before, hits, misses, &mut f.passes_off);
        set_mode(f, mode);
        f.began_draining = u32::from(before == CACHE_DRAINING);
        f.held = 0;
        f.chunks = 0;
    }
    let mut refused = 0;
    let mut held = 0;
    for i in 0..FLUSH_CHUNK {
        let slot = start + i;
        let Some(e) = FLOW_CACHE.get_ptr_mut(slot) else {
            continue;
        };
        match state(e) {
            DIRTY => {}
            // Unchanged since the last write-back: the release walk empties it once every
            // CPU's changed slots are back in the maps.
            CLEAN => continue,
            EMPTY => continue,
            _ => {
                held += 1;
                continue;
            }
        }
        held += 1;
        // A busy flow goes back in the release walk, after every CPU's lighter ones.
        if !heavy(e) {
            refused += write_back_slot(e, slot);
        }
    }
    f.held += held;
    f.chunks |= 1 << (start / FLUSH_CHUNK);
    if start == FLOW_CACHE_SLOTS - FLUSH_CHUNK {
        let all = f.chunks == ALL_CHUNKS;
        set_mode(
            f,
            mode_after_pass(f.mode, all, f.began_draining != 0, f.held),
        );
    }
    compiler_fence(Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { write_volatile(addr_of_mut!(f.flushing), 0) };
    refused
}

/// The release walk over one chunk: the changed slots the write-back walk left for last
/// (the busy flows, [`HEAVY_PACKETS`]) are written back, and every slot unchanged since
/// before the previous pass began (no packet since: its last one is older) is emptied (it
/// holds no counts). A slot written back by this flush (its last packet newer) stays: its
/// flow is active (`before_ns` is `u64::MAX` where the cache drains: every unchanged slot
/// goes).
#[inline(always)]
fn release_chunk(start: u32, before_ns: u64) {
    for i in 0..FLUSH_CHUNK {
        let slot = start + i;
        let Some(e) = FLOW_CACHE.get_ptr_mut(slot) else {
            continue;
        };
        match state(e) {
            DIRTY => {
                // A busy flow the write-back walk left for last (or one counted since).
                write_back_slot(e, slot);
                continue;
            }
            CLEAN => {}
            _ => continue,
        }
        // SAFETY: a slot of this CPU's cache.
        if unsafe { (*e).stats.last_seen_ns } >= before_ns {
            continue;
        }
        // A clean slot holds no counts (they are in the map): emptying it loses nothing.
        set_state(e, EMPTY);
    }
}

/// Whether a slot holds [`HEAVY_PACKETS`] or more packets since its last write-back.
#[inline(always)]
fn heavy(e: *mut CachedFlow) -> bool {
    // SAFETY: a slot of this CPU's cache.
    unsafe { (*e).stats.packets >= HEAVY_PACKETS }
}

/// A changed slot written back by the flush (CLEAN after it, DIRTY again if the map refused
/// it: the refusal is a flow update error of its flow's hook; a flow inserted again counts as
/// created). Returns 1 when refused. The slot is busy meanwhile: a packet that interrupts
/// the flush then misses and is counted in the map, never into counts about to be cleared.
#[inline(always)]
fn write_back_slot(e: *mut CachedFlow, slot: u32) -> i32 {
    set_state(e, BUSY);
    let r = rocemon_flow_write_back(slot);
    set_state(e, if r == 0 { DIRTY } else { CLEAN });
    match r {
        0 => {
            // SAFETY: a slot of this CPU's cache.
            let hook = Hook::from_u32(u32::from(key_in(unsafe { &(*e).key }).hook));
            if let Some(s) = flow_maps::slot(hook) {
                s.counters.flow_update_errors += 1;
            }
            1
        }
        INSERTED => {
            count_created_again(e);
            0
        }
        _ => 0,
    }
}

/// Counts, in the counter block of its flow's hook, a flow the flush inserted again.
#[inline(always)]
fn count_created_again(e: *mut CachedFlow) {
    // SAFETY: a slot of this CPU's cache.
    let hook = Hook::from_u32(u32::from(key_in(unsafe { &(*e).key }).hook));
    if let Some(s) = flow_maps::slot(hook) {
        s.counters.flows_created += 1;
    }
}

/// A bit per chunk of a pass.
const ALL_CHUNKS: u32 = ((1u64 << (FLOW_CACHE_SLOTS / FLUSH_CHUNK)) - 1) as u32;
const _: () = assert!(FLOW_CACHE_SLOTS / FLUSH_CHUNK <= 32);

/// This CPU's hits and misses since the last pass, over its hooks (the misses reset: a
/// packet that interrupts between the read and the reset loses its count here, a judgement's
/// sample).
#[inline(always)]
fn take_use(f: &mut FlushState) -> (u64, u64) {
    let (mut roce, mut misses) = (0, 0);
    for h in Hook::ALL {
        if let Some(s) = flow_maps::slot(h) {
            roce += s.counters.roce_packets();
            misses += s.cache.misses;
            s.cache.misses = 0;
        }
    }
    let seen = core::mem::replace(&mut f.roce_seen, roce);
    pass_use(roce, seen, misses)
}

/// Sets this CPU's cache mode, and its copy in every hook slot (what packets read); the
/// count of passes off starts again at each change.
#[inline(always)]
fn set_mode(f: &mut FlushState, mode: u32) {
    if f.mode != mode {
        f.mode = mode;
        f.passes_off = 0;
    }
    for h in Hook::ALL {
        if let Some(s) = flow_maps::slot(h) {
            // SAFETY: a field of this CPU's hook slot that only the flush writes.
            unsafe { write_volatile(addr_of_mut!(s.cache.mode), mode) };
        }
    }
}

//! The kernel programs' entry into the one counting sequence ([`agent_common::count`]): the
//! fast and slow parse paths end here, the kernel's store ([`KernelStore`]: SESSIONS, the flow
//! cache and the flow maps, the clock and the rhythm's ring) is handed to it. The AF_XDP tally
//! and `analyze` call the same sequence with their own stores.

pub use crate::flow_maps::{on, slot};
use crate::{clock, flow_cache, flow_maps, SESSIONS};
use agent_common::cache_mode::{CacheUse, CACHE_OFF, CACHE_ON};
use agent_common::clock::ClockCache;
use agent_common::count::{count, count_outcome, Store};
use agent_common::headers::mac_control::MacControl;
use agent_common::ring::{lane_of_words, slot_of, RingSlot, RING_SLOTS};
use agent_common::{
    fast::{parse_fast_with, Fast},
    parse::parse_into,
    record::PacketRecord,
    Hook, HookCounters, HookSlot, LinkType, Outcome, PacketReader, SessionKey, SessionStats,
    TrafficClasses,
};
use aya_ebpf::{bindings::BPF_NOEXIST, macros::map, maps::PerCpuArray};

/// Load-time switches, set by the loader (`EbpfLoader::set_global`) before the verifier runs:
/// the code a switch turns off is pruned and never runs. Mirror-session counters here; PSN
/// tracking with the flows ([`crate::flow_maps`]).
#[no_mangle]
static ROCEMON_SESSIONS: u8 = 1;
/// The hooks whose RoCE packets feed [`RING`] (a bit per hook; the loader picks one ingress
/// hook and egress so that no packet is added twice; 0: the ring is off).
#[no_mangle]
static ROCEMON_RING_HOOKS: u8 = 0;

/// 1: the ring reads the coarse clock ([`agent_common::SWITCH_RING_COARSE`]).
#[no_mangle]
static ROCEMON_RING_COARSE: u8 = 0;

/// RoCE packets and bytes per millisecond ([`agent_common::ring`]): the fine series the
/// agent finds the training rhythm in.
#[map]
static RING: PerCpuArray<RingSlot> = PerCpuArray::with_max_entries(RING_SLOTS, 0);

/// Whether `hook`'s RoCE packets feed the ring.
#[inline(always)]
fn ring_on(hook: Hook) -> bool {
    // SAFETY: a valid reference to a static the loader may have rewritten.
    unsafe { core::ptr::read_volatile(&ROCEMON_RING_HOOKS) & (1 << (hook as u8)) != 0 }
}

/// Adds the RoCE packet of `rec` to this CPU's ring slot of its millisecond (and its source's
/// lane); returns the clock (ns).
/// The fine clock through this CPU's cache ([`clock::fine`]: read by each packet, or
/// by one in eight while packets are dense; the bound is in `agent_common::clock`), or the
/// coarse clock where it resolves a millisecond: a packet then lands in the millisecond of
/// the last tick (at most one early). The rhythm's periods (tens of milliseconds and more)
/// do not feel either.
#[inline(always)]
fn ring_add(
    fine: &mut ClockCache,
    coarse: &mut ClockCache,
    rec: &PacketRecord,
    frame_len: u64,
) -> u64 {
    let (now, ms) = if on(&ROCEMON_RING_COARSE) {
        clock::coarse(coarse)
    } else {
        clock::fine(fine)
    };
    if let Some(s) = RING.get_ptr_mut(slot_of(ms)) {
        let (lo, hi) = rec.src_words();
        // SAFETY: this CPU's slot, as for the counter block.
        unsafe { (*s).add(ms, frame_len, lane_of_words(lo, hi)) };
    }
    now
}

/// The AF_XDP classifier feeds the ring itself for the RoCE frames it hands to a socket (the
/// socket's reader counts everything else about them in userspace).
#[inline(always)]
pub fn ring_captured(slot: &mut HookSlot, frame_len: u64) {
    if slot.record.is_roce() && ring_on(Hook::AfXdp) {
        ring_add(
            &mut slot.fine_clock,
            &mut slot.coarse_clock,
            &slot.record,
            frame_len,
        );
    }
}

/// The traffic classes RoCE and CNPs are expected in (lossy RoCE), set by the loader from the
/// configuration like the switches; the defaults are `TrafficClasses::DEFAULT`.
#[no_mangle]
static ROCEMON_ROCE_DSCP: u64 = 1 << 26;
#[no_mangle]
static ROCEMON_ROCE_PRIORITY: u8 = 3;
#[no_mangle]
static ROCEMON_CNP_DSCP: u64 = 1 << 48;

/// The configured traffic classes (read like the switches: the loader may have rewritten them).
#[inline(always)]
fn classes() -> TrafficClasses {
    // SAFETY: valid references to statics the loader may have rewritten.
    unsafe {
        TrafficClasses {
            roce_dscp: core::ptr::read_volatile(&ROCEMON_ROCE_DSCP),
            roce_priority: core::ptr::read_volatile(&ROCEMON_ROCE_PRIORITY),
            cnp_dscp: core::ptr::read_volatile(&ROCEMON_CNP_DSCP),
        }
    }
}

/// Which program counts a frame (for the kernel-only counters).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Path {
    Fast = 0,
    Slow = 1,
    /// The AF_XDP program meant to hand this frame to a socket and found none.
    RedirectFailed = 2,
    /// The AF_XDP slow program, same.
    SlowRedirectFailed = 3,
}

impl Path {
    #[inline(always)]
    fn from_u32(v: u32) -> Path {
        match v {
            0 => Path::Fast,
            1 => Path::Slow,
            2 => Path::RedirectFailed,
            _ => Path::SlowRedirectFailed,
        }
    }
}

/// The fast path: parses a frame of a common shape, asking for the hook's slot only when
/// there is something to write into its record (a RoCE packet, a MAC control frame). The
/// caller counts a record with [`counted_inline`] or [`counted`], an outcome alone with
/// [`outcome`]; [`Fast::Slow`] belongs to the slow program.
#[inline(always)]
pub fn fast<R: PacketReader>(r: Option<R>, hook: Hook) -> Fast<&'static mut HookSlot> {
    match r {
        Some(r) => parse_fast_with(&r, || slot(hook)),
        None => Fast::Slow,
    }
}

/// A frame the fast path answered with an outcome alone (ARP, TCP, UDP to another port):
/// the hook's counter block only, as [`parsed`] counts a record of that outcome.
#[inline(always)]
pub fn outcome(hook: Hook, outcome: Outcome, frame_len: u64) {
    if let Some(s) = slot(hook) {
        count_outcome(&mut s.counters, outcome, frame_len);
    }
}

/// The fast path counts inline rather than through the global function (measured: about
/// 20 ns less per packet); the shapes write the per-CPU record, whose fields the verifier
/// does not track, so the paths merge after the parse and the entry programs verify at about
/// 17,500-24,200 instructions (`tests/kernel.rs` prints them).
#[inline(always)]
pub fn counted_inline(slot: &mut HookSlot, hook: Hook, frame_len: u64, path: Path) {
    parsed(slot, hook, frame_len, path);
}

/// Counts the frame whose parse result is in this CPU's record (a failed flow update is
/// counted in `flow_update_errors`; the agent logs it when the counter first moves: no logging
/// on the packet path).
#[inline(always)]
pub fn counted(hook: Hook, frame_len: u64, path: Path) {
    rocemon_count(hook as u32, frame_len, path as u32);
}

/// The slow path: the general parser, its result written into the hook's record on this
/// CPU. `None` if the hook's slot cannot be had (a lookup at a valid index: never; nothing
/// could count the frame then) or the parser's outcome is out of range (never; counted as
/// unreachable).
#[inline(always)]
pub fn slow<R: PacketReader>(r: &R, hook: Hook, frame_len: u64) -> Option<&'static mut HookSlot> {
    let st = slot(hook)?;
    // The outcome is checked so that the subprogram keeps its scalar return value (a
    // subprogram whose R0 is left holding a stack pointer fails the verifier).
    if parse_into(r, LinkType::Ethernet, &mut st.record) as usize
        >= agent_common::counters::OUTCOME_SLOTS
    {
        unreachable(hook, frame_len);
        return None;
    }
    Some(st)
}

/// The counting sequence as a global BPF function: the verifier checks it once, on its own,
/// instead of once at the end of every parse path (BTF marks it global; it takes only
/// scalars and finds the parse result in the hook's [`HookSlot`]).
#[no_mangle]
#[inline(never)]
pub extern "C" fn rocemon_count(hook: u32, frame_len: u64, path: u32) -> u32 {
    let hook = Hook::from_u32(hook);
    let Some(st) = slot(hook) else {
        return 0;
    };
    parsed(st, hook, frame_len, Path::from_u32(path)) as u32
}

/// A frame the slow program could not be reached for: counted, under no outcome.
#[inline(always)]
pub fn unreachable(hook: Hook, frame_len: u64) {
    if let Some(s) = slot(hook) {
        let c = &mut s.counters;
        c.frames += 1;
        c.frame_bytes += frame_len;
        c.slow_path_unreachable += 1;
    }
}

/// The kernel's [`Store`]: sessions in SESSIONS, flows in the per-CPU flow cache in front of
/// the flow hash maps (a full map refuses a new flow: its packets are counted in
/// `flow_update_errors`; the agent deletes idle flows), the clock through this CPU's caches
/// (and the rhythm's ring).
struct KernelStore<'a> {
    hook: Hook,
    fine_clock: &'a mut ClockCache,
    coarse_clock: &'a mut ClockCache,
    cache: &'a mut CacheUse,
}

impl Store for KernelStore<'_> {
    #[inline(always)]
    fn classes(&self) -> TrafficClasses {
        classes()
    }

    #[inline(always)]
    fn sessions_on(&self) -> bool {
        on(&ROCEMON_SESSIONS)
    }

    #[inline(always)]
    fn psn_on(&self) -> bool {
        flow_maps::psn_on()
    }

    /// The ring needs the fine clock and the flow takes the same reading; without the ring
    /// the coarse clock (tick resolution) is enough for first/last seen and rates over polls,
    /// and read once per tick.
    #[inline(always)]
    fn now(&mut self, rec: &PacketRecord, frame_len: u64) -> u64 {
        if ring_on(self.hook) {
            ring_add(self.fine_clock, self.coarse_clock, rec, frame_len)
        } else {
            clock::coarse(self.coarse_clock).0
        }
    }

    #[inline(always)]
    fn session(&mut self, key: SessionKey, rec: &PacketRecord, frame_len: u64) -> bool {
        session(key.to_bits(), SessionStats::flags(rec), frame_len)
    }

    /// The flow key is the record's first field, looked up in place: the caller wrote the
    /// hook's byte into it ([`parsed`]).
    #[inline(always)]
    fn flow(
        &mut self,
        rec: &PacketRecord,
        hook: Hook,
        c: &mut HookCounters,
        frame_len: u64,
        now: u64,
        _psn: bool,
    ) -> bool {
        if flow_cache::enabled() {
            // SAFETY: a field of this CPU's hook slot that the flush program writes.
            let mode = unsafe { core::ptr::read_volatile(&self.cache.mode) };
            if mode != CACHE_OFF {
                let words = rec.key_words();
                if let Some(e) = flow_cache::hit(&words) {
                    // Draining: the slot is taken out unless it must stay (see
                    // `rocemon_flow_take_out`), then the packet goes to the map.
                    if mode == CACHE_ON || flow_cache::rocemon_flow_take_out(hook as u32) == 0 {
                        // SAFETY: this CPU's slot (see `flow_cache`).
                        unsafe { flow_maps::flow_record(&mut (*e).stats, rec, c, frame_len, now) };
                        flow_cache::counted(e);
                        flow_cache::refresh(e, c.flows_created, hook);
                        return false;
                    }
                } else if mode == CACHE_ON {
                    self.cache.misses += 1;
                    return flow_cache::rocemon_flow_miss(hook as u32, frame_len, now) != 0;
                }
            }
        }
        flow_maps::flow_to_map(rec, hook, c, frame_len, now)
    }

    #[inline(always)]
    fn pause_frame(&mut self, m: &MacControl) {
        crate::pause_ring::push(m);
    }
}

/// Counts one parsed frame through the one counting sequence ([`agent_common::count`]),
/// after the kernel-only counters of its path. Returns true when a flow update failed.
#[inline(always)]
fn parsed(slot: &mut HookSlot, hook: Hook, frame_len: u64, path: Path) -> bool {
    let HookSlot {
        counters: c,
        record: rec,
        fine_clock,
        coarse_clock,
        cache,
    } = slot;
    if matches!(path, Path::Slow | Path::SlowRedirectFailed) {
        c.slow_path_frames += 1;
    }
    if matches!(path, Path::RedirectFailed | Path::SlowRedirectFailed) {
        c.capture_redirect_failures += 1;
    }
    // The flow's key is looked up in place, with this hook's byte (a key copy would take
    // stack the verifier counts).
    rec.key.hook = hook as u8;
    let mut store = KernelStore {
        hook,
        fine_clock,
        coarse_clock,
        cache,
    };
    count(&mut store, c, rec, hook, frame_len)
}

/// Adds a packet to its mirror session's counters (a new session is inserted; a full map is
/// counted by the caller). A separate BPF function taking only scalars: the verifier checks it
/// without the parse path's state, so it does not multiply the paths it explores.
#[allow(clippy::needless_borrows_for_generic_args)]
#[inline(never)]
fn session(key_bits: u64, ce_cnp: u64, frame_len: u64) -> bool {
    let sk = SessionKey::from_bits(key_bits);
    if let Some(s) = SESSIONS.get_ptr_mut(&sk) {
        // SAFETY: this CPU's value of an existing element.
        unsafe { (*s).add(ce_cnp, frame_len) };
        return true;
    }
    let mut s = SessionStats::default();
    s.add(ce_cnp, frame_len);
    if SESSIONS.insert(&sk, &s, BPF_NOEXIST as u64).is_ok() {
        return true;
    }
    if let Some(s) = SESSIONS.get_ptr_mut(&sk) {
        // SAFETY: as above (another CPU inserted it in between).
        unsafe { (*s).add(ce_cnp, frame_len) };
        return true;
    }
    false
}

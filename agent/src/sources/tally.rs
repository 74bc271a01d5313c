//! Counting in userspace exactly as the kernel programs count: the one counting sequence
//! ([`agent_common::count`]) over the same parse record, with hash maps bounded like the
//! kernel's as its store. Used by the AF_XDP capture source and as the host side of the
//! kernel differential tests.

pub use crate::config::switches::Switches;
use agent_common::count::{count, flow_step, Store};
use agent_common::{
    FlowKey, FlowStats, Hook, HookCounters, PacketRecord, SessionKey, SessionStats, TrafficClasses,
    SESSION_MAP_ENTRIES,
};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Flows held at most per family, as the kernel's two flow maps (FLOWS4, FLOWS) bound them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowLimits {
    pub ipv4: usize,
    pub ipv6: usize,
}

impl FlowLimits {
    /// Both families bounded by `n`.
    pub const fn both(n: usize) -> FlowLimits {
        FlowLimits { ipv4: n, ipv6: n }
    }

    /// No bound (a host model of maps that are never full).
    pub const UNBOUNDED: FlowLimits = FlowLimits::both(usize::MAX);

    fn of(&self, ip_version: u8) -> usize {
        if ip_version == 4 {
            self.ipv4
        } else {
            self.ipv6
        }
    }
}

/// One hook's counts: what the kernel keeps in COUNTERS, FLOWS and SESSIONS.
#[derive(Clone, Debug)]
pub struct Tally {
    pub hook: Hook,
    pub counters: HookCounters,
    pub flows: FxHashMap<FlowKey, FlowStats>,
    pub sessions: FxHashMap<SessionKey, SessionStats>,
    /// Flows held at most per family (like the kernel maps' sizes): a new flow beyond it
    /// pushes out the least recently active one instead of growing memory without bound.
    pub flow_limit: FlowLimits,
    /// Flows held per family: IPv4, IPv6.
    held: [usize; 2],
    /// Per family, the held flows in the order they came in, each with its last-seen time
    /// then: the clock hand of the push-out (second chance, see [`TallyStore::flow`]).
    order: [VecDeque<(FlowKey, u64)>; 2],
    /// Flows pushed out of a full table to admit new ones.
    pub pushed_out: u64,
    /// What the kernel programs were loaded to count.
    pub switches: Switches,
}

impl Tally {
    pub fn new(hook: Hook, flow_limit: FlowLimits) -> Tally {
        Tally::with_switches(hook, flow_limit, Switches::default())
    }

    /// A tally that counts as kernel programs loaded with `switches` do.
    pub fn with_switches(hook: Hook, flow_limit: FlowLimits, switches: Switches) -> Tally {
        Tally {
            hook,
            counters: HookCounters::ZERO,
            flows: FxHashMap::default(),
            sessions: FxHashMap::default(),
            flow_limit,
            held: [0; 2],
            order: Default::default(),
            pushed_out: 0,
            switches,
        }
    }

    /// Counts one parsed frame of `frame_len` wire bytes at `now_ns`, through the one
    /// counting sequence ([`agent_common::count`]).
    pub fn record(&mut self, info: &PacketRecord, frame_len: u64, now_ns: u64) {
        let Tally {
            hook,
            counters,
            flows,
            sessions,
            flow_limit,
            held,
            order,
            pushed_out,
            switches,
        } = self;
        let mut store = TallyStore {
            flows,
            sessions,
            flow_limit: *flow_limit,
            held,
            order,
            pushed_out,
            switches,
            now_ns,
        };
        count(&mut store, counters, info, *hook, frame_len);
    }
}

impl Tally {
    /// Deletes the flows with no packet since `before_ns` (the agent's idle timeout, as it
    /// deletes them from the kernel's maps). Returns how many.
    pub fn expire(&mut self, before_ns: u64) -> u64 {
        let n = self.flows.len();
        let held = &mut self.held;
        self.flows.retain(|k, s| {
            let keep = !super::maps::idle(s, before_ns);
            if !keep {
                held[usize::from(k.ip_version != 4)] -= 1;
            }
            keep
        });
        let flows = &self.flows;
        for q in &mut self.order {
            q.retain(|(k, _)| flows.contains_key(k));
        }
        (n - self.flows.len()) as u64
    }
}

/// The tally's [`Store`]: hash maps bounded like the kernel's maps. A full session table
/// counts `session_overflow`; a full flow table (per family, as the kernel's two LRU maps)
/// admits the new flow by pushing out one not seen since the clock hand last passed it
/// (counted in [`Tally::pushed_out`]), so spoofed flows cannot shut new ones out; idle flows
/// leave by [`Tally::expire`].
struct TallyStore<'a> {
    flows: &'a mut FxHashMap<FlowKey, FlowStats>,
    sessions: &'a mut FxHashMap<SessionKey, SessionStats>,
    flow_limit: FlowLimits,
    held: &'a mut [usize; 2],
    order: &'a mut [VecDeque<(FlowKey, u64)>; 2],
    pushed_out: &'a mut u64,
    switches: &'a Switches,
    now_ns: u64,
}

impl Store for TallyStore<'_> {
    fn classes(&self) -> TrafficClasses {
        self.switches.classes
    }

    fn sessions_on(&self) -> bool {
        self.switches.session_counters
    }

    fn psn_on(&self) -> bool {
        self.switches.psn_tracking
    }

    fn now(&mut self, _rec: &PacketRecord, _frame_len: u64) -> u64 {
        self.now_ns
    }

    fn session(&mut self, key: SessionKey, rec: &PacketRecord, frame_len: u64) -> bool {
        if let Some(s) = self.sessions.get_mut(&key) {
            s.record(rec, frame_len);
        } else if self.sessions.len() < SESSION_MAP_ENTRIES as usize {
            self.sessions.entry(key).or_default().record(rec, frame_len);
        } else {
            return false;
        }
        true
    }

    fn flow(
        &mut self,
        rec: &PacketRecord,
        hook: Hook,
        c: &mut HookCounters,
        frame_len: u64,
        now: u64,
        psn: bool,
    ) -> bool {
        let key = rec.flow_key(hook);
        if let Some(s) = self.flows.get_mut(&key) {
            flow_step(s, rec, c, frame_len, now, psn);
            return false;
        }
        let family = usize::from(key.ip_version != 4);
        if self.held[family] >= self.flow_limit.of(key.ip_version) && !self.push_out(family) {
            c.flow_update_errors += 1;
            return true;
        }
        let mut s = FlowStats::default();
        flow_step(&mut s, rec, c, frame_len, now, psn);
        self.order[family].push_back((key, s.last_seen_ns));
        self.flows.insert(key, s);
        self.held[family] += 1;
        c.flows_created += 1;
        false
    }
}

impl TallyStore<'_> {
    /// Makes room for one flow of `family` (the CLOCK approximation of LRU): the hand takes
    /// the oldest entry; a flow seen since it was queued goes round again with its new time,
    /// the first one not seen since is pushed out. Each flow is passed at most twice, so an
    /// admission costs O(1) amortised. False only when nothing is held (a zero limit).
    fn push_out(&mut self, family: usize) -> bool {
        let q = &mut self.order[family];
        for _ in 0..2 * q.len() + 1 {
            let Some((k, at)) = q.pop_front() else {
                return false;
            };
            match self.flows.get(&k) {
                None => continue,
                Some(s) if s.last_seen_ns > at => q.push_back((k, s.last_seen_ns)),
                Some(_) => {
                    self.flows.remove(&k);
                    self.held[family] -= 1;
                    *self.pushed_out += 1;
                    return true;
                }
            }
        }
        false
    }
}

/// Adds one set of flows into another, merging flows with the same key (per-CPU values,
/// per-queue tallies).
pub fn merge_flows(into: &mut FxHashMap<FlowKey, FlowStats>, from: &FxHashMap<FlowKey, FlowStats>) {
    for (k, s) in from {
        into.entry(*k).or_default().merge(s);
    }
}

/// Adds one set of sessions into another.
pub fn merge_sessions(
    into: &mut FxHashMap<SessionKey, SessionStats>,
    from: &FxHashMap<SessionKey, SessionStats>,
) {
    for (k, s) in from {
        into.entry(*k).or_default().merge(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The idle timeout takes the flows quiet since the cut-off, and never a flow without a
    /// last-seen time (read while its first packet was being counted).
    #[test]
    fn expire_takes_quiet_flows_and_never_a_flow_without_a_time() {
        let mut t = Tally::new(Hook::AfXdp, FlowLimits::both(16));
        for (qp, last_seen_ns) in [(1u32, 100u64), (2, 5_000), (3, 0)] {
            let key = FlowKey {
                ip_version: 4,
                dest_qp: qp,
                ..FlowKey::default()
            };
            let s = FlowStats {
                packets: 1,
                last_seen_ns,
                ..FlowStats::default()
            };
            t.flows.insert(key, s);
        }
        t.held = [3, 0];
        assert_eq!(t.expire(1_000), 1);
        let mut left: Vec<u32> = t.flows.keys().map(|k| k.dest_qp).collect();
        left.sort_unstable();
        assert_eq!(left, [2, 3]);
        assert_eq!(t.held, [2, 0], "the family's count follows");
    }

    /// Ethernet, IPv4, UDP 4791 and a BTH (opcode 0, PSN 0): the smallest RoCE frame.
    fn minimal_roce_frame() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 12];
        f[12] = 0x08;
        f[14] = 0x45;
        let tl = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&tl.to_be_bytes());
        f[23] = 17;
        f[36..38].copy_from_slice(&4791u16.to_be_bytes());
        f[38..40].copy_from_slice(&20u16.to_be_bytes());
        f
    }

    /// Records a minimal RoCE frame of UDP source port `sport` at `now`.
    fn send(t: &mut Tally, sport: u16, now: u64) {
        let mut f = minimal_roce_frame();
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        let p = agent_common::parse_record(
            &agent_common::SliceReader(&f),
            agent_common::LinkType::Ethernet,
        );
        t.record(&p, f.len() as u64, now);
    }

    fn sports(t: &Tally) -> Vec<u16> {
        let mut v: Vec<u16> = t.flows.keys().map(|k| k.sport).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn a_full_flow_table_pushes_out_instead_of_growing() {
        let mut t = Tally::new(Hook::AfXdp, FlowLimits::both(1));
        for (sport, now) in [(1u16, 1), (2, 2), (1, 3)] {
            send(&mut t, sport, now);
        }
        assert_eq!(sports(&t), [1], "the newest flow is held");
        assert_eq!(t.counters.flow_update_errors, 0, "never refused");
        assert_eq!(t.counters.flows_created, 3);
        assert_eq!(t.pushed_out, 2);
        assert_eq!(t.counters.roce_packets(), 3);
    }

    /// A flood of one-packet flows never pushes out a flow that keeps sending: the hand
    /// gives it a second chance each time it passes.
    #[test]
    fn a_flood_of_new_flows_keeps_the_flow_that_keeps_sending() {
        let mut t = Tally::new(Hook::AfXdp, FlowLimits::both(8));
        let mut now = 1;
        send(&mut t, 1, now);
        for spoofed in 0..1000u16 {
            now += 1;
            send(&mut t, 1000 + spoofed, now);
            if spoofed % 4 == 0 {
                now += 1;
                send(&mut t, 1, now);
            }
        }
        assert!(sports(&t).contains(&1), "{:?}", sports(&t));
        let legit = t.flows.values().find(|s| s.packets > 1).unwrap();
        assert_eq!(
            legit.packets, 251,
            "every packet of the legitimate flow, exactly"
        );
        assert_eq!(t.flows.len(), 8);
        assert_eq!(t.pushed_out, 1001 - 8);
    }

    /// The idle timeout leaves no stale entry behind the hand (its queue stays bounded).
    #[test]
    fn expire_keeps_the_push_out_order_bounded() {
        let mut t = Tally::new(Hook::AfXdp, FlowLimits::both(1000));
        for round in 0..10u64 {
            for sport in 0..100u16 {
                send(&mut t, sport, round * 1000 + 1 + u64::from(sport));
            }
            t.expire(u64::MAX);
            assert_eq!(t.order[0].len(), 0);
        }
    }

    #[test]
    fn switched_off_psn_tracking_counts_no_psn_event() {
        let off = Switches {
            psn_tracking: false,
            session_counters: false,
            ..Switches::default()
        };
        let mut t = Tally::with_switches(Hook::AfXdp, FlowLimits::both(16), off);
        let mut f = minimal_roce_frame();
        f[42] = 0x04; // RC SEND ONLY: sequenced
        let mut on = Tally::new(Hook::AfXdp, FlowLimits::both(16));
        for psn in [1u8, 5, 3] {
            f[53] = psn;
            let p = agent_common::parse_record(
                &agent_common::SliceReader(&f),
                agent_common::LinkType::Ethernet,
            );
            t.record(&p, f.len() as u64, 0);
            on.record(&p, f.len() as u64, 0);
        }
        assert_eq!((t.counters.psn_gaps, t.counters.retransmits), (0, 0));
        assert_eq!((on.counters.psn_gaps, on.counters.retransmits), (3, 1));
    }
}

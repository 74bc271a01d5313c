//! The flow table: one per agent. Live mode feeds it kernel-map snapshots (cumulative
//! per-flow totals), `analyze` feeds it packets through `FlowStats::record`; both give flows
//! with totals and a smoothed rate, and the same top-K selection.

use crate::config::elephant::ElephantConfig;
use crate::detect::ecmp::FlowView;
use crate::detect::elephant::ElephantState;
use crate::pipeline::flow_counts::{EndReason, ExportMark, FlowCounts};
use crate::pipeline::flow_lives::{self, Lives};
use agent_common::{FlowKey, FlowStats};
use std::net::IpAddr;

#[path = "flow_room.rs"]
mod room;
#[path = "flow_slots.rs"]
mod slots;
use slots::FlowSlots;

/// Default time constant of the exponentially weighted rate, in seconds (the setting's).
pub const RATE_TAU_SECONDS: f64 = crate::config::thresholds::RATE_TAU_SECONDS;

/// Applies the decay of the ticks a quiet flow skipped, up to table clock `to`.
fn decay(e: &mut FlowEntry, to: f64, tau: f64) {
    if to > e.rate_clock_s {
        let f = (-(to - e.rate_clock_s) / tau).exp();
        e.rate_bytes *= f;
        e.rate_packets *= f;
        e.rate_ce *= f;
        e.rate_cnp *= f;
        e.rate_clock_s = to;
    }
}

/// What a total grew by since `prev` (which it becomes): a smaller total means the kernel
/// evicted and re-created the flow, and all of it is new.
fn since(prev: &mut u64, now: u64) -> u64 {
    let d = if now >= *prev { now - *prev } else { now };
    *prev = now;
    d
}

/// A flow as the agent knows it.
#[derive(Clone, Debug)]
pub struct FlowEntry {
    /// Index into [`FlowTable::ifaces`].
    pub iface: usize,
    pub key: FlowKey,
    pub stats: FlowStats,
    /// Smoothed wire bytes per second.
    pub rate_bytes: f64,
    /// Smoothed packets per second.
    pub rate_packets: f64,
    /// Smoothed CE-marked packets and CNPs per second (what `top` shows beside the rates:
    /// running totals beside rates read as a rate).
    pub rate_ce: f64,
    pub rate_cnp: f64,
    /// Elephant detection state.
    pub elephant: ElephantState,
    /// Totals at the previous tick (rates are computed from their change).
    prev_bytes: u64,
    prev_packets: u64,
    prev_ce: u64,
    prev_cnp: u64,
    /// Whether the flow has been through a tick (its first interval has a rate).
    ticked: bool,
    /// Poll generation that last saw the flow in the kernel map.
    generation: u64,
    /// Found in the agent's first poll with totals of unknown age (counted before this agent
    /// started: pinned maps of a previous run): its first interval gives no rate.
    baselined: bool,
    /// In the table's active list: ticks visit it (see [`FlowTable::tick`]).
    active: bool,
    /// The table clock its rates were last brought to: a quiet flow's rates decay lazily.
    rate_clock_s: f64,
    /// Its last flow record (only while records are asked for: [`FlowTable::record_ends`]).
    pub export: Option<Box<ExportMark>>,
    /// Its earlier lives in the kernel map, once the full map pushed it out and it came
    /// back (live mode; `stats` then holds the totals of every life).
    lives: Option<Box<Lives>>,
}

impl FlowEntry {
    /// The kernel map's value of the flow at the last read (its current life).
    fn map_value(&self) -> &FlowStats {
        self.lives.as_ref().map_or(&self.stats, |l| &l.current)
    }

    pub fn src(&self) -> IpAddr {
        addr(self.key.ip_version, &self.key.src)
    }
    pub fn dst(&self) -> IpAddr {
        addr(self.key.ip_version, &self.key.dst)
    }
}

pub use agent_common::flow_key::addr;

pub use crate::detect::elephant::ElephantEvent;

/// What flows that left a bounded table carried (their packets stay in every global counter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EvictedFlows {
    pub flows: u64,
    pub packets: u64,
    pub bytes: u64,
    pub ecn_ce: u64,
    pub cnp: u64,
}

impl EvictedFlows {
    /// Adds a flow that left the table.
    fn add(&mut self, e: &FlowEntry) {
        self.flows += 1;
        self.packets += e.stats.packets;
        self.bytes += e.stats.bytes;
        self.ecn_ce += e.stats.ecn_ce;
        self.cnp += e.stats.cnp;
    }
}

/// The flow table. Ticks cost the flows that changed, not all flows: a flow whose totals did
/// not move, that is no elephant and whose rate is below its entry threshold leaves the
/// active list, and its rates decay lazily (`exp(-t/tau)`, what the ticks it skips would
/// have applied) until it moves again or is read. With a bound (`max_flows`) the longest
/// quiet flows leave the table when it is full, their totals kept in [`EvictedFlows`].
#[derive(Debug)]
pub struct FlowTable {
    pub ifaces: Vec<String>,
    /// The flows in one dense vector behind an index of their keys (see [`slots`]).
    entries: FlowSlots,
    active: Vec<(usize, FlowKey)>,
    /// Flows held at most (None: no bound; the live table is bounded by the kernel maps).
    pub max_flows: Option<usize>,
    pub evicted: EvictedFlows,
    generation: u64,
    /// Time constant of the smoothed rates.
    pub tau_s: f64,
    /// Seconds of ticks so far.
    pub clock_s: f64,
    /// Keep what flow records need (set by the pipeline when records are asked for): the
    /// flows created and the flows that left, with why, until [`FlowTable::take_ended`].
    pub record_ends: bool,
    created: Vec<(usize, FlowKey)>,
    ended: Vec<(FlowEntry, EndReason)>,
    /// Flows the full kernel map pushed out that the table holds at most per interface (see
    /// [`FlowTable::end_poll`]; 0: none, as `analyze` and the tests that feed snapshots).
    pub hold_pushed_out: usize,
    /// The eviction's list of candidates, kept between evictions (a flood of new flows
    /// evicts once per eighth of the table).
    room_scratch: Vec<(u64, usize)>,
    /// Elephants among the last eviction's candidates (see [`FlowTable::make_room`]).
    room_spare: usize,
}

impl FlowTable {
    pub fn new(ifaces: Vec<String>) -> Self {
        FlowTable {
            ifaces,
            entries: FlowSlots::default(),
            active: Vec::new(),
            max_flows: None,
            evicted: EvictedFlows::default(),
            generation: 0,
            tau_s: RATE_TAU_SECONDS,
            clock_s: 0.0,
            record_ends: false,
            created: Vec::new(),
            ended: Vec::new(),
            hold_pushed_out: 0,
            room_scratch: Vec::new(),
            room_spare: room::ROOM_SPARE,
        }
    }

    /// The flow's entry (created when new), on the active list.
    fn entry(&mut self, iface: usize, key: FlowKey) -> &mut FlowEntry {
        self.entry_hashed(self.hash(iface, &key), iface, key)
    }

    /// [`FlowTable::entry`] with the key's [`FlowTable::hash`]. One probe of the index finds
    /// the flow or tells that it is new (a flood of new flows into a full table paid a
    /// second probe for the same answer before making room).
    fn entry_hashed(&mut self, hash: u64, iface: usize, key: FlowKey) -> &mut FlowEntry {
        let i = match self.entries.position_hashed(hash, &(iface, key)) {
            Some(i) => i,
            None => {
                if let Some(max) = self.max_flows {
                    if self.entries.len() >= max {
                        self.make_room(max);
                    }
                }
                if self.record_ends {
                    self.created.push((iface, key));
                }
                self.entries.push_new_hashed(
                    hash,
                    FlowEntry {
                        iface,
                        key,
                        stats: FlowStats::default(),
                        rate_bytes: 0.0,
                        rate_packets: 0.0,
                        rate_ce: 0.0,
                        rate_cnp: 0.0,
                        elephant: ElephantState::default(),
                        prev_bytes: 0,
                        prev_packets: 0,
                        prev_ce: 0,
                        prev_cnp: 0,
                        ticked: false,
                        generation: self.generation,
                        baselined: false,
                        active: false,
                        rate_clock_s: self.clock_s,
                        export: None,
                        lives: None,
                    },
                )
            }
        };
        let e = self.entries.at_mut(i);
        if !e.active {
            e.active = true;
            self.active.push((iface, key));
        }
        e
    }

    /// Brings every quiet flow's rates to the table clock (before reading rates of all flows).
    pub fn settle(&mut self) {
        let (now, tau) = (self.clock_s, self.tau_s.max(1e-3));
        for e in self.entries.values_mut() {
            decay(e, now, tau);
        }
    }

    /// Advances the clock by `dt` seconds: smoothed rates from the totals' change since the
    /// last tick, then elephant detection against each interface's entry threshold
    /// (`enter_bps[iface]`). The same code serves live polls and capture time.
    pub fn tick(&mut self, dt: f64, cfg: &ElephantConfig, enter_bps: &[f64]) -> Vec<ElephantEvent> {
        let before = self.clock_s;
        self.clock_s += dt;
        let now = self.clock_s;
        let tau = self.tau_s.max(1e-3);
        let alpha = if dt > 0.0 {
            1.0 - (-dt / tau).exp()
        } else {
            0.0
        };
        let mut events = Vec::new();
        let mut active = std::mem::take(&mut self.active);
        active.retain(|k| {
            let Some(e) = self.entries.get_mut(k) else {
                return false; // evicted
            };
            // The ticks it skipped while quiet.
            decay(e, before, tau);
            e.rate_clock_s = now;
            let db = since(&mut e.prev_bytes, e.stats.bytes);
            let dp = since(&mut e.prev_packets, e.stats.packets);
            let dce = since(&mut e.prev_ce, e.stats.ecn_ce);
            let dcnp = since(&mut e.prev_cnp, e.stats.cnp);
            if dt <= 0.0 {
                return true;
            }
            if e.baselined {
                // Totals from before this agent: no rate until the next interval.
                e.baselined = false;
                return true;
            }
            let (rb, rp) = (db as f64 / dt, dp as f64 / dt);
            let (rce, rcnp) = (dce as f64 / dt, dcnp as f64 / dt);
            if e.ticked {
                e.rate_bytes += alpha * (rb - e.rate_bytes);
                e.rate_packets += alpha * (rp - e.rate_packets);
                e.rate_ce += alpha * (rce - e.rate_ce);
                e.rate_cnp += alpha * (rcnp - e.rate_cnp);
            } else {
                // The first interval seeds the average (no ramp from zero).
                e.rate_bytes = rb;
                e.rate_packets = rp;
                e.rate_ce = rce;
                e.rate_cnp = rcnp;
                e.ticked = true;
            }
            let enter = enter_bps
                .get(e.iface)
                .copied()
                .unwrap_or(cfg.threshold_bytes_per_second);
            if let Some(t) = e.elephant.step(cfg, enter, e.rate_bytes, dt, now) {
                events.push(ElephantEvent {
                    iface: e.iface,
                    key: e.key,
                    transition: t,
                    at_s: now,
                    rate_bytes: e.rate_bytes,
                });
            }
            // Quiet: nothing moved, no elephant, below the entry threshold (so the detector
            // has nothing to do until it moves: its steps would only keep `above_s` at 0).
            let quiet = db == 0 && dp == 0 && !e.elephant.elephant && e.rate_bytes < enter;
            e.active = !quiet;
            !quiet
        });
        self.active = active;
        events
    }

    /// The detector's view of the elephants (cheap: elephants are always active).
    pub fn elephant_views(&self) -> Vec<FlowView> {
        self.active
            .iter()
            .filter_map(|k| self.entries.get(k))
            .filter(|e| e.elephant.elephant)
            .map(|e| FlowView {
                iface: e.iface,
                key: e.key,
                rate_bytes: e.rate_bytes,
                elephant: true,
            })
            .collect()
    }

    /// The detector's view of every flow.
    pub fn views(&self) -> Vec<FlowView> {
        self.entries
            .values()
            .map(|e| FlowView {
                iface: e.iface,
                key: e.key,
                rate_bytes: e.rate_bytes,
                elephant: e.elephant.elephant,
            })
            .collect()
    }

    /// Elephants per interface.
    pub fn elephants_for(&self, iface: usize) -> usize {
        self.entries
            .values()
            .filter(|e| e.iface == iface && e.elephant.elephant)
            .count()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Flows the next tick visits.
    pub fn active_len(&self) -> usize {
        self.active.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Flows of one interface.
    pub fn count_for(&self, iface: usize) -> usize {
        self.entries.values().filter(|e| e.iface == iface).count()
    }

    /// A flow's hash in the table, for the `*_hashed` calls: a packet's key hashed once for
    /// its two prefetches and its update.
    pub fn hash(&self, iface: usize, key: &FlowKey) -> u64 {
        self.entries.hash(&(iface, *key))
    }

    /// Asks the CPU for the cache lines of a flow that a packet will soon update (captures:
    /// the flow thread looks a few packets ahead); `hash` is the flow's [`FlowTable::hash`].
    pub fn prefetch_hashed(&self, hash: u64) {
        self.entries.prefetch_hashed(hash);
    }

    /// Asks for the flow's slot in the table's index (a few packets before
    /// [`FlowTable::prefetch_hashed`] reads it).
    pub fn prefetch_slot(&self, hash: u64) {
        self.entries.prefetch_slot(hash);
    }

    pub fn iter(&self) -> impl Iterator<Item = &FlowEntry> {
        self.entries.values()
    }

    /// A capture's flow state for the counting sequence's flow step (`analyze`'s store):
    /// found, or created (true) where a full table first evicts the flow quiet the longest
    /// (its totals kept in [`FlowTable::evicted`]). `hash` is the flow's [`FlowTable::hash`]
    /// (`analyze` hashes a packet's key once, for its prefetches and this).
    pub fn stats_hashed(
        &mut self,
        hash: u64,
        iface: usize,
        key: FlowKey,
    ) -> (&mut FlowStats, bool) {
        let e = self.entry_hashed(hash, iface, key);
        let created = e.stats.packets == 0;
        (&mut e.stats, created)
    }

    /// Starts a poll round (live mode).
    pub fn begin_poll(&mut self) {
        self.generation += 1;
    }

    /// Applies a kernel-map snapshot (cumulative totals) of one flow; rates follow at the
    /// next [`FlowTable::tick`]. A snapshot of a new life of the flow (the full map pushed
    /// it out since the last read) adds to the totals of the earlier ones
    /// ([`flow_lives`]).
    pub fn update(&mut self, iface: usize, key: FlowKey, stats: FlowStats) {
        let generation = self.generation;
        let known = self.entries.get_mut(&(iface, key)).filter(|e| {
            let last = e.map_value();
            last.packets == stats.packets && last.bytes == stats.bytes
        });
        if let Some(e) = known {
            // Unchanged: still held by the kernel, nothing for the ticks to do.
            e.generation = generation;
            return;
        }
        let record = self.record_ends;
        let e = self.entry(iface, key);
        if flow_lives::restarted(e.map_value(), &stats) {
            e.lives = Some(Box::new(Lives {
                before: e.stats,
                current: FlowStats::default(),
            }));
        }
        // A snapshot read while the kernel counted the flow's first packet may lack its time:
        // the time already known stands (a held flow's first seen never moves).
        let mut stats = stats;
        let last = *e.map_value();
        if stats.first_seen_ns == 0 || (last.first_seen_ns != 0 && last.packets <= stats.packets) {
            stats.first_seen_ns = if last.first_seen_ns != 0 {
                last.first_seen_ns
            } else {
                stats.first_seen_ns.max(stats.last_seen_ns)
            };
        }
        if generation == 1 && e.stats.packets == 0 && stats.packets > 0 {
            // The first poll: whatever the map holds was counted before this agent started
            // (a previous run's pinned maps), over an unknown time: a baseline, not a rate.
            e.prev_bytes = stats.bytes;
            e.prev_packets = stats.packets;
            e.baselined = true;
            if record {
                // Records carry what this agent saw: a baseline, not a delta.
                e.export = Some(Box::new(ExportMark {
                    counts: FlowCounts::of(&stats),
                    at_ns: stats.last_seen_ns,
                    due_ns: 0,
                }));
            }
        }
        match &mut e.lives {
            Some(l) => {
                l.current = stats;
                e.stats = flow_lives::totals(l, &stats);
            }
            None => e.stats = stats,
        }
        e.generation = generation;
    }

    /// Ends a poll round: flows of `polled` interfaces (each with the idle cut-off of its
    /// read, kernel ns) that the kernel no longer holds leave the table, unless heard since
    /// the cut-off: those the full LRU map pushed out (the agent deletes only idle flows),
    /// held at their totals until they idle out or come back ([`flow_lives`]). Only flows
    /// seen more than once are held (a flood's spoofed flows are seen once), the most
    /// recently heard [`FlowTable::hold_pushed_out`] of them per interface, so no flood
    /// grows the table past the maps' size. Returns how many left, per interface.
    pub fn end_poll(&mut self, polled: &[(usize, u64)]) -> Vec<usize> {
        let g = self.generation;
        let held = self.pushed_out_held(polled);
        let mut gone = vec![0; self.ifaces.len()];
        let (record, ended) = (self.record_ends, &mut self.ended);
        self.entries.retain(|e| {
            let keep = !polled.iter().any(|(i, _)| *i == e.iface)
                || e.generation == g
                || held.contains(&(e.iface, e.key));
            if !keep {
                if let Some(n) = gone.get_mut(e.iface) {
                    *n += 1;
                }
                if record {
                    ended.push((e.clone(), EndReason::IdleTimeout));
                }
            }
            keep
        });
        gone
    }

    /// The flows absent from this round's reads that [`FlowTable::end_poll`] holds.
    fn pushed_out_held(&self, polled: &[(usize, u64)]) -> rustc_hash::FxHashSet<(usize, FlowKey)> {
        let mut held = rustc_hash::FxHashSet::default();
        if self.hold_pushed_out == 0 {
            return held;
        }
        for &(iface, idle_before) in polled {
            let mut absent: Vec<(u64, FlowKey)> = self
                .entries
                .values()
                .filter(|e| {
                    e.iface == iface
                        && e.generation != self.generation
                        && e.stats.packets > 1
                        && e.stats.last_seen_ns >= idle_before
                })
                .map(|e| (e.stats.last_seen_ns, e.key))
                .collect();
            absent.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
            held.extend(
                absent
                    .into_iter()
                    .take(self.hold_pushed_out)
                    .map(|(_, k)| (iface, k)),
            );
        }
        held
    }

    /// The flows created since the last call (with [`FlowTable::record_ends`] only).
    pub fn take_created(&mut self) -> Vec<(usize, FlowKey)> {
        std::mem::take(&mut self.created)
    }

    /// The flows that left since the last call, with why (with [`FlowTable::record_ends`]).
    pub fn take_ended(&mut self) -> Vec<(FlowEntry, EndReason)> {
        std::mem::take(&mut self.ended)
    }

    /// A flow's entry, to read and to mark what its record carried.
    pub fn get_mut(&mut self, iface: usize, key: &FlowKey) -> Option<&mut FlowEntry> {
        self.entries.get_mut(&(iface, *key))
    }

    /// Every flow, to mark them all (the last records at a stop).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut FlowEntry> {
        self.entries.values_mut()
    }

    /// The `k` flows with the highest byte rate (then most bytes), highest first. Selects
    /// before sorting: O(n + k log k), so a poll over 100,000 flows stays cheap.
    pub fn top_k(&self, k: usize) -> Vec<&FlowEntry> {
        let order = |a: &&FlowEntry, b: &&FlowEntry| {
            b.rate_bytes
                .total_cmp(&a.rate_bytes)
                .then(b.stats.bytes.cmp(&a.stats.bytes))
                .then(a.key.cmp(&b.key))
                .then(a.iface.cmp(&b.iface))
        };
        let mut v: Vec<&FlowEntry> = self.entries.values().collect();
        if k < v.len() {
            if k == 0 {
                return Vec::new();
            }
            v.select_nth_unstable_by(k - 1, order);
            v.truncate(k);
        }
        v.sort_by(order);
        v
    }

    /// The flows exported per flow: elephants first (highest rate first), then the highest
    /// rates, `k` in all.
    pub fn exported(&self, k: usize) -> Vec<&FlowEntry> {
        let mut v: Vec<&FlowEntry> = self
            .entries
            .values()
            .filter(|e| e.elephant.elephant)
            .collect();
        v.sort_by(|a, b| {
            b.rate_bytes
                .total_cmp(&a.rate_bytes)
                .then(a.key.cmp(&b.key))
        });
        v.truncate(k);
        if v.len() < k {
            let rest = self.top_k(k);
            for e in rest {
                if v.len() >= k {
                    break;
                }
                if !e.elephant.elephant {
                    v.push(e);
                }
            }
        }
        v
    }
}

#[cfg(test)]
#[path = "flows_tests.rs"]
mod tests;

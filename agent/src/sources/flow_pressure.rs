//! How full an interface's flow maps are, and the flows a full map pushed out.
//!
//! The flow maps are LRU maps: a new flow is always admitted, and when a map is full the
//! kernel silently drops the flow least recently touched. The kernel cannot count that (the
//! LRU eviction has no hook), so it is seen from here, poll by poll: a flow held at the last
//! read that is gone now although the agent did not delete it (the idle timeout), or whose
//! counts went back (pushed out and admitted again since), was pushed out, and what it
//! counted since the last read is lost. The AF_XDP tallies push out the same way
//! ([`super::tally`]), so both paths are watched alike.

use agent_common::{FlowKey, FlowStats, Hook, MAP_FLOWS, MAP_FLOWS4, MAP_FLOWS_OUT};
use rustc_hash::FxHashMap;

/// An interface's flow maps: IPv4 and IPv6 flows that come in, and the flows the host sends.
pub const FLOW_MAPS: usize = 3;

/// The fill of an interface's flow maps, in [`FLOW_MAPS`]' order.
pub type Fill = [MapFill; FLOW_MAPS];

/// Which of the maps holds `k` (the index in a [`Fill`]).
pub fn map_of(k: &FlowKey) -> usize {
    if Hook::sends(k.hook) {
        2
    } else {
        usize::from(k.ip_version != 4)
    }
}

/// One map at one read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapFill {
    /// The kernel map's name (`FLOWS4` holds incoming IPv4 flows, `FLOWS` incoming IPv6
    /// flows, `FLOWS_OUT` the flows the host sends).
    pub map: &'static str,
    /// Flows held after this poll's idle deletions.
    pub entries: u64,
    pub capacity: u64,
    /// Flows pushed out since the last read.
    pub pushed_out: u64,
    /// Flows pushed out since the agent started.
    pub pushed_out_total: u64,
}

impl MapFill {
    /// Entries against capacity, 0..=1.
    pub fn ratio(&self) -> f64 {
        if self.capacity == 0 {
            0.0
        } else {
            self.entries as f64 / self.capacity as f64
        }
    }
}

/// The flows of the previous read, per interface (each probe keeps one).
#[derive(Debug, Default)]
pub struct FlowPressure {
    /// Held flows (not deleted as idle) with their packet count and first-seen time at the
    /// last read.
    held: FxHashMap<FlowKey, (u64, u64)>,
    /// Flows pushed out since the last warning line, and when that line was written.
    unwarned: u64,
    warned_at: Option<std::time::Instant>,
    /// Per map, flows pushed out since the agent started.
    totals: [u64; FLOW_MAPS],
    /// When the maps were last read (monotonic ns).
    last_read_ns: Option<u64>,
    /// After the last read: the flows the maps held once the idle ones were deleted, and the
    /// flows created so far (the counter blocks' `flows_created`, over the hooks).
    base: Option<(i64, u64)>,
    /// What the last reconciliation came out below zero (an insert counted after the flows
    /// were read), made good once at the next.
    debt: i64,
}

/// One read of an interface's flow maps, as [`FlowPressure::observe`] takes it.
#[derive(Clone, Copy, Debug)]
pub struct Read<'a> {
    /// Every flow read, merged over CPUs and queues.
    pub flows: &'a [(FlowKey, FlowStats)],
    /// The idle cut-off of this read ([`FlowPressure::idle_cutoff`]).
    pub idle_before_ns: u64,
    /// The maps' sizes: IPv4, IPv6, sent.
    pub sizes: [u64; FLOW_MAPS],
    /// The flows created so far, over the interface's hooks (None: the counters could not
    /// be read).
    pub created: Option<u64>,
    /// The idle flows this read deleted.
    pub deleted: u64,
}

/// At most one warning line per interface per this long while flows are pushed out.
pub const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl FlowPressure {
    /// The idle cut-off of a read at `now_ns` (monotonic): flows with no packet since it are
    /// deleted. Never later than the previous read, so a flow that had a packet since then
    /// is never deleted: its newest state may sit in a flow cache slot the next flush puts
    /// back into the map (where the map pushed it out), and an idle flow must not come back
    /// from a slot with its old totals.
    pub fn idle_cutoff(&mut self, now_ns: u64, timeout: std::time::Duration) -> u64 {
        let by_timeout = now_ns.saturating_sub(timeout.as_nanos() as u64);
        let cut = match self.last_read_ns {
            Some(last) => by_timeout.min(last),
            None => by_timeout,
        };
        self.last_read_ns = Some(now_ns);
        cut
    }

    /// Takes one read of the maps: returns the maps' fill and push-outs, in [`FLOW_MAPS`]'
    /// order.
    ///
    /// Two views of the push-outs, the larger counts: the flows seen to go (held at the last
    /// read, gone now or counting afresh: only those that lived across a read), and the
    /// reconciliation of the counters (the flows held after the last read, plus the flows
    /// created since, minus the flows held now: also those that came and went between two
    /// reads, as a flood's do). The second has no map; its excess goes to the fuller map.
    pub fn observe(&mut self, read: Read<'_>) -> Fill {
        let Read {
            flows,
            idle_before_ns,
            sizes,
            created,
            deleted,
        } = read;
        let mut out = [
            MapFill {
                map: MAP_FLOWS4,
                capacity: sizes[0],
                ..MapFill::default()
            },
            MapFill {
                map: MAP_FLOWS,
                capacity: sizes[1],
                ..MapFill::default()
            },
            MapFill {
                map: MAP_FLOWS_OUT,
                capacity: sizes[2],
                ..MapFill::default()
            },
        ];
        let mut next = FxHashMap::default();
        next.reserve(flows.len());
        for (k, s) in flows {
            if let Some(&(packets, first)) = self.held.get(k) {
                // Counts that went back, or a later first packet: pushed out and admitted
                // again since the last read (a first-seen time of 0 is a value read while
                // its first packet was being counted: no evidence either way).
                let later = first != 0 && s.first_seen_ns > first;
                if s.packets < packets || later {
                    out[map_of(k)].pushed_out += 1;
                }
            }
            if !super::maps::idle(s, idle_before_ns) {
                out[map_of(k)].entries += 1;
                next.insert(*k, (s.packets, s.first_seen_ns));
            }
        }
        let present: rustc_hash::FxHashSet<&FlowKey> = flows.iter().map(|(k, _)| k).collect();
        for k in self.held.keys().filter(|k| !present.contains(k)) {
            out[map_of(k)].pushed_out += 1;
        }
        self.held = next;
        let seen: u64 = out.iter().map(|f| f.pushed_out).sum();
        let now = flows.len() as i64;
        if let (Some(c), Some((after, before))) = (created, self.base) {
            let raw = after + c.saturating_sub(before) as i64 - now;
            let balanced = raw + self.debt;
            self.debt = raw.min(0);
            let reconciled = balanced.max(0) as u64;
            if reconciled > seen {
                let fuller = (0..FLOW_MAPS)
                    .max_by(|&a, &b| out[a].ratio().total_cmp(&out[b].ratio()).then(b.cmp(&a)))
                    .unwrap_or(0);
                out[fuller].pushed_out += reconciled - seen;
            }
        }
        self.base = created.map(|c| (now - deleted as i64, c));
        self.unwarned += out.iter().map(|f| f.pushed_out).sum::<u64>();
        for (f, total) in out.iter_mut().zip(&mut self.totals) {
            *total += f.pushed_out;
            f.pushed_out_total = *total;
        }
        out
    }

    /// The warning line for the log, at most one per [`WARN_EVERY`] while flows are pushed
    /// out (the first at once): how many since the last line, and how full each map is.
    pub fn warning(&mut self, iface: &str, fill: &Fill, now: std::time::Instant) -> Option<String> {
        if self.unwarned == 0
            || self
                .warned_at
                .is_some_and(|at| now.duration_since(at) < WARN_EVERY)
        {
            return None;
        }
        let maps: Vec<String> = fill
            .iter()
            .map(|f| format!("{} {} of {}", f.map, f.entries, f.capacity))
            .collect();
        let line = format!(
            "{iface}: the flow maps are full ({}): {} flows pushed out since the last warning to admit new ones, their per-flow counts since the previous poll are lost (global counters stay exact); many short-lived or spoofed flows, or maps too small for the fabric: raise flow_map_entries if the flows are real (rocemon_flows_pushed_out_total)",
            maps.join(", "),
            self.unwarned
        );
        self.unwarned = 0;
        self.warned_at = Some(now);
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(v: u8, qp: u32) -> FlowKey {
        FlowKey {
            ip_version: v,
            dest_qp: qp,
            ..FlowKey::default()
        }
    }

    fn stats(packets: u64, last_seen_ns: u64) -> FlowStats {
        FlowStats {
            packets,
            last_seen_ns,
            ..FlowStats::default()
        }
    }

    const SIZES: [u64; FLOW_MAPS] = [4, 8, 2];

    /// A read without the counters (only the flows seen to go count).
    fn obs(p: &mut FlowPressure, flows: &[(FlowKey, FlowStats)], idle: u64) -> Fill {
        p.observe(Read {
            flows,
            idle_before_ns: idle,
            sizes: SIZES,
            created: None,
            deleted: 0,
        })
    }

    /// Flows that came and went between two reads (a flood) are counted from the counters:
    /// 4 held, 100 created since, 4 held now (other ones): 100 pushed out, of which the 4
    /// seen to go are part.
    #[test]
    fn flows_that_came_and_went_between_reads_are_counted_from_the_counters() {
        let mut p = FlowPressure::default();
        let read = |p: &mut FlowPressure, flows: &[(FlowKey, FlowStats)], created, deleted| {
            p.observe(Read {
                flows,
                idle_before_ns: 200,
                sizes: SIZES,
                created: Some(created),
                deleted,
            })
        };
        let at = |qps: std::ops::Range<u32>, last_seen| -> Vec<(FlowKey, FlowStats)> {
            qps.map(|i| (key(4, i), stats(1, last_seen))).collect()
        };
        read(&mut p, &at(0..4, 500), 4, 0);
        let [v4, v6, _] = read(&mut p, &at(100..104, 500), 104, 0);
        assert_eq!((v4.pushed_out, v6.pushed_out), (100, 0));
        // Two of them idle now, deleted: no push-outs.
        let mut now = at(100..102, 100);
        now.extend(at(102..104, 500));
        let [v4, _, _] = read(&mut p, &now, 104, 2);
        assert_eq!(v4.pushed_out, 0);
        // Two new flows, one of them created after the counters were read: no push-out now,
        // and none at the next read, where the counters have it.
        let mut now = at(102..104, 500);
        now.extend(at(0..1, 500));
        now.extend(at(50..51, 500));
        let [v4, _, _] = read(&mut p, &now, 105, 0);
        assert_eq!(v4.pushed_out, 0);
        let [v4, _, _] = read(&mut p, &now, 106, 0);
        assert_eq!(
            v4.pushed_out, 0,
            "the late-counted insert balances the debt"
        );
        assert_eq!(v4.pushed_out_total, 100);
    }

    #[test]
    fn fill_counts_held_flows_per_family() {
        let mut p = FlowPressure::default();
        let fl = [
            (key(4, 1), stats(1, 100)),
            (key(4, 2), stats(1, 100)),
            (key(6, 3), stats(1, 100)),
        ];
        let [v4, v6, _] = obs(&mut p, &fl, 0);
        assert_eq!((v4.map, v4.entries, v4.capacity), ("FLOWS4", 2, 4));
        assert_eq!((v6.map, v6.entries, v6.capacity), ("FLOWS", 1, 8));
        assert_eq!(v4.ratio(), 0.5);
        assert_eq!(v4.pushed_out + v6.pushed_out, 0);
    }

    #[test]
    fn the_flows_the_host_sends_fill_their_own_map() {
        let mut p = FlowPressure::default();
        let sent = |qp| FlowKey {
            hook: Hook::TcEgress as u8,
            ..key(4, qp)
        };
        let fl = [(sent(1), stats(1, 100)), (key(4, 2), stats(1, 100))];
        let [v4, v6, out] = obs(&mut p, &fl, 0);
        assert_eq!((out.map, out.entries, out.capacity), ("FLOWS_OUT", 1, 2));
        assert_eq!((v4.entries, v6.entries), (1, 0));
        // Gone without the idle timeout: pushed out of its own map.
        let [v4, _, out] = obs(&mut p, &fl[1..], 0);
        assert_eq!((v4.pushed_out, out.pushed_out), (0, 1));
    }

    #[test]
    fn a_held_flow_gone_without_the_idle_timeout_was_pushed_out() {
        let mut p = FlowPressure::default();
        obs(
            &mut p,
            &[(key(4, 1), stats(5, 100)), (key(6, 2), stats(5, 100))],
            0,
        );
        let [v4, v6, _] = obs(&mut p, &[(key(6, 2), stats(6, 200))], 0);
        assert_eq!((v4.pushed_out, v6.pushed_out), (1, 0));
    }

    #[test]
    fn counts_that_go_back_were_pushed_out_and_admitted_again() {
        let mut p = FlowPressure::default();
        obs(&mut p, &[(key(4, 1), stats(50, 100))], 0);
        let [v4, _, _] = obs(&mut p, &[(key(4, 1), stats(3, 300))], 0);
        assert_eq!(v4.pushed_out, 1);
    }

    #[test]
    fn a_later_first_packet_was_pushed_out_and_admitted_again() {
        let mut p = FlowPressure::default();
        let first = |packets, first_seen_ns| FlowStats {
            first_seen_ns,
            ..stats(packets, 500)
        };
        obs(&mut p, &[(key(4, 1), first(5, 100))], 0);
        let [v4, _, _] = obs(&mut p, &[(key(4, 1), first(9, 100))], 0);
        assert_eq!(v4.pushed_out, 0, "the same flow, counting on");
        let [v4, _, _] = obs(&mut p, &[(key(4, 1), first(20, 400))], 0);
        assert_eq!(v4.pushed_out, 1);
    }

    /// One line at once, then at most one a minute while push-outs go on, each with the
    /// count since the previous line.
    #[test]
    fn one_warning_a_minute_while_flows_are_pushed_out() {
        let mut p = FlowPressure::default();
        let t0 = std::time::Instant::now();
        let mut lines = Vec::new();
        for poll in 0..130u64 {
            // A new flow every poll pushes out the previous one.
            let fill = obs(&mut p, &[(key(4, poll as u32), stats(1, 100))], 0);
            let now = t0 + std::time::Duration::from_secs(poll);
            lines.extend(p.warning("eth1", &fill, now));
        }
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[0].contains("1 flows pushed out"), "{}", lines[0]);
        assert!(lines[1].contains("60 flows pushed out"), "{}", lines[1]);
        assert!(lines[1].contains("FLOWS4 1 of 4"), "{}", lines[1]);
        let fill = obs(&mut p, &[(key(4, 999), stats(1, 100))], 1_000);
        let quiet = obs(&mut p, &[], 1_000);
        assert_eq!(quiet[0].pushed_out, 0);
        let _ = fill;
        assert!(p
            .warning("eth1", &quiet, t0 + std::time::Duration::from_secs(1_000))
            .is_some_and(|l| l.contains("9 flows")));
        assert!(
            p.warning("eth1", &quiet, t0 + std::time::Duration::from_secs(2_000))
                .is_none(),
            "no line while nothing is pushed out"
        );
    }

    #[test]
    fn the_idle_cutoff_never_passes_the_previous_read() {
        let mut p = FlowPressure::default();
        let s = std::time::Duration::from_secs(1);
        assert_eq!(p.idle_cutoff(10_000_000_000, s), 9_000_000_000);
        // A read 0.5 s later with a 0.1 s timeout: not past the previous read.
        let short = std::time::Duration::from_millis(100);
        assert_eq!(p.idle_cutoff(10_500_000_000, short), 10_000_000_000);
        assert_eq!(p.idle_cutoff(20_000_000_000, s), 10_500_000_000);
        assert_eq!(p.idle_cutoff(20_500_000_000, s), 19_500_000_000);
    }

    #[test]
    fn flows_deleted_as_idle_are_not_pushed_out() {
        let mut p = FlowPressure::default();
        // Idle at this read (deleted by the agent): not held, not counted as entries.
        let [v4, _, _] = obs(&mut p, &[(key(4, 1), stats(5, 100))], 1_000);
        assert_eq!(v4.entries, 0);
        let [v4, _, _] = obs(&mut p, &[], 1_000);
        assert_eq!(v4.pushed_out, 0, "the idle timeout took it");
    }
}

//! The senders' answer to CNPs, live (DCQCN's reaction point), where the agent sees both
//! directions of a connection (a host's ingress and egress, or a mirror of both): at each
//! poll, the flows' byte totals. A CNP flow B -> A to QP `q` answers the data flows A -> B on
//! the UDP port whose reverse packets (B -> A, the ACKs) carry `q`, as in
//! [`super::cnp_response`]. A burst of CNPs (CNPs in a poll interval after one without) is
//! judged one interval later: the data flow's rate in the interval after the burst began
//! against the interval before it. A sender that keeps [`super::engine::reaction::IGNORED_RATIO`] of its rate while
//! CNPs keep arriving ignored them. The poll interval is coarser than a capture's 1 ms
//! windows, and a sender that answers at all cuts its rate for as long as CNPs come.

use agent_common::FlowKey;
use rustc_hash::FxHashMap;

/// Intervals without a CNP before CNPs are a new burst (a stalled interval in the middle of
/// one is not its start).
pub const QUIET_INTERVALS: u32 = 2;

/// The host part of a key (hook aside: one connection may be seen at several hooks).
type Ends = ([u8; 16], [u8; 16], u8);

fn ends(k: &FlowKey) -> Ends {
    (k.src, k.dst, k.ip_version)
}

pub use super::live_flows::FlowTotals;

#[derive(Clone, Copy, Debug, Default)]
struct DataFlow {
    bytes: u64,
    packets: u64,
    /// Bytes and packets per second over the last interval.
    rate: f64,
    packet_rate: f64,
    /// A burst under judgement: the rate and packets of the interval before it.
    burst: Option<(f64, f64)>,
}

pub use super::engine::reaction::Reacted as Judged;

/// The detector's state between polls.
#[derive(Debug, Default)]
pub struct LiveReaction {
    data: FxHashMap<FlowKey, DataFlow>,
    /// CNP totals per CNP flow, and the intervals since the last one with CNPs.
    cnps: FxHashMap<FlowKey, (u64, u32)>,
    pub judged: FxHashMap<FlowKey, Judged>,
    last_s: Option<f64>,
}

impl LiveReaction {
    /// One poll at `now_s` with every flow's totals.
    pub fn poll(&mut self, now_s: f64, flows: &[FlowTotals]) {
        let dt = self.last_s.map_or(0.0, |t| now_s - t);
        self.last_s = Some(now_s);
        // (B, A, port) -> the QP at A that B's packets on that port carry.
        let mut reverse: FxHashMap<(Ends, u16), u32> = FxHashMap::default();
        for f in flows.iter().filter(|f| f.cnps < f.packets) {
            reverse.insert((ends(&f.key), f.key.sport), f.key.dest_qp);
        }
        // CNP flows with CNPs in this interval: (A, B, q at A) and whether it is a new burst.
        let mut answered: FxHashMap<(Ends, u32), bool> = FxHashMap::default();
        for f in flows.iter().filter(|f| f.cnps > 0 && f.cnps == f.packets) {
            // A CNP flow new since the last poll began its burst now; at the first poll its
            // CNPs are of an unknown time: no burst.
            let (seen, quiet) = match (self.cnps.get(&f.key), dt > 0.0) {
                (Some(x), _) => *x,
                (None, true) => (0, QUIET_INTERVALS),
                (None, false) => (f.cnps, 0),
            };
            let now = f.cnps > seen;
            self.cnps.insert(
                f.key,
                (f.cnps, if now { 0 } else { quiet.saturating_add(1) }),
            );
            if now {
                let (b, a, v) = ends(&f.key);
                let e = answered.entry(((a, b, v), f.key.dest_qp)).or_insert(false);
                *e |= quiet >= QUIET_INTERVALS;
            }
        }
        for f in flows.iter().filter(|f| f.cnps < f.packets) {
            let prev = self.data.get(&f.key).copied();
            let mut d = prev.unwrap_or_default();
            if let (Some(p), true) = (prev, dt > 0.0) {
                d.rate = f.bytes.saturating_sub(p.bytes) as f64 / dt;
                d.packet_rate = f.packets.saturating_sub(p.packets) as f64 / dt;
            }
            d.bytes = f.bytes;
            d.packets = f.packets;
            let (a, b, v) = ends(&f.key);
            let q = reverse.get(&((b, a, v), f.key.sport)).copied();
            let cnps_now = q.and_then(|q| answered.get(&((a, b, v), q)).copied());
            match (d.burst, cnps_now) {
                // The interval after the burst began, CNPs still coming: judge.
                (Some((before, before_packets)), Some(_)) => {
                    d.burst = None;
                    self.judged.entry(f.key).or_default().burst(
                        before,
                        before_packets as u64,
                        d.rate,
                        now_s,
                    );
                }
                (Some(_), None) => d.burst = None,
                // A new burst: the rate of the interval before it is the baseline.
                (None, Some(true)) => {
                    if let Some(p) = prev {
                        d.burst = Some((p.rate, p.packet_rate * dt));
                    }
                }
                _ => {}
            }
            self.data.insert(f.key, d);
        }
        // Flows gone from the table are forgotten.
        let live: rustc_hash::FxHashSet<FlowKey> = flows.iter().map(|f| f.key).collect();
        self.data.retain(|k, _| live.contains(k));
        self.cnps.retain(|k, _| live.contains(k));
        self.judged.retain(|k, _| live.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: u8, dst: u8, sport: u16, qp: u32) -> FlowKey {
        let mut k = FlowKey {
            src: [0; 16],
            dst: [0; 16],
            sport,
            ip_version: 4,
            hook: 0,
            dest_qp: qp,
        };
        k.src[0] = src;
        k.dst[0] = dst;
        k
    }

    /// A (1) sends to B (2) on port 100, QP 0x200; B's ACKs carry A's QP 0x100; B's CNPs go
    /// to QP 0x100 from poll 3 on. The sender adds `rate(poll)` bytes (1 KB packets) a second.
    fn run(rate: impl Fn(u64) -> u64) -> LiveReaction {
        let mut l = LiveReaction::default();
        let (mut bytes, mut acks, mut cnps) = (0, 0, 0);
        for poll in 0..8u64 {
            if poll > 0 {
                bytes += rate(poll);
                acks += 100;
                if poll >= 3 {
                    cnps += 50;
                }
            }
            let mut flows = vec![
                FlowTotals {
                    key: key(1, 2, 100, 0x200),
                    packets: bytes / 1000,
                    bytes,
                    cnps: 0,
                    ..FlowTotals::default()
                },
                FlowTotals {
                    key: key(2, 1, 100, 0x100),
                    packets: acks,
                    bytes: acks * 64,
                    cnps: 0,
                    ..FlowTotals::default()
                },
            ];
            if cnps > 0 {
                flows.push(FlowTotals {
                    key: key(2, 1, 999, 0x100),
                    packets: cnps,
                    bytes: cnps * 64,
                    cnps,
                    ..FlowTotals::default()
                });
            }
            l.poll(poll as f64, &flows);
        }
        l
    }

    #[test]
    fn a_sender_that_keeps_its_rate_ignored_the_cnps() {
        let l = run(|_| 1_000_000);
        let j = &l.judged[&key(1, 2, 100, 0x200)];
        assert_eq!((j.bursts, j.ignored), (1, 1), "{j:?}");
        assert!((j.ratio_sum - 1.0).abs() < 1e-9);
        assert!((j.rate_before - 1e6).abs() < 1e-6);
    }

    #[test]
    fn a_sender_that_halves_its_rate_answered() {
        let l = run(|p| if p >= 4 { 500_000 } else { 1_000_000 });
        let j = &l.judged[&key(1, 2, 100, 0x200)];
        assert_eq!((j.bursts, j.ignored), (1, 0), "{j:?}");
        assert!((j.ratio_sum - 0.5).abs() < 1e-9);
    }

    #[test]
    fn without_cnps_nothing_is_judged() {
        let mut l = LiveReaction::default();
        for poll in 0..5u64 {
            l.poll(
                poll as f64,
                &[FlowTotals {
                    key: key(1, 2, 100, 0x200),
                    packets: poll * 1000,
                    bytes: poll * 1_000_000,
                    cnps: 0,
                    ..FlowTotals::default()
                }],
            );
        }
        assert!(l.judged.is_empty());
    }
}

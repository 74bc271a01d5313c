//! Congestion, missing CNPs and loss recovery, live, gathered as `analyze` gathers a capture's:
//! per receiver (the RoCE data to a host, its CE marks, the CNPs it sent back, the senders
//! whose packets were marked) and per data flow (its PSN gaps and go-backs, with the NAKs its
//! receiver returned folded in: [`super::recovery`]), with the same builders
//! ([`super::findings::congestion`], [`super::findings::cnp_missing`],
//! [`super::findings::retransmissions`]) and the same subjects. The evidence is the flow
//! table's totals between polls, summed from the first poll that showed the trouble while it
//! goes on; an entry leaves a window after the trouble stopped (the finding closes then).
//!
//! A receiver is judged for missing CNPs only where the agent sees it send (a flow from it in
//! the table: a mirror of both directions, or a host's egress hook): an ingress-only view of a
//! host cannot see its CNPs leave.

use super::engine::trouble::Trouble;
pub use super::engine::trouble::{FlowTotals, MAX_FOLLOWED};
use agent_common::flow_key::addr;
use agent_common::FlowKey;
use rustc_hash::{FxHashMap, FxHashSet};

/// The stage's state between polls.
#[derive(Debug, Default)]
pub struct LiveFlows {
    last: FxHashMap<FlowKey, FlowTotals>,
    /// The trouble going on, as the engine judges it.
    pub trouble: Trouble,
}

/// What a total grew by since `prev` (a smaller total: the flow left the kernel map and came
/// back, all of it is new).
fn grew(now: u64, prev: u64) -> u64 {
    if now >= prev {
        now - prev
    } else {
        now
    }
}

impl LiveFlows {
    /// One poll at `now_s` (Unix seconds) over every flow's totals: their growth since the
    /// last poll joins the trouble under way; trouble that stopped a window ago is forgotten
    /// (its finding closes).
    pub fn poll(&mut self, now_s: f64, flows: &[FlowTotals], window_s: f64) {
        let mut deltas = Vec::with_capacity(flows.len());
        let mut last = FxHashMap::default();
        last.reserve(flows.len());
        let mut speaks: FxHashSet<std::net::IpAddr> = FxHashSet::default();
        for t in flows {
            let p = self.last.get(&t.key).copied().unwrap_or_default();
            deltas.push(FlowTotals {
                key: t.key,
                packets: grew(t.packets, p.packets),
                bytes: grew(t.bytes, p.bytes),
                cnps: grew(t.cnps, p.cnps),
                ce: grew(t.ce, p.ce),
                psn_gaps: grew(t.psn_gaps, p.psn_gaps),
                retransmits: grew(t.retransmits, p.retransmits),
                naks: grew(t.naks, p.naks),
            });
            last.insert(t.key, *t);
            speaks.insert(addr(t.key.ip_version, &t.key.src));
        }
        self.last = last;
        self.trouble
            .add(|| deltas.iter().map(|d| (*d, now_s, now_s)));
        // A receiver's CNPs are the CNP flows it sends (the agent cannot pair them per packet).
        for d in deltas.iter().filter(|d| d.is_cnp_flow()) {
            self.trouble
                .answers(addr(d.key.ip_version, &d.key.src), d.cnps, 0);
        }
        self.trouble.speaks = Some(speaks);
        self.trouble.forget_before(now_s - window_s);
    }
}

#[cfg(test)]
#[path = "live_flows_tests.rs"]
mod tests;

//! Congestion, missing CNPs and loss recovery, live, judged as `analyze` judges a capture:
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

use super::findings::{self as f, Finding};
use agent_common::flow_key::addr;
use agent_common::FlowKey;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Every flow's totals at a poll: what the live findings judge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowTotals {
    pub key: FlowKey,
    pub packets: u64,
    pub bytes: u64,
    /// CNP packets of the flow (a CNP flow's packets are all CNPs).
    pub cnps: u64,
    /// Packets that arrived CE-marked.
    pub ce: u64,
    pub psn_gaps: u64,
    pub retransmits: u64,
    /// NAKs of every code and RNR NAKs.
    pub naks: u64,
}

/// At most this many receivers and lossy flows are followed at once (a flood of spoofed
/// flows cannot grow the state beyond it; the listing is bounded further, 20 per kind).
pub const MAX_FOLLOWED: usize = 4096;
/// Senders named per receiver (the count goes on).
const MAX_SENDERS: usize = 256;

#[derive(Clone, Debug)]
struct Receiver {
    first_s: f64,
    last_ce_s: f64,
    packets: u64,
    ce: u64,
    cnps_back: u64,
    senders: BTreeSet<IpAddr>,
}

#[derive(Clone, Copy, Debug)]
struct Lossy {
    first_s: f64,
    last_s: f64,
    packets: u64,
    psn_gaps: u64,
    retransmits: u64,
    naks: u64,
}

/// The stage's state between polls.
#[derive(Debug, Default)]
pub struct LiveFlows {
    last: FxHashMap<FlowKey, FlowTotals>,
    receivers: FxHashMap<IpAddr, Receiver>,
    lossy: FxHashMap<FlowKey, Lossy>,
    /// Receivers and flows not followed because [`MAX_FOLLOWED`] were.
    pub not_followed: u64,
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

fn is_cnp_flow(t: &FlowTotals) -> bool {
    t.packets > 0 && t.cnps == t.packets
}

impl LiveFlows {
    /// One poll at `now_s` (Unix seconds) over every flow's totals; returns the findings that
    /// hold, judged over what the trouble's window holds.
    pub fn poll(&mut self, now_s: f64, flows: &[FlowTotals], window_s: f64) -> Vec<Finding> {
        let mut deltas = Vec::with_capacity(flows.len());
        let mut last = FxHashMap::default();
        last.reserve(flows.len());
        let mut speaks: FxHashSet<IpAddr> = FxHashSet::default();
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
        self.receive(now_s, &deltas);
        self.lose(now_s, &deltas);
        self.receivers.retain(|_, r| r.last_ce_s > now_s - window_s);
        self.lossy.retain(|_, l| l.last_s > now_s - window_s);
        let mut out = self.congestion(now_s, &speaks);
        out.extend(self.recoveries(now_s));
        out
    }

    /// Data flows' packets and CE marks to their receivers, then the CNPs the receivers sent.
    fn receive(&mut self, now_s: f64, deltas: &[FlowTotals]) {
        for d in deltas.iter().filter(|d| !is_cnp_flow(d)) {
            let dst = addr(d.key.ip_version, &d.key.dst);
            if d.ce > 0 && !self.receivers.contains_key(&dst) {
                if self.receivers.len() >= MAX_FOLLOWED {
                    self.not_followed += 1;
                    continue;
                }
                self.receivers.insert(
                    dst,
                    Receiver {
                        first_s: now_s,
                        last_ce_s: now_s,
                        packets: 0,
                        ce: 0,
                        cnps_back: 0,
                        senders: BTreeSet::new(),
                    },
                );
            }
            let Some(r) = self.receivers.get_mut(&dst) else {
                continue;
            };
            r.packets += d.packets - d.cnps.min(d.packets);
            r.ce += d.ce;
            if d.ce > 0 {
                r.last_ce_s = now_s;
                if r.senders.len() < MAX_SENDERS {
                    r.senders.insert(addr(d.key.ip_version, &d.key.src));
                }
            }
        }
        for d in deltas.iter().filter(|d| is_cnp_flow(d)) {
            if let Some(r) = self.receivers.get_mut(&addr(d.key.ip_version, &d.key.src)) {
                r.cnps_back += d.cnps;
            }
        }
    }

    /// Flows that lost packets or carried NAKs.
    fn lose(&mut self, now_s: f64, deltas: &[FlowTotals]) {
        for d in deltas {
            let trouble = d.psn_gaps + d.retransmits + d.naks > 0;
            if trouble && !self.lossy.contains_key(&d.key) {
                if self.lossy.len() >= MAX_FOLLOWED {
                    self.not_followed += 1;
                    continue;
                }
                self.lossy.insert(
                    d.key,
                    Lossy {
                        first_s: now_s,
                        last_s: now_s,
                        packets: 0,
                        psn_gaps: 0,
                        retransmits: 0,
                        naks: 0,
                    },
                );
            }
            let Some(l) = self.lossy.get_mut(&d.key) else {
                continue;
            };
            l.packets += d.packets;
            l.psn_gaps += d.psn_gaps;
            l.retransmits += d.retransmits;
            l.naks += d.naks;
            if trouble {
                l.last_s = now_s;
            }
        }
    }

    fn congestion(&self, now_s: f64, speaks: &FxHashSet<IpAddr>) -> Vec<Finding> {
        let mut out = Vec::new();
        for (host, r) in &self.receivers {
            let name = host.to_string();
            let span = (r.first_s, now_s);
            out.extend(f::congestion(&f::Congested {
                host: &name,
                packets: r.packets,
                ce_packets: r.ce,
                cnps: r.cnps_back,
                senders: r.senders.len(),
                span,
            }));
            if speaks.contains(host) {
                out.extend(f::cnp_missing(&f::Receiver {
                    host: &name,
                    senders: r.senders.len(),
                    ce_packets: r.ce,
                    answered_ce: 0,
                    cnps: r.cnps_back,
                    span,
                }));
            }
        }
        out
    }

    /// One incident per loss, on the data flow, with its receiver's NAKs folded in.
    fn recoveries(&self, now_s: f64) -> Vec<Finding> {
        let flows: Vec<(&FlowKey, &Lossy, String, String)> = self
            .lossy
            .iter()
            .map(|(k, l)| {
                (
                    k,
                    l,
                    addr(k.ip_version, &k.src).to_string(),
                    addr(k.ip_version, &k.dst).to_string(),
                )
            })
            .collect();
        let losses: Vec<super::recovery::Loss<'_>> = flows
            .iter()
            .map(|(_, l, src, dst)| super::recovery::Loss {
                src,
                dst,
                psn_gaps: l.psn_gaps,
                retransmits: l.retransmits,
                naks: l.naks,
            })
            .collect();
        let mut out = Vec::new();
        for inc in super::recovery::incidents(&losses) {
            let (k, l, src, dst) = &flows[inc.flow];
            let name = f::flow_name(src, dst, k.sport, k.dest_qp);
            out.extend(f::retransmissions(&f::Recovery {
                flow: &format!("Flow {name}"),
                psn_gaps: l.psn_gaps,
                retransmits: l.retransmits,
                naks: l.naks,
                naks_back: inc.naks_back,
                packets: l.packets,
                span: (l.first_s, now_s),
            }));
        }
        out
    }
}

#[cfg(test)]
#[path = "live_flows_tests.rs"]
mod tests;

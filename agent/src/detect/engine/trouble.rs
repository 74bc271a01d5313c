//! Congestion, missing CNPs and loss recovery, per receiver and per data flow: the evidence
//! the flows give, gathered the same way live (each poll's deltas, while the trouble goes on)
//! and offline (a capture's flows, once). Per receiver: the RoCE data to a host, its CE
//! marks, the CNPs that went back, the senders whose packets were marked. Per data flow: its
//! PSN gaps, go-backs and NAKs; [`super::judge`] folds the receiver's NAKs into the data
//! flow they answer ([`crate::detect::recovery`]).
//!
//! Bounded: at most [`MAX_FOLLOWED`] receivers and as many lossy flows at once, and
//! [`MAX_SENDERS`] senders named per receiver; what was not followed is counted.

use agent_common::flow_key::addr;
use agent_common::FlowKey;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// One flow's totals (or their growth over a window).
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

impl FlowTotals {
    /// A flow record's totals.
    pub fn of(key: FlowKey, s: &agent_common::FlowStats) -> FlowTotals {
        FlowTotals {
            key,
            packets: s.packets,
            bytes: s.bytes,
            cnps: s.cnp,
            ce: s.ecn_ce,
            psn_gaps: s.psn_gaps,
            retransmits: s.retransmits,
            naks: s.nak_total(),
        }
    }

    /// A flow of CNPs only: the answers, not data.
    pub fn is_cnp_flow(&self) -> bool {
        self.packets > 0 && self.cnps == self.packets
    }

    /// Whether the flow lost packets or carried NAKs.
    pub fn in_recovery(&self) -> bool {
        self.psn_gaps + self.retransmits + self.naks > 0
    }
}

/// At most this many receivers and lossy flows are followed at once (a flood of spoofed
/// flows cannot grow the state beyond it; the findings are bounded further per kind).
pub const MAX_FOLLOWED: usize = 4096;
/// Senders named per receiver (a receiver's sender count stops there).
pub const MAX_SENDERS: usize = 256;

/// A receiver whose packets arrived CE-marked.
#[derive(Clone, Debug)]
pub struct Receiver {
    /// When its first CE-marked flow began, and its last CE mark (as the source knows it).
    pub first_s: f64,
    pub last_ce_s: f64,
    pub packets: u64,
    pub ce: u64,
    /// CNPs it sent back, and CE packets a CNP answered (where the source pairs them).
    pub cnps_back: u64,
    pub answered: u64,
    pub senders: BTreeSet<IpAddr>,
}

/// A flow that lost packets or carried NAKs.
#[derive(Clone, Copy, Debug)]
pub struct Lossy {
    pub first_s: f64,
    /// Its last trouble, and its last packet.
    pub last_trouble_s: f64,
    pub last_s: f64,
    pub packets: u64,
    pub psn_gaps: u64,
    pub retransmits: u64,
    pub naks: u64,
}

/// The gathered evidence.
#[derive(Debug, Default)]
pub struct Trouble {
    pub receivers: FxHashMap<IpAddr, Receiver>,
    pub lossy: FxHashMap<FlowKey, Lossy>,
    /// Receivers and flows not followed because [`MAX_FOLLOWED`] were.
    pub not_followed: u64,
    /// Hosts seen sending (None: every host's sending is in view, as in a capture of both
    /// directions): a receiver is judged for missing CNPs only where its CNPs could be seen.
    pub speaks: Option<rustc_hash::FxHashSet<IpAddr>>,
}

impl Trouble {
    /// One window's flows, each seen from its first to its last time (seconds): their data
    /// and CE marks to their receivers, and their loss. The flows that carry CE marks go
    /// first, so that a receiver counts all of the window's packets to it, whichever flow
    /// came first in the table.
    pub fn add<I>(&mut self, flows: impl Fn() -> I)
    where
        I: Iterator<Item = (FlowTotals, f64, f64)>,
    {
        for (d, first_s, last_s) in flows().filter(|(d, _, _)| d.ce > 0) {
            self.flow(&d, first_s, last_s);
        }
        for (d, first_s, last_s) in flows().filter(|(d, _, _)| d.ce == 0) {
            self.flow(&d, first_s, last_s);
        }
    }

    fn flow(&mut self, d: &FlowTotals, first_s: f64, last_s: f64) {
        if !d.is_cnp_flow() {
            self.receive(d, first_s, last_s);
        }
        self.lose(d, first_s, last_s);
    }

    /// CNPs a receiver sent back, and the CE packets they answered (0 where the source
    /// cannot pair them).
    pub fn answers(&mut self, host: IpAddr, cnps: u64, answered: u64) {
        if let Some(r) = self.receivers.get_mut(&host) {
            r.cnps_back += cnps;
            r.answered += answered;
        }
    }

    /// Forgets the trouble that stopped before `t` (its finding closes).
    pub fn forget_before(&mut self, t: f64) {
        self.receivers.retain(|_, r| r.last_ce_s > t);
        self.lossy.retain(|_, l| l.last_trouble_s > t);
    }

    fn receive(&mut self, d: &FlowTotals, first_s: f64, last_s: f64) {
        let dst = addr(d.key.ip_version, &d.key.dst);
        if d.ce > 0 && !self.receivers.contains_key(&dst) {
            if self.receivers.len() >= MAX_FOLLOWED {
                self.not_followed += 1;
                return;
            }
            self.receivers.insert(
                dst,
                Receiver {
                    first_s,
                    last_ce_s: last_s,
                    packets: 0,
                    ce: 0,
                    cnps_back: 0,
                    answered: 0,
                    senders: BTreeSet::new(),
                },
            );
        }
        let Some(r) = self.receivers.get_mut(&dst) else {
            return;
        };
        r.packets += d.packets - d.cnps.min(d.packets);
        r.ce += d.ce;
        if d.ce > 0 {
            r.first_s = r.first_s.min(first_s);
            r.last_ce_s = r.last_ce_s.max(last_s);
            if r.senders.len() < MAX_SENDERS {
                r.senders.insert(addr(d.key.ip_version, &d.key.src));
            }
        }
    }

    fn lose(&mut self, d: &FlowTotals, first_s: f64, last_s: f64) {
        let trouble = d.in_recovery();
        if trouble && !self.lossy.contains_key(&d.key) {
            if self.lossy.len() >= MAX_FOLLOWED {
                self.not_followed += 1;
                return;
            }
            self.lossy.insert(
                d.key,
                Lossy {
                    first_s,
                    last_trouble_s: last_s,
                    last_s,
                    packets: 0,
                    psn_gaps: 0,
                    retransmits: 0,
                    naks: 0,
                },
            );
        }
        let Some(l) = self.lossy.get_mut(&d.key) else {
            return;
        };
        l.packets += d.packets;
        l.psn_gaps += d.psn_gaps;
        l.retransmits += d.retransmits;
        l.naks += d.naks;
        l.last_s = l.last_s.max(last_s);
        if trouble {
            l.last_trouble_s = l.last_trouble_s.max(last_s);
        }
    }

    /// Whether a receiver's CNPs could be seen leaving it.
    pub fn seen_sending(&self, host: &IpAddr) -> bool {
        self.speaks.as_ref().is_none_or(|s| s.contains(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: u8, dst: u8) -> FlowKey {
        let mut k = FlowKey {
            ip_version: 4,
            sport: 1000,
            dest_qp: 7,
            ..FlowKey::default()
        };
        k.src[..4].copy_from_slice(&[10, 0, 0, src]);
        k.dst[..4].copy_from_slice(&[10, 0, 0, dst]);
        k
    }

    /// A receiver counts every packet of the window to it, also those of flows listed
    /// before the first one that carried a CE mark.
    #[test]
    fn a_receiver_counts_the_flows_before_its_first_ce_mark() {
        let flows = [
            FlowTotals {
                key: key(1, 9),
                packets: 900,
                ..FlowTotals::default()
            },
            FlowTotals {
                key: key(2, 9),
                packets: 100,
                ce: 50,
                ..FlowTotals::default()
            },
        ];
        let mut t = Trouble::default();
        t.add(|| flows.iter().map(|f| (*f, 1.0, 2.0)));
        let r = &t.receivers[&"10.0.0.9".parse::<IpAddr>().unwrap()];
        assert_eq!((r.packets, r.ce, r.senders.len()), (1000, 50, 1));
    }

    /// The span of a receiver's trouble runs from its first CE-marked flow's start to its
    /// last CE-marked flow's end.
    #[test]
    fn a_receivers_span_is_its_ce_marked_flows() {
        let mut t = Trouble::default();
        t.add(|| {
            [(2, 3.0, 4.0), (3, 1.0, 2.5)].into_iter().map(|(s, a, b)| {
                let f = FlowTotals {
                    key: key(s, 9),
                    packets: 10,
                    ce: 10,
                    ..FlowTotals::default()
                };
                (f, a, b)
            })
        });
        let r = &t.receivers[&"10.0.0.9".parse::<IpAddr>().unwrap()];
        assert_eq!((r.first_s, r.last_ce_s), (1.0, 4.0));
    }

    /// Answers reach only a receiver followed (a CNP with no CE mark before it is no answer).
    #[test]
    fn answers_reach_only_receivers_with_ce_marks() {
        let mut t = Trouble::default();
        t.answers("10.0.0.9".parse().unwrap(), 5, 5);
        assert!(t.receivers.is_empty());
    }

    /// Trouble that stopped before the window is forgotten; the rest stays.
    #[test]
    fn trouble_that_stopped_is_forgotten() {
        let mut t = Trouble::default();
        let lossy = FlowTotals {
            key: key(1, 2),
            packets: 10,
            psn_gaps: 1,
            ..FlowTotals::default()
        };
        t.add(|| std::iter::once((lossy, 1.0, 1.0)));
        t.forget_before(0.5);
        assert_eq!(t.lossy.len(), 1);
        t.forget_before(1.0);
        assert!(t.lossy.is_empty());
    }
}

//! The NICs' answer to congestion (DCQCN's notification point): each CE-marked RoCE packet
//! paired with the CNP its receiver sends back to the sender's QP. A CNP carries the
//! sender's QP in its BTH, and the reverse direction's packets (ACKs, responses) of the same
//! connection carry that QP too, on the same UDP source port (RoCEv2 drivers derive it from
//! both QP numbers): so a CE packet of (A -> B, port S, QP Qb) is answered by a CNP B -> A
//! whose QP is the one B's packets to A on port S carry. Where no reverse packet was seen, a
//! CNP from B to A answers A's CE packets to B whatever their QP.
//!
//! Per connection: CE packets, CNPs, CE packets left unanswered (no CNP within the answer
//! window after them, and none in the pacing interval before), the latency from the first CE
//! packet of a run to its CNP (p50, p99), and the smallest gap between CNPs (the NIC's CNP
//! pacing).

use agent_common::{FlowKey, PacketRecord};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// How long after a CE packet its CNP may come (DCQCN answers in microseconds; a capture's
/// timestamps and a busy receiver add some).
pub const ANSWER_WINDOW_NS: u64 = 1_000_000;
/// CE packets that arrive this soon after a CNP are covered by it (the NIC sends at most one
/// CNP per QP per interval: mlx5's default is 4 us, some fabrics set 50 us).
pub const PACING_COVER_NS: u64 = 50_000;

/// A connection's key: the data direction (src, dst, UDP source port, destination QP).
type Conn = (IpAddr, IpAddr, u16, u32);

#[derive(Clone, Debug, Default)]
struct ConnState {
    ce: u64,
    cnps: u64,
    answered: u64,
    unanswered: u64,
    /// CE packets waiting for a CNP: (first one's time, count).
    pending: Option<(u64, u64)>,
    last_cnp: Option<u64>,
    latencies: Vec<u64>,
    min_gap: Option<u64>,
}

impl ConnState {
    fn settle(&mut self, now: u64) {
        if let Some((first, n)) = self.pending {
            if now.saturating_sub(first) > ANSWER_WINDOW_NS {
                self.unanswered += n;
                self.pending = None;
            }
        }
    }

    fn ce(&mut self, t: u64) {
        self.settle(t);
        self.ce += 1;
        if self
            .last_cnp
            .is_some_and(|c| t >= c && t - c <= PACING_COVER_NS)
        {
            self.answered += 1;
            return;
        }
        match &mut self.pending {
            Some((_, n)) => *n += 1,
            None => self.pending = Some((t, 1)),
        }
    }

    fn cnp(&mut self, t: u64) {
        self.settle(t);
        self.cnps += 1;
        if let Some((first, n)) = self.pending.take() {
            self.answered += n;
            self.latencies.push(t.saturating_sub(first));
        }
        if let Some(prev) = self.last_cnp {
            let gap = t.saturating_sub(prev);
            self.min_gap = Some(self.min_gap.map_or(gap, |g| g.min(gap)));
        }
        self.last_cnp = Some(t);
    }
}

/// CE and CNP pairing over a capture, packet by packet (memory per connection, not per
/// packet).
#[derive(Clone, Debug, Default)]
pub struct CnpResponse {
    conns: BTreeMap<Conn, ConnState>,
    /// The connections with CE packets between two hosts (A, B).
    by_pair: BTreeMap<(IpAddr, IpAddr), Vec<Conn>>,
    /// (B, A, port) -> the QP at A that B's packets on that port carry (looked up for every
    /// RoCE packet of a capture: a hash map).
    reverse_qp: rustc_hash::FxHashMap<(IpAddr, IpAddr, u16), u32>,
    cnps: u64,
}

fn conn_of(k: &FlowKey) -> Conn {
    (
        agent_common::flow_key::addr(k.ip_version, &k.src),
        agent_common::flow_key::addr(k.ip_version, &k.dst),
        k.sport,
        k.dest_qp,
    )
}

impl CnpResponse {
    /// One RoCE packet (its record and flow key) at `ts_ns`, in time order.
    pub fn packet(&mut self, rec: &PacketRecord, key: &FlowKey, ts_ns: u64) {
        let c = conn_of(key);
        if rec.is_cnp() {
            self.cnp(ts_ns, c.0, c.1, c.3);
            return;
        }
        self.reverse_qp.insert((c.0, c.1, c.2), c.3);
        if rec.ecn() == 3 {
            if !self.conns.contains_key(&c) {
                self.by_pair.entry((c.0, c.1)).or_default().push(c);
            }
            self.conns.entry(c).or_default().ce(ts_ns);
        }
    }

    /// A CNP from `b` to `a` for QP `q` at `a`: it answers the connections A -> B whose
    /// reverse packets (B -> A on their port) carry `q`; with none known, every connection
    /// A -> B without reverse packets.
    fn cnp(&mut self, t: u64, b: IpAddr, a: IpAddr, q: u32) {
        self.cnps += 1;
        let Some(cands) = self.by_pair.get(&(a, b)) else {
            return;
        };
        let exact: Vec<Conn> = cands
            .iter()
            .filter(|c| self.reverse_qp.get(&(b, a, c.2)) == Some(&q))
            .copied()
            .collect();
        let targets: Vec<Conn> = if exact.is_empty() {
            cands
                .iter()
                .filter(|c| !self.reverse_qp.contains_key(&(b, a, c.2)))
                .copied()
                .collect()
        } else {
            exact
        };
        for c in targets {
            if let Some(s) = self.conns.get_mut(&c) {
                s.cnp(t);
            }
        }
    }

    /// The pairing so far (CE packets still waiting count as unanswered: nothing more comes).
    pub fn report(&self) -> CnpReport {
        let mut all_lat = Vec::new();
        let mut min_gap: Option<u64> = None;
        let mut connections = Vec::new();
        let (mut ce, mut answered, mut unanswered) = (0, 0, 0);
        for (c, s) in &self.conns {
            // CE packets still waiting are unanswered: nothing more comes.
            let waiting = s.pending.map_or(0, |(_, n)| n);
            ce += s.ce;
            answered += s.answered;
            unanswered += s.unanswered + waiting;
            all_lat.extend_from_slice(&s.latencies);
            if let Some(g) = s.min_gap {
                min_gap = Some(min_gap.map_or(g, |m| m.min(g)));
            }
            let mut l = s.latencies.clone();
            connections.push(CnpConnection {
                src: c.0.to_string(),
                dst: c.1.to_string(),
                sport: c.2,
                dest_qp: c.3,
                ce_packets: s.ce,
                cnps: s.cnps,
                unanswered_ce: s.unanswered + waiting,
                latency_p50_seconds: quantile(&mut l, 0.5),
            });
        }
        connections.sort_by(|a, b| {
            b.unanswered_ce
                .cmp(&a.unanswered_ce)
                .then(b.ce_packets.cmp(&a.ce_packets))
        });
        CnpReport {
            ce_packets: ce,
            answered_ce: answered,
            unanswered_ce: unanswered,
            cnps: self.cnps,
            latency_seconds: Latency {
                p50: quantile(&mut all_lat.clone(), 0.5),
                p99: quantile(&mut all_lat, 0.99),
            },
            min_gap_seconds: min_gap.map(|g| g as f64 / 1e9),
            connections,
        }
    }
}

/// The `q` quantile (nearest rank) of `v` in seconds; None when empty.
fn quantile(v: &mut [u64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i] as f64 / 1e9)
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// `roce.cnp_response` of the analyze JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CnpReport {
    pub ce_packets: u64,
    pub answered_ce: u64,
    pub unanswered_ce: u64,
    pub cnps: u64,
    pub latency_seconds: Latency,
    pub min_gap_seconds: Option<f64>,
    pub connections: Vec<CnpConnection>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CnpConnection {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    /// The CE-marked data flow's destination QP.
    pub dest_qp: u32,
    pub ce_packets: u64,
    pub cnps: u64,
    pub unanswered_ce: u64,
    pub latency_p50_seconds: Option<f64>,
}

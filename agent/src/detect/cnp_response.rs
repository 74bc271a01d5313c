//! The NICs' answer to congestion (DCQCN's notification point): each CE-marked RoCE packet
//! paired with the CNP its receiver sends back to the sender's QP. A CNP carries the
//! sender's QP in its BTH, and the reverse direction's packets (ACKs, responses) of the same
//! connection carry that QP too, on the same UDP source port (RoCEv2 drivers derive it from
//! both QP numbers): so a CE packet of (A -> B, port S, QP Qb) is answered by a CNP B -> A
//! whose QP is the one B's packets to A on port S carry. Where no reverse packet was seen, a
//! CNP from B to A answers the CE flow A -> B that has waited longest for an answer (a NIC
//! sends one CNP per CE-marked QP and interval, so one CNP answers one flow).
//!
//! Linear in the packets: a CNP finds its flows through indexes (the ports whose reverse
//! packets carry its QP, the CE flows on each port, the pair's flows waiting in order), never
//! by walking every connection of a host pair.
//!
//! Per connection: CE packets, CNPs, CE packets left unanswered (no CNP within the answer
//! window after them, and none in the pacing interval before), the latency from the first CE
//! packet of a run to its CNP (p50, p99), and the smallest gap between CNPs (the NIC's CNP
//! pacing).
//!
//! And the sender's side (DCQCN's reaction point): for each burst of CNPs to a connection
//! (the first CNP after [`REACTION_WINDOW_NS`] without one), its data rate over the window
//! after the first CNP against the window before it. A sender that keeps [`IGNORED_RATIO`]
//! or more of its rate has ignored the CNPs.

use super::latency_sample::quantile;
use agent_common::{FlowKey, PacketRecord};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::VecDeque;
use std::net::IpAddr;

/// How long after a CE packet its CNP may come (DCQCN answers in microseconds; a capture's
/// timestamps and a busy receiver add some).
pub const ANSWER_WINDOW_NS: u64 = 1_000_000;
/// CE packets that arrive this soon after a CNP are covered by it (the NIC sends at most one
/// CNP per QP per interval: mlx5's default is 4 us, some fabrics set 50 us).
pub const PACING_COVER_NS: u64 = 50_000;

/// The window a sender's rate is measured over before and after the CNPs of a burst (DCQCN
/// cuts the rate within microseconds of a CNP).
pub const REACTION_WINDOW_NS: u64 = 1_000_000;
pub use super::engine::reaction::{IGNORED_RATIO, MIN_BEFORE_PACKETS};
/// A connection's key: the data direction (src, dst, UDP source port, destination QP).
type Conn = (IpAddr, IpAddr, u16, u32);

#[derive(Clone, Copy, Debug)]
struct Burst {
    at: u64,
    before_bytes: u64,
    before_packets: u64,
    after_bytes: u64,
}

/// A connection's pairing state: what every CE packet reads and writes, in one small entry
/// of [`CnpResponse::conns`] (a capture's CE marks touch thousands of connections in turn,
/// and the entries stay in cache only while they are small); what its CNPs leave is boxed
/// ([`Answers`]), made at its first CNP.
#[derive(Clone, Debug, Default)]
struct ConnState {
    ce: u64,
    answered: u64,
    unanswered: u64,
    /// CE packets waiting for a CNP: (first one's time, count).
    pending: Option<(u64, u64)>,
    last_cnp: Option<u64>,
    /// The CNPs' side (none before the first CNP).
    answers: Option<Box<Answers>>,
}

/// What a connection's CNPs left: their count and gaps, the CE -> CNP latencies, the
/// sender's reactions.
#[derive(Clone, Debug, Default)]
struct Answers {
    cnps: u64,
    /// CE -> CNP latencies (ns), bounded ([`super::latency_sample`]).
    latencies: super::latency_sample::LatencySample,
    min_gap: Option<u64>,
    burst: Option<Burst>,
    /// Bursts of CNPs judged, by the one rule ([`super::engine::reaction`]).
    reacted: super::engine::reaction::Reacted,
}

impl ConnState {
    /// A data packet of `len` bytes at `t`: counted after the burst's first CNP, and the
    /// burst judged once its window is over.
    /// A data packet of the flow while a burst is being judged; false once it is judged (or
    /// none is open).
    fn data(&mut self, t: u64, len: u64) -> bool {
        let Some(a) = self.answers.as_deref_mut() else {
            return false;
        };
        let Some(b) = &mut a.burst else {
            return false;
        };
        if t < b.at + REACTION_WINDOW_NS {
            if t >= b.at {
                b.after_bytes += len;
            }
            return true;
        }
        let b = *b;
        a.burst = None;
        let rate = |bytes: u64| bytes as f64 * 1e9 / REACTION_WINDOW_NS as f64;
        a.reacted.burst(
            rate(b.before_bytes),
            b.before_packets,
            rate(b.after_bytes),
            b.at as f64 / 1e9,
        );
        false
    }

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

    /// A CNP at `t`; `before` gives the flow's bytes and packets in the window before `t`
    /// (asked only when a burst starts).
    fn cnp(&mut self, t: u64, before: impl FnOnce() -> (u64, u64)) -> bool {
        self.settle(t);
        let a = self.answers.get_or_insert_with(Box::default);
        a.cnps += 1;
        let quiet = self
            .last_cnp
            .is_none_or(|c| t.saturating_sub(c) > REACTION_WINDOW_NS);
        let opened = quiet && a.burst.is_none();
        if opened {
            let (before_bytes, before_packets) = before();
            a.burst = Some(Burst {
                at: t,
                before_bytes,
                before_packets,
                after_bytes: 0,
            });
        }
        if let Some((first, n)) = self.pending.take() {
            self.answered += n;
            a.latencies.push(t.saturating_sub(first));
        }
        if let Some(prev) = self.last_cnp {
            let gap = t.saturating_sub(prev);
            a.min_gap = Some(a.min_gap.map_or(gap, |g| g.min(gap)));
        }
        self.last_cnp = Some(t);
        opened
    }
}

/// CE and CNP pairing over a capture, packet by packet (memory per connection, not per
/// packet).
#[derive(Clone, Debug, Default)]
pub struct CnpResponse {
    /// The pairing state of each data flow that had a CE-marked packet (its flow key, the
    /// hook byte 0). Looked up for CE packets, CNPs and the flows with a burst open only.
    conns: FxHashMap<FlowKey, ConnState>,
    /// The CE flows A -> B on each port: keyed by a flow key without its QP.
    ce_by_port: FxHashMap<FlowKey, Vec<FlowKey>>,
    /// (B, A, port) -> the QP at A that B's packets on that port carry (of the newest flow on
    /// the port): keyed by a flow key without its QP.
    reverse_qp: FxHashMap<FlowKey, u32>,
    /// (B, A, QP q) -> the ports whose reverse packets carried q (a port whose QP changed
    /// since stays listed; the CNP checks [`Self::reverse_qp`]).
    ports_by_qp: FxHashMap<FlowKey, Vec<u16>>,
    /// Per host pair A -> B: the CE flows on ports without reverse packets, each with the
    /// time its wait began, in that order. An entry stands for one wait: a flow whose wait
    /// expired and began anew is queued again, and its old entry is stale (its start is not
    /// the flow's). Entries older than [`ANSWER_WINDOW_NS`] leave as a new wait is queued,
    /// so a queue holds at most the waits begun within one answer window.
    waiting: FxHashMap<FlowKey, WaitQueue>,
    /// Index entries the CNPs looked at: the pairing's work, linear in the packets.
    pub visits: u64,
    /// Connections paired at most (`--max-flows`; 0: no bound): the pairing state is bounded
    /// as the flow table is. CE packets of connections beyond it are counted, not paired.
    max_conns: usize,
    /// CE packets of connections past [`Self::max_conns`].
    untracked_ce: u64,
    /// New flows whose port was not indexed: [`Self::reverse_qp`] held `max_conns` ports.
    not_indexed: u64,
    /// Every data packet of the last [`REACTION_WINDOW_NS`] (time, flow, bytes), in time
    /// order: a flow's rate before a CNP is summed from it when a burst starts, so a packet
    /// costs a push, not a lookup of its flow.
    recent: VecDeque<(u64, FlowKey, u64)>,
    /// The flows whose burst of CNPs is being judged (their packets add to its "after").
    open: FxHashMap<FlowKey, ()>,
    cnps: u64,
}

/// A host pair's waits in order, the first held in the map's entry itself: a pair with one
/// CE flow (the common case) is one entry to read per wait, not an entry and its buffer.
#[derive(Clone, Debug, Default)]
struct WaitQueue {
    first: Option<(FlowKey, u64)>,
    rest: VecDeque<(FlowKey, u64)>,
}

impl WaitQueue {
    fn front(&self) -> Option<&(FlowKey, u64)> {
        self.first.as_ref()
    }

    fn pop_front(&mut self) -> Option<(FlowKey, u64)> {
        let out = self.first.take();
        self.first = self.rest.pop_front();
        out
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn push_back(&mut self, w: (FlowKey, u64)) {
        if self.first.is_none() {
            self.first = Some(w);
        } else {
            self.rest.push_back(w);
        }
    }
}

/// Whether the wait of flow `c` that began at `start` is still on at `t`: not expired (told
/// by its start alone, with no lookup), and the flow's pending CE run is that wait's (not
/// answered since, nor expired and begun anew).
fn still_waits(conns: &FxHashMap<FlowKey, ConnState>, c: &FlowKey, start: u64, t: u64) -> bool {
    t.saturating_sub(start) <= ANSWER_WINDOW_NS
        && conns
            .get(c)
            .and_then(|s| s.pending)
            .is_some_and(|(first, _)| first == start)
}

/// A flow key as this detector keys it: no hook (captures and hooks alike).
fn flow_of(k: &FlowKey) -> FlowKey {
    FlowKey { hook: 0, ..*k }
}

/// The key of a host pair (A -> B): the addresses only.
fn pair_of(src: [u8; 16], dst: [u8; 16], ip_version: u8) -> FlowKey {
    FlowKey {
        src,
        dst,
        ip_version,
        ..FlowKey::default()
    }
}

/// The key of a direction and port (A -> B, port S): no QP.
fn port_of(src: [u8; 16], dst: [u8; 16], ip_version: u8, sport: u16) -> FlowKey {
    FlowKey {
        sport,
        ..pair_of(src, dst, ip_version)
    }
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
    /// A pairing of at most `max_conns` connections (0: no bound).
    pub fn bounded(max_conns: usize) -> CnpResponse {
        CnpResponse {
            max_conns,
            ..CnpResponse::default()
        }
    }

    /// One RoCE packet (its record, flow key and wire length) at `ts_ns`, in time order;
    /// `new_flow`: the first packet of its flow (its QP becomes its port's).
    pub fn packet(
        &mut self,
        rec: &PacketRecord,
        key: &FlowKey,
        len: u64,
        ts_ns: u64,
        new_flow: bool,
    ) {
        let k = flow_of(key);
        if rec.is_cnp() {
            self.cnp(ts_ns, &k);
            return;
        }
        if new_flow {
            self.index(&k);
        }
        while self
            .recent
            .front()
            .is_some_and(|(t, _, _)| t + REACTION_WINDOW_NS <= ts_ns)
        {
            self.recent.pop_front();
        }
        self.recent.push_back((ts_ns, k, len));
        if !self.open.is_empty() && self.open.contains_key(&k) {
            if let Some(s) = self.conns.get_mut(&k) {
                if !s.data(ts_ns, len) {
                    self.open.remove(&k);
                }
            }
        }
        if rec.is_ce() {
            self.ce(ts_ns, k);
        }
    }

    /// A new flow: the newest flow on a port names its QP (a port carries one QP pair, but
    /// where two QPs share a 5-tuple). The index holds `max_conns` ports and as many QPs;
    /// a flow beyond them is counted, and a CNP to it paired by the waiting rule.
    fn index(&mut self, k: &FlowKey) {
        let port = port_of(k.src, k.dst, k.ip_version, k.sport);
        let by_qp = FlowKey {
            dest_qp: k.dest_qp,
            ..pair_of(k.src, k.dst, k.ip_version)
        };
        let bound = self.max_conns;
        let full = bound > 0
            && ((self.reverse_qp.len() >= bound && !self.reverse_qp.contains_key(&port))
                || (self.ports_by_qp.len() >= bound && !self.ports_by_qp.contains_key(&by_qp)));
        if full {
            self.not_indexed += 1;
        } else if self.reverse_qp.insert(port, k.dest_qp) != Some(k.dest_qp) {
            self.ports_by_qp.entry(by_qp).or_default().push(k.sport);
        }
    }

    /// A CE-marked data packet of flow `k` at `t`: it waits for its CNP.
    fn ce(&mut self, t: u64, k: FlowKey) {
        let full = self.max_conns > 0 && self.conns.len() >= self.max_conns;
        let s = match self.conns.entry(k) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if full => {
                self.untracked_ce += 1;
                return;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                self.ce_by_port
                    .entry(port_of(k.src, k.dst, k.ip_version, k.sport))
                    .or_default()
                    .push(k);
                e.insert(ConnState::default())
            }
        };
        // Waiting for an answer already (an expired wait is over: this CE starts anew).
        let was_waiting = s
            .pending
            .is_some_and(|(first, _)| t.saturating_sub(first) <= ANSWER_WINDOW_NS);
        s.ce(t);
        let waits = !was_waiting && s.pending.is_some();
        if waits
            && !self
                .reverse_qp
                .contains_key(&port_of(k.dst, k.src, k.ip_version, k.sport))
        {
            let conns = &self.conns;
            let queue = self
                .waiting
                .entry(pair_of(k.src, k.dst, k.ip_version))
                .or_default();
            // The waits at the front that are over leave now (each once: linear): an expired
            // one by its start alone, an answered or renewed one by its flow's state. CE
            // marks no CNP answers thus never grow a queue past one answer window's waits.
            while queue
                .front()
                .is_some_and(|&(c, start)| !still_waits(conns, &c, start, t))
            {
                queue.pop_front();
            }
            queue.push_back((k, t));
        }
    }

    /// A CNP from `b` to `a` for QP `q` at `a` (the CNP's flow key): it answers the flows
    /// A -> B whose reverse packets (B -> A on their port) carry `q`; with none known, the
    /// flow A -> B without reverse packets that has waited longest for an answer.
    fn cnp(&mut self, t: u64, k: &FlowKey) {
        self.cnps += 1;
        let (b, a, q, v) = (k.src, k.dst, k.dest_qp, k.ip_version);
        let mut targets: Vec<FlowKey> = Vec::new();
        if let Some(ports) = self.ports_by_qp.get(&FlowKey {
            dest_qp: q,
            ..pair_of(b, a, v)
        }) {
            for &port in ports {
                self.visits += 1;
                if self.reverse_qp.get(&port_of(b, a, v, port)) != Some(&q) {
                    continue;
                }
                if let Some(flows) = self.ce_by_port.get(&port_of(a, b, v, port)) {
                    self.visits += flows.len() as u64;
                    targets.extend_from_slice(flows);
                }
            }
            targets.sort_unstable_by_key(conn_of);
            targets.dedup();
        }
        if targets.is_empty() {
            if let Some(queue) = self.waiting.get_mut(&pair_of(a, b, v)) {
                while let Some((c, start)) = queue.pop_front() {
                    self.visits += 1;
                    let waits = still_waits(&self.conns, &c, start, t);
                    let unreversed = !self.reverse_qp.contains_key(&port_of(b, a, v, c.sport));
                    if waits && unreversed {
                        targets.push(c);
                        break;
                    }
                }
            }
        }
        let recent = &self.recent;
        for c in targets {
            if let Some(s) = self.conns.get_mut(&c) {
                // The window before the CNP: the flow's packets still in `recent`.
                let before = || {
                    recent
                        .iter()
                        .filter(|(ts, f, _)| *f == c && *ts < t && ts + REACTION_WINDOW_NS > t)
                        .fold((0, 0), |(b, p), (_, _, l)| (b + l, p + 1))
                };
                if s.cnp(t, before) {
                    self.open.insert(c, ());
                }
            }
        }
    }

    /// The pairing so far (CE packets still waiting count as unanswered: nothing more comes).
    pub fn report(&self) -> CnpReport {
        self.report_and_all().0
    }

    /// The report, and every connection paired (at most `--max-flows`), most unanswered CE
    /// packets first: the findings judge them all; the report lists the first
    /// [`LISTED_CONNECTIONS`]. One walk for both.
    pub fn report_and_all(&self) -> (CnpReport, Vec<CnpConnection>) {
        let ((ce, answered, unanswered), (mut all_lat, min_gap), all) = self.walk();
        let report = CnpReport {
            untracked_ce_packets: self.untracked_ce,
            flows_not_indexed: self.not_indexed,
            connections_total: all.len(),
            ce_packets: ce,
            answered_ce: answered,
            unanswered_ce: unanswered,
            cnps: self.cnps,
            latency_seconds: Latency {
                p50: quantile(&mut all_lat.clone(), 0.5),
                p99: quantile(&mut all_lat, 0.99),
            },
            min_gap_seconds: min_gap.map(|g| g as f64 / 1e9),
            connections: all.iter().take(LISTED_CONNECTIONS).cloned().collect(),
        };
        (report, all)
    }

    /// The totals (CE, answered, unanswered), the latencies and the smallest gap, and every
    /// connection's row, sorted.
    #[allow(clippy::type_complexity)]
    fn walk(
        &self,
    ) -> (
        (u64, u64, u64),
        (Vec<(u64, f64)>, Option<u64>),
        Vec<CnpConnection>,
    ) {
        let mut all_lat = Vec::new();
        let mut min_gap: Option<u64> = None;
        let mut connections = Vec::new();
        let (mut ce, mut answered, mut unanswered) = (0, 0, 0);
        // In the order of the connections (addresses, port, QP), then by the stable sort below.
        let mut conns: Vec<(Conn, &ConnState)> =
            self.conns.iter().map(|(k, s)| (conn_of(k), s)).collect();
        conns.sort_by_key(|c| c.0);
        let none = Answers::default();
        for (c, s) in conns {
            let a = s.answers.as_deref().unwrap_or(&none);
            // CE packets still waiting are unanswered: nothing more comes.
            let waiting = s.pending.map_or(0, |(_, n)| n);
            ce += s.ce;
            answered += s.answered;
            unanswered += s.unanswered + waiting;
            let w = a.latencies.weight();
            all_lat.extend(a.latencies.kept().iter().map(|&ns| (ns, w)));
            if let Some(g) = a.min_gap {
                min_gap = Some(min_gap.map_or(g, |m| m.min(g)));
            }
            connections.push(CnpConnection {
                src: c.0.to_string(),
                dst: c.1.to_string(),
                sport: c.2,
                dest_qp: c.3,
                ce_packets: s.ce,
                cnps: a.cnps,
                unanswered_ce: s.unanswered + waiting,
                latency_p50_seconds: a.latencies.quantile(0.5),
                cnp_bursts: a.reacted.bursts,
                cnp_bursts_ignored: a.reacted.ignored,
                rate_after_cnps_ratio: a.reacted.mean_ratio(),
                rate_before_cnps_bits_per_second: (a.reacted.bursts > 0)
                    .then_some(a.reacted.rate_before * 8.0),
            });
        }
        connections.sort_by(|a, b| {
            b.unanswered_ce
                .cmp(&a.unanswered_ce)
                .then(b.ce_packets.cmp(&a.ce_packets))
        });
        ((ce, answered, unanswered), (all_lat, min_gap), connections)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// Connections the report lists at most (the most unanswered CE first; the findings read
/// these): the JSON stays bounded whatever the capture holds.
pub const LISTED_CONNECTIONS: usize = 1_000;

/// `roce.cnp_response` of the analyze JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CnpReport {
    /// CE packets of the connections paired (see `untracked_ce_packets`).
    pub ce_packets: u64,
    /// CE packets of connections beyond `--max-flows` connections paired: counted, not paired.
    pub untracked_ce_packets: u64,
    /// New flows whose port and QP were not indexed (the index holds `--max-flows` ports):
    /// a CNP to them is paired by the waiting rule.
    pub flows_not_indexed: u64,
    /// Connections paired; `connections` lists the first [`LISTED_CONNECTIONS`].
    pub connections_total: usize,
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
    /// Bursts of CNPs whose reaction was judged (the sender's rate in the window after the
    /// first CNP against the window before), and those the sender ignored.
    pub cnp_bursts: u64,
    pub cnp_bursts_ignored: u64,
    /// The mean of the after/before rate ratios (null: no burst judged).
    pub rate_after_cnps_ratio: Option<f64>,
    /// The sender's rate before the last burst judged.
    pub rate_before_cnps_bits_per_second: Option<f64>,
}

#[cfg(test)]
#[path = "cnp_response_tests.rs"]
mod tests;

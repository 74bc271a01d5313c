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
//!
//! And the sender's side (DCQCN's reaction point): for each burst of CNPs to a connection
//! (the first CNP after [`REACTION_WINDOW_NS`] without one), its data rate over the window
//! after the first CNP against the window before it. A sender that keeps [`IGNORED_RATIO`]
//! or more of its rate has ignored the CNPs.

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

/// The window a sender's rate is measured over before and after the CNPs of a burst (DCQCN
/// cuts the rate within microseconds of a CNP).
pub const REACTION_WINDOW_NS: u64 = 1_000_000;
/// A sender that keeps this share of its rate after a burst's first CNP ignored it (DCQCN's
/// first cut halves the rate; later ones cut by alpha/2).
pub const IGNORED_RATIO: f64 = 0.9;
/// Packets the window before a burst needs for a judgement (a trickle has no rate to cut).
pub const MIN_BEFORE_PACKETS: u64 = 20;
/// Sub-windows of the rate meter.
const METER_SLOTS: usize = 10;
const SLOT_NS: u64 = REACTION_WINDOW_NS / METER_SLOTS as u64;

/// A connection's key: the data direction (src, dst, UDP source port, destination QP).
type Conn = (IpAddr, IpAddr, u16, u32);

/// A data flow's bytes and packets over the last window, in sub-windows.
#[derive(Clone, Debug, Default)]
struct Meter {
    /// The sub-window of the newest slot (time / SLOT_NS).
    slot: u64,
    bytes: [u64; METER_SLOTS],
    packets: [u64; METER_SLOTS],
}

impl Meter {
    fn roll(&mut self, t: u64) {
        let now = t / SLOT_NS;
        if now > self.slot {
            let n = (now - self.slot).min(METER_SLOTS as u64);
            for k in 1..=n {
                let i = ((self.slot + k) % METER_SLOTS as u64) as usize;
                self.bytes[i] = 0;
                self.packets[i] = 0;
            }
            self.slot = now;
        }
    }

    fn add(&mut self, t: u64, len: u64) {
        self.roll(t);
        if t / SLOT_NS + (METER_SLOTS as u64) <= self.slot {
            return; // older than the window (timestamps stepped back)
        }
        let i = ((t / SLOT_NS) % METER_SLOTS as u64) as usize;
        self.bytes[i] += len;
        self.packets[i] += 1;
    }

    /// Bytes and packets of the window before `t` (the full sub-windows before t's).
    fn before(&mut self, t: u64) -> (u64, u64) {
        self.roll(t);
        let cur = ((t / SLOT_NS) % METER_SLOTS as u64) as usize;
        let mut b = (0, 0);
        for i in (0..METER_SLOTS).filter(|i| *i != cur) {
            b.0 += self.bytes[i];
            b.1 += self.packets[i];
        }
        // Nine sub-windows: scaled to the whole window.
        let k = METER_SLOTS as u64;
        (b.0 * k / (k - 1), b.1 * k / (k - 1))
    }
}

/// A burst of CNPs to a connection under judgement.
#[derive(Clone, Copy, Debug)]
struct Burst {
    at: u64,
    before_bytes: u64,
    before_packets: u64,
    after_bytes: u64,
}

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
    burst: Option<Burst>,
    /// Bursts of CNPs judged, those the sender ignored, and the sum of after/before rates.
    bursts: u64,
    ignored: u64,
    ratio_sum: f64,
    /// The data rate before the last burst judged, bytes per second.
    rate_before: f64,
}

impl ConnState {
    /// A data packet of `len` bytes at `t`: counted after the burst's first CNP, and the
    /// burst judged once its window is over.
    fn data(&mut self, t: u64, len: u64) {
        let Some(b) = &mut self.burst else {
            return;
        };
        if t < b.at + REACTION_WINDOW_NS {
            if t >= b.at {
                b.after_bytes += len;
            }
            return;
        }
        let b = *b;
        self.burst = None;
        if b.before_packets < MIN_BEFORE_PACKETS {
            return;
        }
        let ratio = b.after_bytes as f64 / b.before_bytes.max(1) as f64;
        self.bursts += 1;
        self.ratio_sum += ratio;
        self.rate_before = b.before_bytes as f64 * 1e9 / REACTION_WINDOW_NS as f64;
        if ratio >= IGNORED_RATIO {
            self.ignored += 1;
        }
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

    fn cnp(&mut self, t: u64, meter: Option<&mut Meter>) {
        self.settle(t);
        self.cnps += 1;
        let quiet = self
            .last_cnp
            .is_none_or(|c| t.saturating_sub(c) > REACTION_WINDOW_NS);
        if let (true, None, Some(m)) = (quiet, self.burst, meter) {
            let (before_bytes, before_packets) = m.before(t);
            self.burst = Some(Burst {
                at: t,
                before_bytes,
                before_packets,
                after_bytes: 0,
            });
        }
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
    /// Every data flow's rate over the last window (the sender's rate before a CNP).
    meters: rustc_hash::FxHashMap<Conn, Meter>,
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
    /// One RoCE packet (its record, flow key and wire length) at `ts_ns`, in time order.
    pub fn packet(&mut self, rec: &PacketRecord, key: &FlowKey, len: u64, ts_ns: u64) {
        let c = conn_of(key);
        if rec.is_cnp() {
            self.cnp(ts_ns, c.0, c.1, c.3);
            return;
        }
        self.reverse_qp.insert((c.0, c.1, c.2), c.3);
        self.meters.entry(c).or_default().add(ts_ns, len);
        if let Some(s) = self.conns.get_mut(&c) {
            s.data(ts_ns, len);
        }
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
                s.cnp(t, self.meters.get_mut(&c));
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
                cnp_bursts: s.bursts,
                cnp_bursts_ignored: s.ignored,
                rate_after_cnps_ratio: (s.bursts > 0).then(|| s.ratio_sum / s.bursts as f64),
                rate_before_cnps_bits_per_second: (s.bursts > 0).then_some(s.rate_before * 8.0),
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
    /// Bursts of CNPs whose reaction was judged (the sender's rate in the window after the
    /// first CNP against the window before), and those the sender ignored.
    pub cnp_bursts: u64,
    pub cnp_bursts_ignored: u64,
    /// The mean of the after/before rate ratios (null: no burst judged).
    pub rate_after_cnps_ratio: Option<f64>,
    /// The sender's rate before the last burst judged.
    pub rate_before_cnps_bits_per_second: Option<f64>,
}

//! One interface's counters at one poll, as the live findings and the host's totals need
//! them (`live_findings`, `live_totals`): a few hundred bytes per poll, not the whole
//! counter block, and their difference over an interval.

use agent_common::headers::mac_control::{quanta_seconds, PRIORITIES};
use agent_common::HookCounters;

/// What the window needs of one interface's counters at one poll (a few hundred bytes, not
/// the whole counter block).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Received (XDP, tc ingress): RoCE data packets, CE-marked ones, CNPs.
    pub rx_packets: u64,
    pub rx_ce: u64,
    pub rx_cnp: u64,
    /// RoCE frame bytes received (ingress hooks) and sent (egress hooks).
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Sent (tc egress): CNPs, and whether an egress hook counts at all.
    pub tx_cnp: u64,
    pub egress: bool,
    pub psn_gaps: u64,
    pub retransmits: u64,
    pub naks: u64,
    pub lossy: u64,
    pub roce: u64,
    pub pfc_quanta: [u64; PRIORITIES],
    /// The NIC's own count of the time the peer paused each priority, microseconds (mlx5
    /// `rx_prioN_pause_duration`; None where the driver has none).
    pub nic_paused_us: [Option<u64>; PRIORITIES],
    /// The time each priority was paused so far by the union of the pause intervals of the
    /// frames the kernel saw, nanoseconds ([`super::live_pause`]; None while the link's speed
    /// is unknown).
    pub union_paused_ns: [Option<u64>; PRIORITIES],
}

impl Sample {
    /// Adds one hook's counter block.
    pub fn add(&mut self, ingress: bool, c: &HookCounters) {
        let roce = c.roce_packets();
        if ingress {
            self.rx_packets += roce.saturating_sub(c.cnp_packets);
            self.rx_ce += c.ecn_packets[3];
            self.rx_cnp += c.cnp_packets;
            self.rx_bytes += c.roce_bytes();
        } else {
            self.tx_bytes += c.roce_bytes();
            self.tx_cnp += c.cnp_packets;
            self.egress = true;
        }
        self.psn_gaps += c.psn_gaps;
        self.retransmits += c.retransmits;
        self.naks += c.naks.iter().sum::<u64>();
        self.lossy += c.lossy_roce_packets;
        self.roce += roce;
        for p in 0..PRIORITIES {
            self.pfc_quanta[p] += c.pfc_quanta[p];
        }
    }

    pub fn minus(&self, o: &Sample) -> Sample {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Sample {
            rx_packets: d(self.rx_packets, o.rx_packets),
            rx_ce: d(self.rx_ce, o.rx_ce),
            rx_cnp: d(self.rx_cnp, o.rx_cnp),
            rx_bytes: d(self.rx_bytes, o.rx_bytes),
            tx_bytes: d(self.tx_bytes, o.tx_bytes),
            tx_cnp: d(self.tx_cnp, o.tx_cnp),
            egress: self.egress,
            psn_gaps: d(self.psn_gaps, o.psn_gaps),
            retransmits: d(self.retransmits, o.retransmits),
            naks: d(self.naks, o.naks),
            lossy: d(self.lossy, o.lossy),
            roce: d(self.roce, o.roce),
            pfc_quanta: std::array::from_fn(|p| d(self.pfc_quanta[p], o.pfc_quanta[p])),
            nic_paused_us: std::array::from_fn(|p| {
                Some(d(self.nic_paused_us[p]?, o.nic_paused_us[p]?))
            }),
            union_paused_ns: std::array::from_fn(|p| {
                Some(d(self.union_paused_ns[p]?, o.union_paused_ns[p]?))
            }),
        }
    }

    /// Seconds priority `p` was paused in this delta at `speed` bits/s: the NIC's own pause
    /// time where its driver counts it (true wall time), else the union of the pause
    /// intervals of the frames the kernel saw (as `analyze` works it out), else the pause
    /// quanta the kernel counted (their sum: an upper bound, refreshed XOFFs overlap).
    pub fn paused_seconds(&self, p: usize, speed: u64) -> f64 {
        match (self.nic_paused_us[p], self.union_paused_ns[p]) {
            (Some(us), _) => us as f64 / 1e6,
            (None, Some(ns)) => ns as f64 / 1e9,
            (None, None) => quanta_seconds(self.pfc_quanta[p], speed),
        }
    }
}

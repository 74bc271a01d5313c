//! The host's RoCE at a glance (`/api/v1/summary`, the header of `rocemon top`): the rates of
//! the last poll interval summed over the watched interfaces, from the same counter deltas
//! the live findings judge ([`super::live_sample::Sample`]). Rates in bits per second
//! (what a person reads for a network), shares as ratios 0..1.

use super::live_sample::Sample;
use agent_common::headers::mac_control::PRIORITIES;
use serde::Serialize;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Interfaces with two polls to compare (0: nothing measured yet).
    pub interfaces: usize,
    /// The longest interval the rates are over, seconds.
    pub interval_seconds: f64,
    /// RoCE received (ingress hooks) and sent (egress hooks), bits per second.
    pub rx_bits_per_second: f64,
    pub tx_bits_per_second: f64,
    /// RoCE data packets received per second (CNPs apart).
    pub rx_packets_per_second: f64,
    /// CE-marked share of the received RoCE data packets (None: none received).
    pub ce_ratio: Option<f64>,
    /// CNPs received and sent, per second.
    pub cnp_per_second: f64,
    /// The largest share of the interval that any priority of any interface was paused.
    pub pfc_paused_ratio: f64,
    /// Findings active after the poll.
    pub findings_active: usize,
}

impl Totals {
    /// Adds one interface's delta over `dt` seconds at link `speed` (bits/s; 0: unknown, no
    /// pause time from quanta).
    pub fn add(&mut self, d: &Sample, dt: f64, speed: u64) {
        if dt <= 0.0 {
            return;
        }
        let ce = self.ce_ratio.unwrap_or(0.0) * self.rx_packets_per_second;
        self.interfaces += 1;
        self.interval_seconds = self.interval_seconds.max(dt);
        self.rx_bits_per_second += d.rx_bytes as f64 * 8.0 / dt;
        self.tx_bits_per_second += d.tx_bytes as f64 * 8.0 / dt;
        self.rx_packets_per_second += d.rx_packets as f64 / dt;
        let ce = ce + d.rx_ce as f64 / dt;
        self.ce_ratio =
            (self.rx_packets_per_second > 0.0).then(|| (ce / self.rx_packets_per_second).min(1.0));
        self.cnp_per_second += (d.rx_cnp + d.tx_cnp) as f64 / dt;
        let paused = (0..PRIORITIES)
            .map(|p| d.paused_seconds(p, speed) / dt)
            .fold(0.0, f64::max)
            .min(1.0);
        self.pfc_paused_ratio = self.pfc_paused_ratio.max(paused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rx_bytes: u64, rx_packets: u64, rx_ce: u64) -> Sample {
        Sample {
            rx_bytes,
            rx_packets,
            rx_ce,
            ..Sample::default()
        }
    }

    #[test]
    fn rates_are_bits_per_second_over_the_interval() {
        let mut t = Totals::default();
        t.add(&sample(1_000_000, 1000, 0), 2.0, 0);
        assert_eq!(t.rx_bits_per_second, 4e6);
        assert_eq!(t.rx_packets_per_second, 500.0);
        assert_eq!(t.interfaces, 1);
        assert_eq!(t.interval_seconds, 2.0);
    }

    #[test]
    fn ce_share_weighs_interfaces_by_their_packets() {
        let mut t = Totals::default();
        t.add(&sample(0, 900, 0), 1.0, 0);
        t.add(&sample(0, 100, 100), 1.0, 0);
        assert_eq!(t.ce_ratio, Some(0.1));
    }

    #[test]
    fn no_received_packets_no_ce_share() {
        let mut t = Totals::default();
        t.add(&sample(0, 0, 0), 1.0, 0);
        assert_eq!(t.ce_ratio, None);
    }

    #[test]
    fn paused_share_is_the_most_paused_priority() {
        let mut t = Totals::default();
        let mut s = Sample::default();
        s.nic_paused_us[3] = Some(250_000);
        s.nic_paused_us[5] = Some(100_000);
        t.add(&s, 1.0, 100_000_000_000);
        assert_eq!(t.pfc_paused_ratio, 0.25);
    }

    #[test]
    fn an_empty_interval_adds_nothing() {
        let mut t = Totals::default();
        t.add(&sample(10, 10, 10), 0.0, 0);
        assert_eq!(t, Totals::default());
    }
}

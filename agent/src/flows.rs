//! The flow table: one per agent. Live mode feeds it kernel-map snapshots (cumulative
//! per-flow totals), `analyze` feeds it packets through `FlowStats::record`; both give flows
//! with totals and a smoothed rate, and the same top-K selection.

use agent_common::psn::PsnEvent;
use agent_common::{FlowKey, FlowStats, RoceInfo};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Time constant of the exponentially weighted rate, in seconds.
pub const RATE_TAU_SECONDS: f64 = 5.0;

/// A flow as the agent knows it.
#[derive(Clone, Debug)]
pub struct FlowEntry {
    /// Index into [`FlowTable::ifaces`].
    pub iface: usize,
    pub key: FlowKey,
    pub stats: FlowStats,
    /// Smoothed wire bytes per second.
    pub rate_bytes: f64,
    /// Smoothed packets per second.
    pub rate_packets: f64,
    /// Poll generation that last saw the flow in the kernel map.
    generation: u64,
}

impl FlowEntry {
    pub fn src(&self) -> IpAddr {
        addr(self.key.ip_version, &self.key.src)
    }
    pub fn dst(&self) -> IpAddr {
        addr(self.key.ip_version, &self.key.dst)
    }
}

/// The address stored in a flow key.
pub fn addr(ip_version: u8, bytes: &[u8; 16]) -> IpAddr {
    if ip_version == 4 {
        IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*bytes))
    }
}

#[derive(Default, Debug)]
pub struct FlowTable {
    pub ifaces: Vec<String>,
    entries: HashMap<(usize, FlowKey), FlowEntry>,
    generation: u64,
}

impl FlowTable {
    pub fn new(ifaces: Vec<String>) -> Self {
        FlowTable {
            ifaces,
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Flows of one interface.
    pub fn count_for(&self, iface: usize) -> usize {
        self.entries.keys().filter(|(i, _)| *i == iface).count()
    }

    pub fn iter(&self) -> impl Iterator<Item = &FlowEntry> {
        self.entries.values()
    }

    /// Counts one packet (captures, AF_XDP): the same update the kernel runs.
    pub fn record(
        &mut self,
        iface: usize,
        key: FlowKey,
        info: &RoceInfo,
        frame_len: u64,
        ts_ns: u64,
    ) -> PsnEvent {
        let e = self
            .entries
            .entry((iface, key))
            .or_insert_with(|| FlowEntry {
                iface,
                key,
                stats: FlowStats::default(),
                rate_bytes: 0.0,
                rate_packets: 0.0,
                generation: 0,
            });
        e.stats.record(info, frame_len, ts_ns)
    }

    /// For captures: the mean rate of each flow over its own lifetime.
    pub fn finish_capture_rates(&mut self) {
        for e in self.entries.values_mut() {
            let span = e.stats.last_seen_ns.saturating_sub(e.stats.first_seen_ns);
            if span > 0 {
                let s = span as f64 / 1e9;
                e.rate_bytes = e.stats.bytes as f64 / s;
                e.rate_packets = e.stats.packets as f64 / s;
            }
        }
    }

    /// Starts a poll round (live mode).
    pub fn begin_poll(&mut self) {
        self.generation += 1;
    }

    /// Applies a kernel-map snapshot of one flow seen `dt` seconds after the previous poll.
    pub fn update(&mut self, iface: usize, key: FlowKey, stats: FlowStats, dt: f64) {
        let generation = self.generation;
        match self.entries.get_mut(&(iface, key)) {
            Some(e) => {
                // A smaller total means the kernel evicted and re-created the flow.
                let db = if stats.bytes >= e.stats.bytes {
                    stats.bytes - e.stats.bytes
                } else {
                    stats.bytes
                };
                let dp = if stats.packets >= e.stats.packets {
                    stats.packets - e.stats.packets
                } else {
                    stats.packets
                };
                if dt > 0.0 {
                    let alpha = 1.0 - (-dt / RATE_TAU_SECONDS).exp();
                    e.rate_bytes += alpha * (db as f64 / dt - e.rate_bytes);
                    e.rate_packets += alpha * (dp as f64 / dt - e.rate_packets);
                }
                e.stats = stats;
                e.generation = generation;
            }
            None => {
                self.entries.insert(
                    (iface, key),
                    FlowEntry {
                        iface,
                        key,
                        stats,
                        rate_bytes: 0.0,
                        rate_packets: 0.0,
                        generation,
                    },
                );
            }
        }
    }

    /// Ends a poll round: flows of `polled` interfaces that the kernel no longer holds
    /// (evicted from the LRU map) leave the table. Returns how many left, per interface.
    pub fn end_poll(&mut self, polled: &[usize]) -> Vec<usize> {
        let g = self.generation;
        let mut gone = vec![0; self.ifaces.len()];
        self.entries.retain(|(i, _), e| {
            let keep = !polled.contains(i) || e.generation == g;
            if !keep {
                if let Some(n) = gone.get_mut(*i) {
                    *n += 1;
                }
            }
            keep
        });
        gone
    }

    /// The `k` flows with the highest byte rate (then most bytes), highest first.
    pub fn top_k(&self, k: usize) -> Vec<&FlowEntry> {
        let mut v: Vec<&FlowEntry> = self.entries.values().collect();
        v.sort_by(|a, b| {
            b.rate_bytes
                .total_cmp(&a.rate_bytes)
                .then(b.stats.bytes.cmp(&a.stats.bytes))
                .then(a.key.cmp(&b.key))
        });
        v.truncate(k);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(qp: u32) -> FlowKey {
        FlowKey {
            ip_version: 4,
            dest_qp: qp,
            ..FlowKey::default()
        }
    }

    fn stats(bytes: u64) -> FlowStats {
        FlowStats {
            bytes,
            packets: bytes / 100,
            ..FlowStats::default()
        }
    }

    #[test]
    fn rates_top_k_and_eviction() {
        let mut t = FlowTable::new(vec!["a".into()]);
        t.begin_poll();
        t.update(0, key(1), stats(0), 1.0);
        t.update(0, key(2), stats(0), 1.0);
        t.end_poll(&[0]);
        for i in 1..=50u64 {
            t.begin_poll();
            t.update(0, key(1), stats(i * 1_000_000), 1.0);
            t.update(0, key(2), stats(i * 1_000), 1.0);
            t.end_poll(&[0]);
        }
        let top = t.top_k(1);
        assert_eq!(top[0].key.dest_qp, 1);
        // converged near 1 MB/s
        assert!(
            (top[0].rate_bytes - 1e6).abs() < 1e4,
            "{}",
            top[0].rate_bytes
        );
        t.begin_poll();
        t.update(0, key(1), stats(51_000_000), 1.0);
        assert_eq!(t.end_poll(&[0]), vec![1]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.count_for(0), 1);
    }

    #[test]
    fn addresses() {
        let mut k = key(1);
        k.src[..4].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(addr(4, &k.src).to_string(), "10.0.0.1");
        let mut b = [0u8; 16];
        b[0] = 0xfd;
        b[15] = 1;
        assert_eq!(addr(6, &b).to_string(), "fd00::1");
    }
}

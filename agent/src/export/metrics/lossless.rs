//! The lossless fabric's series: PFC and PAUSE frames from the kernel's counter blocks, the
//! traffic classes of RoCE, and the NIC's own pause counters (DCB, ethtool). Declared in the
//! catalog (`mod.rs`); advanced here.

use super::Metrics;
use crate::sources::nic_pause::{NicPause, Origin};
use agent_common::headers::mac_control::{quanta_seconds, PRIORITIES};
use agent_common::{Hook, HookCounters};

/// Priority label values.
const PRIORITY: [&str; PRIORITIES] = ["0", "1", "2", "3", "4", "5", "6", "7"];

impl Metrics {
    /// The interface's link speed (bits per second) for pause seconds; `None`: unknown, and
    /// only quanta are exported.
    pub fn set_link_speed(&mut self, iface: &str, bps: Option<u64>) {
        match bps {
            Some(b) if b > 0 => {
                self.link_speed_bps.insert(iface.to_string(), b);
            }
            _ => {
                self.link_speed_bps.remove(iface);
            }
        }
    }

    /// Advances the lossless-fabric counters of one hook from `prev` to `cur`.
    pub(super) fn observe_lossless(
        &self,
        iface: &str,
        hook: Hook,
        cur: &HookCounters,
        prev: &HookCounters,
    ) {
        let d = super::delta;
        let (dir, hn) = (hook.direction(), hook.name());
        let l = [iface, dir, hn];
        let speed = self.link_speed_bps.get(iface).copied();
        for (p, name) in PRIORITY.iter().enumerate() {
            for (kind, now, before) in [
                ("xoff", cur.pfc_xoff[p], prev.pfc_xoff[p]),
                ("xon", cur.pfc_xon[p], prev.pfc_xon[p]),
            ] {
                let n = d(now, before);
                if n > 0 {
                    self.pfc_priority_frames
                        .with_label_values(&[iface, dir, hn, name, kind])
                        .inc_by(n);
                }
            }
            let q = d(cur.pfc_quanta[p], prev.pfc_quanta[p]);
            if q > 0 {
                self.pfc_quanta
                    .with_label_values(&[iface, dir, hn, name])
                    .inc_by(q);
                if let Some(bps) = speed {
                    self.pfc_seconds
                        .with_label_values(&[iface, dir, hn, name])
                        .inc_by(quanta_seconds(q, bps));
                }
            }
        }
        let xon = d(cur.pause_xon, prev.pause_xon);
        let all = d(cur.pause_frames, prev.pause_frames);
        for (kind, n) in [("xoff", all.saturating_sub(xon)), ("xon", xon)] {
            if n > 0 {
                self.pause_frames
                    .with_label_values(&[iface, dir, hn, kind])
                    .inc_by(n);
            }
        }
        let q = d(cur.pause_quanta, prev.pause_quanta);
        self.pause_quanta.with_label_values(&l).inc_by(q);
        if let Some(bps) = speed {
            self.pause_seconds
                .with_label_values(&l)
                .inc_by(quanta_seconds(q, bps));
        }
        for dscp in 0..64usize {
            let ds = dscp.to_string();
            let counts = [
                (
                    &cur.roce_dscp_packets,
                    &prev.roce_dscp_packets,
                    &cur.roce_dscp_bytes,
                    &prev.roce_dscp_bytes,
                ),
                (
                    &cur.cnp_dscp_packets,
                    &prev.cnp_dscp_packets,
                    &cur.cnp_dscp_bytes,
                    &prev.cnp_dscp_bytes,
                ),
            ]
            .map(|(cp, pp, cb, pb)| (d(cp[dscp], pp[dscp]), d(cb[dscp], pb[dscp])));
            by_class(
                &self.dscp_packets,
                &self.dscp_bytes,
                [iface, dir, hn, &ds],
                counts,
            );
        }
        for (p, name) in PRIORITY.iter().enumerate() {
            let counts = [
                (
                    &cur.roce_pcp_packets,
                    &prev.roce_pcp_packets,
                    &cur.roce_pcp_bytes,
                    &prev.roce_pcp_bytes,
                ),
                (
                    &cur.cnp_pcp_packets,
                    &prev.cnp_pcp_packets,
                    &cur.cnp_pcp_bytes,
                    &prev.cnp_pcp_bytes,
                ),
            ]
            .map(|(cp, pp, cb, pb)| (d(cp[p], pp[p]), d(cb[p], pb[p])));
            by_class(
                &self.priority_packets,
                &self.priority_bytes,
                [iface, dir, hn, name],
                counts,
            );
        }
    }

    /// The NIC's own pause counters of one interface (totals; a device with neither source
    /// exports no series).
    /// The union pause time per priority so far (ns; see `detect::live_pause`).
    pub fn set_pfc_paused(&self, iface: &str, paused_ns: &[Option<u64>; PRIORITIES]) {
        for (p, ns) in paused_ns.iter().enumerate() {
            if let Some(ns) = ns {
                super::follow(
                    &self
                        .pfc_paused_seconds
                        .with_label_values(&[iface, PRIORITY[p]]),
                    *ns as f64 / 1e9,
                );
            }
        }
    }

    pub fn set_nic_pause(&self, iface: &str, nic: &NicPause) {
        for c in &nic.pfc {
            let origin = c.origin.name();
            for (dir, v) in [("rx", c.rx), ("tx", c.tx)] {
                if let Some(v) = v {
                    super::follow(
                        &self.nic_pfc_frames.with_label_values(&[
                            iface,
                            PRIORITY[c.priority as usize % PRIORITIES],
                            dir,
                            origin,
                        ]),
                        v,
                    );
                }
            }
        }
        for d in &nic.durations {
            for (dir, v) in [("rx", d.rx_micros), ("tx", d.tx_micros)] {
                if let Some(v) = v {
                    super::follow(
                        &self.nic_pfc_pause_seconds.with_label_values(&[
                            iface,
                            PRIORITY[d.priority as usize % PRIORITIES],
                            dir,
                        ]),
                        v as f64 / 1e6,
                    );
                }
            }
        }
        for (name, v) in &nic.other {
            super::follow(
                &self
                    .nic_pause_counter
                    .with_label_values(&[iface, name, Origin::Ethtool.name()]),
                *v,
            );
        }
    }
}

/// Adds one traffic class's packets and bytes since the previous poll, RoCE (CNPs included)
/// then CNPs only, under `labels` plus the `class` label; a class with no packet adds no
/// series.
fn by_class(
    packets: &prometheus::IntCounterVec,
    bytes: &prometheus::IntCounterVec,
    labels: [&str; 4],
    counts: [(u64, u64); 2],
) {
    for (class, (pk, by)) in ["roce", "cnp"].into_iter().zip(counts) {
        if pk > 0 {
            let [a, b, c, e] = labels;
            let lv = [a, b, c, e, class];
            packets.with_label_values(&lv).inc_by(pk);
            bytes.with_label_values(&lv).inc_by(by);
        }
    }
}

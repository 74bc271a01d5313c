//! The sFlow collector's series, set from its totals at every poll (declared in the catalog,
//! `mod.rs`).

use super::{follow, Metrics, ECN_LABELS};
use crate::sflow::collector::Collector;
use agent_common::opcode;

impl Metrics {
    /// The collector's totals, and the datagrams the kernel dropped before it read them.
    pub fn set_sflow(&self, c: &Collector, dropped: u64) {
        // Per agent address (sub-agents summed: one switch).
        let mut by_agent: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        for ((agent, _), a) in &c.agents {
            let e = by_agent.entry(agent.to_string()).or_default();
            e.0 += a.datagrams;
            e.1 += a.lost_datagrams;
        }
        for (agent, (d, lost)) in &by_agent {
            follow(&self.sflow_datagrams.with_label_values(&[agent]), *d);
            follow(&self.sflow_lost.with_label_values(&[agent]), *lost);
        }
        for (kind, n) in [
            ("flow", c.flow_samples),
            ("counter", c.counter_samples),
            ("unknown", c.unknown_samples),
        ] {
            follow(&self.sflow_samples.with_label_values(&[kind]), n);
        }
        for (m, n) in &c.malformed {
            follow(&self.sflow_malformed.with_label_values(&[m.name()]), *n);
        }
        follow(
            &self.sflow_dropped.with_label_values(&[] as &[&str]),
            dropped,
        );
        for (k, p) in &c.ports {
            let (agent, ifindex) = (k.agent.to_string(), k.if_index.to_string());
            if p.roce.packets > 0 {
                let l = [agent.as_str(), ifindex.as_str(), k.direction];
                follow(
                    &self.sflow_port_samples.with_label_values(&l),
                    p.roce.packets,
                );
                follow(
                    &self.sflow_port_packets.with_label_values(&l),
                    p.estimated.packets,
                );
                follow(
                    &self.sflow_port_bytes.with_label_values(&l),
                    p.estimated.bytes,
                );
            }
            if let Some(g) = &p.counters {
                self.sflow_port_speed
                    .with_label_values(&[&agent, &ifindex])
                    .set(g.speed.min(i64::MAX as u64) as i64);
                for (dir, v) in [("in", g.in_octets), ("out", g.out_octets)] {
                    follow(
                        &self
                            .sflow_port_octets
                            .with_label_values(&[&agent, &ifindex, dir]),
                        v,
                    );
                }
            }
        }
        for (op, n) in c.estimated.opcodes() {
            follow(
                &self
                    .sflow_opcode_packets
                    .with_label_values(&[&opcode::name(op)]),
                n,
            );
        }
        for (i, cp) in ECN_LABELS.iter().enumerate() {
            follow(
                &self.sflow_ecn_packets.with_label_values(&[cp]),
                c.estimated.ecn[i],
            );
        }
        follow(
            &self.sflow_cnp_packets.with_label_values(&[] as &[&str]),
            c.estimated.cnp,
        );
    }
}

impl Metrics {
    /// The fabric view: per switch uplink load, elephants and collisions.
    pub fn set_sflow_fabric(&self, groups: &[crate::detect::ecmp::GroupView]) {
        for g in groups {
            self.sflow_colliding_uplinks
                .with_label_values(&[&g.name])
                .set(g.colliding_members as i64);
            for m in &g.members {
                let l = [g.name.as_str(), m.member.as_str()];
                self.sflow_uplink_rate
                    .with_label_values(&l)
                    .set(m.bytes_per_second);
                self.sflow_uplink_elephants
                    .with_label_values(&l)
                    .set(m.elephants as i64);
                self.sflow_uplink_colliding
                    .with_label_values(&l)
                    .set(i64::from(m.colliding));
            }
        }
    }
}

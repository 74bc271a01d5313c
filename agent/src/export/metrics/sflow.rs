//! The sFlow collector's series, set from its totals at every poll (declared in the catalog,
//! `mod.rs`). Per-agent and per-port series exist only while the collector holds their agent
//! or port (its tables are bounded and aged): anyone who can reach the sFlow port chooses
//! agent addresses, so a series per address ever seen would be unbounded.

use super::{follow, Metrics, ECN_LABELS};
use crate::sflow::collector::{Collector, PortKey};
use agent_common::opcode;
use prometheus::{IntCounter, IntGauge};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

/// What was exported at the last poll: agents by label, and each port's series handles, kept
/// between polls so that a poll over a fabric's tens of thousands of ports follows the
/// collector's figures into them without formatting a label or looking a series up again
/// (only a new port's series are made, only a gone port's removed).
#[derive(Debug, Default)]
pub struct Exported {
    agents: BTreeSet<String>,
    ports: FxHashMap<PortKey, PortSeries>,
    port_counters: FxHashMap<PortKey, CounterSeries>,
}

/// The RoCE series of one port (agent, ifIndex, direction).
#[derive(Debug)]
struct PortSeries {
    samples: IntCounter,
    packets: IntCounter,
    bytes: IntCounter,
}

/// A port's series from its counter samples.
#[derive(Debug)]
struct CounterSeries {
    speed: IntGauge,
    in_octets: IntCounter,
    out_octets: IntCounter,
}

/// A port's labels: agent, ifIndex.
fn port_labels(k: &PortKey) -> [String; 2] {
    [k.agent.to_string(), k.if_index.to_string()]
}

/// The name the agents no longer held are summed under.
const OTHER: &str = "other";

impl Metrics {
    /// The collector's totals, and the datagrams the kernel dropped before it read them.
    pub fn set_sflow(&mut self, c: &Collector, dropped: u64) {
        let mut now = Exported::default();
        // Per agent address (sub-agents summed: one switch).
        let mut by_agent: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for ((agent, _), a) in c.agents.iter() {
            let e = by_agent.entry(agent.to_string()).or_default();
            e.0 += a.datagrams;
            e.1 += a.lost_so_far();
            e.2 += a.restarts;
        }
        let gone = &c.agents.gone;
        by_agent.insert(
            OTHER.into(),
            (gone.datagrams, gone.lost_so_far(), gone.restarts),
        );
        for (agent, (d, lost, restarts)) in &by_agent {
            follow(&self.sflow_datagrams.with_label_values(&[agent]), *d);
            follow(&self.sflow_lost.with_label_values(&[agent]), *lost);
            follow(&self.sflow_restarts.with_label_values(&[agent]), *restarts);
            now.agents.insert(agent.clone());
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
        let none: &[&str] = &[];
        follow(&self.sflow_dropped.with_label_values(none), dropped);
        follow(
            &self.sflow_denied.with_label_values(none),
            c.denied_datagrams,
        );
        follow(
            &self.sflow_implausible.with_label_values(none),
            c.implausible_samples,
        );
        for (table, s) in [
            ("agents", c.agents.stats()),
            ("ports", c.ports.stats()),
            ("flows", c.flows.stats()),
            ("port_flows", c.port_flows.stats()),
            ("rhythm_ports", c.rhythms.stats()),
        ] {
            self.sflow_table_entries
                .with_label_values(&[table])
                .set(i64::try_from(s.entries).unwrap_or(i64::MAX));
            for (reason, n) in [
                ("dropped", s.dropped),
                ("evicted", s.evicted),
                ("expired", s.expired),
            ] {
                follow(
                    &self.sflow_table_removed.with_label_values(&[table, reason]),
                    n,
                );
            }
        }
        let mut was = std::mem::take(&mut self.sflow_series);
        for (k, p) in c.ports.iter() {
            if p.roce.packets > 0 {
                let s = was.ports.remove(k).unwrap_or_else(|| {
                    let [agent, ifindex] = port_labels(k);
                    let l = [agent.as_str(), ifindex.as_str(), k.direction.as_str()];
                    PortSeries {
                        samples: self.sflow_port_samples.with_label_values(&l),
                        packets: self.sflow_port_packets.with_label_values(&l),
                        bytes: self.sflow_port_bytes.with_label_values(&l),
                    }
                });
                follow(&s.samples, p.roce.packets);
                follow(&s.packets, p.estimated.packets);
                follow(&s.bytes, p.estimated.bytes);
                now.ports.insert(*k, s);
            }
            if let Some(g) = &p.counters {
                let s = was.port_counters.remove(k).unwrap_or_else(|| {
                    let [agent, ifindex] = port_labels(k);
                    let octets = |dir| {
                        self.sflow_port_octets.with_label_values(&[
                            agent.as_str(),
                            ifindex.as_str(),
                            dir,
                        ])
                    };
                    CounterSeries {
                        speed: self.sflow_port_speed.with_label_values(&[&agent, &ifindex]),
                        in_octets: octets("in"),
                        out_octets: octets("out"),
                    }
                });
                s.speed.set(g.speed.min(i64::MAX as u64) as i64);
                follow(&s.in_octets, g.in_octets);
                follow(&s.out_octets, g.out_octets);
                now.port_counters.insert(*k, s);
            }
        }
        self.remove_gone_sflow_series(&was, &now);
        self.sflow_series = now;
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
            &self.sflow_cnp_packets.with_label_values(none),
            c.estimated.cnp,
        );
    }

    /// Removes the series of agents and ports exported before and no longer held (`was`:
    /// what the last poll exported, less what this one took over).
    fn remove_gone_sflow_series(&self, was: &Exported, now: &Exported) {
        for a in was.agents.difference(&now.agents) {
            for c in [
                &self.sflow_datagrams,
                &self.sflow_lost,
                &self.sflow_restarts,
            ] {
                let _ = c.remove_label_values(&[a]);
            }
        }
        for k in was.ports.keys() {
            let [a, i] = port_labels(k);
            let l = [a.as_str(), i.as_str(), k.direction.as_str()];
            for c in [
                &self.sflow_port_samples,
                &self.sflow_port_packets,
                &self.sflow_port_bytes,
            ] {
                let _ = c.remove_label_values(&l);
            }
        }
        for k in was.port_counters.keys() {
            let [a, i] = port_labels(k);
            let _ = self.sflow_port_speed.remove_label_values(&[&a, &i]);
            for dir in ["in", "out"] {
                let _ = self.sflow_port_octets.remove_label_values(&[&a, &i, dir]);
            }
        }
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

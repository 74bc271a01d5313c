//! The sFlow collector's series (declared in the catalog, `mod.rs`). Per-agent series are
//! set from its totals at every poll and exist only while the collector holds their agent:
//! anyone who can reach the sFlow port chooses agent addresses, so a series per address ever
//! seen would be unbounded. Per-port series (a
//! fabric's tens of thousands of ports, three series each) are not kept as registry objects at
//! all: each scrape writes them out of the collector's port table, as ebpf_exporter reads its
//! maps at scrape time, so they are exactly the ports the collector holds, cost no memory
//! between scrapes and no work at a poll.

use super::{follow, Metrics, ECN_LABELS, PORT_FAMILIES};
use crate::sflow::collector::Collector;
use agent_common::opcode;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// What was exported at the last poll: the agents, by label.
#[derive(Debug, Default)]
pub struct Exported {
    agents: BTreeSet<String>,
}

/// Appends the per-port series of the ports `c` holds to `out` (Prometheus text format, a
/// family's series together, labels in name order as the registry writes them): RoCE samples
/// and estimates of the ports that carried RoCE, speed and octets of those with counter
/// samples. A counter restarts from zero when its port left the table and came back, as after
/// a restart.
pub fn write_port_series(c: &Collector, out: &mut String) {
    for (f, family) in PORT_FAMILIES.iter().enumerate() {
        let _ = write!(
            out,
            "# HELP {0} {1}\n# TYPE {0} {2}\n",
            family.name, family.help, family.kind
        );
        for (k, p) in c.ports.iter() {
            let (agent, ifindex) = (k.agent, k.if_index);
            let _ = match f {
                0..=2 if p.roce.packets > 0 => {
                    let v = [p.roce.packets, p.estimated.packets, p.estimated.bytes][f];
                    writeln!(
                        out,
                        "{}{{agent=\"{agent}\",direction=\"{}\",ifindex=\"{ifindex}\"}} {v}",
                        family.name,
                        k.direction.as_str()
                    )
                }
                3 => match &p.counters {
                    Some(g) => writeln!(
                        out,
                        "{}{{agent=\"{agent}\",ifindex=\"{ifindex}\"}} {}",
                        family.name,
                        g.speed.min(i64::MAX as u64)
                    ),
                    None => Ok(()),
                },
                4 => match &p.counters {
                    Some(g) => writeln!(
                        out,
                        "{0}{{agent=\"{agent}\",direction=\"in\",ifindex=\"{ifindex}\"}} {1}\n\
                         {0}{{agent=\"{agent}\",direction=\"out\",ifindex=\"{ifindex}\"}} {2}",
                        family.name, g.in_octets, g.out_octets
                    ),
                    None => Ok(()),
                },
                _ => Ok(()),
            };
        }
    }
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
        let was = std::mem::take(&mut self.sflow_series);
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

    /// Removes the series of agents exported before and no longer held.
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

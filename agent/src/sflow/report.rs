//! The JSON shape of an sFlow collector's state.

use super::collector::{Collector, FlowEstimate, RoceTotals, FEW_SAMPLES};
use super::decode::IfCounters;
use super::table::TableStats;
use agent_common::opcode;
use serde::Serialize;
use std::collections::BTreeMap;

/// Flows listed (highest estimated bytes first).
pub const TOP_FLOWS: usize = 100;

#[derive(Clone, Debug, Serialize)]
pub struct SflowReport {
    pub datagrams: u64,
    pub lost_datagrams: u64,
    pub flow_samples: u64,
    pub counter_samples: u64,
    pub unknown_samples: u64,
    /// Flow samples without an Ethernet header record.
    pub other_headers: u64,
    pub malformed: BTreeMap<&'static str, u64>,
    pub agents: Vec<Agent>,
    /// The agents no longer held (expired or pushed out), summed.
    pub agents_gone: Gone,
    /// Datagrams from agents outside `[sflow] agents`, dropped.
    pub denied_datagrams: u64,
    /// Flow samples claiming a frame over 64 KiB or a sampling rate of 0: not estimated from.
    pub implausible_samples: u64,
    /// Each table's size, bound, and the entries refused, pushed out and expired.
    pub tables: Tables,
    /// RoCE samples as sampled (each once).
    pub samples: Totals,
    /// RoCE samples weighted by their sampling rate.
    pub estimated: Totals,
    pub ports: Vec<Port>,
    pub ports_dropped: u64,
    pub flows: Vec<Flow>,
    pub flows_total: usize,
    pub flows_dropped: u64,
    /// ECMP at the switches (with `[[sflow.groups]]` configured).
    pub fabric: Option<super::fabric::FabricReport>,
    /// The training rhythm per switch port (as last detected; ports with RoCE samples, at
    /// most [`super::collector::MAX_RHYTHM_PORTS`]).
    pub rhythms: Vec<PortRhythm>,
    pub rhythm_ports_dropped: u64,
}

/// A switch port's rhythm: estimated RoCE bytes at the agent's uptime clock.
#[derive(Clone, Debug, Serialize)]
pub struct PortRhythm {
    pub agent: String,
    pub ifindex: u32,
    pub period_seconds: Option<f64>,
    pub duty_ratio: Option<f64>,
    pub slow_steps: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Agent {
    pub agent: String,
    pub sub_agent: u32,
    pub datagrams: u64,
    pub lost_datagrams: u64,
    pub reordered_datagrams: u64,
    pub duplicate_datagrams: u64,
    /// The agent's uptime went back: it restarted, and its sequence with it.
    pub restarts: u64,
    /// Sequence jumps larger than the elapsed uptime could hold (not counted as loss).
    pub discontinuities: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Gone {
    pub datagrams: u64,
    pub lost_datagrams: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Tables {
    pub agents: TableStats,
    pub ports: TableStats,
    pub flows: TableStats,
    pub port_flows: TableStats,
    pub rhythm_ports: TableStats,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ecn {
    pub not_ect: u64,
    pub ect1: u64,
    pub ect0: u64,
    pub ce: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Opcode {
    pub opcode: u8,
    pub name: String,
    pub packets: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    pub packets: u64,
    pub bytes: u64,
    pub cnp: u64,
    pub ecn: Ecn,
    pub opcodes: Vec<Opcode>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Port {
    pub agent: String,
    pub ifindex: u32,
    pub direction: &'static str,
    pub samples: u64,
    pub roce_samples: u64,
    pub estimated_packets: u64,
    pub estimated_bytes: u64,
    /// Fewer than 30 RoCE samples: the estimate is rough.
    pub few_samples: bool,
    pub counters: Option<IfCounters>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Flow {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dest_qp: u32,
    pub samples: u64,
    pub estimated_packets: u64,
    pub estimated_bytes: u64,
    pub few_samples: bool,
}

fn totals(t: &RoceTotals) -> Totals {
    Totals {
        packets: t.packets,
        bytes: t.bytes,
        cnp: t.cnp,
        ecn: Ecn {
            not_ect: t.ecn[0],
            ect1: t.ecn[1],
            ect0: t.ecn[2],
            ce: t.ecn[3],
        },
        opcodes: t
            .opcodes()
            .map(|(op, n)| Opcode {
                opcode: op,
                name: opcode::name(op),
                packets: n,
            })
            .collect(),
    }
}

/// A table's entries in key order (the tables keep no order; the report does).
fn sorted<'a, K: Ord + 'a, V: 'a>(
    entries: impl Iterator<Item = (&'a K, &'a V)>,
) -> impl Iterator<Item = (&'a K, &'a V)> {
    let mut v: Vec<_> = entries.collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v.into_iter()
}

/// The report of a collector, with the fabric view when groups are configured.
pub fn build(c: &Collector, fabric: Option<&super::fabric::Fabric>) -> SflowReport {
    let mut flows: Vec<(&agent_common::FlowKey, &FlowEstimate)> = c.flows.iter().collect();
    flows.sort_by_key(|f| (std::cmp::Reverse(f.1.estimated_bytes), *f.0));
    SflowReport {
        datagrams: c.datagrams,
        lost_datagrams: c.lost_datagrams(),
        flow_samples: c.flow_samples,
        counter_samples: c.counter_samples,
        unknown_samples: c.unknown_samples,
        other_headers: c.other_headers,
        malformed: c.malformed.iter().map(|(m, n)| (m.name(), *n)).collect(),
        agents: sorted(c.agents.iter())
            .map(|((a, sub), s)| Agent {
                agent: a.to_string(),
                sub_agent: *sub,
                datagrams: s.datagrams,
                lost_datagrams: s.lost_so_far(),
                reordered_datagrams: s.reordered,
                duplicate_datagrams: s.duplicates,
                restarts: s.restarts,
                discontinuities: s.discontinuities,
            })
            .collect(),
        agents_gone: Gone {
            datagrams: c.agents.gone.datagrams,
            lost_datagrams: c.agents.gone.lost_so_far(),
        },
        denied_datagrams: c.denied_datagrams,
        implausible_samples: c.implausible_samples,
        tables: Tables {
            agents: c.agents.stats(),
            ports: c.ports.stats(),
            flows: c.flows.stats(),
            port_flows: c.port_flows.stats(),
            rhythm_ports: c.rhythms.stats(),
        },
        samples: totals(&c.samples),
        estimated: totals(&c.estimated),
        ports: sorted(c.ports.iter())
            .map(|(k, p)| Port {
                agent: k.agent.to_string(),
                ifindex: k.if_index,
                direction: k.direction.as_str(),
                samples: p.samples,
                roce_samples: p.roce.packets,
                estimated_packets: p.estimated.packets,
                estimated_bytes: p.estimated.bytes,
                few_samples: p.roce.packets < FEW_SAMPLES,
                counters: p.counters.as_deref().copied(),
            })
            .collect(),
        ports_dropped: c.ports.stats().dropped,
        flows_total: c.flows.len(),
        flows: flows
            .into_iter()
            .take(TOP_FLOWS)
            .map(|(k, f)| Flow {
                src: agent_common::flow_key::addr(k.ip_version, &k.src).to_string(),
                dst: agent_common::flow_key::addr(k.ip_version, &k.dst).to_string(),
                sport: k.sport,
                dest_qp: k.dest_qp,
                samples: f.samples,
                estimated_packets: f.estimated_packets,
                estimated_bytes: f.estimated_bytes,
                few_samples: f.samples < FEW_SAMPLES,
            })
            .collect(),
        flows_dropped: c.flows.stats().dropped,
        fabric: fabric.map(|f| f.report()),
        rhythms: sorted(c.rhythms.iter())
            .map(|((agent, ifindex), t)| PortRhythm {
                agent: agent.to_string(),
                ifindex: *ifindex,
                period_seconds: t.rhythm.period_seconds,
                duty_ratio: t.rhythm.duty_ratio,
                slow_steps: t.slow_steps,
            })
            .collect(),
        rhythm_ports_dropped: c.rhythms.stats().dropped,
    }
}

//! What an sFlow stream adds up to: datagrams and lost datagrams per agent, samples, and the
//! sampled RoCE packets, raw and weighted by their sampling rate (an estimate of what the
//! switch forwarded), per opcode, ECN codepoint, CNP, flow and switch port. Each sampled header
//! goes through `agent-common`'s parser, cut at 128 bytes as switches send it.

use super::decode::{self, IfCounters, Malformed, Port, Sample};
use crate::detect::steps::StepTracker;
use agent_common::{parse_record, FlowKey, Hook, LinkType, SliceReader};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Flows held at most (a fabric has many; more are counted in `flows_dropped`).
pub const MAX_FLOWS: usize = 65_536;
/// Ports held at most.
pub const MAX_PORTS: usize = 16_384;
/// An estimate from fewer samples than this says so (`few_samples`).
pub const FEW_SAMPLES: u64 = 30;

/// RoCE seen in samples: packets, bytes (frame lengths), CNPs, ECN codepoints, opcodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RoceTotals {
    pub packets: u64,
    pub bytes: u64,
    pub cnp: u64,
    /// not_ect, ect1, ect0, ce (the two ECN bits).
    pub ecn: [u64; 4],
    /// By BTH opcode (256 entries once anything was added).
    #[serde(skip)]
    pub opcodes: Vec<u64>,
}

impl RoceTotals {
    fn add(&mut self, opcode: u8, ecn: u8, cnp: bool, bytes: u64, weight: u64) {
        // Saturating: a hostile agent's rate and frame length must not wrap the totals.
        let b = bytes.saturating_mul(weight);
        self.packets = self.packets.saturating_add(weight);
        self.bytes = self.bytes.saturating_add(b);
        let e = &mut self.ecn[(ecn & 3) as usize];
        *e = e.saturating_add(weight);
        if cnp {
            self.cnp = self.cnp.saturating_add(weight);
        }
        if self.opcodes.is_empty() {
            self.opcodes = vec![0; 256];
        }
        let o = &mut self.opcodes[opcode as usize];
        *o = o.saturating_add(weight);
    }

    /// The opcodes seen: (opcode, packets).
    pub fn opcodes(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        self.opcodes
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(op, n)| (op as u8, *n))
    }
}

/// Per agent (address, sub-agent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentState {
    pub datagrams: u64,
    pub lost_datagrams: u64,
    pub last_sequence: Option<u32>,
}

/// A switch port: (agent, ifIndex, direction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortKey {
    pub agent: IpAddr,
    pub if_index: u32,
    /// "ingress" (the sample's input port), "egress" (its output port).
    pub direction: &'static str,
}

/// RoCE of one port: samples, and packets and bytes estimated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortRoce {
    pub packets: u64,
    pub bytes: u64,
}

/// Samples of one port.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortStats {
    pub samples: u64,
    /// RoCE samples (packets = samples, bytes = their frame lengths).
    pub roce: PortRoce,
    /// Weighted by the sampling rate.
    pub estimated: PortRoce,
    /// The port's last interface counters (counter samples).
    pub counters: Option<IfCounters>,
}

/// A fabric flow: 5-tuple and destination QP, as the sampled header shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlowEstimate {
    pub samples: u64,
    pub estimated_packets: u64,
    pub estimated_bytes: u64,
}

/// The collector's state (one per `rocemon run`, one per `analyze`).
#[derive(Clone, Debug, Default)]
pub struct Collector {
    pub datagrams: u64,
    pub flow_samples: u64,
    pub counter_samples: u64,
    /// Samples of formats rocemon does not read.
    pub unknown_samples: u64,
    /// Flow samples whose header is not Ethernet, or absent.
    pub other_headers: u64,
    /// Datagrams (or parts of them) that could not be read, by reason.
    pub malformed: BTreeMap<Malformed, u64>,
    pub agents: BTreeMap<(IpAddr, u32), AgentState>,
    /// RoCE samples (each counts once).
    pub samples: RoceTotals,
    /// RoCE samples weighted by their sampling rate.
    pub estimated: RoceTotals,
    pub ports: FxHashMap<PortKey, PortStats>,
    pub ports_dropped: u64,
    pub flows: FxHashMap<FlowKey, FlowEstimate>,
    pub flows_dropped: u64,
    /// Estimated bytes of each flow on each port (the fabric view's rates).
    pub port_flows: FxHashMap<(PortKey, FlowKey), u64>,
    /// The training rhythm per switch port (agent, ifIndex), from the RoCE samples' estimated
    /// bytes at the agent's uptime clock; at most [`MAX_RHYTHM_PORTS`] ports.
    pub rhythms: BTreeMap<(IpAddr, u32), StepTracker>,
    pub rhythm_ports_dropped: u64,
}

/// Switch ports whose rhythm is followed (480 KB each: the last minute in 1 ms buckets).
pub const MAX_RHYTHM_PORTS: usize = 64;

impl Collector {
    /// Adds one datagram's payload (what arrived on UDP 6343).
    pub fn datagram(&mut self, buf: &[u8]) {
        let d = match decode::decode(buf) {
            Ok(d) => d,
            Err(m) => {
                *self.malformed.entry(m).or_default() += 1;
                return;
            }
        };
        self.datagrams += 1;
        for m in &d.problems {
            *self.malformed.entry(*m).or_default() += 1;
        }
        let h = d.header;
        let a = self.agents.entry((h.agent, h.sub_agent)).or_default();
        a.datagrams += 1;
        if let Some(last) = a.last_sequence {
            let gap = h.sequence.wrapping_sub(last);
            // A gap below 2^31 is loss; anything else is a restart or reordering.
            if gap > 1 && gap < 1 << 31 {
                a.lost_datagrams = a.lost_datagrams.saturating_add(u64::from(gap - 1));
            }
        }
        a.last_sequence = Some(h.sequence);
        for s in &d.samples {
            match s {
                Sample::Flow(f) => self.flow_sample(h.agent, f, h.uptime_ms),
                Sample::Counters(c) => {
                    self.counter_samples += 1;
                    if let Some(g) = c.generic {
                        let key = PortKey {
                            agent: h.agent,
                            if_index: g.if_index,
                            direction: "port",
                        };
                        if let Some(p) = self.port(key) {
                            p.counters = Some(g);
                        }
                    }
                }
                Sample::Unknown(_) => self.unknown_samples += 1,
            }
        }
    }

    fn port(&mut self, key: PortKey) -> Option<&mut PortStats> {
        if !self.ports.contains_key(&key) && self.ports.len() >= MAX_PORTS {
            self.ports_dropped += 1;
            return None;
        }
        Some(self.ports.entry(key).or_default())
    }

    fn flow_sample(&mut self, agent: IpAddr, f: &decode::FlowSample<'_>, uptime_ms: u32) {
        self.flow_samples += 1;
        let Some(h) = f.header.filter(|h| h.protocol == 1) else {
            self.other_headers += 1;
            return;
        };
        let roce =
            Some(parse_record(&SliceReader(h.header), LinkType::Ethernet)).filter(|r| r.is_roce());
        let weight = u64::from(f.sampling_rate);
        let bytes = u64::from(h.frame_length);
        let mut ports: Vec<PortKey> = Vec::with_capacity(2);
        for (port, direction) in [(f.input, "ingress"), (f.output, "egress")] {
            if let Port::IfIndex(i) = port {
                ports.push(PortKey {
                    agent,
                    if_index: i,
                    direction,
                });
            }
        }
        if ports.is_empty() {
            // Neither port known (some agents): the sample's data source.
            ports.push(PortKey {
                agent,
                if_index: f.source_index,
                direction: "source",
            });
        }
        let ports_of_sample = ports.clone();
        for key in ports {
            if let Some(p) = self.port(key) {
                p.samples += 1;
                if roce.is_some() {
                    p.roce.packets += 1;
                    p.roce.bytes = p.roce.bytes.saturating_add(bytes);
                    p.estimated.packets = p.estimated.packets.saturating_add(weight);
                    p.estimated.bytes = p
                        .estimated
                        .bytes
                        .saturating_add(bytes.saturating_mul(weight));
                }
            }
        }
        let Some(i) = roce else {
            return;
        };
        for port in &ports_of_sample {
            let k = (port.agent, port.if_index);
            if !self.rhythms.contains_key(&k) && self.rhythms.len() >= MAX_RHYTHM_PORTS {
                self.rhythm_ports_dropped += 1;
                continue;
            }
            self.rhythms.entry(k).or_default().add_restarting(
                u64::from(uptime_ms) * 1_000_000,
                bytes.saturating_mul(weight),
            );
        }
        let (op, ecn, cnp) = (i.opcode(), i.ecn(), i.is_cnp());
        self.samples.add(op, ecn, cnp, bytes, 1);
        self.estimated.add(op, ecn, cnp, bytes, weight);
        let key = i.flow_key(Hook::Xdp);
        for port in &ports_of_sample {
            let k = (*port, key);
            if self.port_flows.contains_key(&k) || self.port_flows.len() < 2 * MAX_FLOWS {
                let v = self.port_flows.entry(k).or_default();
                *v = v.saturating_add(bytes.saturating_mul(weight));
            }
        }
        if !self.flows.contains_key(&key) && self.flows.len() >= MAX_FLOWS {
            self.flows_dropped += 1;
            return;
        }
        let fl = self.flows.entry(key).or_default();
        fl.samples += 1;
        fl.estimated_packets = fl.estimated_packets.saturating_add(weight);
        fl.estimated_bytes = fl
            .estimated_bytes
            .saturating_add(bytes.saturating_mul(weight));
    }

    /// Lost datagrams over all agents.
    pub fn lost_datagrams(&self) -> u64 {
        self.agents.values().map(|a| a.lost_datagrams).sum()
    }
}

//! What an sFlow stream adds up to: datagrams and lost datagrams per agent, samples, and the
//! sampled RoCE packets, raw and weighted by their sampling rate (an estimate of what the
//! switch forwarded), per opcode, ECN codepoint, CNP, flow and switch port. Each sampled header
//! goes through `agent-common`'s parser, cut at 128 bytes as switches send it.

use super::decode::{self, IfCounters, Malformed, Port, Sample};
use super::sequence::SequenceState;
use super::table::{Absorb, Table};
pub use crate::config::sflow::{
    Limits, Network, DEFAULT_IDLE_TIMEOUT_NS, MAX_AGENTS, MAX_FLOWS, MAX_PORTS,
};
use crate::detect::steps::StepTracker;
use agent_common::{parse_record, FlowKey, Hook, LinkType, SliceReader};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Switch ports whose rhythm is followed (480 KB each: the last minute in 1 ms buckets).
pub const MAX_RHYTHM_PORTS: usize = 64;
/// The longest frame a sample may claim: a GSO frame of 64 KiB and its headers. A longer one
/// (or a sampling rate of 0) is implausible: counted, never estimated from.
pub const MAX_FRAME_LENGTH: u32 = 65_535 + 512;
/// An estimate from fewer samples than this says so (`few_samples`).
pub const FEW_SAMPLES: u64 = 30;

impl Limits {
    fn allows(&self, a: IpAddr) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|n| n.contains(a))
    }

    fn protects_agent(&self, a: IpAddr) -> bool {
        self.protected.iter().any(|(p, _)| *p == a)
    }

    fn protects_port(&self, a: IpAddr, if_index: u32) -> bool {
        self.protected
            .iter()
            .any(|(p, ports)| *p == a && ports.contains(&if_index))
    }
}

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

impl Absorb for SequenceState {
    /// The agents no longer held, summed: their datagrams and losses stay in the totals.
    fn absorb(&mut self, gone: &Self) {
        self.datagrams += gone.datagrams;
        self.lost += gone.lost_so_far();
        self.restarts += gone.restarts;
        self.discontinuities += gone.discontinuities;
        self.reordered += gone.reordered;
        self.duplicates += gone.duplicates;
    }
}

/// A switch port: (agent, ifIndex, direction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortKey {
    pub agent: IpAddr,
    pub if_index: u32,
    pub direction: Direction,
}

/// Which side of a port a figure is from. An enum, not its label: the collector hashes and
/// compares port keys several times per sample, a string would be hashed and compared byte by
/// byte each time. Declared in the labels' alphabetical order, so sorted keys read as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// The sample's output port.
    Egress,
    /// The sample's input port.
    Ingress,
    /// A counter sample's interface (both directions).
    Port,
    /// The sample's data source, when the agent names neither port.
    Source,
}

impl Direction {
    /// The label: "egress", "ingress", "port" or "source".
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Egress => "egress",
            Direction::Ingress => "ingress",
            Direction::Port => "port",
            Direction::Source => "source",
        }
    }
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
    /// The port's last interface counters (counter samples; boxed: only the counter
    /// samples' ports have them, and the per-sample ports' entries stay small).
    pub counters: Option<Box<IfCounters>>,
}

/// A fabric flow: 5-tuple and destination QP, as the sampled header shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlowEstimate {
    pub samples: u64,
    pub estimated_packets: u64,
    pub estimated_bytes: u64,
}

impl Absorb for PortStats {}
impl Absorb for FlowEstimate {}
impl Absorb for StepTracker {}

/// The collector's state (one per `rocemon run`, one per `analyze`).
#[derive(Clone, Debug)]
pub struct Collector {
    pub limits: Limits,
    pub datagrams: u64,
    pub flow_samples: u64,
    pub counter_samples: u64,
    /// Samples of formats rocemon does not read.
    pub unknown_samples: u64,
    /// Flow samples whose header is not Ethernet, or absent.
    pub other_headers: u64,
    /// Datagrams (or parts of them) that could not be read, by reason.
    pub malformed: BTreeMap<Malformed, u64>,
    /// Per agent (address, sub-agent); `agents.gone` sums those no longer held.
    pub agents: Table<(IpAddr, u32), SequenceState>,
    /// Datagrams from agents outside `limits.allow`, dropped.
    pub denied_datagrams: u64,
    /// Flow samples with a frame length over [`MAX_FRAME_LENGTH`] or a sampling rate of 0.
    pub implausible_samples: u64,
    /// RoCE samples (each counts once).
    pub samples: RoceTotals,
    /// RoCE samples weighted by their sampling rate.
    pub estimated: RoceTotals,
    pub ports: Table<PortKey, PortStats>,
    pub flows: Table<FlowKey, FlowEstimate>,
    /// Estimated bytes of each flow on each configured group's uplink, outward (the fabric
    /// view's rates; no other port's).
    pub port_flows: Table<(PortKey, FlowKey), u64>,
    /// The training rhythm per switch port (agent, ifIndex), from the RoCE samples' estimated
    /// bytes at the agent's uptime clock.
    pub rhythms: Table<(IpAddr, u32), StepTracker>,
    /// When the tables are next swept for idle entries.
    next_sweep_ns: u64,
}

impl Default for Collector {
    fn default() -> Self {
        Collector::new(Limits::default())
    }
}

impl Collector {
    pub fn new(limits: Limits) -> Collector {
        Collector {
            datagrams: 0,
            flow_samples: 0,
            counter_samples: 0,
            unknown_samples: 0,
            other_headers: 0,
            malformed: BTreeMap::new(),
            agents: Table::new(limits.max_agents),
            denied_datagrams: 0,
            implausible_samples: 0,
            samples: RoceTotals::default(),
            estimated: RoceTotals::default(),
            ports: Table::new(limits.max_ports),
            flows: Table::new(limits.max_flows),
            port_flows: Table::new(limits.max_flows.saturating_mul(2)),
            rhythms: Table::new(MAX_RHYTHM_PORTS),
            next_sweep_ns: 0,
            limits,
        }
    }

    /// Adds one datagram's payload (what arrived on UDP 6343) at `now_ns` (the capture's
    /// time, or the agent's clock live: what idle entries are measured by).
    pub fn datagram(&mut self, buf: &[u8], now_ns: u64) {
        self.sweep(now_ns);
        let d = match decode::decode(buf) {
            Ok(d) => d,
            Err(m) => {
                *self.malformed.entry(m).or_default() += 1;
                return;
            }
        };
        let h = d.header;
        if !self.limits.allows(h.agent) {
            self.denied_datagrams += 1;
            return;
        }
        self.datagrams += 1;
        for m in &d.problems {
            *self.malformed.entry(*m).or_default() += 1;
        }
        let protected = self.limits.protects_agent(h.agent);
        if let Some(a) = self
            .agents
            .touch(&(h.agent, h.sub_agent), now_ns, protected)
        {
            a.datagram(h.sequence, h.uptime_ms);
        }
        for s in &d.samples {
            match s {
                Sample::Flow(f) => self.flow_sample(h.agent, f, h.uptime_ms, now_ns),
                Sample::Counters(c) => {
                    self.counter_samples += 1;
                    if let Some(g) = c.generic {
                        let key = PortKey {
                            agent: h.agent,
                            if_index: g.if_index,
                            direction: Direction::Port,
                        };
                        if let Some(p) = self.port(key, now_ns) {
                            p.counters = Some(Box::new(g));
                        }
                    }
                }
                Sample::Unknown(_) => self.unknown_samples += 1,
            }
        }
    }

    /// Expires idle entries, at most four times per idle timeout.
    fn sweep(&mut self, now_ns: u64) {
        if now_ns < self.next_sweep_ns {
            return;
        }
        let idle = self.limits.idle_timeout_ns;
        if self.next_sweep_ns != 0 {
            self.agents.expire(now_ns, idle);
            self.ports.expire(now_ns, idle);
            self.flows.expire(now_ns, idle);
            self.port_flows.expire(now_ns, idle);
            self.rhythms.expire(now_ns, idle);
        }
        self.next_sweep_ns = now_ns.saturating_add((idle / 4).max(1));
    }

    fn port(&mut self, key: PortKey, now_ns: u64) -> Option<&mut PortStats> {
        let protected = self.limits.protects_port(key.agent, key.if_index);
        self.ports.touch(&key, now_ns, protected)
    }

    fn flow_sample(
        &mut self,
        agent: IpAddr,
        f: &decode::FlowSample<'_>,
        uptime_ms: u32,
        now_ns: u64,
    ) {
        self.flow_samples += 1;
        let Some(h) = f.header.filter(|h| h.protocol == 1) else {
            self.other_headers += 1;
            return;
        };
        if h.frame_length > MAX_FRAME_LENGTH || f.sampling_rate == 0 {
            self.implausible_samples += 1;
            return;
        }
        let roce =
            Some(parse_record(&SliceReader(h.header), LinkType::Ethernet)).filter(|r| r.is_roce());
        let weight = u64::from(f.sampling_rate);
        let bytes = u64::from(h.frame_length);
        let wire = bytes.saturating_mul(weight);
        // The sample's ports (at most two; no allocation per sample), each with whether it is
        // a configured group's uplink (asked once per sample).
        let mut ports = [None; 2];
        for (slot, (port, direction)) in ports
            .iter_mut()
            .zip([(f.input, Direction::Ingress), (f.output, Direction::Egress)])
        {
            if let Port::IfIndex(i) = port {
                *slot = Some(PortKey {
                    agent,
                    if_index: i,
                    direction,
                });
            }
        }
        if ports == [None, None] {
            // Neither port known (some agents): the sample's data source.
            ports[0] = Some(PortKey {
                agent,
                if_index: f.source_index,
                direction: Direction::Source,
            });
        }
        let ports = ports.map(|k| k.map(|k| (k, self.limits.protects_port(k.agent, k.if_index))));
        for (key, prot) in ports.iter().flatten() {
            if let Some(p) = self.ports.touch(key, now_ns, *prot) {
                p.samples += 1;
                if roce.is_some() {
                    p.roce.packets += 1;
                    p.roce.bytes = p.roce.bytes.saturating_add(bytes);
                    p.estimated.packets = p.estimated.packets.saturating_add(weight);
                    p.estimated.bytes = p.estimated.bytes.saturating_add(wire);
                }
            }
        }
        let Some(i) = roce else {
            return;
        };
        for (port, prot) in ports.iter().flatten() {
            let k = (port.agent, port.if_index);
            if let Some(t) = self.rhythms.touch(&k, now_ns, *prot) {
                t.add_restarting(u64::from(uptime_ms) * 1_000_000, wire);
            }
        }
        let (op, ecn, cnp) = (i.opcode(), i.ecn(), i.is_cnp());
        self.samples.add(op, ecn, cnp, bytes, 1);
        self.estimated.add(op, ecn, cnp, bytes, weight);
        let key = i.flow_key(Hook::Xdp);
        // Each flow's bytes per port are what the fabric view reads, and it reads only the
        // configured groups' uplinks, outward: the flows of every other port are not kept
        // (at a fabric's scale that was two lookups in the largest table per sample, for
        // nothing). Flows are the switches' traffic, not configuration: never protected, so
        // they stay within their bounds and expire when idle, on a group's uplinks too (a
        // flow that keeps sending is never pushed out by new ones; see `table`).
        for (port, _) in ports
            .iter()
            .flatten()
            .filter(|(k, prot)| *prot && k.direction == Direction::Egress)
        {
            if let Some(v) = self.port_flows.touch(&(*port, key), now_ns, false) {
                *v = v.saturating_add(wire);
            }
        }
        if let Some(fl) = self.flows.touch(&key, now_ns, false) {
            fl.samples += 1;
            fl.estimated_packets = fl.estimated_packets.saturating_add(weight);
            fl.estimated_bytes = fl.estimated_bytes.saturating_add(wire);
        }
    }

    /// Lost datagrams over all agents (those no longer held included), as far as is known.
    pub fn lost_datagrams(&self) -> u64 {
        self.agents.gone.lost_so_far()
            + self
                .agents
                .iter()
                .map(|(_, a)| a.lost_so_far())
                .sum::<u64>()
    }
}

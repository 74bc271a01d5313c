//! The fabric view: ECMP as the switches see it. A configured group of one agent's uplink
//! ports is an ECMP group; each flow's estimated rate on each uplink (sampled bytes weighted
//! by the sampling rate, smoothed) runs through the same elephant rule as the hosts' flows,
//! and the same collision rule marks an uplink that carries two or more elephants while
//! another uplink of its group carries none.

use super::collector::{Collector, Direction, PortKey};
use crate::config::elephant::ElephantConfig;
pub use crate::config::sflow::{validate, UplinkGroup};
use crate::detect::ecmp::{group_view, GroupView, MemberView};
use crate::detect::elephant::ElephantState;
use agent_common::FlowKey;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The first and last flow keys (for a range over one port's flows): every byte 0, every
/// byte 0xFF.
const KEY_MIN: FlowKey = key_of_bytes(0);
const KEY_MAX: FlowKey = key_of_bytes(0xFF);

const fn key_of_bytes(b: u8) -> FlowKey {
    FlowKey {
        src: [b; 16],
        dst: [b; 16],
        sport: u16::from_ne_bytes([b; 2]),
        ip_version: b,
        hook: b,
        dest_qp: u32::from_ne_bytes([b; 4]),
    }
}

/// One flow on one uplink.
#[derive(Clone, Copy, Debug, Default)]
struct OnUplink {
    seen_bytes: u64,
    rate: f64,
    state: ElephantState,
}

/// The fabric view's state between ticks.
#[derive(Clone, Debug, Default)]
pub struct Fabric {
    flows: BTreeMap<(PortKey, FlowKey), OnUplink>,
    /// Port counters at the last tick: (octets out, octets in).
    link: BTreeMap<PortKey, (u64, u64, f64)>,
    now_s: f64,
    /// The last tick's groups.
    pub groups: Vec<GroupView>,
    /// Elephants now: (group, uplink, flow).
    pub elephants: Vec<(String, String, FlowKey, f64)>,
}

/// The fabric view as reported.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FabricReport {
    pub groups: Vec<GroupView>,
    pub elephants: Vec<FabricElephant>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FabricElephant {
    pub group: String,
    pub uplink: String,
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dest_qp: u32,
    pub estimated_bytes_per_second: f64,
}

impl Fabric {
    /// Advances by `dt` seconds: rates from the collector's per-uplink totals (smoothed with
    /// time constant `tau_s`), elephants, then the groups.
    pub fn tick(
        &mut self,
        c: &Collector,
        groups: &[UplinkGroup],
        cfg: &ElephantConfig,
        tau_s: f64,
        dt: f64,
    ) {
        if dt <= 0.0 {
            return;
        }
        self.now_s += dt;
        let alpha = 1.0 - (-dt / tau_s.max(1e-3)).exp();
        for (key, total) in c.port_flows.iter() {
            let f = self.flows.entry(*key).or_default();
            let inst = total.saturating_sub(f.seen_bytes) as f64 / dt;
            f.seen_bytes = *total;
            f.rate += alpha * (inst - f.rate);
        }
        // A flow the collector no longer holds (idle, or pushed out) leaves the view too.
        if self.flows.len() > c.port_flows.len() {
            self.flows.retain(|k, _| c.port_flows.contains_key(k));
        }
        let enter = cfg.threshold_bytes_per_second;
        for f in self.flows.values_mut() {
            f.state.step(cfg, enter, f.rate, dt, self.now_s);
        }
        self.groups.clear();
        self.elephants.clear();
        for g in groups {
            // Link load from counter samples where the switch sends them.
            let links: Vec<Option<f64>> = g
                .uplinks
                .iter()
                .map(|&i| self.link_rate(c, g.agent, i, dt))
                .collect();
            let members = g
                .uplinks
                .iter()
                .zip(links)
                .map(|(&i, link)| {
                    let port = PortKey {
                        agent: g.agent,
                        if_index: i,
                        direction: Direction::Egress,
                    };
                    let on: Vec<(&FlowKey, &OnUplink)> = self
                        .flows
                        .range((port, KEY_MIN)..=(port, KEY_MAX))
                        .map(|((_, k), f)| (k, f))
                        .collect();
                    for (k, f) in on.iter().filter(|(_, f)| f.state.elephant) {
                        self.elephants
                            .push((g.name.clone(), g.member(i), **k, f.rate));
                    }
                    // Else the sampled estimate.
                    let sampled: f64 = on.iter().map(|(_, f)| f.rate).sum();
                    let link = link.unwrap_or(sampled);
                    MemberView {
                        member: g.member(i),
                        flows: on.len(),
                        elephants: on.iter().filter(|(_, f)| f.state.elephant).count(),
                        bytes_per_second: link,
                        colliding: false,
                    }
                })
                .collect();
            self.groups.push(group_view(g.name.clone(), members));
        }
    }

    /// Octets per second out of a port from its counter samples (since the last tick).
    fn link_rate(&mut self, c: &Collector, agent: IpAddr, if_index: u32, dt: f64) -> Option<f64> {
        let key = PortKey {
            agent,
            if_index,
            direction: Direction::Port,
        };
        let g = *c.ports.get(&key)?.counters.as_deref()?;
        let prev = self
            .link
            .insert(key, (g.out_octets, g.in_octets, self.now_s));
        let (out, _, at) = prev?;
        let span = (self.now_s - at).max(dt);
        Some(g.out_octets.saturating_sub(out) as f64 / span)
    }

    pub fn report(&self) -> FabricReport {
        FabricReport {
            groups: self.groups.clone(),
            elephants: self
                .elephants
                .iter()
                .map(|(g, u, k, r)| FabricElephant {
                    group: g.clone(),
                    uplink: u.clone(),
                    src: agent_common::flow_key::addr(k.ip_version, &k.src).to_string(),
                    dst: agent_common::flow_key::addr(k.ip_version, &k.dst).to_string(),
                    sport: k.sport,
                    dest_qp: k.dest_qp,
                    estimated_bytes_per_second: *r,
                })
                .collect(),
        }
    }
}

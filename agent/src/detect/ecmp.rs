//! ECMP collisions, three ways:
//!
//! 1. observed: the agent watches the uplinks of one ECMP group and sees which uplink each
//!    flow takes;
//! 2. predicted: a configured model of the switch hash ([`super::hash`]) gives each flow's path;
//! 3. entropy: flows that share one outer 5-tuple (distinct destination QPs) can never be
//!    separated by a 5-tuple hash, and few UDP source ports per host pair mean few paths.
//!
//! A collision, observed or predicted, is a member (uplink or path) carrying two or more
//! elephants while another member of the same group carries none.

use super::hash::{FlowFields, HashModel};
use crate::config::ecmp::EcmpConfig;
use agent_common::flow_key::addr;
use agent_common::opcode::is_connection_management;
use agent_common::{FlowKey, ROCEV2_UDP_PORT};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// How many shared 5-tuples and host pairs the report lists (all are counted).
pub const MAX_LISTED: usize = 1000;

/// What the detectors need to know of a flow.
#[derive(Clone, Copy, Debug)]
pub struct FlowView {
    pub iface: usize,
    pub key: FlowKey,
    pub rate_bytes: f64,
    pub elephant: bool,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MemberView {
    /// Interface name (observed) or path number (predicted).
    pub member: String,
    pub flows: usize,
    pub elephants: usize,
    pub bytes_per_second: f64,
    /// Carries two or more elephants while another member carries none.
    pub colliding: bool,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GroupView {
    pub name: String,
    pub members: Vec<MemberView>,
    pub colliding_members: usize,
    /// Max over mean member load (1 is perfect balance; 0 when idle).
    pub imbalance_ratio: f64,
    pub collision: bool,
}

impl GroupView {
    /// The groups' colliding members, as the findings name them: (group, member, elephants
    /// on it). Observed groups, predicted paths and the sFlow fabric's switch uplinks alike.
    pub fn colliding<'a>(
        groups: impl IntoIterator<Item = &'a GroupView>,
    ) -> Vec<(String, String, usize)> {
        groups
            .into_iter()
            .flat_map(|g| {
                g.members
                    .iter()
                    .filter(|m| m.colliding)
                    .map(|m| (g.name.clone(), m.member.clone(), m.elephants))
            })
            .collect()
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SharedTuple {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dest_qps: Vec<u32>,
}

impl SharedTuple {
    /// As a finding names it: `src -> dst port S, N QPs`.
    pub fn describe(&self) -> String {
        format!(
            "{} -> {} port {}, {} QPs",
            self.src,
            self.dst,
            self.sport,
            self.dest_qps.len()
        )
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HostPair {
    pub src: String,
    pub dst: String,
    pub source_ports: usize,
    pub flows: usize,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct EcmpReport {
    /// Observed: one entry per configured group.
    pub groups: Vec<GroupView>,
    /// Predicted from the hash model, if one is configured.
    pub predicted: Option<GroupView>,
    /// Groups of flows (distinct destination QPs) sharing one outer 5-tuple: how many.
    pub shared_5tuple_groups: usize,
    /// The first [`MAX_LISTED`] of them.
    pub shared_5tuples: Vec<SharedTuple>,
    /// Host pairs seen.
    pub host_pairs: usize,
    /// Distinct UDP source ports per host pair, fewest first ([`MAX_LISTED`] at most).
    pub source_ports: Vec<HostPair>,
}

/// Marks colliding members; returns their number.
pub fn mark_collisions(members: &mut [MemberView]) -> usize {
    let idle = members.iter().any(|m| m.elephants == 0);
    let mut n = 0;
    for m in members.iter_mut() {
        m.colliding = idle && m.elephants >= 2;
        n += m.colliding as usize;
    }
    n
}

/// A group from its members: collisions marked, imbalance computed (shared with the sFlow
/// fabric view).
pub fn group_view(name: String, mut members: Vec<MemberView>) -> GroupView {
    let colliding = mark_collisions(&mut members);
    let loads: Vec<f64> = members.iter().map(|m| m.bytes_per_second).collect();
    let mean = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
    let max = loads.iter().cloned().fold(0.0, f64::max);
    GroupView {
        name,
        members,
        colliding_members: colliding,
        imbalance_ratio: if mean > 0.0 { max / mean } else { 0.0 },
        collision: colliding > 0,
    }
}

/// The flow's fields as a switch hashes them.
/// Whether a flow of interface `iface` that is no elephant hashes (by `model`) onto a path
/// where two or more of that interface's own elephants collide while another path carries
/// none: what makes an ECMP collision a cause of a step of a job on that link. Elephants
/// colliding on another link's paths share nothing with it.
pub fn job_shares_a_colliding_path(flows: &[FlowView], iface: usize, model: &HashModel) -> bool {
    let here = || flows.iter().filter(|f| f.iface == iface);
    let mut elephants = vec![0usize; model.paths.max(1) as usize];
    for f in here().filter(|f| f.elephant) {
        if let Some(n) = elephants.get_mut(model.path(&fields(&f.key)) as usize) {
            *n += 1;
        }
    }
    if !elephants.contains(&0) {
        return false;
    }
    here().filter(|f| !f.elephant).any(|f| {
        elephants
            .get(model.path(&fields(&f.key)) as usize)
            .is_some_and(|&n| n >= 2)
    })
}

pub fn fields(key: &FlowKey) -> FlowFields<'_> {
    let n = if key.ip_version == 4 { 4 } else { 16 };
    FlowFields {
        src: &key.src[..n],
        dst: &key.dst[..n],
        sport: key.sport,
        dport: ROCEV2_UDP_PORT,
        dest_qp: key.dest_qp,
    }
}

/// One record per flow for the host-level views: a flow seen at several hooks or
/// interfaces counts once, with its highest rate (its key's hook byte 0). `flows` holds one
/// record per (interface, flow key), as the flow table does: where every record is of one
/// interface and one hook (a capture), they are one per flow already, and are taken as they
/// are. Merging them through a map was a copy of every flow in a table twice its size (55 MB
/// for a capture of a quarter million flows).
fn one_per_flow(flows: &[FlowView]) -> Vec<FlowView> {
    let one_place = flows
        .windows(2)
        .all(|w| w[0].iface == w[1].iface && w[0].key.hook == w[1].key.hook);
    if one_place {
        return flows
            .iter()
            .map(|f| FlowView {
                key: FlowKey { hook: 0, ..f.key },
                ..*f
            })
            .collect();
    }
    merged(flows)
}

/// [`one_per_flow`] through a map of the flows by key.
fn merged(flows: &[FlowView]) -> Vec<FlowView> {
    let mut unique: FxHashMap<FlowKey, FlowView> = FxHashMap::default();
    unique.reserve(flows.len());
    for f in flows {
        let k = FlowKey { hook: 0, ..f.key };
        let e = unique.entry(k).or_insert(FlowView { key: k, ..*f });
        if f.rate_bytes > e.rate_bytes {
            e.rate_bytes = f.rate_bytes;
        }
        e.elephant |= f.elephant;
    }
    unique.into_values().collect()
}

/// Runs the three ECMP views over the flows. `ifaces` names the flow views' interfaces.
pub fn analyze(flows: &[FlowView], ifaces: &[String], cfg: &EcmpConfig) -> EcmpReport {
    let mut report = EcmpReport::default();
    for g in &cfg.groups {
        let members = g
            .interfaces
            .iter()
            .map(|name| {
                let idx = ifaces.iter().position(|i| i == name);
                let on: Vec<&FlowView> = flows.iter().filter(|f| Some(f.iface) == idx).collect();
                MemberView {
                    member: name.clone(),
                    flows: on.len(),
                    elephants: on.iter().filter(|f| f.elephant).count(),
                    bytes_per_second: on.iter().map(|f| f.rate_bytes).sum(),
                    colliding: false,
                }
            })
            .collect();
        report.groups.push(group_view(g.name.clone(), members));
    }
    let unique = one_per_flow(flows);
    if let Some(model) = &cfg.hash {
        let mut members: Vec<MemberView> = (0..model.paths)
            .map(|p| MemberView {
                member: p.to_string(),
                flows: 0,
                elephants: 0,
                bytes_per_second: 0.0,
                colliding: false,
            })
            .collect();
        for f in &unique {
            let m = &mut members[model.path(&fields(&f.key)) as usize];
            m.flows += 1;
            m.elephants += f.elephant as usize;
            m.bytes_per_second += f.rate_bytes;
        }
        report.predicted = Some(group_view("predicted".into(), members));
    }
    // Sorted (host pair, source port, destination QP) triples: runs of one host pair give its
    // source ports, runs of one 5-tuple give the QPs sharing it. No allocation per flow.
    type HostPairKey = (u8, [u8; 16], [u8; 16]);
    let mut rows: Vec<(HostPairKey, u16, u32)> = unique
        .iter()
        .map(|f| &f.key)
        .map(|k| ((k.ip_version, k.src, k.dst), k.sport, k.dest_qp))
        .collect();
    rows.sort_unstable();
    let mut pairs: Vec<(usize, usize, usize)> = Vec::new(); // (first row, ports, flows)
    let mut i = 0;
    while i < rows.len() {
        let pair = rows[i].0;
        let start = i;
        let mut ports = 0;
        while i < rows.len() && rows[i].0 == pair {
            let sport = rows[i].1;
            let t0 = i;
            while i < rows.len() && rows[i].0 == pair && rows[i].1 == sport {
                i += 1;
            }
            ports += 1;
            // Connection management (MADs to QP 1) travels on a data connection's 5-tuple
            // by design: it shares no path with anything that needs entropy of its own.
            let data_qps = rows[t0..i]
                .iter()
                .filter(|r| !is_connection_management(r.2))
                .count();
            if data_qps >= 2 {
                report.shared_5tuple_groups += 1;
                if report.shared_5tuples.len() < MAX_LISTED {
                    let (v, s, d) = pair;
                    report.shared_5tuples.push(SharedTuple {
                        src: addr(v, &s).to_string(),
                        dst: addr(v, &d).to_string(),
                        sport,
                        dest_qps: rows[t0..i]
                            .iter()
                            .map(|r| r.2)
                            .filter(|q| !is_connection_management(*q))
                            .collect(),
                    });
                }
            }
        }
        pairs.push((start, ports, i - start));
    }
    report.host_pairs = pairs.len();
    // The host pairs with the fewest source ports (least entropy) first.
    pairs.sort_unstable_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
    report.source_ports = pairs
        .iter()
        .take(MAX_LISTED)
        .map(|&(row, ports, flows)| {
            let (v, s, d) = rows[row].0;
            HostPair {
                src: addr(v, &s).to_string(),
                dst: addr(v, &d).to_string(),
                source_ports: ports,
                flows,
            }
        })
        .collect();
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ecmp::GroupConfig;
    use crate::detect::hash::{default_fields, HashFn};

    fn flow(iface: usize, sport: u16, qp: u32, rate: f64, elephant: bool) -> FlowView {
        let mut key = FlowKey {
            ip_version: 4,
            sport,
            dest_qp: qp,
            ..FlowKey::default()
        };
        key.src[..4].copy_from_slice(&[10, 0, 0, 1]);
        key.dst[..4].copy_from_slice(&[10, 0, 0, 2]);
        FlowView {
            iface,
            key,
            rate_bytes: rate,
            elephant,
        }
    }

    #[test]
    fn observed_collision_rule() {
        let ifaces: Vec<String> = ["u0", "u1", "u2", "u3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let cfg = EcmpConfig {
            groups: vec![GroupConfig {
                name: "g".into(),
                interfaces: ifaces.clone(),
            }],
            hash: None,
        };
        // u0 two elephants, u1 one, u2 one light flow, u3 nothing: u0 collides
        let flows = [
            flow(0, 1, 1, 100.0, true),
            flow(0, 2, 2, 100.0, true),
            flow(1, 3, 3, 100.0, true),
            flow(2, 4, 4, 1.0, false),
        ];
        let r = analyze(&flows, &ifaces, &cfg);
        let g = &r.groups[0];
        assert!(g.collision);
        assert_eq!(g.colliding_members, 1);
        assert!(g.members[0].colliding && !g.members[1].colliding);
        assert!((g.imbalance_ratio - 200.0 / (301.0 / 4.0)).abs() < 1e-9);
        // every uplink has an elephant: two on one uplink is no collision by the rule
        let flows = [
            flow(0, 1, 1, 1.0, true),
            flow(0, 2, 2, 1.0, true),
            flow(1, 3, 3, 1.0, true),
            flow(2, 4, 4, 1.0, true),
            flow(3, 5, 5, 1.0, true),
        ];
        assert!(!analyze(&flows, &ifaces, &cfg).groups[0].collision);
    }

    #[test]
    fn predicted_and_entropy() {
        let model = HashModel {
            function: HashFn::Crc16_1021,
            seed: None,
            fields: default_fields(),
            paths: 2,
        };
        let cfg = EcmpConfig {
            groups: vec![],
            hash: Some(model.clone()),
        };
        // three elephants sharing one 5-tuple: one path, which collides; entropy shows it
        let flows = [
            flow(0, 7, 2, 10.0, true),
            flow(0, 7, 3, 10.0, true),
            flow(0, 7, 4, 10.0, true),
        ];
        let r = analyze(&flows, &["x".into()], &cfg);
        let p = r.predicted.unwrap();
        assert_eq!(p.members.iter().map(|m| m.elephants).sum::<usize>(), 3);
        assert!(p.collision);
        assert_eq!(r.shared_5tuples.len(), 1);
        assert_eq!(r.shared_5tuples[0].dest_qps, vec![2, 3, 4]);
        assert_eq!(r.source_ports[0].source_ports, 1);
        assert_eq!(r.source_ports[0].flows, 3);
    }

    /// Elephants colliding on one link's path are a cause for a job flow on that link's same
    /// path, not for one on another link.
    #[test]
    fn a_colliding_path_is_shared_only_on_its_own_link() {
        let model = HashModel {
            function: HashFn::Crc16_1021,
            seed: None,
            fields: default_fields(),
            paths: 2,
        };
        let path = |f: &FlowView| model.path(&fields(&f.key));
        // Two elephants on link 0 on one path (searching source ports for it).
        let mut flows: Vec<FlowView> = Vec::new();
        let target = path(&flow(0, 100, 9, 1.0, true));
        for sport in 100..2_000u16 {
            let f = flow(0, sport, 9, 10.0, true);
            if path(&f) == target && flows.len() < 2 {
                flows.push(f);
            }
        }
        let mut job = (2_000..4_000u16)
            .map(|p| flow(0, p, 0x11, 1.0, false))
            .find(|f| path(f) == target)
            .unwrap();
        let mut with_job = flows.clone();
        with_job.push(job);
        assert!(job_shares_a_colliding_path(&with_job, 0, &model));
        job.iface = 1;
        let mut elsewhere = flows.clone();
        elsewhere.push(job);
        assert!(!job_shares_a_colliding_path(&elsewhere, 1, &model));
        assert!(!job_shares_a_colliding_path(&elsewhere, 0, &model));
    }

    /// A data connection and its connection management (QP 1) on one 5-tuple is no shared
    /// 5-tuple; two data QPs beside QP 1 are, and QP 1 is not listed among them.
    #[test]
    fn connection_management_is_not_a_shared_5tuple() {
        let cfg = EcmpConfig::default();
        let r = analyze(
            &[flow(0, 7, 1, 1.0, false), flow(0, 7, 0x11, 1.0, false)],
            &["x".into()],
            &cfg,
        );
        assert_eq!(r.shared_5tuple_groups, 0, "{:?}", r.shared_5tuples);
        let r = analyze(
            &[
                flow(0, 7, 1, 1.0, false),
                flow(0, 7, 0x11, 1.0, false),
                flow(0, 7, 0x12, 1.0, false),
            ],
            &["x".into()],
            &cfg,
        );
        assert_eq!(r.shared_5tuple_groups, 1);
        assert_eq!(r.shared_5tuples[0].dest_qps, vec![0x11, 0x12]);
    }

    #[test]
    fn config_validation() {
        let bad = EcmpConfig {
            groups: vec![GroupConfig {
                name: "g".into(),
                interfaces: vec!["a".into(), "z".into()],
            }],
            hash: None,
        };
        assert!(bad
            .validate(Some(&["a".into(), "b".into()]))
            .unwrap_err()
            .contains("'z'"));
        let one = EcmpConfig {
            groups: vec![GroupConfig {
                name: "g".into(),
                interfaces: vec!["a".into()],
            }],
            hash: None,
        };
        assert!(one.validate(None).is_err());
    }

    /// A flow seen at two hooks is one record, at its highest rate, an elephant if either
    /// saw one; flows of one interface and hook are taken as they are, the same records as
    /// the merge through a map gives.
    #[test]
    fn one_record_per_flow() {
        let mut a = flow(0, 100, 7, 5.0, false);
        a.key.hook = 1;
        let mut b = flow(1, 100, 7, 9.0, true);
        b.key.hook = 2;
        let c = flow(0, 101, 7, 1.0, false);
        let got = one_per_flow(&[a, b, c]);
        assert_eq!(got.len(), 2);
        let merged_ab = got.iter().find(|f| f.key.sport == 100).unwrap();
        assert_eq!((merged_ab.rate_bytes, merged_ab.elephant), (9.0, true));
        assert!(got.iter().all(|f| f.key.hook == 0));

        let mut one_place: Vec<FlowView> = (0..50u16)
            .map(|i| flow(3, 1000 + i % 7, u32::from(i), f64::from(i), i % 5 == 0))
            .collect();
        for f in &mut one_place {
            f.key.hook = 1;
        }
        let key = |f: &FlowView| (f.key, f.rate_bytes.to_bits(), f.elephant);
        let mut fast: Vec<_> = one_per_flow(&one_place).iter().map(key).collect();
        let mut slow: Vec<_> = merged(&one_place).iter().map(key).collect();
        fast.sort_unstable();
        slow.sort_unstable();
        assert_eq!(fast, slow);
        assert_eq!(fast.len(), 50);
    }
}

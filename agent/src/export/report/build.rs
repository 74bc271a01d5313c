//! The report of an analysis ([`Report`]): the counts, the health, the elephants and flows,
//! the lossless and training views, and the findings the engine raised over the analysis
//! ([`crate::pipeline::findings`]). A sink: it judges nothing.

use super::*;
use crate::export::report::lossless;
use crate::pipeline::analysis::Analysis;
use crate::pipeline::flows::FlowEntry;
use agent_common::{opcode, Outcome, OutcomeKind};
use std::collections::BTreeMap;

/// Builds the report of an analysis and of its judgement.
pub fn build(a: &Analysis, judged: crate::pipeline::findings::Judged) -> Report<'_> {
    build_with(a, judged, flow_list(&a.pipeline.flows))
}

/// [`build`] with the flow list made already ([`flow_list`], as `analyze` makes it beside the
/// judging).
pub fn build_with<'a>(
    a: &'a Analysis,
    judged: crate::pipeline::findings::Judged,
    flows: FlowList<'a>,
) -> Report<'a> {
    let c = &a.counters;
    let crate::pipeline::findings::Judged {
        training,
        cnp,
        ranked,
    } = judged;
    let mut not_roce = BTreeMap::new();
    let mut malformed = BTreeMap::new();
    for o in Outcome::ALL {
        let n = c.outcomes[o as usize];
        match o.kind() {
            OutcomeKind::Roce => {}
            OutcomeKind::NotRoce => {
                not_roce.insert(o.name(), n);
            }
            OutcomeKind::Malformed => {
                malformed.insert(o.name(), n);
            }
        }
    }
    let opcodes = (0..=255u8)
        .filter(|&op| c.opcode_packets[op as usize] > 0)
        .map(|op| Opcode {
            opcode: op,
            name: opcode::name(op),
            packets: c.opcode_packets[op as usize],
            bytes: c.opcode_bytes[op as usize],
        })
        .collect();
    let elephants = a
        .pipeline
        .elephants
        .iter()
        .map(|(k, periods)| Elephant {
            src: agent_common::flow_key::addr(k.ip_version, &k.src).to_string(),
            dst: agent_common::flow_key::addr(k.ip_version, &k.dst).to_string(),
            sport: k.sport,
            dest_qp: k.dest_qp,
            periods: periods.clone(),
        })
        .collect();
    let mut r = Report {
        schema_version: SCHEMA_VERSION,
        verdict: String::new(),
        inputs: Vec::new(),
        first_ts_ns: a.first_ts_ns.unwrap_or(0),
        frames: c.frames,
        bytes: c.frame_bytes,
        duration_seconds: a.duration_seconds(),
        roce: Roce {
            packets: c.roce_packets(),
            bytes: c.roce_bytes(),
            cnp: c.cnp_packets,
            becn: c.becn_packets,
            fecn: c.fecn_packets,
            ext_truncated: c.outcomes[Outcome::RoceExtTruncated as usize],
            tunnels: agent_common::headers::encap::TunnelKind::ALL
                .iter()
                .map(|k| (k.name(), c.tunnel_packets[*k as usize]))
                .collect(),
            sessions: a
                .sessions
                .iter()
                .map(|(k, s)| Session {
                    tunnel: k.kind_name(),
                    id: k.id,
                    packets: s.packets,
                    bytes: s.bytes,
                    ce_packets: s.ce_packets,
                    cnp_packets: s.cnp_packets,
                })
                .collect(),
            ecn: Ecn {
                not_ect: c.ecn_packets[0],
                ect1: c.ecn_packets[1],
                ect0: c.ecn_packets[2],
                ce: c.ecn_packets[3],
            },
            opcodes,
            dscp: lossless::dscp(c),
            pcp: lossless::pcp(c),
            cnp_classes: lossless::cnp_classes(c),
            lossy: lossless::lossy(c, &a.options().classes),
            messages: crate::pipeline::training::messages(c),
            cnp_response: cnp,
        },
        pfc: lossless::pfc(c, a.options().link_speed_bps),
        pause: lossless::pause(c, a.options().link_speed_bps),
        training,
        training_sources: a.training.sources(),
        sflow: (a.sflow.datagrams + a.sflow.malformed.values().sum::<u64>() > 0).then(|| {
            crate::sflow::report::build(
                &a.sflow,
                (!a.options().sflow_groups.is_empty()).then_some(&a.pipeline.fabric),
            )
        }),
        not_roce,
        malformed,
        truncated_tail: a.summary.truncated_tail,
        capture_time: a.clock.time.clone(),
        flows_evicted: a.pipeline.flows.evicted,
        health: Health {
            psn_gaps: c.psn_gaps,
            retransmits: c.retransmits,
            naks: naks(&c.naks),
            rnr_naks: c.rnr_naks,
        },
        elephants,
        ecmp: a.pipeline.ecmp.clone(),
        flows,
        findings: Vec::new(),
        paused_over_time: match a.timeline.start_ns() {
            Some(start) => a.pause.series(
                start,
                (a.timeline.bucket_seconds() * 1e9) as u64,
                a.timeline.buckets().len(),
            ),
            None => Vec::new(),
        },
    };
    for p in r.pfc.priorities.iter_mut() {
        p.paused_seconds = Some(a.pause.paused_seconds(usize::from(p.priority)));
    }
    r.findings = ranked.incidents;
    r.verdict = ranked.verdict;
    r
}

/// The flows held, highest mean rate first, then most bytes, ties in `top_k`'s order: sorted
/// as references (a flow's report is 300 bytes to move).
pub fn flow_list(flows: &crate::pipeline::flows::FlowTable) -> FlowList<'_> {
    let mut order: Vec<(usize, f64, &FlowEntry)> = flows
        .top_k(usize::MAX)
        .into_iter()
        .enumerate()
        .map(|(rank, e)| (rank, mean_rate(e), e))
        .collect();
    order.sort_unstable_by(|x, y| {
        y.1.total_cmp(&x.1)
            .then(y.2.stats.bytes.cmp(&x.2.stats.bytes))
            .then(x.0.cmp(&y.0))
    });
    FlowList::new(order.into_iter().map(|(_, _, e)| e).collect())
}

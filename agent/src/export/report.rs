//! `rocemon analyze` output: one JSON object, or a readable table.

use crate::detect::ecmp::EcmpReport;
use crate::export::named::Named;
use crate::export::report_lossless as lossless;
use crate::pipeline::analysis::{Analysis, ElephantPeriod};
use crate::pipeline::flows::FlowEntry;
use agent_common::message::MsgOp;
use agent_common::psn::{NAK_NAMES, NAK_SLOTS};
use agent_common::{opcode, OpClass, Outcome, OutcomeKind, ROCEV2_UDP_PORT};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The version of `analyze --format json`'s layout: raised when a field changes meaning or
/// goes away (new fields do not raise it).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize, Debug)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The captures read, as named on the command line (`-` for standard input).
    pub inputs: Vec<String>,
    /// The capture's first frame (ns since the epoch): where the HTML charts' time starts.
    #[serde(skip)]
    pub first_ts_ns: u64,
    pub frames: u64,
    pub bytes: u64,
    pub duration_seconds: f64,
    pub roce: Roce,
    /// Frames that are not RoCEv2, by reason.
    pub not_roce: BTreeMap<&'static str, u64>,
    /// Malformed frames, by reason (every reason listed, zero or not).
    pub malformed: BTreeMap<&'static str, u64>,
    /// The file ended inside a record; everything before it is counted.
    pub truncated_tail: bool,
    /// PSN and NAK health over all flows.
    pub health: Health,
    /// Flows that were elephants at some time of the capture.
    pub elephants: Vec<Elephant>,
    /// ECMP views: predicted collisions (with a hash model), shared 5-tuples, source ports.
    pub ecmp: EcmpReport,
    /// Every flow held, highest mean rate first.
    pub flows: Vec<Flow>,
    /// Flows that left the bounded flow table (`--max-flows`), with what they carried; their
    /// packets are in every total above.
    pub flows_evicted: crate::pipeline::flows::EvictedFlows,
    /// PFC frames per priority (mirrored ones included).
    pub pfc: lossless::Pfc,
    /// 802.3x PAUSE frames, and other MAC control frames.
    pub pause: lossless::Pause,
    /// The training job's step rhythm (null fields when there is none).
    pub training: crate::detect::rhythm::Rhythm,
    /// The rhythm of each source host with the most bytes (several jobs on one link); empty
    /// with one source.
    pub training_sources: Vec<crate::pipeline::training::SourceRhythm>,
    /// sFlow datagrams in the capture (UDP 6343); null when there are none.
    pub sflow: Option<crate::sflow::report::SflowReport>,
    /// What the counts mean: most serious first (see `docs/runbook.md`).
    pub findings: Vec<crate::detect::findings::Finding>,
    /// The share of each timeline bucket each priority was paused (the HTML chart).
    #[serde(skip)]
    pub paused_over_time: Vec<[f64; 8]>,
}

#[derive(Serialize, Debug)]
pub struct Health {
    pub psn_gaps: u64,
    pub retransmits: u64,
    pub naks: Naks,
    pub rnr_naks: u64,
}

#[derive(Serialize, Debug)]
pub struct Elephant {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dest_qp: u32,
    pub periods: Vec<ElephantPeriod>,
}

#[derive(Serialize, Debug)]
pub struct Roce {
    pub packets: u64,
    pub bytes: u64,
    pub cnp: u64,
    pub becn: u64,
    pub fecn: u64,
    /// RoCE packets whose extension headers were cut short (included in `packets`).
    pub ext_truncated: u64,
    /// RoCE packets by the mirror session or tunnel they arrived in.
    pub tunnels: BTreeMap<&'static str, u64>,
    /// Encapsulated RoCE by mirror session or tunnel id (ERSPAN session, VXLAN VNI, GRE key).
    pub sessions: Vec<Session>,
    pub ecn: Ecn,
    pub opcodes: Vec<Opcode>,
    /// RoCE packets (CNPs included) by DSCP, and tagged ones by 802.1p priority.
    pub dscp: Vec<lossless::ClassCount>,
    pub pcp: Vec<lossless::ClassCount>,
    /// CNPs by DSCP and priority.
    pub cnp_classes: lossless::CnpClasses,
    /// RoCE outside the configured lossless class.
    pub lossy: lossless::Lossy,
    /// RDMA messages: WRITE and READ by their RETH DMA length, SEND by their payloads.
    pub messages: Vec<crate::pipeline::training::MessageReport>,
    /// CE-marked packets paired with the CNPs their receivers sent back (DCQCN's
    /// notification point).
    pub cnp_response: crate::detect::cnp_response::CnpReport,
}

#[derive(Serialize, Debug)]
pub struct Session {
    pub tunnel: &'static str,
    pub id: u32,
    pub packets: u64,
    pub bytes: u64,
    pub ce_packets: u64,
    pub cnp_packets: u64,
}

#[derive(Serialize, Debug)]
pub struct Ecn {
    pub not_ect: u64,
    pub ect0: u64,
    pub ect1: u64,
    pub ce: u64,
}

#[derive(Serialize, Debug)]
pub struct Opcode {
    pub opcode: u8,
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Serialize, Debug, Clone)]
pub struct Flow {
    pub ip_version: u8,
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dport: u16,
    pub dest_qp: u32,
    /// The destination QP as people and the metrics' labels write it (0x12).
    pub dest_qp_hex: String,
    pub packets: u64,
    pub bytes: u64,
    pub ecn_ce: u64,
    pub cnp: u64,
    pub becn: u64,
    /// Unix time, nanoseconds (live and offline).
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// Smoothed current rate (live) or at the end of the capture (analyze).
    pub rate_bytes_per_second: f64,
    /// Bytes over the flow's lifetime (first to last packet).
    pub mean_bytes_per_second: f64,
    pub elephant: bool,
    pub last_psn: u32,
    pub psn_gaps: u64,
    pub retransmits: u64,
    pub naks: Naks,
    pub rnr_naks: u64,
    /// Packets by operation class.
    pub ops: Named<u64, { OpClass::COUNT }>,
    /// RDMA messages by operation (rdma_write, rdma_read, send): count and bytes.
    pub messages: Named<FlowMessages, { MsgOp::COUNT }>,
}

/// NAK counts by name.
pub type Naks = Named<u64, NAK_SLOTS>;

/// A flow's RDMA messages of one operation.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FlowMessages {
    pub messages: u64,
    pub bytes: u64,
}

/// A flow's bytes per second over its lifetime (0 for a flow of one instant).
fn mean_rate(e: &FlowEntry) -> f64 {
    let span = e.stats.last_seen_ns.saturating_sub(e.stats.first_seen_ns);
    if span > 0 {
        e.stats.bytes as f64 * 1e9 / span as f64
    } else {
        0.0
    }
}

/// NAK counts by name.
pub fn naks(counts: &[u64; NAK_SLOTS]) -> Naks {
    Named::new(std::array::from_fn(|i| (NAK_NAMES[i], counts[i])))
}

impl Flow {
    /// The flow with its times moved by `ns` (the live tables' monotonic clock to Unix time).
    pub fn shifted(mut self, ns: u64) -> Flow {
        self.first_seen_ns += ns;
        self.last_seen_ns += ns;
        self
    }

    pub fn from_entry(e: &FlowEntry) -> Flow {
        Flow {
            ip_version: e.key.ip_version,
            src: e.src().to_string(),
            dst: e.dst().to_string(),
            sport: e.key.sport,
            dport: ROCEV2_UDP_PORT,
            dest_qp: e.key.dest_qp,
            dest_qp_hex: format!("0x{:x}", e.key.dest_qp),
            packets: e.stats.packets,
            bytes: e.stats.bytes,
            ecn_ce: e.stats.ecn_ce,
            cnp: e.stats.cnp,
            becn: e.stats.becn,
            first_seen_ns: e.stats.first_seen_ns,
            last_seen_ns: e.stats.last_seen_ns,
            rate_bytes_per_second: e.rate_bytes,
            mean_bytes_per_second: mean_rate(e),
            elephant: e.elephant.elephant,
            last_psn: e.stats.last_psn,
            psn_gaps: e.stats.psn_gaps,
            retransmits: e.stats.retransmits,
            naks: naks(&e.stats.naks),
            rnr_naks: e.stats.rnr_naks,
            ops: Named::new(OpClass::ALL.map(|c| (c.name(), e.stats.class_packets[c as usize]))),
            messages: Named::new(MsgOp::ALL.map(|o| {
                let i = o as usize;
                let m = FlowMessages {
                    messages: e.stats.messages[i],
                    bytes: e.stats.message_bytes[i],
                };
                (o.name(), m)
            })),
        }
    }
}

/// Builds the report of an analysis.
pub fn build(a: &Analysis) -> Report {
    let c = &a.counters;
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
    // Highest mean rate first, then most bytes, ties in `top_k`'s order: sorted as references
    // (a flow's report is 300 bytes to move).
    let mut order: Vec<(usize, f64, &FlowEntry)> = a
        .flows
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
    let flows: Vec<Flow> = order
        .into_iter()
        .map(|(_, _, e)| Flow::from_entry(e))
        .collect();
    let elephants = a
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
            cnp_response: a.cnp.report(),
        },
        pfc: lossless::pfc(c, a.options().link_speed_bps),
        pause: lossless::pause(c, a.options().link_speed_bps),
        training: a.training.rhythm_paused(
            &a.pause,
            crate::detect::slow_steps::job_priorities(&a.options().classes),
        ),
        training_sources: a.training.sources(),
        sflow: (a.sflow.datagrams + a.sflow.malformed.values().sum::<u64>() > 0).then(|| {
            crate::sflow::report::build(
                &a.sflow,
                (!a.options().sflow_groups.is_empty()).then_some(&a.fabric),
            )
        }),
        not_roce,
        malformed,
        truncated_tail: a.summary.truncated_tail,
        flows_evicted: a.flows.evicted,
        health: Health {
            psn_gaps: c.psn_gaps,
            retransmits: c.retransmits,
            naks: naks(&c.naks),
            rnr_naks: c.rnr_naks,
        },
        elephants,
        ecmp: a.ecmp.clone(),
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
    super::report_training::explain_slow_steps(a, &mut r.training);
    r.findings = super::report_findings::findings(a, &r);
    r
}

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * n as f64 / d as f64)
    }
}

/// Human-readable bytes.
pub fn human_bytes(b: f64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < units.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", units[i])
    } else {
        format!("{v:.1} {}", units[i])
    }
}

/// The summary table: totals, opcodes, ECN, CNPs, parse outcomes and the top flows.
pub fn table(r: &Report, top: usize) -> String {
    let mut s = String::new();
    super::report_findings::table(&mut s, &r.findings);
    let _ = writeln!(
        s,
        "Frames      {:>12}   {} over {:.3} s",
        r.frames,
        human_bytes(r.bytes as f64),
        r.duration_seconds
    );
    let _ = writeln!(
        s,
        "RoCEv2      {:>12}   {}  ({} of frames)",
        r.roce.packets,
        human_bytes(r.roce.bytes as f64),
        pct(r.roce.packets, r.frames)
    );
    let _ = writeln!(
        s,
        "CNPs        {:>12}   BECN {}  FECN {}",
        r.roce.cnp, r.roce.becn, r.roce.fecn
    );
    let e = &r.roce.ecn;
    let p = r.roce.packets;
    let _ = writeln!(
        s,
        "ECN         not-ECT {} ({})  ECT(0) {} ({})  ECT(1) {} ({})  CE {} ({})",
        e.not_ect,
        pct(e.not_ect, p),
        e.ect0,
        pct(e.ect0, p),
        e.ect1,
        pct(e.ect1, p),
        e.ce,
        pct(e.ce, p)
    );
    let encapsulated: u64 = r
        .roce
        .tunnels
        .iter()
        .filter(|(k, _)| **k != "none")
        .map(|(_, v)| v)
        .sum();
    if encapsulated > 0 {
        let kinds: Vec<String> = r
            .roce
            .tunnels
            .iter()
            .filter(|(k, v)| **k != "none" && **v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "Mirrored    {encapsulated:>12}   {}", kinds.join("  "));
        for x in &r.roce.sessions {
            let _ = writeln!(
                s,
                "  session {:<8} {:<10} {:>10} packets  {:>10}  CE {}  CNP {}",
                x.tunnel,
                x.id,
                x.packets,
                human_bytes(x.bytes as f64),
                x.ce_packets,
                x.cnp_packets
            );
        }
    }
    lossless::table(&mut s, &r.pfc, &r.pause, &r.roce.dscp, &r.roce.lossy);
    crate::export::report_training::table(&mut s, &r.training, &r.roce.messages);
    let other: u64 = r.not_roce.values().sum();
    let bad: u64 = r.malformed.values().sum();
    let tail = if r.truncated_tail {
        "   (file ends inside a record)"
    } else {
        ""
    };
    let _ = writeln!(s, "Not RoCE    {other:>12}   Malformed {bad}{tail}");
    for (k, v) in r.malformed.iter().filter(|(_, v)| **v > 0) {
        let _ = writeln!(s, "  malformed {k:<28} {v}");
    }
    let h = &r.health;
    let nak_total: u64 = h.naks.values().sum();
    let _ = writeln!(
        s,
        "PSN gaps    {:>12}   retransmissions {}   NAKs {}   RNR NAKs {}",
        h.psn_gaps, h.retransmits, nak_total, h.rnr_naks
    );
    for (k, v) in h.naks.iter().filter(|(_, v)| **v > 0) {
        let _ = writeln!(s, "  NAK {k:<34} {v}");
    }

    let _ = writeln!(s, "\n{:<36} {:>12} {:>12}", "OPCODE", "PACKETS", "BYTES");
    let mut ops: Vec<&Opcode> = r.roce.opcodes.iter().collect();
    ops.sort_by(|a, b| b.packets.cmp(&a.packets).then(a.opcode.cmp(&b.opcode)));
    for o in ops {
        let name = format!("{} (0x{:02x})", o.name, o.opcode);
        let _ = writeln!(s, "{name:<36} {:>12} {:>12}", o.packets, o.bytes);
    }

    let _ = writeln!(s, "\nELEPHANTS {}", r.elephants.len());
    for e in &r.elephants {
        for p in &e.periods {
            let end = p
                .ended_s
                .map(|t| format!("{t:.1} s"))
                .unwrap_or_else(|| "end".into());
            let _ = writeln!(
                s,
                "  {} -> {} sport {} qp 0x{:x}: {:.1} s .. {end}, peak {}",
                e.src,
                e.dst,
                e.sport,
                e.dest_qp,
                p.started_s,
                crate::detect::findings::bits_per_second(p.peak_bytes_per_second)
            );
        }
    }
    if let Some(p) = &r.ecmp.predicted {
        let verdict = if p.collision {
            "COLLISION"
        } else {
            "no collision"
        };
        let _ = writeln!(s, "\nPREDICTED ECMP ({} paths): {verdict}", p.members.len());
        for m in p.members.iter().filter(|m| m.flows > 0) {
            let mark = if m.colliding { "  <- collision" } else { "" };
            let _ = writeln!(
                s,
                "  path {:>4}: {:>5} flows {:>3} elephants{mark}",
                m.member, m.flows, m.elephants
            );
        }
    }
    let _ = writeln!(
        s,
        "\nSHARED 5-TUPLES {} (flows no 5-tuple hash can separate)",
        r.ecmp.shared_5tuple_groups
    );
    for t in r.ecmp.shared_5tuples.iter().take(top) {
        let _ = writeln!(
            s,
            "  {} -> {} sport {}: {} QPs",
            t.src,
            t.dst,
            t.sport,
            t.dest_qps.len()
        );
    }

    let _ = writeln!(
        s,
        "\nTOP {} OF {} FLOWS",
        top.min(r.flows.len()),
        r.flows.len()
    );
    if r.flows_evicted.flows > 0 {
        let _ = writeln!(
            s,
            "({} more flows left the table, --max-flows: {} packets, {} bytes; in every total)",
            r.flows_evicted.flows, r.flows_evicted.packets, r.flows_evicted.bytes
        );
    }
    let _ = writeln!(
        s,
        "{:<42} {:>6} {:>8} {:>10} {:>12} {:>12} {:>7} {:>5} {:>5} {:>5}",
        "SRC -> DST",
        "SPORT",
        "DEST_QP",
        "PACKETS",
        "BYTES",
        "MEAN RATE",
        "CE",
        "CNP",
        "GAPS",
        "NAKS"
    );
    for f in r.flows.iter().take(top) {
        let _ = writeln!(
            s,
            "{:<42} {:>6} {:>8} {:>10} {:>12} {:>12} {:>7} {:>5} {:>5} {:>5}{}",
            format!("{} -> {}", f.src, f.dst),
            f.sport,
            format!("0x{:x}", f.dest_qp),
            f.packets,
            f.bytes,
            crate::detect::findings::bits_per_second(f.mean_bytes_per_second),
            f.ecn_ce,
            f.cnp,
            f.psn_gaps,
            f.naks.values().sum::<u64>() + f.rnr_naks,
            if f.elephant { "  elephant" } else { "" }
        );
    }
    s
}

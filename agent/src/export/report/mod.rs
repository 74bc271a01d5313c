//! `rocemon analyze` output: the report's model here; [`build`] makes it from an analysis
//! (with its [`findings`] and [`training`] answers), and the sinks write it: JSON (serde), a
//! readable table ([`table`]), an HTML page ([`html`] with [`html_charts`],
//! [`html_findings`], [`html_views`]); [`lossless`] is the lossless fabric's section.

pub mod build;
pub mod findings;
pub mod flow_json;
pub mod html;
pub mod html_charts;
pub mod html_findings;
pub mod html_views;
pub mod lossless;
pub mod table;
pub mod training;

use crate::detect::ecmp::EcmpReport;
use crate::export::named::{NameOrder, Named};
use crate::pipeline::analysis::ElephantPeriod;
use crate::pipeline::flows::FlowEntry;
use agent_common::message::MsgOp;
use agent_common::psn::{NAK_NAMES, NAK_SLOTS};
use agent_common::{OpClass, ROCEV2_UDP_PORT};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// The version of `analyze --format json`'s layout: raised when a field changes meaning or
/// goes away (new fields do not raise it).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize, Debug)]
pub struct Report<'a> {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// One sentence that sums the capture up: the slow steps and their causes, then what is
    /// behind them ([`crate::detect::engine::rank`]).
    pub verdict: String,
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
    /// Frames stepped back in time and jumps of the capture's clock (the capture's time runs
    /// on across a jump instead of spanning it).
    pub capture_time: crate::pipeline::capture_clock::CaptureTime,
    /// PSN and NAK health over all flows.
    pub health: Health,
    /// Flows that were elephants at some time of the capture.
    pub elephants: Vec<Elephant>,
    /// ECMP views: predicted collisions (with a hash model), shared 5-tuples, source ports.
    pub ecmp: EcmpReport,
    /// Every flow held, highest mean rate first.
    pub flows: FlowList<'a>,
    /// Flows that left the bounded flow table (`--max-flows`), with what they carried; their
    /// packets are in every total above.
    pub flows_evicted: crate::pipeline::flows::EvictedFlows,
    /// PFC frames per priority (mirrored ones included).
    pub pfc: lossless::Pfc,
    /// 802.3x PAUSE frames, and other MAC control frames.
    pub pause: lossless::Pause,
    /// The largest training job's step rhythm (the link's where no job is found; null fields
    /// when there is none), and every job found in the traffic (`jobs`).
    pub training: crate::pipeline::training::TrainingView,
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

/// Every flow held, in the report's order: the flow table's entries, each written out as a
/// [`Flow`] when the report is, on every core ([`flow_json`]). A quarter million flows' rows
/// (about 750 bytes each) are never held at once: that doubled `analyze`'s peak memory on a
/// capture of many flows.
///
/// Or, where `analyze` wrote the list's JSON beside the judging ([`FlowList::with_json`]),
/// that text, written as it is.
pub struct FlowList<'a>(Vec<&'a FlowEntry>, Option<Box<serde_json::value::RawValue>>);

impl<'a> FlowList<'a> {
    /// The entries, in the order they are listed.
    pub fn new(order: Vec<&'a FlowEntry>) -> Self {
        FlowList(order, None)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each flow's row, in order, built as it is read.
    pub fn iter(&self) -> impl Iterator<Item = Flow> + '_ {
        self.0.iter().map(|e| Flow::from_entry(e))
    }

    /// The list as JSON (what serializing it with `serde_json` writes).
    pub fn to_json(&self) -> serde_json::Result<Box<serde_json::value::RawValue>> {
        serde_json::value::to_raw_value(self)
    }

    /// Whether its JSON is written already ([`FlowList::with_json`]).
    pub fn written(&self) -> bool {
        self.1.is_some()
    }

    /// The list, written as `json` (its [`FlowList::to_json`], made on another thread) when
    /// it is serialized.
    pub fn with_json(mut self, json: Box<serde_json::value::RawValue>) -> Self {
        self.1 = Some(json);
        self
    }
}

impl Serialize for FlowList<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.1 {
            Some(json) => json.serialize(s),
            None if self.0.len() >= flow_json::PARALLEL_FROM => {
                flow_json::serialize_rows(&self.0, s)
            }
            None => s.collect_seq(self.iter()),
        }
    }
}

impl std::fmt::Debug for FlowList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
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
pub(crate) fn mean_rate(e: &FlowEntry) -> f64 {
    let span = e.stats.last_seen_ns.saturating_sub(e.stats.first_seen_ns);
    if span > 0 {
        e.stats.bytes as f64 * 1e9 / span as f64
    } else {
        0.0
    }
}

/// NAK counts by name.
pub fn naks(counts: &[u64; NAK_SLOTS]) -> Naks {
    static ORDER: LazyLock<NameOrder<NAK_SLOTS>> = LazyLock::new(|| NameOrder::of(NAK_NAMES));
    Named::in_order(std::array::from_fn(|i| (NAK_NAMES[i], counts[i])), &ORDER)
}

/// The operation classes' names in [`Named`]'s order.
static OPS_ORDER: LazyLock<NameOrder<{ OpClass::COUNT }>> =
    LazyLock::new(|| NameOrder::of(OpClass::ALL.map(OpClass::name)));
/// The message operations' names in [`Named`]'s order.
static MSGS_ORDER: LazyLock<NameOrder<{ MsgOp::COUNT }>> =
    LazyLock::new(|| NameOrder::of(MsgOp::ALL.map(MsgOp::name)));

impl Flow {
    /// The flow with its times moved by `ns` (the live tables' monotonic clock to Unix time).
    pub fn shifted(mut self, ns: u64) -> Flow {
        self.first_seen_ns += ns;
        self.last_seen_ns += ns;
        self
    }

    pub fn from_entry(e: &FlowEntry) -> Flow {
        let classes = e.stats.class_packets();
        let (messages, message_bytes) = (e.stats.messages(), e.stats.message_bytes());
        Flow {
            ip_version: e.key.ip_version,
            src: addr_text(e.src()),
            dst: addr_text(e.dst()),
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
            naks: naks(&e.stats.naks()),
            rnr_naks: e.stats.rnr_naks,
            ops: Named::in_order(
                OpClass::ALL.map(|c| (c.name(), classes[c as usize])),
                &OPS_ORDER,
            ),
            messages: Named::in_order(
                MsgOp::ALL.map(|o| {
                    let i = o as usize;
                    let m = FlowMessages {
                        messages: messages[i],
                        bytes: message_bytes[i],
                    };
                    (o.name(), m)
                }),
                &MSGS_ORDER,
            ),
        }
    }
}

/// An address as `Display` writes it; IPv4 without the formatter's machinery (the report of
/// a quarter million flows writes half a million addresses).
pub fn addr_text(a: std::net::IpAddr) -> String {
    let std::net::IpAddr::V4(v4) = a else {
        return a.to_string();
    };
    let mut s = String::with_capacity(15);
    for (i, o) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        if o >= 100 {
            s.push(char::from(b'0' + o / 100));
        }
        if o >= 10 {
            s.push(char::from(b'0' + o / 10 % 10));
        }
        s.push(char::from(b'0' + o % 10));
    }
    s
}

/// Human-readable bytes.
pub use crate::detect::findings::thousands;

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

#[cfg(test)]
mod tests {
    use super::addr_text;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    #[test]
    fn ipv4_text_is_what_display_writes_for_every_octet_in_every_place() {
        for o in 0..=255u8 {
            for place in 0..4 {
                let mut octets = [1, 22, 203, 4];
                octets[place] = o;
                let a = IpAddr::V4(Ipv4Addr::from(octets));
                assert_eq!(addr_text(a), a.to_string());
            }
        }
    }

    #[test]
    fn ipv6_text_is_what_display_writes() {
        for a in ["fd00::1", "::", "2001:db8::ff:0:1", "::ffff:10.0.0.1"] {
            let a = IpAddr::V6(a.parse::<Ipv6Addr>().unwrap());
            assert_eq!(addr_text(a), a.to_string());
        }
    }
}

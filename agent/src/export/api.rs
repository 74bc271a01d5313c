//! The JSON API's documents: `/api/v1/flows`, `/api/v1/ecmp`, `/api/v1/lossless` and
//! `/api/v1/sflow`, rebuilt at every poll.

use crate::config::Config;
use crate::detect::ecmp::{self, EcmpReport};
use crate::export::report::Flow;
use crate::pipeline::flows::FlowTable;
use agent_common::Hook;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct ApiFlow {
    pub iface: String,
    pub direction: &'static str,
    pub hook: &'static str,
    #[serde(flatten)]
    pub flow: Flow,
    pub rate_packets_per_second: f64,
    /// Smoothed CE-marked packets and CNPs per second.
    pub ce_per_second: f64,
    pub cnp_per_second: f64,
    /// The ECMP group whose uplink carries the flow (observed), if any.
    pub group: Option<String>,
    /// The path the hash model predicts, if a model is configured.
    pub predicted_path: Option<u32>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FlowsDoc {
    pub flows_total: usize,
    pub elephants_total: usize,
    /// Flows by smoothed rate, highest first (elephants included).
    pub flows: Vec<ApiFlow>,
}

/// The lossless fabric of one interface and hook (totals since attach), and what its NIC
/// reports itself.
#[derive(Clone, Debug, Serialize)]
pub struct LosslessHook {
    pub iface: String,
    pub hook: &'static str,
    pub direction: &'static str,
    pub pfc: crate::export::report::lossless::Pfc,
    pub pause: crate::export::report::lossless::Pause,
    pub dscp: Vec<crate::export::report::lossless::ClassCount>,
    pub pcp: Vec<crate::export::report::lossless::ClassCount>,
    pub cnp_classes: crate::export::report::lossless::CnpClasses,
    pub lossy: crate::export::report::lossless::Lossy,
}

/// The NIC's own PFC counters of one interface (DCB or ethtool); absent for devices without.
#[derive(Clone, Debug, Serialize)]
pub struct NicPfc {
    pub iface: String,
    pub priority: u8,
    pub rx: Option<u64>,
    pub tx: Option<u64>,
    pub origin: &'static str,
    /// The NIC's own pause time of the priority, seconds (rx: the peer paused this port;
    /// tx: this port paused the peer), where the driver counts it.
    pub rx_paused_seconds: Option<f64>,
    pub tx_paused_seconds: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct LosslessDoc {
    pub hooks: Vec<LosslessHook>,
    pub nic: Vec<NicPfc>,
}

impl LosslessDoc {
    /// Adds one hook's counter block (`link_speed_bps` 0: unknown, seconds 0).
    pub fn add_hook(
        &mut self,
        iface: &str,
        hook: Hook,
        c: &agent_common::HookCounters,
        link_speed_bps: u64,
        classes: &agent_common::TrafficClasses,
    ) {
        use crate::export::report::lossless as l;
        self.hooks.push(LosslessHook {
            iface: iface.to_string(),
            hook: hook.name(),
            direction: hook.direction(),
            pfc: l::pfc(c, link_speed_bps),
            pause: l::pause(c, link_speed_bps),
            dscp: l::dscp(c),
            pcp: l::pcp(c),
            cnp_classes: l::cnp_classes(c),
            lossy: l::lossy(c, classes),
        });
    }

    /// Adds an interface's NIC counters.
    pub fn add_nic(&mut self, iface: &str, nic: &crate::sources::nic_pause::NicPause) {
        let d = |p: u8| nic.durations.iter().find(|d| d.priority == p);
        self.nic.extend(nic.pfc.iter().map(|c| {
            NicPfc {
                iface: iface.to_string(),
                priority: c.priority,
                rx: c.rx,
                tx: c.tx,
                origin: c.origin.name(),
                rx_paused_seconds: d(c.priority)
                    .and_then(|d| d.rx_micros)
                    .map(|us| us as f64 / 1e6),
                tx_paused_seconds: d(c.priority)
                    .and_then(|d| d.tx_micros)
                    .map(|us| us as f64 / 1e6),
            }
        }));
    }
}

/// What the API serves; replaced after every poll.
#[derive(Clone, Debug, Default)]
pub struct ApiView {
    pub flows: FlowsDoc,
    pub ecmp: EcmpReport,
    pub lossless: LosslessDoc,
    /// The sFlow collector's state, when it runs.
    pub sflow: Option<crate::sflow::report::SflowReport>,
    pub training: TrainingDoc,
    /// Active and recently closed findings (`/api/v1/findings`).
    pub findings: crate::detect::live_findings::FindingsView,
    /// The host at a glance (`/api/v1/summary`).
    pub summary: Summary,
    /// A poll has been made (`/readyz`).
    pub ready: bool,
}

/// The host at a glance (`/api/v1/summary`): the last poll's rates and shares, the flows and
/// elephants held, the active findings.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// One sentence over the active findings: the slow steps and their causes, then what is
    /// behind them ([`crate::detect::engine::rank`]).
    pub verdict: String,
    /// The three most severe incidents behind the verdict (several receivers or flows with
    /// one cause at one time are one), most serious first: the answer before the numbers.
    pub incidents: Vec<Headline>,
    #[serde(flatten)]
    pub totals: crate::detect::live_totals::Totals,
    pub flows: usize,
    pub elephants: usize,
    /// Every watched interface's flow maps: how full, and what they pushed out.
    pub flow_maps: Vec<FlowMapFill>,
}

/// An incident as the summary lists it.
#[derive(Clone, Debug, Serialize)]
pub struct Headline {
    pub kind: &'static str,
    pub severity: crate::detect::findings::Severity,
    pub subject: String,
    pub summary: String,
    /// Unix seconds.
    pub start_s: f64,
}

/// How many incidents the summary lists.
pub const HEADLINES: usize = 3;

/// One flow map of one interface at the last poll.
#[derive(Clone, Debug, Serialize)]
pub struct FlowMapFill {
    pub iface: String,
    /// `FLOWS4` (incoming IPv4), `FLOWS` (incoming IPv6) or `FLOWS_OUT` (sent).
    pub map: &'static str,
    pub entries: u64,
    pub max_entries: u64,
    /// Entries against max_entries, 0..1.
    pub fill_ratio: f64,
    /// Flows pushed out to admit new ones since the agent started.
    pub pushed_out_total: u64,
}

impl Summary {
    pub fn new(
        totals: &crate::detect::live_totals::Totals,
        flows: &FlowsDoc,
        flow_maps: &[(String, crate::sources::flow_pressure::Fill)],
        ranked: &crate::detect::engine::Ranked,
    ) -> Summary {
        Summary {
            verdict: ranked.verdict.clone(),
            incidents: ranked
                .incidents
                .iter()
                .take(HEADLINES)
                .map(|f| Headline {
                    kind: f.kind,
                    severity: f.severity,
                    subject: f.subject.clone(),
                    summary: f.summary.clone(),
                    start_s: f.start_s,
                })
                .collect(),
            totals: totals.clone(),
            flows: flows.flows_total,
            elephants: flows.elephants_total,
            flow_maps: flow_maps
                .iter()
                .flat_map(|(iface, fill)| {
                    fill.iter().map(move |f| FlowMapFill {
                        iface: iface.clone(),
                        map: f.map,
                        entries: f.entries,
                        max_entries: f.capacity,
                        fill_ratio: f.ratio(),
                        pushed_out_total: f.pushed_out_total,
                    })
                })
                .collect(),
        }
    }
}

/// The training rhythm of every watched interface (`/api/v1/training`), as last detected.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TrainingDoc {
    pub interfaces: Vec<IfaceRhythm>,
}

#[derive(Clone, Debug, Serialize)]
pub struct IfaceRhythm {
    pub iface: String,
    pub period_seconds: Option<f64>,
    pub duty_ratio: Option<f64>,
    /// Mean RoCE bytes of the recent steps.
    pub step_bytes: Option<f64>,
    pub slow_steps: u64,
    pub lost_seconds: f64,
    /// The last steps (at most 16).
    pub steps: Vec<crate::detect::rhythm::Step>,
    /// The training jobs found in the interface's traffic (by their source hosts' rhythm),
    /// most hosts first.
    pub jobs: Vec<crate::detect::live_jobs::LiveJob>,
}

impl TrainingDoc {
    pub fn add(
        &mut self,
        iface: &str,
        t: &crate::detect::steps::StepTracker,
        jobs: &[crate::detect::live_jobs::LiveJob],
    ) {
        let mut jobs = jobs.to_vec();
        jobs.sort_by(|a, b| b.hosts.len().cmp(&a.hosts.len()).then(a.id.cmp(&b.id)));
        let s = t.summary();
        let st = &t.rhythm.steps;
        self.interfaces.push(IfaceRhythm {
            iface: iface.to_string(),
            period_seconds: s.map(|s| s.period_seconds),
            duty_ratio: s.map(|s| s.duty_ratio),
            step_bytes: s.map(|s| s.step_bytes),
            slow_steps: t.slow_steps,
            lost_seconds: t.lost_ms as f64 / 1e3,
            steps: st[st.len().saturating_sub(16)..].to_vec(),
            jobs,
        });
    }
}

/// Builds the API view from the flow table and the ECMP report (at most `limit` flows); the
/// flows' first and last seen become Unix time by adding `to_unix_ns` (the live tables keep
/// the kernel's monotonic clock).
pub fn build(
    table: &FlowTable,
    ecmp_report: &EcmpReport,
    config: &Config,
    limit: usize,
    to_unix_ns: u64,
) -> ApiView {
    let model = config.ecmp.hash.as_ref();
    let top = table.top_k(limit);
    let flows = top
        .into_iter()
        .map(|e| {
            let hook = Hook::ALL
                .get(e.key.hook as usize)
                .copied()
                .unwrap_or(Hook::Xdp);
            let iface = table.ifaces.get(e.iface).cloned().unwrap_or_default();
            let group = config
                .ecmp
                .groups
                .iter()
                .find(|g| g.interfaces.contains(&iface))
                .map(|g| g.name.clone());
            ApiFlow {
                iface,
                direction: hook.direction(),
                hook: hook.name(),
                flow: Flow::from_entry(e).shifted(to_unix_ns),
                rate_packets_per_second: e.rate_packets,
                ce_per_second: e.rate_ce,
                cnp_per_second: e.rate_cnp,
                group,
                predicted_path: model.map(|m| m.path(&ecmp::fields(&e.key))),
            }
        })
        .collect();
    ApiView {
        flows: FlowsDoc {
            flows_total: table.len(),
            elephants_total: (0..table.ifaces.len())
                .map(|i| table.elephants_for(i))
                .sum(),
            flows,
        },
        ecmp: ecmp_report.clone(),
        lossless: LosslessDoc::default(),
        sflow: None,
        training: TrainingDoc::default(),
        findings: Default::default(),
        summary: Summary::default(),
        ready: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::findings::{self, Severity};

    fn receiver(host: &str, start: f64) -> findings::Finding {
        let mut f = findings::link_down("x", start).retitle(format!("receiver {host}"));
        f.kind = "congestion";
        f.severity = Severity::Warning;
        f.end_s = start + 5.0;
        f
    }

    /// The summary opens with the verdict and the incidents behind it: three congested
    /// receivers at one time are one incident, after the critical one.
    #[test]
    fn the_summary_lists_the_most_severe_incidents_first() {
        let active = vec![
            receiver("10.0.0.1", 100.0),
            receiver("10.0.0.2", 101.0),
            receiver("10.0.0.3", 102.0),
            findings::link_down("eth1", 103.0),
        ];
        let ranked = crate::detect::engine::rank(active, None);
        let s = Summary::new(&Default::default(), &FlowsDoc::default(), &[], &ranked);
        assert!(!s.verdict.is_empty());
        let kinds: Vec<&str> = s.incidents.iter().map(|h| h.kind).collect();
        assert_eq!(kinds, ["link_down", "congestion"], "{:?}", s.incidents);
        assert!(
            s.incidents[1].summary.starts_with("3 receivers at once"),
            "{:?}",
            s.incidents[1]
        );
    }
}

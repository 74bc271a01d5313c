//! The metric catalog: every metric rocemon exports is declared here, nowhere else.
//!
//! Conventions: prefix `rocemon_`, base units, `_total` for counters, bounded labels
//! (iface, direction, hook, opcode name (<= 256), ECN codepoint, parse outcome); per-flow
//! series only for the top-K flows by rate, replaced on every poll.

use agent_common::{Hook, HookCounters};
use anyhow::Result;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use std::collections::HashMap;

mod findings;
mod histogram;
mod ipfix;
mod lossless;
mod observe;
mod sflow;
mod training;

pub use training::RhythmSource;

/// ECN codepoint label values, indexed by the two ECN bits.
pub const ECN_LABELS: [&str; 4] = ["not_ect", "ect1", "ect0", "ce"];

pub struct Metrics {
    pub registry: Registry,
    /// Every metric name exported (histograms as their series names).
    pub catalog: Vec<String>,
    packets: IntCounterVec,
    bytes: IntCounterVec,
    ecn: IntCounterVec,
    cnp: IntCounterVec,
    becn: IntCounterVec,
    fecn: IntCounterVec,
    frames: IntCounterVec,
    outcomes: IntCounterVec,
    map_update_errors: IntCounterVec,
    map_read_errors: IntCounterVec,
    flows: IntGaugeVec,
    flow_rate_bytes: GaugeVec,
    flow_rate_packets: GaugeVec,
    flow_evictions: IntCounterVec,
    flow_map_entries: IntGaugeVec,
    flow_map_max_entries: IntGaugeVec,
    flows_pushed_out: IntCounterVec,
    flow_elephant: GaugeVec,
    flow_psn_gaps: IntCounterVec,
    flow_retransmits: IntCounterVec,
    flow_naks: IntCounterVec,
    psn_gaps: IntCounterVec,
    retransmits: IntCounterVec,
    naks: IntCounterVec,
    rnr_naks: IntCounterVec,
    elephants: IntGaugeVec,
    uplink_rate: GaugeVec,
    uplink_elephants: IntGaugeVec,
    uplink_colliding: IntGaugeVec,
    colliding_uplinks: IntGaugeVec,
    imbalance: GaugeVec,
    path_elephants: IntGaugeVec,
    colliding_paths: IntGaugeVec,
    shared_tuples: IntGaugeVec,
    source_ports: IntGaugeVec,
    pub poll_duration: Histogram,
    attached: IntGaugeVec,
    interface_up: IntGaugeVec,
    attach_errors: IntCounterVec,
    program_runs: IntCounterVec,
    program_seconds: prometheus::CounterVec,
    flow_cache_cpus: IntGaugeVec,
    tunnels: IntCounterVec,
    rdma_counters: IntCounterVec,
    build_info: IntGaugeVec,
    session_overflow: IntCounterVec,
    redirect_failures: IntCounterVec,
    slow_path_frames: IntCounterVec,
    slow_path_unreachable: IntCounterVec,
    session_packets: IntCounterVec,
    session_bytes: IntCounterVec,
    session_ce: IntCounterVec,
    session_cnp: IntCounterVec,
    afxdp_frames: IntCounterVec,
    afxdp_bytes: IntCounterVec,
    afxdp_dropped: IntCounterVec,
    afxdp_fill_empty: IntCounterVec,
    afxdp_socket: IntGaugeVec,
    path_flows: IntGaugeVec,
    reloads: IntCounterVec,
    rdma_connections: IntGaugeVec,
    pfc_frames: IntCounterVec,
    pfc_priority_frames: IntCounterVec,
    pfc_quanta: IntCounterVec,
    pfc_seconds: prometheus::CounterVec,
    pfc_paused_seconds: prometheus::CounterVec,
    pause_frames: IntCounterVec,
    pause_quanta: IntCounterVec,
    pause_seconds: prometheus::CounterVec,
    mac_control_other: IntCounterVec,
    dscp_packets: IntCounterVec,
    dscp_bytes: IntCounterVec,
    priority_packets: IntCounterVec,
    priority_bytes: IntCounterVec,
    lossy_packets: IntCounterVec,
    lossy_bytes: IntCounterVec,
    cnp_out_of_class: IntCounterVec,
    nic_pfc_frames: IntCounterVec,
    nic_pause_counter: IntCounterVec,
    nic_pfc_pause_seconds: prometheus::CounterVec,
    sflow_datagrams: IntCounterVec,
    sflow_lost: IntCounterVec,
    sflow_samples: IntCounterVec,
    sflow_malformed: IntCounterVec,
    sflow_dropped: IntCounterVec,
    sflow_opcode_packets: IntCounterVec,
    sflow_ecn_packets: IntCounterVec,
    sflow_cnp_packets: IntCounterVec,
    sflow_uplink_rate: GaugeVec,
    sflow_uplink_elephants: IntGaugeVec,
    sflow_uplink_colliding: IntGaugeVec,
    sflow_colliding_uplinks: IntGaugeVec,
    findings_active: IntGaugeVec,
    findings_total: IntCounterVec,
    active_finding: IntGaugeVec,
    sflow_denied: IntCounterVec,
    sflow_implausible: IntCounterVec,
    sflow_restarts: IntCounterVec,
    sflow_table_entries: IntGaugeVec,
    sflow_table_removed: IntCounterVec,
    /// The per-agent sFlow series exported at the last poll (removed when the collector no
    /// longer holds their agent).
    sflow_series: sflow::Exported,
    /// The sFlow collector whose per-port series a scrape writes out ([`Metrics::encode`]).
    sflow_ports: Option<std::sync::Arc<std::sync::Mutex<crate::sflow::collector::Collector>>>,
    ipfix_records: IntCounterVec,
    ipfix_messages: IntCounterVec,
    /// The IPFIX exporter's collectors, whose counts a scrape reads ([`Metrics::encode`]).
    ipfix: ipfix::Collectors,
    training_period: GaugeVec,
    training_duty: GaugeVec,
    training_step_bytes: GaugeVec,
    training_slow_steps: IntCounterVec,
    training_lost: prometheus::CounterVec,
    /// The jobs found live per interface ([`training::JobSeries`]).
    training_jobs: training::JobSeries,
    pub message_bytes: histogram::CountedHistogram,
    /// Link speed per interface, bits per second (pause quanta to seconds); absent: unknown.
    link_speed_bps: HashMap<String, u64>,
    /// Last kernel totals per (iface, hook): counters advance by the difference.
    prev: HashMap<(String, Hook), HookCounters>,
}

/// The registry and the names registered in it (series of a vector exist only once used,
/// so the registry alone cannot list the catalog).
struct Reg {
    r: Registry,
    names: std::cell::RefCell<Vec<String>>,
}

impl Reg {
    fn add(&self, c: Box<dyn prometheus::core::Collector>, names: &[String]) -> Result<()> {
        self.r.register(c)?;
        self.names.borrow_mut().extend(names.iter().cloned());
        Ok(())
    }
}

fn counter(r: &Reg, name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    r.add(Box::new(c.clone()), &[name.to_string()])?;
    Ok(c)
}

fn float_counter(
    r: &Reg,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<prometheus::CounterVec> {
    let c = prometheus::CounterVec::new(Opts::new(name, help), labels)?;
    r.add(Box::new(c.clone()), &[name.to_string()])?;
    Ok(c)
}

fn gauge(r: &Reg, name: &str, help: &str, labels: &[&str]) -> Result<GaugeVec> {
    let g = GaugeVec::new(Opts::new(name, help), labels)?;
    r.add(Box::new(g.clone()), &[name.to_string()])?;
    Ok(g)
}

fn int_gauge(r: &Reg, name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec> {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
    r.add(Box::new(g.clone()), &[name.to_string()])?;
    Ok(g)
}

/// A per-port family written at scrape time.
pub struct PortFamily {
    pub name: &'static str,
    pub kind: &'static str,
    pub help: &'static str,
}

/// The sFlow per-port families: not registry objects, written at each scrape from the
/// collector's port table, in this order ([`sflow::write_port_series`]).
pub const PORT_FAMILIES: [PortFamily; 5] = [
    PortFamily {
        name: "rocemon_sflow_port_roce_samples_total",
        kind: "counter",
        help: "RoCEv2 flow samples per switch port (agent, ifIndex, direction: ingress, egress, or source when the agent names neither port).",
    },
    PortFamily {
        name: "rocemon_sflow_port_roce_packets_estimated_total",
        kind: "counter",
        help: "RoCEv2 packets per switch port, estimated: each sample weighted by its sampling rate.",
    },
    PortFamily {
        name: "rocemon_sflow_port_roce_bytes_estimated_total",
        kind: "counter",
        help: "RoCEv2 bytes (the samples' frame lengths) per switch port, estimated.",
    },
    PortFamily {
        name: "rocemon_sflow_port_speed_bits_per_second",
        kind: "gauge",
        help: "A switch port's speed from its counter samples.",
    },
    PortFamily {
        name: "rocemon_sflow_port_octets_total",
        kind: "counter",
        help: "A switch port's octets from its counter samples (direction in or out): its link load.",
    },
];

const HOOK: &[&str] = &["iface", "direction", "hook"];
const FLOW: &[&str] = &["iface", "direction", "src", "dst", "sport", "dest_qp"];
const SESSION: &[&str] = &["iface", "hook", "tunnel", "session"];

/// What a kernel total gained since `before`; a total below it means the map was re-created,
/// and counting starts over from it.
pub(crate) fn delta(now: u64, before: u64) -> u64 {
    if now >= before {
        now - before
    } else {
        now
    }
}

/// Moves a counter up to a total read from elsewhere (a kernel map, a driver, a socket); a
/// smaller total means the source was reset, and the counter follows from there. Integer
/// counters and float ones (seconds) alike.
fn follow<P: prometheus::core::Atomic>(c: &prometheus::core::GenericCounter<P>, total: P::T) {
    let seen = c.get();
    if total >= seen {
        let mut up = total;
        up -= seen;
        c.inc_by(up);
    } else {
        c.reset();
        c.inc_by(total);
    }
}

impl Metrics {
    pub fn new() -> Result<Metrics> {
        let r = Reg {
            r: Registry::new(),
            names: Default::default(),
        };
        let with = |extra: &'static str| -> Vec<&'static str> {
            let mut v = HOOK.to_vec();
            v.push(extra);
            v
        };
        let with2 = |a: &'static str, b: &'static str| -> Vec<&'static str> {
            let mut v = HOOK.to_vec();
            v.extend([a, b]);
            v
        };
        let poll_duration = Histogram::with_opts(
            HistogramOpts::new(
                "rocemon_poll_duration_seconds",
                "Time to read the kernel maps and update the flow table.",
            )
            .buckets(vec![
                0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0,
            ]),
        )?;
        // The agent's own CPU, memory and file descriptors (process_* names, as every exporter).
        r.r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        let h = "rocemon_poll_duration_seconds";
        r.add(
            Box::new(poll_duration.clone()),
            &["_bucket", "_sum", "_count"].map(|s| format!("{h}{s}")),
        )?;
        let message_bytes = histogram::CountedHistogram::new(
            "rocemon_rdma_message_bytes",
            "RDMA message sizes by operation: rdma_write and rdma_read (the RETH's DMA length of each request), send (the payload of FIRST..LAST or ONLY).",
            &with("op"),
            (0..agent_common::message::MSG_BUCKETS - 1)
                .filter_map(|i| agent_common::message::bucket_le(i).map(|b| b as f64))
                .collect(),
        )?;
        let h = "rocemon_rdma_message_bytes";
        r.add(
            Box::new(message_bytes.clone()),
            &["_bucket", "_sum", "_count"].map(|s| format!("{h}{s}")),
        )?;
        const RHYTHM: &[&str] = &["iface", "agent", "ifindex"];
        Ok(Metrics {
            training_period: gauge(&r, "rocemon_training_step_period_seconds", "Period of the training job's steps (communication bursts) in RoCE traffic, by interface or sFlow switch port (agent, ifindex); absent when the traffic has no rhythm.", RHYTHM)?,
            training_duty: gauge(&r, "rocemon_training_comm_duty_ratio", "Share of each step with RoCE traffic (communication), mean over the last minute's steps.", RHYTHM)?,
            training_step_bytes: gauge(&r, "rocemon_training_step_bytes", "RoCE bytes per step, mean over the recent steps (sFlow ports: sampled bytes, not scaled).", RHYTHM)?,
            training_slow_steps: counter(&r, "rocemon_training_slow_steps_total", "Steps that ran more than 1.5 times the median of the recent steps.", RHYTHM)?,
            training_lost: float_counter(&r, "rocemon_training_series_lost_seconds_total", "Time of the per-millisecond RoCE series the agent read too late (the kernel ring holds 4.096 s): the rhythm has gaps there.", &["iface"])?,
            training_jobs: training::JobSeries::new(&r)?,
            message_bytes,
            packets: counter(&r, "rocemon_packets_total", "RoCEv2 packets by BTH opcode.", &with("opcode"))?,
            bytes: counter(&r, "rocemon_bytes_total", "RoCEv2 wire bytes by BTH opcode.", &with("opcode"))?,
            ecn: counter(&r, "rocemon_ecn_packets_total", "RoCEv2 packets by IP ECN codepoint (not_ect, ect0, ect1, ce).", &with("codepoint"))?,
            cnp: counter(&r, "rocemon_cnp_packets_total", "RoCEv2 congestion notification packets (BTH opcode 0x81).", HOOK)?,
            becn: counter(&r, "rocemon_becn_packets_total", "RoCEv2 packets with the BTH BECN bit set.", HOOK)?,
            fecn: counter(&r, "rocemon_fecn_packets_total", "RoCEv2 packets with the BTH FECN bit set.", HOOK)?,
            frames: counter(&r, "rocemon_frames_total", "All frames the hook saw, RoCE or not.", HOOK)?,
            outcomes: counter(&r, "rocemon_parse_outcomes_total", "Frames by parse outcome: roce, a not-RoCE reason, or a malformed reason.", &["iface", "hook", "outcome", "kind"])?,
            map_update_errors: counter(&r, "rocemon_map_update_errors_total", "Kernel map updates that failed (the flow was not recorded; global counters still were).", &["iface", "map"])?,
            map_read_errors: counter(&r, "rocemon_map_read_errors_total", "Kernel map entries or maps that could not be read by the agent.", &["iface", "map"])?,
            flows: int_gauge(&r, "rocemon_flows", "RoCEv2 flows currently held in the flow table.", &["iface"])?,
            flow_rate_bytes: gauge(&r, "rocemon_flow_rate_bytes_per_second", "Smoothed wire bytes per second of a top-K flow.", &["iface", "direction", "src", "dst", "sport", "dest_qp"])?,
            flow_rate_packets: gauge(&r, "rocemon_flow_rate_packets_per_second", "Smoothed packets per second of a top-K flow.", &["iface", "direction", "src", "dst", "sport", "dest_qp"])?,
            flow_evictions: counter(&r, "rocemon_flow_evictions_total", "Flows deleted from the flow maps after flow_idle_timeout_seconds without a packet (a full map pushes flows out instead: rocemon_flows_pushed_out_total).", &["iface"])?,
            flow_map_entries: int_gauge(&r, "rocemon_flow_map_entries", "Flows held in a flow map (FLOWS4: incoming IPv4, FLOWS: incoming IPv6, FLOWS_OUT: the flows the host sends) after the last poll; against rocemon_flow_map_max_entries it says how full the map is.", &["iface", "map"])?,
            flow_map_max_entries: int_gauge(&r, "rocemon_flow_map_max_entries", "The size of a flow map (flow_map_entries, flow_map_entries_ipv4/_ipv6).", &["iface", "map"])?,
            flows_pushed_out: counter(&r, "rocemon_flows_pushed_out_total", "Flows a full flow map pushed out to admit new ones (least recently used first): their per-flow counts since the previous poll are lost; global counters stay exact. Steady growth means more flows than the map holds (a flood of spoofed flows, or flow_map_entries too small).", &["iface", "map"])?,
            flow_elephant: gauge(&r, "rocemon_flow_elephant", "1 when a top-K flow is an elephant, else 0.", FLOW)?,
            flow_psn_gaps: counter(&r, "rocemon_flow_psn_gaps_total", "Packets missing from a top-K flow's request sequence since the flow was first seen (the series starts again when the flow re-enters the top K).", FLOW)?,
            flow_retransmits: counter(&r, "rocemon_flow_retransmits_total", "Retransmitted requests of a top-K flow since it was first seen.", FLOW)?,
            flow_naks: counter(&r, "rocemon_flow_naks_total", "NAKs (all codes, and RNR NAKs) received on a top-K flow since it was first seen.", FLOW)?,
            psn_gaps: counter(&r, "rocemon_psn_gaps_total", "Packets missing from RC/UC/XRC request sequences (PSN gaps).", HOOK)?,
            retransmits: counter(&r, "rocemon_retransmitted_packets_total", "Requests whose PSN was seen again (retransmissions).", HOOK)?,
            naks: counter(&r, "rocemon_naks_total", "NAKs by code (psn_sequence_error, invalid_request, remote_access_error, remote_operational_error, invalid_rd_request, reserved).", &with("code"))?,
            rnr_naks: counter(&r, "rocemon_rnr_naks_total", "Receiver-not-ready NAKs.", HOOK)?,
            elephants: int_gauge(&r, "rocemon_elephant_flows", "Flows that are elephants now.", &["iface"])?,
            uplink_rate: gauge(&r, "rocemon_ecmp_uplink_bytes_per_second", "Smoothed RoCE load of an uplink of an ECMP group.", &["group", "iface"])?,
            uplink_elephants: int_gauge(&r, "rocemon_ecmp_uplink_elephants", "Elephants on an uplink of an ECMP group.", &["group", "iface"])?,
            uplink_colliding: int_gauge(&r, "rocemon_ecmp_uplink_colliding", "1 when the uplink carries two or more elephants while another uplink of its group carries none.", &["group", "iface"])?,
            colliding_uplinks: int_gauge(&r, "rocemon_ecmp_colliding_uplinks", "Colliding uplinks of an ECMP group.", &["group"])?,
            imbalance: gauge(&r, "rocemon_ecmp_imbalance_ratio", "Max over mean uplink load of an ECMP group (1 is balanced).", &["group"])?,
            path_elephants: int_gauge(&r, "rocemon_ecmp_predicted_path_elephants", "Elephants the hash model puts on a path.", &["path"])?,
            colliding_paths: int_gauge(&r, "rocemon_ecmp_predicted_colliding_paths", "Paths the hash model predicts to collide.", &[])?,
            shared_tuples: int_gauge(&r, "rocemon_ecmp_shared_5tuple_groups", "Groups of flows (distinct destination QPs) sharing one outer 5-tuple.", &[])?,
            source_ports: int_gauge(&r, "rocemon_ecmp_source_ports", "Distinct UDP source ports of a host pair (the top-K pairs with the fewest).", &["src", "dst"])?,
            rdma_counters: counter(&r, "rocemon_rdma_port_counter_total", "A counter of an RDMA NIC port, as its driver reports it under /sys/class/infiniband (counters/ and hw_counters/).", &["device", "port", "netdev", "counter"])?,
            tunnels: counter(&r, "rocemon_tunnel_packets_total", "RoCEv2 packets by the mirror session or tunnel they arrived in (none, vxlan, gre, erspan2, erspan3).", &with("tunnel"))?,
            attached: int_gauge(&r, "rocemon_attached", "1 for every program attached (mode: native, skb or tcx).", &["iface", "hook", "mode"])?,
            interface_up: int_gauge(&r, "rocemon_interface_up", "1 while a watched interface exists and rocemon's programs are attached to it, 0 while it is gone.", &["iface"])?,
            attach_errors: counter(&r, "rocemon_attach_errors_total", "Attempts to attach to a watched interface (after it came back) that failed.", &["iface"])?,
            flow_cache_cpus: int_gauge(&r, "rocemon_flow_cache_cpus", "Online CPUs whose kernel flow cache is on, draining or off (it steps aside where a CPU's flows outnumber its 4,096 slots: most packets missed it in a poll interval; tried again 16 polls later).", &["iface", "mode"])?,
            program_runs: counter(&r, "rocemon_program_runs_total", "Runs of each rocemon kernel program, as the kernel counts them (BPF run-time statistics on).", &["iface", "hook", "program"])?,
            program_seconds: {
                let name = "rocemon_program_run_seconds_total";
                let c = prometheus::CounterVec::new(Opts::new(name, "Time the kernel spent in each rocemon kernel program (BPF run-time statistics on): divided by rocemon_program_runs_total, the cost per packet."), &["iface", "hook", "program"])?;
                r.add(Box::new(c.clone()), &[name.to_string()])?;
                c
            },
            build_info: int_gauge(&r, "rocemon_build_info", "Build and kernel version; always 1.", &["version", "kernel"])?,
            session_overflow: counter(&r, "rocemon_session_overflow_packets_total", "Encapsulated RoCEv2 packets whose mirror session found the session map full (counted everywhere but in the per-session series).", HOOK)?,
            slow_path_frames: counter(&r, "rocemon_slow_path_frames_total", "Frames the kernel fast path handed to the slow program (tunnels and mirror sessions, QinQ, IPv4 options and fragments, IPv6 extension headers, malformed frames).", HOOK)?,
            slow_path_unreachable: counter(&r, "rocemon_slow_path_unreachable_total", "Frames whose tail call to the slow program failed (its program array slot empty): counted in frames, under no outcome. Never expected.", HOOK)?,
            redirect_failures: counter(&r, "rocemon_afxdp_redirect_failures_total", "AF_XDP capture: RoCE frames whose receive queue had no socket; the kernel counted them itself and passed them on.", &["iface"])?,
            session_packets: counter(&r, "rocemon_session_packets_total", "RoCEv2 packets by mirror session or tunnel id (ERSPAN session, VXLAN VNI, GRE key); at most 256 sessions per interface.", SESSION)?,
            session_bytes: counter(&r, "rocemon_session_bytes_total", "Wire bytes of the mirrored (outer) frames by session.", SESSION)?,
            session_ce: counter(&r, "rocemon_session_ce_packets_total", "Mirrored RoCEv2 packets marked CE, by session.", SESSION)?,
            session_cnp: counter(&r, "rocemon_session_cnp_packets_total", "Mirrored RoCEv2 CNPs by session.", SESSION)?,
            afxdp_frames: counter(&r, "rocemon_afxdp_frames_total", "Frames received on an AF_XDP capture socket.", &["iface", "queue"])?,
            afxdp_bytes: counter(&r, "rocemon_afxdp_bytes_total", "Bytes received on an AF_XDP capture socket.", &["iface", "queue"])?,
            afxdp_dropped: counter(&r, "rocemon_afxdp_dropped_frames_total", "Frames the kernel dropped before an AF_XDP socket got them: no_fill_buffer (fill ring empty), rx_ring_full, invalid_descriptor.", &["iface", "queue", "reason"])?,
            afxdp_fill_empty: counter(&r, "rocemon_afxdp_fill_ring_empty_total", "Times the kernel found an AF_XDP socket's fill ring empty.", &["iface", "queue"])?,
            afxdp_socket: int_gauge(&r, "rocemon_afxdp_socket", "1 for every AF_XDP capture socket (mode: copy or zerocopy).", &["iface", "queue", "mode"])?,
            reloads: counter(&r, "rocemon_config_reloads_total", "Configuration reloads (SIGHUP) by result: success or failure (the running configuration stays).", &["result"])?,
            path_flows: int_gauge(&r, "rocemon_ecmp_predicted_path_flows", "Flows (seen in packets, or RC connections from the RDMA resource view) the hash model puts on a path.", &["path"])?,
            rdma_connections: int_gauge(&r, "rocemon_rdma_connections", "RC connections of an RDMA device from the kernel's resource view (rdma res), with addresses known.", &["device"])?,
            pfc_frames: counter(&r, "rocemon_pfc_frames_total", "PFC frames (MAC control opcode 0x0101) the hook saw, mirrored ones included.", HOOK)?,
            pfc_priority_frames: counter(&r, "rocemon_pfc_priority_frames_total", "PFC pause requests per priority: type xoff (class enabled, time above 0) or xon (enabled, time 0).", &with2("priority", "type"))?,
            pfc_quanta: counter(&r, "rocemon_pfc_pause_quanta_total", "Pause quanta (512 bit times each) that PFC XOFF frames requested, per priority.", &with("priority"))?,
            pfc_seconds: float_counter(&r, "rocemon_pfc_pause_seconds_total", "Pause time PFC XOFF frames requested, per priority, in seconds at the interface's link speed (absent when the speed is unknown).", &with("priority"))?,
            pfc_paused_seconds: float_counter(&r, "rocemon_pfc_paused_seconds_total", "Wall time each priority was paused: the union of the pause intervals of the PFC and PAUSE frames the kernel saw (a refreshed XOFF extends a pause, an XON ends it), at the interface's link speed, as analyze works it out (absent when the speed is unknown). The pause time the findings, top and the summary read where the NIC has no pause counter of its own.", &["iface", "priority"])?,
            pause_frames: counter(&r, "rocemon_pause_frames_total", "802.3x PAUSE frames (MAC control opcode 0x0001): type xoff (time above 0) or xon (time 0).", &with("type"))?,
            pause_quanta: counter(&r, "rocemon_pause_quanta_total", "Pause quanta (512 bit times each) that 802.3x PAUSE frames requested.", HOOK)?,
            pause_seconds: float_counter(&r, "rocemon_pause_seconds_total", "Pause time 802.3x PAUSE frames requested, in seconds at the interface's link speed.", HOOK)?,
            mac_control_other: counter(&r, "rocemon_mac_control_other_frames_total", "MAC control frames (EtherType 0x8808) with an opcode other than PAUSE and PFC.", HOOK)?,
            dscp_packets: counter(&r, "rocemon_dscp_packets_total", "RoCEv2 packets by DSCP; class roce (all RoCE, CNPs included) or cnp (CNPs only).", &with2("dscp", "class"))?,
            dscp_bytes: counter(&r, "rocemon_dscp_bytes_total", "RoCEv2 wire bytes by DSCP; class roce or cnp as in rocemon_dscp_packets_total.", &with2("dscp", "class"))?,
            priority_packets: counter(&r, "rocemon_priority_packets_total", "Tagged RoCEv2 packets by the outermost tag's 802.1p priority; class roce or cnp.", &with2("priority", "class"))?,
            priority_bytes: counter(&r, "rocemon_priority_bytes_total", "Tagged RoCEv2 wire bytes by 802.1p priority; class roce or cnp.", &with2("priority", "class"))?,
            lossy_packets: counter(&r, "rocemon_lossy_roce_packets_total", "RoCEv2 packets (not CNPs) outside the configured lossless class ([classes]: DSCP set, 802.1p priority): RDMA not protected by PFC.", HOOK)?,
            lossy_bytes: counter(&r, "rocemon_lossy_roce_bytes_total", "Wire bytes of lossy RoCE packets.", HOOK)?,
            cnp_out_of_class: counter(&r, "rocemon_cnp_out_of_class_packets_total", "CNPs whose DSCP is not the configured CNP class.", HOOK)?,
            nic_pfc_frames: counter(&r, "rocemon_nic_pfc_frames_total", "PFC frames the NIC itself sent (tx) and received (rx) per priority: origin dcb (the kernel's DCB interface, as `dcb pfc show`) or ethtool (driver statistics).", &["iface", "priority", "direction", "origin"])?,
            nic_pause_counter: counter(&r, "rocemon_nic_pause_counter_total", "Other pause statistics of the NIC's driver (ethtool -S), by the driver's own name: pause durations, pause storms, link-level PAUSE.", &["iface", "counter", "origin"])?,
            nic_pfc_pause_seconds: float_counter(&r, "rocemon_nic_pfc_pause_seconds_total", "Time a priority was paused by the NIC's own clock (mlx5 rx/tx_prioN_pause_duration): rx, the peer paused this port's sending; tx, this port paused the peer.", &["iface", "priority", "direction"])?,
            sflow_datagrams: counter(&r, "rocemon_sflow_datagrams_total", "sFlow datagrams received, by agent (switch) address the collector holds; agent=\"other\" sums the agents no longer held (idle, or pushed out of a full table).", &["agent"])?,
            sflow_lost: counter(&r, "rocemon_sflow_lost_datagrams_total", "sFlow datagrams lost on the way, by agent (agent=\"other\" as in rocemon_sflow_datagrams_total): sequence numbers that did not arrive within a window of 64 for reordering; restarts and jumps larger than the elapsed time could hold are not loss.", &["agent"])?,
            sflow_samples: counter(&r, "rocemon_sflow_samples_total", "sFlow samples by kind: flow, counter, unknown (a format rocemon skips).", &["kind"])?,
            sflow_malformed: counter(&r, "rocemon_sflow_malformed_total", "sFlow datagrams or parts of them that could not be read, by reason.", &["reason"])?,
            sflow_dropped: counter(&r, "rocemon_sflow_dropped_datagrams_total", "sFlow datagrams the kernel dropped because the collector's receive buffer was full.", &[])?,
            sflow_opcode_packets: counter(&r, "rocemon_sflow_packets_estimated_total", "RoCEv2 packets across the sampled fabric by BTH opcode, estimated.", &["opcode"])?,
            sflow_ecn_packets: counter(&r, "rocemon_sflow_ecn_packets_estimated_total", "RoCEv2 packets across the sampled fabric by ECN codepoint, estimated.", &["codepoint"])?,
            sflow_cnp_packets: counter(&r, "rocemon_sflow_cnp_packets_estimated_total", "RoCEv2 CNPs across the sampled fabric, estimated.", &[])?,
            sflow_uplink_rate: gauge(&r, "rocemon_sflow_uplink_bytes_per_second", "Load of a switch uplink in an sFlow ECMP group ([[sflow.groups]]): from counter samples where the switch sends them, else the sampled estimate.", &["group", "uplink"])?,
            sflow_uplink_elephants: int_gauge(&r, "rocemon_sflow_uplink_elephants", "Elephant flows on a switch uplink, by estimated rate.", &["group", "uplink"])?,
            sflow_uplink_colliding: int_gauge(&r, "rocemon_sflow_uplink_colliding", "1 when the switch uplink carries two or more elephants while another uplink of its group carries none.", &["group", "uplink"])?,
            sflow_colliding_uplinks: int_gauge(&r, "rocemon_sflow_colliding_uplinks", "Colliding uplinks of a switch's ECMP group (sFlow fabric view).", &["group"])?,
            findings_active: int_gauge(&r, "rocemon_findings_active", "Findings active now, by kind and severity (see /api/v1/findings and docs/runbook.md).", &["kind", "severity"])?,
            findings_total: counter(&r, "rocemon_findings_total", "Findings opened, by kind.", &["kind"])?,
            active_finding: int_gauge(&r, "rocemon_active_finding_info", "1 for each active finding with its subject (the interface, priority, flow or job it is about): what an alert names. Bounded: at most 20 subjects of a kind, the rest one finding with subject \"more subjects\".", &["kind", "severity", "subject"])?,
            sflow_denied: counter(&r, "rocemon_sflow_denied_datagrams_total", "sFlow datagrams from agents outside the allowed networks ([sflow] agents), dropped.", &[])?,
            sflow_implausible: counter(&r, "rocemon_sflow_implausible_samples_total", "sFlow flow samples claiming a frame over 64 KiB or a sampling rate of 0: counted, not estimated from.", &[])?,
            sflow_restarts: counter(&r, "rocemon_sflow_agent_restarts_total", "sFlow agent restarts (the agent's uptime went back and its sequence with it), by agent; agent=\"other\" sums the agents no longer held.", &["agent"])?,
            sflow_table_entries: int_gauge(&r, "rocemon_sflow_table_entries", "Entries the sFlow collector holds per table (agents, ports, flows, port_flows, rhythm_ports); each is bounded ([sflow] max_*).", &["table"])?,
            sflow_table_removed: counter(&r, "rocemon_sflow_table_entries_removed_total", "sFlow collector table entries refused (dropped: the table was full of busy or protected entries), pushed out by a new key (evicted: the least busy of a sample) or expired after the idle timeout (expired).", &["table", "reason"])?,
            ipfix_records: counter(&r, "rocemon_ipfix_records_total", "IPFIX flow records by collector and result: sent, queue_full (the exporter's queue was full: dropped before sending), send_failed (the send or write failed), collector_down (a TCP collector was not connected).", &["collector", "result"])?,
            ipfix_messages: counter(&r, "rocemon_ipfix_messages_total", "IPFIX messages written to a collector (templates and data).", &["collector"])?,
            ipfix: Default::default(),
            sflow_series: Default::default(),
            sflow_ports: None,
            link_speed_bps: HashMap::new(),
            poll_duration,
            prev: HashMap::new(),
            catalog: {
                let mut names = r.names.take();
                names.extend(PORT_FAMILIES.iter().map(|f| f.name.to_string()));
                names
            },
            registry: r.r,
        })
    }

    /// The Prometheus text exposition of every metric. A label a series does not have (an
    /// sFlow port's rhythm has no `iface`, an interface's no `agent`) is left out rather than
    /// written empty: the same series to Prometheus, and no `iface=""` for a person.
    pub fn encode(&self) -> Result<String> {
        self.set_ipfix();
        let mut families = self.registry.gather();
        for f in &mut families {
            for m in f.mut_metric() {
                let labels = m.take_label();
                m.set_label(
                    labels
                        .into_iter()
                        .filter(|l| !l.value().is_empty())
                        .collect(),
                );
            }
        }
        let mut buf = Vec::new();
        TextEncoder::new().encode(&families, &mut buf)?;
        let mut text = String::from_utf8(buf)?;
        if let Some(c) = &self.sflow_ports {
            if let Ok(c) = c.lock() {
                sflow::write_port_series(&c, &mut text);
            }
        }
        Ok(text)
    }

    /// The sFlow collector whose per-port series each scrape writes out, read then (see
    /// [`sflow::write_port_series`]).
    pub fn attach_sflow(
        &mut self,
        c: std::sync::Arc<std::sync::Mutex<crate::sflow::collector::Collector>>,
    ) {
        self.sflow_ports = Some(c);
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

//! The metric catalog: every metric rocemon exports is declared here, nowhere else.
//!
//! Conventions: prefix `rocemon_`, base units, `_total` for counters, bounded labels
//! (iface, direction, hook, opcode name (<= 256), ECN codepoint, parse outcome); per-flow
//! series only for the top-K flows by rate, replaced on every poll.

use crate::detect::ecmp::{EcmpReport, GroupView};
use crate::flows::FlowTable;
use agent_common::psn::NAK_NAMES;
use agent_common::{opcode, Hook, HookCounters, Outcome, OutcomeKind};
use anyhow::Result;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use std::collections::HashMap;

mod lossless;

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
    flow_elephant: GaugeVec,
    flow_psn_gaps: GaugeVec,
    flow_retransmits: GaugeVec,
    flow_naks: GaugeVec,
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

const HOOK: &[&str] = &["iface", "direction", "hook"];
const FLOW: &[&str] = &["iface", "direction", "src", "dst", "sport", "dest_qp"];
const SESSION: &[&str] = &["iface", "hook", "tunnel", "session"];

/// Moves a counter up to a total read from elsewhere (a kernel map, a driver, a socket); a
/// smaller total means the source was reset, and the counter follows from there.
fn follow(c: &prometheus::IntCounter, total: u64) {
    let seen = c.get();
    if total >= seen {
        c.inc_by(total - seen);
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
        Ok(Metrics {
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
            flow_evictions: counter(&r, "rocemon_flow_evictions_total", "Flows the kernel LRU flow map evicted (created minus still held).", &["iface"])?,
            flow_elephant: gauge(&r, "rocemon_flow_elephant", "1 when a top-K flow is an elephant, else 0.", FLOW)?,
            flow_psn_gaps: gauge(&r, "rocemon_flow_psn_gaps", "Packets missing from a top-K flow's request sequence so far.", FLOW)?,
            flow_retransmits: gauge(&r, "rocemon_flow_retransmits", "Retransmitted requests of a top-K flow so far.", FLOW)?,
            flow_naks: gauge(&r, "rocemon_flow_naks", "NAKs (all codes, and RNR NAKs) received on a top-K flow so far.", FLOW)?,
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
            link_speed_bps: HashMap::new(),
            poll_duration,
            prev: HashMap::new(),
            catalog: r.names.take(),
            registry: r.r,
        })
    }

    pub fn set_build_info(&self) {
        for r in ["success", "failure"] {
            self.reloads.with_label_values(&[r]);
        }
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        self.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), kernel.trim()])
            .set(1);
    }

    /// The kernel's run count and run time of one program (totals since it was loaded).
    pub fn set_program_stats(
        &self,
        iface: &str,
        hook: Hook,
        program: &str,
        runs: u64,
        seconds: f64,
    ) {
        let l = [iface, hook.name(), program];
        follow(&self.program_runs.with_label_values(&l), runs);
        let c = self.program_seconds.with_label_values(&l);
        let seen = c.get();
        if seconds >= seen {
            c.inc_by(seconds - seen);
        } else {
            c.reset();
            c.inc_by(seconds);
        }
    }

    /// Whether a watched interface is there with the programs attached.
    pub fn set_interface_up(&self, iface: &str, up: bool) {
        self.interface_up
            .with_label_values(&[iface])
            .set(i64::from(up));
        // The series exists from the start (0 failures), so alerts can use it.
        self.attach_errors.with_label_values(&[iface]);
    }

    /// An attach after the interface came back failed.
    pub fn attach_failed(&self, iface: &str) {
        self.attach_errors.with_label_values(&[iface]).inc();
    }

    /// Marks one program detached (its series stays, at 0).
    pub fn set_detached(&self, iface: &str, hook: Hook, mode: &str) {
        self.attached
            .with_label_values(&[iface, hook.name(), mode])
            .set(0);
    }

    pub fn set_attached(&self, iface: &str, hook: Hook, mode: &str) {
        self.attached
            .with_label_values(&[iface, hook.name(), mode])
            .set(1);
        // Create the always-present series so rates and ratios exist from the first scrape.
        let l = [iface, hook.direction(), hook.name()];
        for c in [&self.cnp, &self.becn, &self.fecn, &self.frames] {
            c.with_label_values(&l);
        }
        for e in ECN_LABELS {
            self.ecn
                .with_label_values(&[iface, hook.direction(), hook.name(), e]);
        }
        self.map_update_errors
            .with_label_values(&[iface, agent_common::MAP_FLOWS]);
        for m in [
            agent_common::MAP_COUNTERS,
            agent_common::MAP_FLOWS,
            agent_common::MAP_SESSIONS,
        ] {
            self.map_read_errors.with_label_values(&[iface, m]);
        }
        self.flow_evictions.with_label_values(&[iface]);
    }

    /// Advances the counters of one hook to the kernel's totals `cur`.
    pub fn observe_counters(&mut self, iface: &str, hook: Hook, cur: &HookCounters) {
        let prev = self
            .prev
            .entry((iface.to_string(), hook))
            .or_insert(HookCounters::ZERO);
        // A total below the previous one means the map was re-created: start over from it.
        let d = |now: u64, before: u64| if now >= before { now - before } else { now };
        let (dir, hn) = (hook.direction(), hook.name());
        for op in 0..256usize {
            let dp = d(cur.opcode_packets[op], prev.opcode_packets[op]);
            if dp > 0 {
                let name = opcode::name(op as u8);
                self.packets
                    .with_label_values(&[iface, dir, hn, &name])
                    .inc_by(dp);
                self.bytes
                    .with_label_values(&[iface, dir, hn, &name])
                    .inc_by(d(cur.opcode_bytes[op], prev.opcode_bytes[op]));
            }
        }
        for (i, e) in ECN_LABELS.iter().enumerate() {
            self.ecn
                .with_label_values(&[iface, dir, hn, e])
                .inc_by(d(cur.ecn_packets[i], prev.ecn_packets[i]));
        }
        let l = [iface, dir, hn];
        self.cnp
            .with_label_values(&l)
            .inc_by(d(cur.cnp_packets, prev.cnp_packets));
        self.becn
            .with_label_values(&l)
            .inc_by(d(cur.becn_packets, prev.becn_packets));
        self.fecn
            .with_label_values(&l)
            .inc_by(d(cur.fecn_packets, prev.fecn_packets));
        self.frames
            .with_label_values(&l)
            .inc_by(d(cur.frames, prev.frames));
        for o in Outcome::ALL {
            let n = d(cur.outcomes[o as usize], prev.outcomes[o as usize]);
            let kind = match o.kind() {
                OutcomeKind::Roce => "roce",
                OutcomeKind::NotRoce => "not_roce",
                OutcomeKind::Malformed => "malformed",
            };
            if n > 0 || o == Outcome::Roce {
                self.outcomes
                    .with_label_values(&[iface, hn, o.name(), kind])
                    .inc_by(n);
            }
        }
        self.map_update_errors
            .with_label_values(&[iface, agent_common::MAP_FLOWS])
            .inc_by(d(cur.flow_update_errors, prev.flow_update_errors));
        self.psn_gaps
            .with_label_values(&l)
            .inc_by(d(cur.psn_gaps, prev.psn_gaps));
        self.session_overflow
            .with_label_values(&l)
            .inc_by(d(cur.session_overflow, prev.session_overflow));
        self.slow_path_frames
            .with_label_values(&l)
            .inc_by(d(cur.slow_path_frames, prev.slow_path_frames));
        self.slow_path_unreachable
            .with_label_values(&l)
            .inc_by(d(cur.slow_path_unreachable, prev.slow_path_unreachable));
        // The kernel does not log on the packet path: say here when a failure counter first
        // moves (once per interface and hook while the agent runs).
        if cur.flow_update_errors > 0 && prev.flow_update_errors == 0 {
            log::warn!(
                "{iface} {hn}: the flow map refused {} flow updates (map full of busy flows or out of memory); global counters stay exact, per-flow figures miss them (rocemon_map_update_errors_total)",
                cur.flow_update_errors
            );
        }
        if cur.slow_path_unreachable > 0 && prev.slow_path_unreachable == 0 {
            log::warn!(
                "{iface} {hn}: {} frames could not reach the slow program (empty program array slot); they are counted as frames only (rocemon_slow_path_unreachable_total)",
                cur.slow_path_unreachable
            );
        }
        if hook == Hook::AfXdp {
            self.redirect_failures.with_label_values(&[iface]).inc_by(d(
                cur.capture_redirect_failures,
                prev.capture_redirect_failures,
            ));
        }
        for k in agent_common::headers::encap::TunnelKind::ALL {
            let i = k as usize;
            let n = d(cur.tunnel_packets[i], prev.tunnel_packets[i]);
            if n > 0 {
                self.tunnels
                    .with_label_values(&[iface, dir, hn, k.name()])
                    .inc_by(n);
            }
        }
        self.retransmits
            .with_label_values(&l)
            .inc_by(d(cur.retransmits, prev.retransmits));
        self.rnr_naks
            .with_label_values(&l)
            .inc_by(d(cur.rnr_naks, prev.rnr_naks));
        for (i, code) in NAK_NAMES.iter().enumerate() {
            self.naks
                .with_label_values(&[iface, dir, hn, code])
                .inc_by(d(cur.naks[i], prev.naks[i]));
        }
        let before = *prev;
        *prev = *cur;
        self.observe_lossless(iface, hook, cur, &before);
    }

    pub fn map_read_error(&self, iface: &str, map: &str, n: u64) {
        self.map_read_errors
            .with_label_values(&[iface, map])
            .inc_by(n);
    }

    /// Advances the eviction counter of an interface to `evicted_total` (flows created by its
    /// programs minus flows still in its map).
    pub fn set_flow_evictions(&mut self, iface: &str, evicted_total: u64) {
        let c = self.flow_evictions.with_label_values(&[iface]);
        // Evictions never go back (a drop below means a read race, not a reset).
        if evicted_total > c.get() {
            follow(&c, evicted_total);
        }
    }

    /// Advances the per-session counters of an interface to the maps' totals.
    pub fn set_sessions(
        &self,
        iface: &str,
        sessions: &rustc_hash::FxHashMap<agent_common::SessionKey, agent_common::SessionStats>,
    ) {
        for (k, s) in sessions {
            let hook = Hook::ALL
                .iter()
                .find(|h| **h as u8 == k.hook)
                .map(|h| h.name())
                .unwrap_or("unknown");
            let id = k.id.to_string();
            let l = [iface, hook, k.kind_name(), id.as_str()];
            follow(&self.session_packets.with_label_values(&l), s.packets);
            follow(&self.session_bytes.with_label_values(&l), s.bytes);
            follow(&self.session_ce.with_label_values(&l), s.ce_packets);
            follow(&self.session_cnp.with_label_values(&l), s.cnp_packets);
        }
    }

    /// Counts a configuration reload.
    pub fn config_reloaded(&self, ok: bool) {
        self.reloads
            .with_label_values(&[if ok { "success" } else { "failure" }])
            .inc();
    }

    /// Sets the RC connection counts per RDMA device.
    pub fn set_rdma_connections(&self, conns: &[crate::sources::rdma::Connection]) {
        self.rdma_connections.reset();
        for c in conns {
            if c.flow_key().is_some() {
                self.rdma_connections.with_label_values(&[&c.device]).inc();
            }
        }
    }

    /// Advances the AF_XDP socket figures of an interface.
    pub fn set_capture_queues(&self, iface: &str, queues: &[crate::sources::afxdp::QueueStats]) {
        for q in queues {
            let qs = q.queue.to_string();
            let l = [iface, qs.as_str()];
            self.afxdp_socket
                .with_label_values(&[iface, &qs, q.mode])
                .set(1);
            follow(&self.afxdp_frames.with_label_values(&l), q.frames);
            follow(&self.afxdp_bytes.with_label_values(&l), q.bytes);
            follow(
                &self.afxdp_fill_empty.with_label_values(&l),
                q.fill_ring_empty,
            );
            for (reason, n) in [
                ("no_fill_buffer", q.dropped_no_buffer),
                ("rx_ring_full", q.dropped_rx_ring_full),
                ("invalid_descriptor", q.invalid_descriptors),
            ] {
                follow(
                    &self.afxdp_dropped.with_label_values(&[iface, &qs, reason]),
                    n,
                );
            }
        }
    }

    /// Replaces the per-flow series with the current top-K (elephants first, then the
    /// highest rates) and sets the flow and elephant counts.
    pub fn set_flows(&self, table: &FlowTable, top_k: usize) {
        for (i, name) in table.ifaces.iter().enumerate() {
            self.flows
                .with_label_values(&[name])
                .set(table.count_for(i) as i64);
            self.elephants
                .with_label_values(&[name])
                .set(table.elephants_for(i) as i64);
        }
        for g in [
            &self.flow_rate_bytes,
            &self.flow_rate_packets,
            &self.flow_elephant,
            &self.flow_psn_gaps,
            &self.flow_retransmits,
            &self.flow_naks,
        ] {
            g.reset();
        }
        for e in table.exported(top_k) {
            let hook = Hook::ALL
                .get(e.key.hook as usize)
                .copied()
                .unwrap_or(Hook::Xdp);
            let iface = table.ifaces.get(e.iface).map(String::as_str).unwrap_or("?");
            let (src, dst) = (e.src().to_string(), e.dst().to_string());
            let (sport, qp) = (e.key.sport.to_string(), format!("0x{:x}", e.key.dest_qp));
            let l = [iface, hook.direction(), &src, &dst, &sport, &qp];
            self.flow_rate_bytes.with_label_values(&l).set(e.rate_bytes);
            self.flow_rate_packets
                .with_label_values(&l)
                .set(e.rate_packets);
            self.flow_elephant
                .with_label_values(&l)
                .set(e.elephant.elephant as u8 as f64);
            self.flow_psn_gaps
                .with_label_values(&l)
                .set(e.stats.psn_gaps as f64);
            self.flow_retransmits
                .with_label_values(&l)
                .set(e.stats.retransmits as f64);
            let naks: u64 = e.stats.naks.iter().sum::<u64>() + e.stats.rnr_naks;
            self.flow_naks.with_label_values(&l).set(naks as f64);
        }
    }

    /// Sets the ECMP gauges from the detectors' report.
    pub fn set_ecmp(&self, r: &EcmpReport, top_k: usize) {
        for g in &r.groups {
            self.set_group(g);
        }
        self.path_elephants.reset();
        self.path_flows.reset();
        if let Some(p) = &r.predicted {
            for m in &p.members {
                self.path_elephants
                    .with_label_values(&[&m.member])
                    .set(m.elephants as i64);
                self.path_flows
                    .with_label_values(&[&m.member])
                    .set(m.flows as i64);
            }
            self.colliding_paths
                .with_label_values(&[] as &[&str])
                .set(p.colliding_members as i64);
        }
        self.shared_tuples
            .with_label_values(&[] as &[&str])
            .set(r.shared_5tuple_groups as i64);
        self.source_ports.reset();
        for h in r.source_ports.iter().take(top_k) {
            self.source_ports
                .with_label_values(&[&h.src, &h.dst])
                .set(h.source_ports as i64);
        }
    }

    fn set_group(&self, g: &GroupView) {
        for m in &g.members {
            let l = [g.name.as_str(), m.member.as_str()];
            self.uplink_rate
                .with_label_values(&l)
                .set(m.bytes_per_second);
            self.uplink_elephants
                .with_label_values(&l)
                .set(m.elephants as i64);
            self.uplink_colliding
                .with_label_values(&l)
                .set(m.colliding as i64);
        }
        self.colliding_uplinks
            .with_label_values(&[&g.name])
            .set(g.colliding_members as i64);
        self.imbalance
            .with_label_values(&[&g.name])
            .set(g.imbalance_ratio);
    }

    /// Advances the RDMA NIC port counters to the driver's values.
    pub fn set_rdma_counters(&self, counters: &[crate::sources::rdma::PortCounter]) {
        for c in counters {
            // A smaller value means the driver reset it (device reset): follow from there.
            follow(
                &self
                    .rdma_counters
                    .with_label_values(&[&c.device, &c.port, &c.netdev, &c.name]),
                c.value,
            );
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> Result<String> {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf)?;
        Ok(String::from_utf8(buf)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_common::{parse_frame, LinkType, SliceReader, TrafficClasses};
    use rocemon_testkit::frames::Roce;

    #[test]
    fn counters_follow_kernel_totals_and_names_follow_conventions() {
        let mut m = Metrics::new().unwrap();
        m.set_attached("veth0", Hook::Xdp, "native");
        let mut c = HookCounters::ZERO;
        let mut r = Roce::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            0xC000,
            5,
            0x0A,
        );
        r.ecn = 3;
        let f = r.frame();
        for _ in 0..3 {
            c.record(
                &parse_frame(&SliceReader(&f), LinkType::Ethernet),
                f.len() as u64,
                &TrafficClasses::DEFAULT,
            );
        }
        m.observe_counters("veth0", Hook::Xdp, &c);
        m.observe_counters("veth0", Hook::Xdp, &c); // no change, no double count
        let text = m.encode().unwrap();
        assert!(text.contains(r#"rocemon_packets_total{direction="ingress",hook="xdp",iface="veth0",opcode="RC_RDMA_WRITE_ONLY"} 3"#), "{text}");
        assert!(text.contains(r#"rocemon_ecn_packets_total{codepoint="ce",direction="ingress",hook="xdp",iface="veth0"} 3"#));
        assert!(text.contains(
            r#"rocemon_parse_outcomes_total{hook="xdp",iface="veth0",kind="roce",outcome="roce"} 3"#
        ));
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
            let mut p = line.split_whitespace().skip(2);
            let (name, ty) = (p.next().unwrap(), p.next().unwrap());
            // Ours carry the prefix; the process collector's are the standard process_* set.
            assert!(
                name.starts_with("rocemon_") || name.starts_with("process_"),
                "{name}"
            );
            assert_eq!(
                ty == "counter",
                name.ends_with("_total"),
                "{name} is a {ty}"
            );
        }
    }
}

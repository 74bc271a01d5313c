//! How the series advance: kernel counter blocks (by difference), map and socket statistics,
//! the flow table's top-K and the ECMP report, set at every poll. The series themselves are
//! declared in the catalog (`mod.rs`).

use super::{follow, Metrics, ECN_LABELS};
use crate::detect::ecmp::{EcmpReport, GroupView};
use crate::pipeline::flows::FlowTable;
use agent_common::psn::NAK_NAMES;
use agent_common::{opcode, Hook, HookCounters, Outcome, OutcomeKind};
use prometheus::IntCounterVec;

/// A counter series and the counter-block field it follows.
type FieldSeries<'a> = (&'a IntCounterVec, fn(&HookCounters) -> u64);

impl Metrics {
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
        follow(&self.program_seconds.with_label_values(&l), seconds);
    }

    /// The online CPUs whose flow cache is on, draining and off.
    pub fn set_flow_cache_modes(&self, iface: &str, modes: [u64; 3]) {
        for (mode, n) in ["on", "draining", "off"].into_iter().zip(modes) {
            self.flow_cache_cpus
                .with_label_values(&[iface, mode])
                .set(n as i64);
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
            .with_label_values(&[iface, agent_common::MAP_LABEL_FLOWS]);
        for m in [
            agent_common::MAP_COUNTERS,
            agent_common::MAP_LABEL_FLOWS,
            agent_common::MAP_SESSIONS,
        ] {
            self.map_read_errors.with_label_values(&[iface, m]);
        }
        self.flow_evictions.with_label_values(&[iface]);
    }

    /// The series that follow one field of a hook's counter block, labelled by interface,
    /// direction and hook.
    fn per_hook_counters(&self) -> [FieldSeries<'_>; 15] {
        [
            (&self.cnp, |c| c.cnp_packets),
            (&self.becn, |c| c.becn_packets),
            (&self.fecn, |c| c.fecn_packets),
            (&self.frames, |c| c.frames),
            (&self.psn_gaps, |c| c.psn_gaps),
            (&self.session_overflow, |c| c.session_overflow),
            (&self.slow_path_frames, |c| c.slow_path_frames),
            (&self.slow_path_unreachable, |c| c.slow_path_unreachable),
            (&self.retransmits, |c| c.retransmits),
            (&self.rnr_naks, |c| c.rnr_naks),
            (&self.pfc_frames, |c| c.pfc_frames),
            (&self.mac_control_other, |c| c.mac_control_other),
            (&self.lossy_packets, |c| c.lossy_roce_packets),
            (&self.lossy_bytes, |c| c.lossy_roce_bytes),
            (&self.cnp_out_of_class, |c| c.cnp_out_of_class),
        ]
    }

    /// Advances the counters of one hook to the kernel's totals `cur`.
    pub fn observe_counters(&mut self, iface: &str, hook: Hook, cur: &HookCounters) {
        let slot = self
            .prev
            .entry((iface.to_string(), hook))
            .or_insert(HookCounters::ZERO);
        let before = std::mem::replace(slot, *cur);
        let prev = &before;
        // A total below the previous one means the map was re-created: start over from it.
        let d = super::delta;
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
        for (series, field) in self.per_hook_counters() {
            series
                .with_label_values(&l)
                .inc_by(d(field(cur), field(prev)));
        }
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
            .with_label_values(&[iface, agent_common::MAP_LABEL_FLOWS])
            .inc_by(d(cur.flow_update_errors, prev.flow_update_errors));
        // The kernel does not log on the packet path: say here when a failure counter first
        // moves (once per interface and hook while the agent runs).
        if cur.flow_update_errors > 0 && prev.flow_update_errors == 0 {
            log::warn!(
                "{iface} {hn}: the flow maps failed {} flow updates (out of kernel memory, or a flow pushed out by another CPU between its insert and its update); global counters stay exact, per-flow figures miss them (rocemon_map_update_errors_total)",
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
        for (i, code) in NAK_NAMES.iter().enumerate() {
            self.naks
                .with_label_values(&[iface, dir, hn, code])
                .inc_by(d(cur.naks[i], prev.naks[i]));
        }
        self.observe_lossless(iface, hook, cur, prev);
        self.observe_messages(iface, hook, cur, prev);
    }

    pub fn map_read_error(&self, iface: &str, map: &str, n: u64) {
        self.map_read_errors
            .with_label_values(&[iface, map])
            .inc_by(n);
    }

    /// Counts flows of an interface deleted from its flow maps after the idle timeout.
    pub fn flows_expired(&self, iface: &str, n: u64) {
        self.flow_evictions.with_label_values(&[iface]).inc_by(n);
    }

    /// How full an interface's flow maps are, and the flows they pushed out since the last
    /// poll.
    pub fn set_flow_maps(&self, iface: &str, fill: &[crate::sources::flow_pressure::MapFill]) {
        for f in fill {
            let l = [iface, f.map];
            self.flow_map_entries
                .with_label_values(&l)
                .set(f.entries as i64);
            self.flow_map_max_entries
                .with_label_values(&l)
                .set(f.capacity as i64);
            self.flows_pushed_out
                .with_label_values(&l)
                .inc_by(f.pushed_out);
        }
    }

    /// Counts map updates of the agent's own that failed (deleting an idle flow).
    pub fn map_update_error(&self, iface: &str, map: &str, n: u64) {
        self.map_update_errors
            .with_label_values(&[iface, map])
            .inc_by(n);
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
        ] {
            g.reset();
        }
        // The flows' running totals as counters: set by resetting and adding the total (a
        // flow that leaves the top K loses its series; back in, it starts from its total).
        for c in [&self.flow_psn_gaps, &self.flow_retransmits, &self.flow_naks] {
            c.reset();
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
                .inc_by(e.stats.psn_gaps);
            self.flow_retransmits
                .with_label_values(&l)
                .inc_by(e.stats.retransmits);
            let naks: u64 = e.stats.nak_total();
            self.flow_naks.with_label_values(&l).inc_by(naks);
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
}

//! One poll of the live agent: the rhythm first (without the metrics lock: the
//! autocorrelation takes milliseconds), then every probe's counters, sessions and flows into
//! the metrics and the flow table, then the pipeline's tick and detectors, the findings, and
//! the API view, published before the metrics lock goes.

use super::live::Live;
use super::rhythm::{self, detect_rhythms, ring_read_errors, NewSlowStep};
use crate::detect::elephant::link_speed_mbps;
use crate::detect::live_findings::Sample;
use crate::detect::steps::StepTracker;
use crate::export::api;
use crate::export::metrics::{Metrics, RhythmSource};
use crate::kernel::loader::Attachment;
use crate::pipeline::stages::Rates;
use crate::sources::rdma::RdmaView;
use agent_common::{MAP_COUNTERS, MAP_SESSIONS};
use std::time::Instant;

/// What the probes gave in one poll, for the findings and the API view.
#[derive(Default)]
struct ProbeReads {
    /// (interface index, idle-before time) of each interface whose flows were read.
    polled: Vec<(usize, u64)>,
    lossless: api::LosslessDoc,
    /// (interface, its counters' sample, its speed in bits per second).
    samples: Vec<(String, Sample, u64)>,
    flow_maps: Vec<(String, crate::sources::flow_pressure::Fill)>,
}

impl Live {
    /// One poll, `dt` seconds after the last one.
    pub fn poll(&mut self, dt: f64) {
        let started = Instant::now();
        self.pipeline.begin_poll();
        let (ring_failed, slow) = self.rhythms();
        let metrics = self.shared.metrics.clone();
        let Ok(mut m) = metrics.lock() else {
            log::error!("metrics lock poisoned; skipping poll");
            return;
        };
        ring_read_errors(&ring_failed, &m);
        rhythm::set_metrics(&self.rhythm, &mut m);
        let reads = self.read_probes(&mut m, dt);
        self.publish(&mut m, reads, slow, dt);
        m.poll_duration.observe(started.elapsed().as_secs_f64());
    }

    /// The rings drained and, when due, the rhythms and jobs looked for (interfaces and
    /// sFlow switch ports): the rings that could not be read, and the new slow steps.
    fn rhythms(&mut self) -> (Vec<String>, Vec<NewSlowStep>) {
        let due = self.rhythm.due();
        let (mut failed, mut slow) = (Vec::new(), Vec::new());
        if self.config.switches.rhythm {
            failed = rhythm::drain_rings(&self.probes, &mut self.rhythm);
            if due {
                let link = detect_rhythms(
                    self.rhythm
                        .ifaces
                        .iter_mut()
                        .map(|(i, t)| (RhythmSource::Iface(i), t)),
                );
                slow = rhythm::detect_jobs(&mut self.rhythm, &self.pipeline.flows, link);
            }
        }
        if let (Some(r), true) = (&self.sflow, due) {
            if let Ok(mut c) = r.collector.lock() {
                let mut ports: Vec<(String, String, &mut StepTracker)> = c
                    .rhythms
                    .iter_mut()
                    .map(|((a, i), t)| (a.to_string(), i.to_string(), t))
                    .collect();
                detect_rhythms(ports.iter_mut().map(|(a, i, t)| {
                    (
                        RhythmSource::SflowPort {
                            agent: a,
                            ifindex: i,
                        },
                        &mut **t,
                    )
                }));
            }
        }
        (failed, slow)
    }

    /// Every probe's counters, sessions, program statistics and flows.
    fn read_probes(&mut self, m: &mut Metrics, dt: f64) -> ProbeReads {
        let mut reads = ProbeReads::default();
        let now_mono = crate::sources::maps::monotonic_ns();
        for i in 0..self.probes.len() {
            // An interface that is gone has no probe: nothing to read until it is back.
            let Some(p) = self.probes[i].as_mut() else {
                continue;
            };
            let created = read_counters(
                p,
                m,
                &self.config,
                &mut self.findings,
                &mut reads,
                (now_mono, dt),
            );
            match p.read_sessions() {
                Ok(sessions) => m.set_sessions(&p.iface, &sessions),
                Err(e) => {
                    log::warn!("read {MAP_SESSIONS} on {}: {e:#}", p.iface);
                    m.map_read_error(&p.iface, MAP_SESSIONS, 1);
                }
            }
            m.set_capture_queues(&p.iface, &p.capture_queues());
            for (hook, program, runs, seconds) in p.program_stats() {
                m.set_program_stats(&p.iface, hook, program, runs, seconds);
            }
            match p.flow_cache_modes() {
                Ok(modes) => m.set_flow_cache_modes(&p.iface, modes),
                Err(e) => log::debug!("read the flow cache's modes on {}: {e:#}", p.iface),
            }
            if let Some(read) = super::flows::read(p, m, &self.config, now_mono, created) {
                for (k, st) in read.live {
                    self.pipeline.flow(i, k, st);
                }
                reads.flow_maps.push((p.iface.clone(), read.fill));
                reads.polled.push((i, read.idle_before_ns));
            }
        }
        reads
    }

    /// The pipeline's tick and detectors over this poll's flows, the findings, and the API
    /// view of this poll, in place before the metrics lock goes: a client that has seen this
    /// poll's metrics never reads an older API view.
    fn publish(&mut self, m: &mut Metrics, reads: ProbeReads, slow: Vec<NewSlowStep>, dt: f64) {
        self.pipeline.end_poll(&reads.polled);
        let events = {
            // The fabric view ticks with the flows, over the switches' flows of this moment.
            let collector = self.sflow.as_ref().and_then(|r| r.collector.lock().ok());
            self.pipeline
                .tick(dt, &self.enter_bps, collector.as_deref())
        };
        // The flow records of this poll (IPFIX): handed to the exporter's queue, never waited on.
        super::ipfix::records(&mut self.pipeline);
        super::flows::log_elephants(&self.pipeline.flows.ifaces, &events);
        m.set_rdma_counters(&crate::sources::rdma::port_counters(
            &self.config.sysfs_root,
        ));
        // Rates of every flow are read below (top-K, API): `detect` brings the quiet ones up to
        // date before the ECMP views.
        let rdma = rdma_views(&self.rdma, self.config.rdma.elephants());
        let views = self.pipeline.detect(rdma, Rates::Now);
        m.set_rdma_connections(&self.rdma.connections);
        let (table, report) = (&self.pipeline.flows, &self.pipeline.ecmp);
        m.set_flows(table, self.config.top_k);
        m.set_ecmp(report, self.config.top_k);
        let to_unix = crate::sources::maps::monotonic_to_unix_ns();
        let mut view = api::build(table, report, &self.config, 1000, to_unix);
        view.lossless = reads.lossless;
        view.findings = super::findings::update(
            &mut self.findings,
            reads.samples,
            slow,
            &reads.flow_maps,
            &self.config,
            (table, &views, report, &self.pipeline.fabric.groups),
            m,
        );
        view.summary = api::Summary::new(
            &self.findings.totals,
            &view.flows,
            &reads.flow_maps,
            &crate::detect::engine::rank(view.findings.active.clone(), None),
        );
        view.training = rhythm::training_doc(&self.rhythm);
        if let Some(r) = &self.sflow {
            if let Ok(c) = r.collector.lock() {
                for ((a, i), t) in c.rhythms.iter() {
                    let (agent, ifindex) = (a.to_string(), i.to_string());
                    m.set_training(
                        RhythmSource::SflowPort {
                            agent: &agent,
                            ifindex: &ifindex,
                        },
                        t,
                    );
                }
                let fabric =
                    (!self.config.sflow_groups.is_empty()).then_some(&self.pipeline.fabric);
                if let Some(f) = fabric {
                    m.set_sflow_fabric(&f.groups);
                }
                m.set_sflow(&c, r.dropped());
                view.sflow = Some(crate::sflow::report::build(&c, fabric));
            }
        }
        if let Ok(mut a) = self.shared.api.lock() {
            *a = view;
        }
    }
}

/// A probe's counter blocks into the metrics, the lossless view and the findings' sample,
/// with its link speed and NIC pause counters; the flows the kernel created so far (for the
/// flow read), when the counters could be read.
fn read_counters(
    p: &mut Attachment,
    m: &mut Metrics,
    config: &crate::config::Config,
    findings: &mut crate::detect::live_findings::LiveFindings,
    reads: &mut ProbeReads,
    (now_mono, dt): (u64, f64),
) -> Option<u64> {
    // Pause quanta to seconds at the reported speed (or the configured one for drivers
    // that report none); the NIC's own pause counters.
    let speed = link_speed_mbps(&config.sysfs_root.join("class/net"), &p.iface)
        .or(config.elephant.link_speed_mbps)
        .map(|mbps| (mbps * 1e6) as u64);
    m.set_link_speed(&p.iface, speed);
    let nic = crate::sources::nic_pause::read(&p.iface);
    m.set_nic_pause(&p.iface, &nic);
    reads.lossless.add_nic(&p.iface, &nic);
    let blocks = match p.read_counters() {
        Ok(b) => b,
        Err(e) => {
            log::warn!("read {MAP_COUNTERS} on {}: {e:#}", p.iface);
            m.map_read_error(&p.iface, MAP_COUNTERS, 1);
            return None;
        }
    };
    for h in &p.hooks {
        m.observe_counters(&p.iface, *h, &blocks[*h as usize]);
        reads.lossless.add_hook(
            &p.iface,
            *h,
            &blocks[*h as usize],
            speed.unwrap_or(0),
            &config.switches.classes,
        );
    }
    let mut sample = super::findings::sample(&p.hooks, &blocks, &nic);
    sample.union_paused_ns = super::findings::union_paused(
        findings,
        p,
        &sample,
        speed.unwrap_or(0),
        (now_mono, (dt * 1e9) as u64),
        config.pfc_storm_s,
        m,
    );
    m.set_pfc_paused(&p.iface, &sample.union_paused_ns);
    reads
        .samples
        .push((p.iface.clone(), sample, speed.unwrap_or(0)));
    Some(blocks.iter().map(|b| b.flows_created).sum::<u64>())
}

/// The RC connections as flows of no watched interface: the hash model places them; observed
/// groups do not see them; a flow the hooks also see is counted once.
fn rdma_views(
    rdma: &RdmaView,
    elephants: bool,
) -> impl Iterator<Item = crate::detect::ecmp::FlowView> + '_ {
    rdma.connections.iter().filter_map(move |c| {
        Some(crate::detect::ecmp::FlowView {
            iface: usize::MAX,
            key: c.flow_key()?,
            rate_bytes: 0.0,
            elephant: elephants,
        })
    })
}

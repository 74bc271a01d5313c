//! The live agent's state between events: the configuration, the attached probes, the
//! pipeline and the detectors' state, and what each event does to it (a reload, a link
//! change, a ring read, a poll tick). [`super::run`] owns the timers and the event loop.

use super::ipfix;
use super::links::{attach_one, reconcile, show_attached};
use super::reload::apply_reload;
use super::rhythm::{drain_rings, ring_read_errors, LiveRhythm};
use super::words::summary_line;
use crate::config::Config;
use crate::detect::elephant::link_speed_mbps;
use crate::detect::live_findings::LiveFindings;
use crate::error::UsageError;
use crate::export::api::ApiView;
use crate::export::http::Shared;
use crate::export::ipfix::Exporter;
use crate::export::metrics::Metrics;
use crate::kernel::loader::Attachment;
use crate::pipeline::stages::Pipeline;
use crate::sflow::receiver::Receiver;
use crate::sources::rdma::RdmaView;
use anyhow::Result;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Everything a live agent keeps between events.
pub struct Live {
    pub config: Config,
    pub probes: Vec<Option<Attachment>>,
    /// Each watched interface's MTU as last seen (a change is logged).
    pub mtus: Vec<Option<u32>>,
    pub pipeline: Pipeline,
    pub shared: Shared,
    /// Elephant entry thresholds per interface.
    pub enter_bps: Vec<f64>,
    /// RC connections of hardware RoCE NICs (invisible to the hooks), refreshed now and then.
    pub rdma: RdmaView,
    pub sflow: Option<Receiver>,
    pub rhythm: LiveRhythm,
    pub findings: LiveFindings,
    exporter: Option<Exporter>,
    last_poll: Instant,
    last_summary: Instant,
    /// One agent per pin directory: a second one would take over the first one's links.
    _pin_lock: Option<crate::kernel::pins::PinLock>,
    /// BPF run-time statistics, on while this descriptor is open.
    _stats: Option<OwnedFd>,
}

impl Live {
    /// Starts sFlow, takes the pin lock, attaches every interface, and sets up the metrics,
    /// the API view, the flow-record exporter and the pipeline.
    pub fn start(config: Config) -> Result<Live> {
        let sflow = match &config.sflow {
            Some(s) => Some(Receiver::start(s).map_err(|e| {
                UsageError::BadConfig(format!(
                    "cannot receive sFlow on udp://{}: {:#}; choose another address with --sflow-listen",
                    s.listen, e
                ))
            })?),
            None => None,
        };
        let hooks = !config.ifaces.is_empty();
        let _pin_lock = if hooks && config.pin && config.afxdp.is_none() {
            crate::kernel::pins::ensure_bpffs(&config.pin_dir)?;
            Some(crate::kernel::pins::PinLock::acquire(&config.pin_dir)?)
        } else {
            None
        };
        let mut probes = Vec::new();
        for iface in &config.ifaces {
            probes.push(Some(attach_one(iface, &config)?));
        }
        let mut metrics = Metrics::new()?;
        metrics.set_build_info();
        if let Some(r) = &sflow {
            metrics.attach_sflow(r.collector.clone());
        }
        for p in probes.iter().flatten() {
            show_attached(&metrics, p);
        }
        let shared = Shared {
            metrics: Arc::new(Mutex::new(metrics)),
            api: Arc::new(Mutex::new(ApiView::default())),
        };
        let mut settings = crate::pipeline::stages::Settings::live(&config);
        let exporter = ipfix::start(&config, &shared, &mut settings)?;
        let pipeline = Pipeline::new(config.ifaces.clone(), settings);
        let mut live = Live {
            enter_bps: entry_thresholds(&config),
            mtus: vec![None; config.ifaces.len()],
            _stats: program_stats(&config),
            config,
            probes,
            pipeline,
            shared,
            rdma: RdmaView::default(),
            sflow,
            rhythm: LiveRhythm::default(),
            findings: LiveFindings::default(),
            exporter,
            last_poll: Instant::now(),
            last_summary: Instant::now(),
            _pin_lock,
        };
        live.reconcile();
        Ok(live)
    }

    /// The watched interfaces looked at again: the flows of one that went away end.
    pub fn reconcile(&mut self) {
        for i in reconcile(&mut self.probes, &mut self.mtus, &self.config, &self.shared) {
            ipfix::end_iface(&mut self.pipeline, i);
        }
    }

    /// A new configuration (SIGHUP) applied where it can change without reattaching; the
    /// poll interval is the caller's timer. Returns whether it was applied.
    pub fn reload(&mut self, r: super::Reload) -> bool {
        match r {
            Ok(new) => {
                apply_reload(&mut self.config, new, &mut self.pipeline);
                self.enter_bps = entry_thresholds(&self.config);
                self.rdma.read_at = None;
                true
            }
            Err(e) => {
                log::error!("reload failed, keeping the running configuration: {e}");
                false
            }
        }
    }

    /// The kernel rings read (they hold 4 s: every second, whatever the poll interval).
    pub fn drain_rings(&mut self) {
        let failed = drain_rings(&self.probes, &mut self.rhythm);
        if !failed.is_empty() {
            if let Ok(m) = self.shared.metrics.lock() {
                ring_read_errors(&failed, &m);
            }
        }
    }

    /// A poll tick: the interfaces looked at, the RC connections refreshed, one poll
    /// ([`super::poll`]), and the summary line when it is due. The first tick polls with no
    /// time elapsed.
    pub fn tick(&mut self, first: bool) {
        if !first {
            self.reconcile();
        }
        let now = Instant::now();
        let dt = if first {
            0.0
        } else {
            now.duration_since(self.last_poll).as_secs_f64()
        };
        self.last_poll = now;
        self.rdma.refresh(&self.config.rdma);
        self.poll(dt);
        if let Some(every) = self.config.summary_every {
            if !first && now.duration_since(self.last_summary) >= every {
                self.last_summary = now;
                eprintln!("{}", summary_line(&self.probes, &self.pipeline.flows));
            }
        }
    }

    /// Every flow's last record out before the agent stops (dropping the agent then drops
    /// the probes: detached, or left pinned and counting).
    pub fn finish_records(&mut self) {
        ipfix::finish(&mut self.pipeline, self.exporter.take());
    }
}

/// Elephant entry thresholds per interface (link share of the reported speed, or absolute).
pub fn entry_thresholds(config: &Config) -> Vec<f64> {
    let sysfs = config.sysfs_root.join("class/net");
    config
        .ifaces
        .iter()
        .map(|i| config.elephant.enter_bps(link_speed_mbps(&sysfs, i)))
        .collect()
}

/// The kernel's per-program run time and count (what each packet costs, in production): on
/// while the descriptor is open. It needs CAP_SYS_ADMIN; without it the figures come only
/// where `sysctl kernel.bpf_stats_enabled=1` is set. Costs two clock reads per run.
fn program_stats(config: &Config) -> Option<OwnedFd> {
    if !config.program_stats {
        return None;
    }
    match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
        Ok(fd) => Some(fd),
        Err(e) => {
            log::info!("BPF run-time statistics not enabled by rocemon ({e}); rocemon_program_run_seconds_total counts only with `sysctl kernel.bpf_stats_enabled=1`");
            None
        }
    }
}

//! The live pipeline: check, bind, attach, then poll the kernel maps into the flow table and
//! the metrics until `shutdown` completes; then detach everything (dropping the probes).

use crate::cmd::run_ipfix;
use crate::cmd::run_links::{attach_one, reconcile, show_attached};
use crate::cmd::run_reload::apply_reload;
use crate::cmd::run_rhythm::{
    detect_rhythms, drain_rings, ring_read_errors, LiveRhythm, RING_READ_EVERY,
};
use crate::config::Config;
use crate::detect::elephant::link_speed_mbps;
use crate::detect::steps::StepTracker;
use crate::error::UsageError;
use crate::export::api::{self, ApiView};
use crate::export::http::{self, Shared};
use crate::export::metrics::Metrics;
use crate::export::metrics::RhythmSource;
use crate::export::report::human_bytes;
use crate::kernel::loader::{self, Attachment};
use crate::pipeline::flows::FlowTable;
use crate::pipeline::stages::{Pipeline, Rates};
use crate::sources::rdma::RdmaView;
use agent_common::{HookCounters, MAP_COUNTERS, MAP_SESSIONS};
use anyhow::{Context, Result};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A reload request (SIGHUP): the configuration read again, or why it could not be.
pub type Reload = Result<Config, String>;

/// Runs the agent until `shutdown` completes. Exits with a [`UsageError`] for problems the
/// user can fix (interface, privileges, XDP mode, listen address). Configurations arriving on
/// `reloads` replace what can change without reattaching (see [`apply_reload`]).
pub async fn run(
    mut config: Config,
    shutdown: impl Future<Output = ()>,
    mut reloads: tokio::sync::mpsc::UnboundedReceiver<Reload>,
) -> Result<()> {
    for iface in &config.ifaces {
        loader::ifindex(iface)?;
    }
    let hooks = !config.ifaces.is_empty();
    if hooks {
        loader::check_privileges()?;
        loader::raise_memlock();
    }
    // Bind before attaching: a taken port fails fast, with nothing to undo.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| UsageError::ListenFailed {
            addr: config.listen.to_string(),
            reason: e.to_string(),
        })?;
    let local = listener.local_addr().context("listener address")?;
    let sflow = match &config.sflow {
        Some(s) => Some(crate::sflow::receiver::Receiver::start(s).map_err(|e| {
            UsageError::BadConfig(format!(
                "cannot receive sFlow on udp://{}: {:#}; choose another address with --sflow-listen",
                s.listen, e
            ))
        })?),
        None => None,
    };
    // One agent per pin directory: a second one would take over the first one's links.
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
    let mut settings = config.pipeline();
    let exporter = run_ipfix::start(&config, &shared, &mut settings)?;
    let mut pipeline = Pipeline::new(config.ifaces.clone(), settings);
    let mut enter_bps = entry_thresholds(&config);

    // The kernel's per-program run time and count (what each packet costs, in production):
    // on while this descriptor is open. It needs CAP_SYS_ADMIN; without it the figures come
    // only where `sysctl kernel.bpf_stats_enabled=1` is set. Costs two clock reads per run.
    let _stats = if config.program_stats {
        match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
            Ok(fd) => Some(fd),
            Err(e) => {
                log::info!("BPF run-time statistics not enabled by rocemon ({e}); rocemon_program_run_seconds_total counts only with `sysctl kernel.bpf_stats_enabled=1`");
                None
            }
        }
    } else {
        None
    };
    // Link changes: a cue to look at the watched interfaces again (also done every poll).
    let links = match crate::sources::links::LinkEvents::open() {
        Ok(l) => Some(l),
        Err(e) => {
            log::warn!("no rtnetlink link events ({e}); interfaces are checked every poll");
            None
        }
    };
    let mut mtus: Vec<Option<u32>> = vec![None; config.ifaces.len()];
    for i in reconcile(&mut probes, &mut mtus, &config, &shared) {
        run_ipfix::end_iface(&mut pipeline, i);
    }
    // RC connections of hardware RoCE NICs (invisible to the hooks), refreshed now and then.
    let mut rdma = RdmaView::default();
    let mut tick = tokio::time::interval(config.poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The kernel rings hold 4 s: read them every second whatever the poll interval.
    let mut ring_tick = tokio::time::interval(RING_READ_EVERY);
    ring_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rhythm = LiveRhythm::default();
    let mut findings = crate::detect::live_findings::LiveFindings::default();
    let mut last_summary = Instant::now();
    // A first poll before /metrics serves: the first scrape (and systemd's READY) already
    // has every interface's series. The interval's first tick fires at once: taken here.
    tick.tick().await;
    rdma.refresh(&config.rdma);
    poll(
        &mut probes,
        &mut pipeline,
        &shared,
        0.0,
        &config,
        &enter_bps,
        &rdma,
        sflow.as_ref(),
        &mut rhythm,
        &mut findings,
    );
    let mut last_poll = Instant::now();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(
        listener,
        shared.clone(),
        config.web.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let scheme = if config.web.tls.is_some() {
        "https"
    } else {
        "http"
    };
    log::info!("serving metrics at {scheme}://{local}/metrics");
    // systemd Type=notify: ready once the programs are attached and /metrics serves.
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);

    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(r) = reloads.recv() => {
                let mut states = vec![sd_notify::NotifyState::Reloading];
                states.extend(sd_notify::NotifyState::monotonic_usec_now().ok());
                let _ = sd_notify::notify(false, &states);
                let ok = match r {
                    Ok(new) => {
                        apply_reload(&mut config, new, &mut pipeline);
                        enter_bps = entry_thresholds(&config);
                        tick = tokio::time::interval(config.poll_interval);
                        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        rdma.read_at = None;
                        true
                    }
                    Err(e) => {
                        log::error!("reload failed, keeping the running configuration: {e}");
                        false
                    }
                };
                if let Ok(m) = shared.metrics.lock() {
                    m.config_reloaded(ok);
                }
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
            }
            Ok(()) = async {
                match &links {
                    Some(l) => l.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                for i in reconcile(&mut probes, &mut mtus, &config, &shared) {
                    run_ipfix::end_iface(&mut pipeline, i);
                }
            }
            _ = ring_tick.tick(), if config.switches.rhythm => {
                let failed = drain_rings(&probes, &mut rhythm);
                if !failed.is_empty() {
                    if let Ok(m) = shared.metrics.lock() {
                        ring_read_errors(&failed, &m);
                    }
                }
            }
            _ = tick.tick() => {
                for i in reconcile(&mut probes, &mut mtus, &config, &shared) {
                    run_ipfix::end_iface(&mut pipeline, i);
                }
                let now = Instant::now();
                let dt = now.duration_since(last_poll).as_secs_f64();
                last_poll = now;
                rdma.refresh(&config.rdma);
                poll(&mut probes, &mut pipeline, &shared, dt, &config, &enter_bps, &rdma, sflow.as_ref(), &mut rhythm, &mut findings);
                if let Some(every) = config.summary_every {
                    if now.duration_since(last_summary) >= every {
                        last_summary = now;
                        eprintln!("{}", summary_line(&probes, &pipeline.flows));
                    }
                }
            }
        }
    }
    let (level, message) = shutdown_message(&probes, &config);
    log::log!(level, "{message}");
    run_ipfix::finish(&mut pipeline, exporter);
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    let _ = stop_tx.send(());
    drop(probes);
    match server.await {
        Ok(r) => r.context("HTTP server")?,
        Err(e) => return Err(e).context("HTTP server task"),
    }
    Ok(())
}

/// Elephant entry thresholds per interface (link share of the reported speed, or absolute).
fn entry_thresholds(config: &Config) -> Vec<f64> {
    let sysfs = config.sysfs_root.join("class/net");
    config
        .ifaces
        .iter()
        .map(|i| config.elephant.enter_bps(link_speed_mbps(&sysfs, i)))
        .collect()
}

/// One poll: counters and flows of every probe into the metrics and the flow table, then the
/// detectors, then the API view.
#[allow(clippy::too_many_arguments)]
fn poll(
    probes: &mut [Option<Attachment>],
    pipeline: &mut Pipeline,
    shared: &Shared,
    dt: f64,
    config: &Config,
    enter_bps: &[f64],
    rdma: &RdmaView,
    sflow: Option<&crate::sflow::receiver::Receiver>,
    rhythm: &mut LiveRhythm,
    findings: &mut crate::detect::live_findings::LiveFindings,
) {
    let started = Instant::now();
    pipeline.begin_poll();
    let mut polled = Vec::new();
    let mut lossless = api::LosslessDoc::default();
    let mut samples = Vec::new();
    let mut flow_maps = Vec::new();
    // The rhythm first, without the metrics lock (the autocorrelation takes milliseconds).
    let rhythm_due = rhythm.due();
    let mut ring_failed = Vec::new();
    let mut slow = Vec::new();
    if config.switches.rhythm {
        ring_failed = drain_rings(probes, rhythm);
        if rhythm_due {
            slow = detect_rhythms(
                rhythm
                    .ifaces
                    .iter_mut()
                    .map(|(i, t)| (RhythmSource::Iface(i), t)),
            );
            super::run_rhythm::detect_jobs(rhythm, &pipeline.flows);
        }
    }
    if let (Some(r), true) = (sflow, rhythm_due) {
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
    let Ok(mut m) = shared.metrics.lock() else {
        log::error!("metrics lock poisoned; skipping poll");
        return;
    };
    ring_read_errors(&ring_failed, &m);
    super::run_rhythm::set_metrics(rhythm, &mut m);
    let now_mono = crate::sources::maps::monotonic_ns();
    for (i, p) in probes.iter_mut().enumerate() {
        // An interface that is gone has no probe: nothing to read until it is back.
        let Some(p) = p else {
            continue;
        };
        // Pause quanta to seconds at the reported speed (or the configured one for drivers
        // that report none); the NIC's own pause counters.
        let speed = link_speed_mbps(&config.sysfs_root.join("class/net"), &p.iface)
            .or(config.elephant.link_speed_mbps)
            .map(|mbps| (mbps * 1e6) as u64);
        m.set_link_speed(&p.iface, speed);
        let nic = crate::sources::nic_pause::read(&p.iface);
        m.set_nic_pause(&p.iface, &nic);
        lossless.add_nic(&p.iface, &nic);
        let mut created = None;
        match p.read_counters() {
            Ok(blocks) => {
                created = Some(blocks.iter().map(|b| b.flows_created).sum::<u64>());
                for h in &p.hooks {
                    m.observe_counters(&p.iface, *h, &blocks[*h as usize]);
                    lossless.add_hook(
                        &p.iface,
                        *h,
                        &blocks[*h as usize],
                        speed.unwrap_or(0),
                        &config.switches.classes,
                    );
                }
                let mut sample = super::run_findings::sample(&p.hooks, &blocks, &nic);
                sample.union_paused_ns = super::run_findings::union_paused(
                    findings,
                    p,
                    &sample,
                    speed.unwrap_or(0),
                    (now_mono, (dt * 1e9) as u64),
                    &m,
                );
                m.set_pfc_paused(&p.iface, &sample.union_paused_ns);
                samples.push((p.iface.clone(), sample, speed.unwrap_or(0)));
            }
            Err(e) => {
                log::warn!("read {MAP_COUNTERS} on {}: {e:#}", p.iface);
                m.map_read_error(&p.iface, MAP_COUNTERS, 1);
            }
        }
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
        if let Some(read) = super::run_flows::read(p, &m, config, now_mono, created) {
            for (k, st) in read.live {
                pipeline.flow(i, k, st);
            }
            flow_maps.push((p.iface.clone(), read.fill));
            polled.push((i, read.idle_before_ns));
        }
    }
    pipeline.end_poll(&polled);
    let events = {
        // The fabric view ticks with the flows, over the switches' flows of this moment.
        let collector = sflow.and_then(|r| r.collector.lock().ok());
        pipeline.tick(dt, enter_bps, collector.as_deref())
    };
    // The flow records of this poll (IPFIX): handed to the exporter's queue, never waited on.
    run_ipfix::records(pipeline);
    super::run_flows::log_elephants(&pipeline.flows.ifaces, &events);
    m.set_rdma_counters(&crate::sources::rdma::port_counters(&config.sysfs_root));
    // Rates of every flow are read below (top-K, API): `detect` brings the quiet ones up to
    // date before the ECMP views.
    let views = pipeline.detect(rdma_views(rdma, config.rdma.elephants()), Rates::Now);
    m.set_rdma_connections(&rdma.connections);
    let (table, report) = (&pipeline.flows, &pipeline.ecmp);
    m.set_flows(table, config.top_k);
    m.set_ecmp(report, config.top_k);
    // The API view of this poll is in place before the metrics lock goes: a client that has
    // seen this poll's metrics never reads an older API view.
    let to_unix = crate::sources::maps::monotonic_to_unix_ns();
    let mut view = api::build(table, report, config, 1000, to_unix);
    view.lossless = lossless;
    view.findings = super::run_findings::update(
        findings,
        samples,
        slow,
        &flow_maps,
        config,
        (table, &views, report),
        &m,
    );
    view.summary = api::Summary::new(
        &findings.totals,
        &view.flows,
        &flow_maps,
        &view.findings.active,
    );
    view.training = super::run_rhythm::training_doc(rhythm);
    if let Some(r) = sflow {
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
            let fabric = (!config.sflow_groups.is_empty()).then_some(&pipeline.fabric);
            if let Some(f) = fabric {
                m.set_sflow_fabric(&f.groups);
            }
            m.set_sflow(&c, r.dropped());
            view.sflow = Some(crate::sflow::report::build(&c, fabric));
        }
    }
    if let Ok(mut a) = shared.api.lock() {
        *a = view;
    }
    m.poll_duration.observe(started.elapsed().as_secs_f64());
    drop(m);
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

/// A one-line live summary (the demo prints it every few seconds).
fn summary_line(probes: &[Option<Attachment>], table: &FlowTable) -> String {
    let mut total = HookCounters::ZERO;
    for p in probes.iter().flatten() {
        if let Ok(blocks) = p.read_counters() {
            for h in &p.hooks {
                total.add(&blocks[*h as usize]);
            }
        }
    }
    let top = table.top_k(1);
    let top = top
        .first()
        .map(|e| {
            format!(
                "top flow {} -> {} qp 0x{:x} at {}",
                e.src(),
                e.dst(),
                e.key.dest_qp,
                crate::detect::findings::bits_per_second(e.rate_bytes)
            )
        })
        .unwrap_or_else(|| "no flows yet".into());
    format!(
        "rocemon: {} RoCE packets ({}), CE {}, CNP {}, {} flows; {}",
        total.roce_packets(),
        human_bytes(total.roce_bytes() as f64),
        total.ecn_packets[3],
        total.cnp_packets,
        table.len(),
        top
    )
}

/// What stopping leaves behind, in words: nothing (sFlow only, or unpinned programs that
/// detach now), or programs that stay pinned and counting, with the command that removes
/// them as this agent was run (its `--pin-dir` when not the default).
fn shutdown_message(
    probes: &[Option<crate::kernel::loader::Attachment>],
    config: &Config,
) -> (log::Level, String) {
    let pin_dir = config.pin_dir.display();
    if probes.iter().flatten().any(|p| p.pins_removed()) {
        return (log::Level::Warn, format!(
            "shutting down; the pins under {pin_dir} were removed while this agent ran (`rocemon detach --force`): the programs detach now"
        ));
    }
    if probes.iter().flatten().next().is_none() {
        return (
            log::Level::Info,
            "shutting down (no programs were attached)".into(),
        );
    }
    if !(config.pin && config.afxdp.is_none()) {
        return (log::Level::Info, "shutting down: detaching programs".into());
    }
    let flag = if config.pin_dir == std::path::Path::new(crate::config::DEFAULT_PIN_DIR) {
        String::new()
    } else {
        format!(" --pin-dir {}", shell_word(&pin_dir.to_string()))
    };
    (log::Level::Info, format!(
        "shutting down; the programs stay attached and counting (pinned under {pin_dir}); `rocemon detach{flag}` removes them"
    ))
}

/// `s` as one shell word: as it is when it needs no quoting, else in single quotes.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn a_plain_path_is_one_word_as_it_is() {
        assert_eq!(shell_word("/sys/fs/bpf/rocemon-2"), "/sys/fs/bpf/rocemon-2");
    }

    #[test]
    fn a_path_with_spaces_or_quotes_is_single_quoted() {
        assert_eq!(shell_word("/tmp/my pins"), "'/tmp/my pins'");
        assert_eq!(shell_word("/tmp/it's"), "'/tmp/it'\\''s'");
    }
}

//! The live pipeline: check, bind, attach, then poll the kernel maps into the flow table and
//! the metrics until `shutdown` completes; then detach everything (dropping the probes).
//! [`live`] holds the agent's state and what each event does to it, [`poll`] one poll,
//! [`words`] what the agent says; the stages' live sides are [`links`], [`reload`],
//! [`rhythm`], [`flows`], [`findings`] and [`ipfix`].

pub mod findings;
pub mod flows;
pub mod ipfix;
pub mod links;
pub mod live;
pub mod poll;
pub mod reload;
pub mod rhythm;
pub mod words;

use crate::config::Config;
use crate::error::UsageError;
use crate::export::http;
use crate::kernel::loader;
use anyhow::{Context, Result};
use live::Live;
use rhythm::RING_READ_EVERY;
use std::future::Future;
use tokio::time::{interval, MissedTickBehavior};

/// A reload request (SIGHUP): the configuration read again, or why it could not be.
pub type Reload = Result<Config, String>;

/// The interfaces exist and the agent may attach to them; the listen address is bound
/// before anything is attached (a taken port fails fast, with nothing to undo).
async fn check_and_bind(config: &Config) -> Result<tokio::net::TcpListener> {
    for iface in &config.ifaces {
        loader::ifindex(iface)?;
    }
    if !config.ifaces.is_empty() {
        loader::check_privileges()?;
        loader::raise_memlock();
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| UsageError::ListenFailed {
            addr: config.listen.to_string(),
            reason: e.to_string(),
        })?;
    Ok(listener)
}

/// The HTTP server (metrics and API) started on `listener`; it stops when the sender is used.
fn serve(
    listener: tokio::net::TcpListener,
    live: &Live,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(
        listener,
        live.shared.clone(),
        live.config.web.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    (stop_tx, server)
}

/// Runs the agent until `shutdown` completes. Exits with a [`UsageError`] for problems the
/// user can fix (interface, privileges, XDP mode, listen address). Configurations arriving on
/// `reloads` replace what can change without reattaching (see [`reload::apply_reload`]).
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
    mut reloads: tokio::sync::mpsc::UnboundedReceiver<Reload>,
) -> Result<()> {
    let listener = check_and_bind(&config).await?;
    let local = listener.local_addr().context("listener address")?;
    let mut live = Live::start(config)?;
    // Link changes: a cue to look at the watched interfaces again (also done every poll).
    let links = match crate::sources::links::LinkEvents::open() {
        Ok(l) => Some(l),
        Err(e) => {
            log::warn!("no rtnetlink link events ({e}); interfaces are checked every poll");
            None
        }
    };
    let mut tick = interval(live.config.poll_interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The kernel rings hold 4 s: read them every second whatever the poll interval.
    let mut ring_tick = interval(RING_READ_EVERY);
    ring_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // A first poll before /metrics serves: the first scrape (and systemd's READY) already
    // has every interface's series. The interval's first tick fires at once: taken here.
    tick.tick().await;
    live.tick(true);
    let (stop_tx, server) = serve(listener, &live);
    let scheme = if live.config.web.tls.is_some() {
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
                let ok = live.reload(r);
                if ok {
                    tick = interval(live.config.poll_interval);
                    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                }
                if let Ok(m) = live.shared.metrics.lock() {
                    m.config_reloaded(ok);
                }
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
            }
            Ok(()) = async {
                match &links {
                    Some(l) => l.changed().await,
                    None => std::future::pending().await,
                }
            } => live.reconcile(),
            _ = ring_tick.tick(), if live.config.switches.rhythm => live.drain_rings(),
            _ = tick.tick() => live.tick(false),
        }
    }
    let (level, message) = words::shutdown_message(&live.probes, &live.config);
    log::log!(level, "{message}");
    live.finish_records();
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    let _ = stop_tx.send(());
    drop(live);
    match server.await {
        Ok(r) => r.context("HTTP server")?,
        Err(e) => return Err(e).context("HTTP server task"),
    }
    Ok(())
}

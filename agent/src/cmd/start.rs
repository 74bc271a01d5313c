//! `rocemon run` as a process: the validated configuration, logging as it says, the runtime,
//! the signals (SIGTERM and SIGINT stop, SIGHUP reloads) around the live pipeline
//! ([`super::run::run`]).

use crate::config::cli::RunArgs;
use crate::config::Config;
use anyhow::{Context, Result};

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(args: RunArgs) -> Result<()> {
    let config = Config::from_args(&args);
    // The configuration says how to log; its own errors go to stderr either way.
    let (format, level) = match &config {
        Ok(c) => (c.log_format, c.log_level.unwrap_or(log::LevelFilter::Info)),
        Err(_) => (
            crate::config::logging::LogFormat::Auto,
            log::LevelFilter::Info,
        ),
    };
    crate::config::logging::init(format, level);
    let config = config?;
    // What can be checked before the banner is: a missing interface is a usage error said
    // alone, not the last line under twenty lines of "starting".
    for iface in &config.ifaces {
        crate::kernel::loader::ifindex(iface)?;
    }
    log::info!(
        "rocemon {} starting:\n{}",
        env!("CARGO_PKG_VERSION"),
        config.summary()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("start the tokio runtime")?;
    rt.block_on(async {
        // Install the handlers before anything else, so an early SIGTERM is a clean stop.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("install the SIGTERM handler")?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("install the SIGINT handler")?;
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("install the SIGHUP handler")?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => log::info!("SIGTERM received"),
                _ = int.recv() => log::info!("SIGINT received"),
            }
        };
        // SIGHUP: read the file (and the flags) again; the agent applies what it can.
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                log::info!("SIGHUP received: reloading the configuration");
                let r = Config::from_args(&args).map_err(|e| e.to_string());
                if reload_tx.send(r).is_err() {
                    break;
                }
            }
        });
        crate::cmd::run::run(config, shutdown, reload_rx).await
    })
}

//! The `rocemon` binary: flags -> validated config -> the live pipeline or an offline analysis.

use anyhow::{Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use rocemon::cli::{AnalyzeArgs, Cli, Command, OutputFormat, RunArgs};
use rocemon::config::Config;
use rocemon::error::{exit_status, UsageError};
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => run(a),
        Command::Analyze(a) => analyze(a),
        Command::Top(a) => rocemon::top::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rocemon: error: {e:#}");
            ExitCode::from(exit_status(&e) as u8)
        }
    }
}

fn run(args: RunArgs) -> Result<()> {
    let config = Config::from_args(&args)?;
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
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => log::info!("SIGTERM received"),
                _ = int.recv() => log::info!("SIGINT received"),
            }
        };
        rocemon::run::run(config, shutdown).await
    })
}

fn analyze(args: AnalyzeArgs) -> Result<()> {
    let size = std::fs::metadata(&args.file)
        .map_err(|e| UsageError::BadCapture {
            path: args.file.display().to_string(),
            reason: e.to_string(),
        })?
        .len();
    let show = !args.no_progress && std::io::stdout().is_terminal() && size > 16 << 20;
    let bar = if show {
        let b = ProgressBar::new(size);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let mut opts = rocemon::analyze::AnalyzeOptions::default();
    if let Some(path) = &args.config {
        let file = rocemon::config::load_file(path)?;
        let (rate_window_s, elephant, ecmp) = rocemon::config::detectors(&file)?;
        opts.rate_window_s = rate_window_s;
        opts.elephant = elephant;
        opts.ecmp = ecmp;
    }
    if let Some(bps) = args.elephant_bps {
        opts.elephant.threshold_bytes_per_second = bps;
        opts.elephant.validate().map_err(UsageError::BadConfig)?;
    }
    if args.tick_ms == 0 {
        return Err(UsageError::BadConfig("--tick-ms must be at least 1".into()).into());
    }
    opts.tick_s = args.tick_ms as f64 / 1000.0;
    let a = rocemon::analyze::analyze_file(&args.file, opts, |n| {
        if let Some(b) = &bar {
            b.set_position(n);
        }
    })
    .map_err(|e| UsageError::BadCapture {
        path: args.file.display().to_string(),
        reason: e.to_string(),
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if a.summary.truncated_tail {
        log::warn!(
            "{}: the file ends inside a record; counted everything before it",
            args.file.display()
        );
    }
    let report = rocemon::report::build(&a);
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string(&report)?),
        OutputFormat::Table => print!("{}", rocemon::report::table(&report, args.top)),
    }
    Ok(())
}

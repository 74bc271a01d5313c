//! The `rocemon` binary: flags -> validated config -> the live pipeline or an offline analysis.

use anyhow::{Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use rocemon::cli::{
    AnalyzeArgs, CheckConfigArgs, Cli, Command, DetachArgs, OutputFormat, RdmaArgs, ReloadArgs,
    RunArgs,
};
use rocemon::config::Config;
use rocemon::error::{exit_status, UsageError};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_)) {
        rocemon::logging::init(rocemon::logging::LogFormat::Auto, log::LevelFilter::Info);
    }
    let result = match cli.command {
        Command::Run(a) => run(a),
        Command::Analyze(a) => analyze(a),
        Command::Top(a) => rocemon::cmd::top::run(a),
        Command::Rdma(a) => rdma(a),
        Command::Detach(a) => detach(a),
        Command::CheckConfig(a) => check_config(a),
        Command::Reload(a) => reload(a),
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
    let config = Config::from_args(&args);
    // The configuration says how to log; its own errors go to stderr either way.
    let (format, level) = match &config {
        Ok(c) => (c.log_format, c.log_level.unwrap_or(log::LevelFilter::Info)),
        Err(_) => (rocemon::logging::LogFormat::Auto, log::LevelFilter::Info),
    };
    rocemon::logging::init(format, level);
    let config = config?;
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
        rocemon::cmd::run::run(config, shutdown, reload_rx).await
    })
}

fn analyze(mut args: AnalyzeArgs) -> Result<()> {
    // `-r FILE` (tshark's and tcpdump's habit) names a capture like a plain argument.
    let read = std::mem::take(&mut args.read);
    args.files.extend(read);
    use std::os::unix::fs::FileTypeExt;
    let mut opts = rocemon::cmd::analyze::AnalyzeOptions::default();
    if let Some(path) = &args.config {
        let file = rocemon::config::load_file(path)?;
        let (rate_window_s, elephant, ecmp) = rocemon::config::detectors(&file)?;
        opts.rate_window_s = rate_window_s;
        opts.elephant = elephant;
        opts.ecmp = ecmp;
        opts.classes = rocemon::config::classes(&file)?;
        opts.sflow_groups = rocemon::config::sflow_groups(&file)?;
        opts.sflow_limits = rocemon::config::sflow_limits(&file, &opts.sflow_groups)?;
    }
    if !(args.link_speed.is_finite() && args.link_speed > 0.0 && args.link_speed <= 10_000.0) {
        return Err(UsageError::BadConfig(format!(
            "--link-speed {} is not a link speed; give Gb/s above 0, e.g. --link-speed 400",
            args.link_speed
        ))
        .into());
    }
    opts.link_speed_bps = (args.link_speed * 1e9) as u64;
    if !(args.pfc_storm_seconds.is_finite() && (0.001..=3600.0).contains(&args.pfc_storm_seconds)) {
        return Err(UsageError::BadConfig(format!(
            "--pfc-storm-seconds {} is out of range; use 0.001 to 3600 (e.g. 0.2, as SONiC's PFC watchdog)",
            args.pfc_storm_seconds
        ))
        .into());
    }
    opts.pfc_storm_ns = (args.pfc_storm_seconds * 1e9) as u64;
    if let Some(bits) = args.elephant_bps {
        opts.elephant.threshold_bytes_per_second = bits / 8.0;
        opts.elephant.validate().map_err(UsageError::BadConfig)?;
    }
    if args.tick_ms == 0 {
        return Err(UsageError::BadConfig("--tick-ms must be at least 1".into()).into());
    }
    opts.tick_s = args.tick_ms as f64 / 1000.0;
    if args.max_flows == 0 {
        return Err(UsageError::BadConfig("--max-flows must be at least 1".into()).into());
    }
    opts.max_flows = args.max_flows;
    if args.files.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
        return Err(UsageError::BadConfig(
            "standard input (-) can be given once; name the other captures by their files".into(),
        )
        .into());
    }
    // What each input is, before anything is read.
    let mut plain_size = None;
    let mut piped = false;
    for f in &args.files {
        if f.as_os_str() == "-" {
            piped = true;
            continue;
        }
        let bad = |reason: String| UsageError::BadCapture {
            path: f.display().to_string(),
            reason,
        };
        let meta = std::fs::metadata(f).map_err(|e| bad(e.to_string()))?;
        if meta.is_dir() {
            return Err(bad("it is a directory; give a pcap or pcapng file".into()).into());
        }
        if meta.file_type().is_fifo() {
            piped = true;
            // Opening a FIFO waits for its writer: say so, or the wait looks like a hang.
            log::info!(
                "{} is a FIFO: waiting for a writer (for example `tcpdump -w {}`)",
                f.display(),
                f.display()
            );
        } else if args.files.len() == 1 && meta.is_file() {
            let mut magic = [0u8; 6];
            let n = std::fs::File::open(f)
                .and_then(|mut h| std::io::Read::read(&mut h, &mut magic))
                .unwrap_or(0);
            if rocemon::sources::input::Compression::of(&magic[..n])
                == rocemon::sources::input::Compression::None
            {
                plain_size = Some(meta.len());
            }
        }
    }
    // A progress bar for one large plain file (its size is what the reader goes through).
    let show = !args.no_progress && std::io::stdout().is_terminal();
    let bar = match plain_size {
        Some(size) if show && size > 16 << 20 => {
            let b = ProgressBar::new(size);
            b.set_style(
                ProgressStyle::with_template(rocemon::cmd::analyze::PROGRESS_TEMPLATE)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Some(b)
        }
        _ => None,
    };
    let (a, failed) = rocemon::cmd::analyze::analyze_inputs(&args.files, opts, |n| {
        if let Some(b) = &bar {
            b.set_position(n);
            if Some(n) >= plain_size {
                b.set_message(rocemon::cmd::analyze::PROGRESS_READ);
            }
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(e) = &failed {
        if a.counters.frames == 0 {
            return Err(UsageError::BadCapture {
                path: e.path.clone(),
                reason: e.reason.clone(),
            }
            .into());
        }
    }
    if a.summary.truncated_tail {
        log::warn!(
            "{}: the capture ends inside a record; counted everything before it",
            args.files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut report = rocemon::export::report_build::build(&a);
    report.inputs = args.files.iter().map(|f| f.display().to_string()).collect();
    if let Some(path) = &args.html {
        let page = rocemon::export::report_html::render(
            &report,
            &a.timeline,
            &report.inputs,
            args.top.max(20),
        );
        std::fs::write(path, page)
            .with_context(|| format!("write the HTML report {}", path.display()))?;
        log::info!("wrote the HTML report {}", path.display());
    }
    match args.format {
        OutputFormat::Json => {
            // Streamed: a report of a quarter million flows is not built as one string first.
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let written = serde_json::to_writer(&mut out, &report)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
                .and_then(|()| out.flush());
            quiet_on_closed_stdout(written)?;
        }
        OutputFormat::Table => {
            let text = rocemon::export::report_table::table(&report, args.top);
            quiet_on_closed_stdout(std::io::stdout().lock().write_all(text.as_bytes()))?;
        }
    }
    if failed.is_none() && piped && a.summary.truncated_tail {
        // A file cut inside its last record is a capture that was interrupted; a pipe that
        // closes inside one means its writer failed.
        return Err(UsageError::BadCapture {
            path: "standard input or FIFO".into(),
            reason: format!(
                "the stream closed inside a record (did its writer fail?) after {} frames; the report covers them",
                a.counters.frames
            ),
        }
        .into());
    }
    if let Some(e) = failed {
        // The report above covers what was read before the failure.
        return Err(UsageError::BadCapture {
            path: e.path,
            reason: format!(
                "{} (after {} frames; the report covers them)",
                e.reason, a.counters.frames
            ),
        }
        .into());
    }
    Ok(())
}

/// Output into a pipe whose reader left (`| head`) is no error: stop quietly, as other
/// command-line tools do.
fn quiet_on_closed_stdout(r: std::io::Result<()>) -> Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("write the report"),
    }
}

fn rdma(args: RdmaArgs) -> Result<()> {
    use rocemon::sources::rdma;
    let connections = rdma::load_connections(args.qp_json.as_deref(), args.cm_id_json.as_deref())?;
    let model = match &args.config {
        Some(p) => {
            rocemon::config::detectors(&rocemon::config::load_file(p)?)?
                .2
                .hash
        }
        None => None,
    };
    let path_of = |c: &rdma::Connection| {
        let k = c.flow_key()?;
        model
            .as_ref()
            .map(|m| m.path(&rocemon::detect::ecmp::fields(&k)))
    };
    let counters = rdma::port_counters(&args.sysfs_root);
    match args.format {
        OutputFormat::Json => {
            let conns: Vec<serde_json::Value> = connections
                .iter()
                .map(|c| {
                    let mut v = serde_json::to_value(c).unwrap_or_default();
                    v["predicted_path"] =
                        path_of(c).map(serde_json::Value::from).unwrap_or_default();
                    v
                })
                .collect();
            let ctrs: Vec<serde_json::Value> = counters
                .iter()
                .map(|c| serde_json::json!({"device": c.device, "port": c.port, "netdev": c.netdev, "group": c.group, "counter": c.name, "value": c.value}))
                .collect();
            println!(
                "{}",
                serde_json::json!({"port_counters": ctrs, "connections": conns})
            );
        }
        OutputFormat::Table => {
            println!("RDMA PORT COUNTERS {}", counters.len());
            for c in &counters {
                println!(
                    "  {}/{} ({}) {}/{} {}",
                    c.device, c.port, c.netdev, c.group, c.name, c.value
                );
            }
            println!("\nRC CONNECTIONS {}", connections.len());
            for c in &connections {
                let path = path_of(c)
                    .map(|p| format!("  predicted path {p}"))
                    .unwrap_or_default();
                println!(
                    "  {} qp 0x{:x} -> 0x{:x} {} -> {} udp sport {}{path}",
                    c.device,
                    c.lqpn,
                    c.rqpn,
                    c.src.as_deref().unwrap_or("?"),
                    c.dst.as_deref().unwrap_or("?"),
                    c.sport
                );
            }
        }
    }
    Ok(())
}

fn detach(args: DetachArgs) -> Result<()> {
    let file_dir = match &args.config {
        Some(p) => rocemon::config::load_file(p)?.pin_dir,
        None => None,
    };
    let root = args
        .pin_dir
        .or(file_dir)
        .unwrap_or_else(|| rocemon::kernel::pins::DEFAULT_PIN_DIR.into());
    if let Some(pid) = rocemon::kernel::pins::PinLock::held(&root) {
        let who = pid.map(|p| format!(" (process {p})")).unwrap_or_default();
        if !args.force {
            return Err(UsageError::BadConfig(format!(
                "a running rocemon{who} holds the pins under {}; stop it first (`systemctl stop rocemon`), or add --force to remove the pins anyway (its programs detach when it exits)",
                root.display()
            ))
            .into());
        }
        log::warn!("--force: removing the pins of a running rocemon{who}");
    }
    let mut done = Vec::new();
    let mut left = Vec::new();
    let ifaces: Vec<Option<&str>> = if args.ifaces.is_empty() {
        vec![None]
    } else {
        args.ifaces.iter().map(|i| Some(i.as_str())).collect()
    };
    for i in ifaces {
        let (d, out) = rocemon::kernel::pins::detach(&root, i)?;
        done.extend(d);
        left.extend(out.left);
    }
    for p in &left {
        eprintln!(
            "rocemon: left {} in place: not a pin of rocemon's (by name or object type)",
            p.display()
        );
    }
    if done.is_empty() {
        println!("nothing of rocemon's pinned under {}", root.display());
    } else {
        println!(
            "detached and removed the pins of {} (under {})",
            done.join(", "),
            root.display()
        );
    }
    Ok(())
}

/// `rocemon reload --pid PID`: SIGHUP to a running agent, after checking that PID is one.
fn reload(args: ReloadArgs) -> Result<()> {
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", args.pid)).map_err(|e| {
        UsageError::BadConfig(format!(
            "no process {} ({e}); give the agent's pid (systemd: $MAINPID)",
            args.pid
        ))
    })?;
    if comm.trim() != "rocemon" {
        return Err(UsageError::BadConfig(format!(
            "process {} is {:?}, not rocemon; give the agent's pid",
            args.pid,
            comm.trim()
        ))
        .into());
    }
    // SAFETY: kill(2) with a checked pid and a valid signal.
    if unsafe { libc::kill(args.pid as i32, libc::SIGHUP) } != 0 {
        return Err(anyhow::anyhow!(
            "signal process {}: {}",
            args.pid,
            std::io::Error::last_os_error()
        ));
    }
    println!("asked rocemon (pid {}) to reload", args.pid);
    Ok(())
}

fn check_config(args: CheckConfigArgs) -> Result<()> {
    let c = Config::from_args(&RunArgs {
        config: Some(args.file.clone()),
        ..RunArgs::default()
    })?;
    let mut missing = Vec::new();
    for i in &c.ifaces {
        if rocemon::kernel::loader::ifindex(i).is_err() {
            missing.push(i.as_str());
        }
    }
    println!("{}: valid", args.file.display());
    println!("{}", c.summary());
    if !missing.is_empty() {
        println!(
            "note: not on this host (now): {}; `rocemon run` will refuse them until they exist",
            missing.join(", ")
        );
    }
    Ok(())
}

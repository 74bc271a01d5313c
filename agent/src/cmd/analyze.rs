//! `rocemon analyze`: captures (files, FIFOs, standard input; plain or compressed; several
//! merged by timestamp) read into one [`Analysis`].

use crate::config::cli::{AnalyzeArgs, OutputFormat};
use crate::error::UsageError;
pub use crate::pipeline::analysis::{Analysis, AnalyzeOptions, ElephantPeriod};
use crate::sources::capture::{
    read_capture, read_capture_from, CaptureError, CaptureSummary, Frame,
};
use crate::sources::input::{self, Compression, ReadFailure};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Analyses a capture file; `progress` receives the bytes read so far.
pub fn analyze_file(
    path: &Path,
    opts: AnalyzeOptions,
    mut progress: impl FnMut(u64),
) -> Result<Analysis, CaptureError> {
    let mut a = Analysis::new(opts);
    let summary = read_capture(path, &mut progress, |f| a.frame(f))?;
    a.summary = summary;
    a.finish();
    Ok(a)
}

/// Why an input could not be read (whole): which input, and what went wrong.
/// The progress bar of one large plain capture: what was read, how fast, and for how long,
/// but no time left: the work per byte is not constant (the flow table grows, and the report
/// of many flows comes after the last byte), so an estimate from the rate so far misled (7 s
/// left on a run that took 100 s).
pub const PROGRESS_TEMPLATE: &str =
    "{bar:40} {bytes}/{total_bytes} read at {bytes_per_sec}, {elapsed} so far{msg}";

/// The progress bar's message once the last byte is read.
pub const PROGRESS_READ: &str = "; finishing the flows and the report";

#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct InputError {
    pub path: String,
    pub reason: String,
}

fn input_error(
    path: &Path,
    compression: Compression,
    e: CaptureError,
    failure: &ReadFailure,
) -> InputError {
    let reason = match (e, failure.take_described(compression)) {
        // The decompressor's (or the disk's) own words beat the capture reader's "read error"
        // (and "empty" or "not a capture", when the stream failed at its start).
        (CaptureError::UnsupportedLinkType(l), _) => {
            CaptureError::UnsupportedLinkType(l).to_string()
        }
        (_, Some(msg)) => msg,
        (e, None) => e.to_string(),
    };
    InputError {
        path: path.display().to_string(),
        reason,
    }
}

/// A read error the stream hit after which the capture reader saw an end: the records before
/// it are counted, and this says why the rest is missing.
fn stream_failure(
    path: &Path,
    compression: Compression,
    failure: &ReadFailure,
) -> Option<InputError> {
    Some(InputError {
        path: path.display().to_string(),
        reason: failure.take_described(compression)?,
    })
}

/// The flow lists `analyze` writes as JSON beside the judging, at most (longer ones are
/// streamed into the output after it, never held whole: a quarter million flows' list is
/// 200 MB of text).
const FLOWS_WRITTEN_BESIDE: usize = 50_000;

/// The judgement of the capture, and the flow list made on a thread beside it: its order
/// (a quarter million flows take 50 ms to sort) and, for JSON output of at most
/// [`FLOWS_WRITTEN_BESIDE`] flows, its JSON (its rows serialized on every core by
/// [`crate::export::report::flow_json`]). After the last frame these are the run's tail (on
/// the bench's capture of 10,000 flows, 17 and 13 ms); the list's order is made once, here.
fn judge_and_list_flows(
    a: &Analysis,
    format: OutputFormat,
) -> (
    crate::pipeline::findings::Judged,
    crate::export::report::FlowList<'_>,
) {
    let flows = &a.pipeline.flows;
    let json = format == OutputFormat::Json && flows.len() <= FLOWS_WRITTEN_BESIDE;
    let list = move || {
        let list = crate::export::report::build::flow_list(flows);
        match json.then(|| list.to_json()) {
            Some(Ok(text)) => list.with_json(text),
            _ => list,
        }
    };
    std::thread::scope(|s| {
        let beside = std::thread::Builder::new()
            .name("analyze-json".into())
            .spawn_scoped(s, list)
            .ok();
        let judged = crate::pipeline::findings::judge_analysis(a);
        let listed = match beside.map(|t| t.join()) {
            Some(Ok(listed)) => listed,
            Some(Err(p)) => std::panic::resume_unwind(p),
            None => list(),
        };
        (judged, listed)
    })
}

/// Analyses one capture made of `paths` (files, FIFOs, `-` for standard input; plain or
/// gzip/zstd/xz compressed): one input is streamed as it is; several are read side by side
/// and merged in timestamp order (ties: the earlier input first). Returns the analysis of
/// everything read, and the first input that failed, if one did (its frames up to the
/// failure are counted).
pub fn analyze_inputs(
    paths: &[PathBuf],
    opts: AnalyzeOptions,
    progress: impl FnMut(u64),
) -> (Analysis, Option<InputError>) {
    let mut a = Analysis::new(opts);
    let err = if let [one] = paths {
        read_one(one, &mut a, progress)
    } else {
        read_merged(paths, &mut a)
    };
    a.finish();
    (a, err)
}

fn read_one(path: &Path, a: &mut Analysis, progress: impl FnMut(u64)) -> Option<InputError> {
    let input = match input::open(path) {
        Ok(i) => i,
        Err(e) => {
            return Some(InputError {
                path: path.display().to_string(),
                reason: e.to_string(),
            })
        }
    };
    match read_capture_from(input.reader, progress, |f| a.frame(f)) {
        Ok(s) => {
            a.summary = s;
            stream_failure(path, input.compression, &input.failure)
        }
        Err(e) => Some(input_error(path, input.compression, e, &input.failure)),
    }
}

/// A frame copied out of its reader's buffer (several inputs are read on threads).
struct OwnedFrame {
    link: agent_common::LinkType,
    ts_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
}

const MERGE_BATCH: usize = 512;

fn read_merged(paths: &[PathBuf], a: &mut Analysis) -> Option<InputError> {
    use std::collections::VecDeque;
    use std::sync::mpsc;
    let mut streams = Vec::new();
    for path in paths {
        let (tx, rx) = mpsc::sync_channel::<Vec<OwnedFrame>>(4);
        let path = path.clone();
        let reader = std::thread::spawn(move || -> Result<CaptureSummary, InputError> {
            let input = input::open(&path).map_err(|e| InputError {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
            let mut batch = Vec::with_capacity(MERGE_BATCH);
            let r = read_capture_from(
                input.reader,
                |_| {},
                |f: Frame<'_>| {
                    batch.push(OwnedFrame {
                        link: f.link,
                        ts_ns: f.ts_ns,
                        orig_len: f.orig_len,
                        data: f.data.to_vec(),
                    });
                    if batch.len() == MERGE_BATCH {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(MERGE_BATCH));
                        let _ = tx.send(full);
                    }
                },
            );
            if !batch.is_empty() {
                let _ = tx.send(batch);
            }
            let s = r.map_err(|e| input_error(&path, input.compression, e, &input.failure))?;
            match stream_failure(&path, input.compression, &input.failure) {
                Some(e) => Err(e),
                None => Ok(s),
            }
        });
        streams.push((VecDeque::<OwnedFrame>::new(), Some(rx), reader));
    }
    loop {
        // Refill empty queues (blocking: the merge needs every input's next frame).
        for (queue, rx, _) in streams.iter_mut() {
            if queue.is_empty() {
                if let Some(r) = rx {
                    match r.recv() {
                        Ok(batch) => queue.extend(batch),
                        Err(_) => *rx = None,
                    }
                }
            }
        }
        let next = streams
            .iter()
            .enumerate()
            .filter_map(|(i, (q, _, _))| q.front().map(|f| (f.ts_ns, i)))
            .min();
        let Some((_, i)) = next else {
            break;
        };
        if let Some(f) = streams[i].0.pop_front() {
            a.frame(Frame {
                link: f.link,
                ts_ns: f.ts_ns,
                orig_len: f.orig_len,
                data: &f.data,
            });
        }
    }
    let mut first_err = None;
    for (_, _, reader) in streams {
        match reader.join() {
            Ok(Ok(s)) => a.summary.truncated_tail |= s.truncated_tail,
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(InputError {
                    path: "?".into(),
                    reason: "a reader thread panicked".into(),
                });
            }
        }
    }
    first_err
}

/// `rocemon analyze`: the captures read, the report printed (table or JSON), the page written.
pub fn analyze(mut args: AnalyzeArgs) -> Result<()> {
    // `-r FILE` (tshark's and tcpdump's habit) names a capture like a plain argument.
    let read = std::mem::take(&mut args.read);
    args.files.extend(read);
    use std::os::unix::fs::FileTypeExt;
    let mut opts = crate::cmd::analyze::AnalyzeOptions::default();
    let mut ipfix_section = None;
    let mut file_storm = None;
    if let Some(path) = &args.config {
        let file = crate::config::load_file(path)?;
        file_storm = file.pfc_storm_seconds;
        // Its [ipfix] settings apply, but not its collectors: a capture goes where the
        // command line says, never to a fleet's collectors by surprise.
        ipfix_section = file.ipfix.clone().map(|mut s| {
            s.collectors = None;
            s
        });
        let (rate_window_s, elephant, ecmp) = crate::config::detectors(&file)?;
        opts.rate_window_s = rate_window_s;
        opts.elephant = elephant;
        opts.ecmp = ecmp;
        opts.classes = crate::config::classes(&file)?;
        opts.sflow_groups = crate::config::sflow_groups(&file)?;
        opts.sflow_limits = crate::config::sflow_limits(&file, &opts.sflow_groups)?;
    }
    opts.link_speed_bps = crate::config::thresholds::link_speed_bps(args.link_speed)?;
    let storm_s = crate::config::pfc_storm_seconds(args.pfc_storm_seconds, file_storm)?;
    opts.pfc_storm_ns = (storm_s * 1e9) as u64;
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
    let exporter = start_ipfix(&args, ipfix_section.as_ref())?;
    if let Some((x, active)) = &exporter {
        opts.records = Some(crate::pipeline::flow_records::RecordSettings {
            active_timeout_ns: active.as_nanos() as u64,
            idle_timeout_ns: crate::config::DEFAULT_FLOW_IDLE_TIMEOUT_S * 1_000_000_000,
            sink: x.waiting_sink(),
        });
    }
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
            if crate::sources::input::Compression::of(&magic[..n])
                == crate::sources::input::Compression::None
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
                ProgressStyle::with_template(crate::cmd::analyze::PROGRESS_TEMPLATE)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Some(b)
        }
        _ => None,
    };
    let (a, failed) = crate::cmd::analyze::analyze_inputs(&args.files, opts, |n| {
        if let Some(b) = &bar {
            b.set_position(n);
            if Some(n) >= plain_size {
                b.set_message(crate::cmd::analyze::PROGRESS_READ);
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
    if let Some((x, _)) = exporter {
        let collectors = x.collectors.clone();
        x.finish();
        report_ipfix(&collectors);
    }
    let (judged, flows) = judge_and_list_flows(&a, args.format);
    let mut report = crate::export::report::build::build_with(&a, judged, flows);
    report.inputs = args.files.iter().map(|f| f.display().to_string()).collect();
    if let Some(path) = &args.html {
        let page = crate::export::report::html::render(
            &report,
            &a.timeline,
            &report.inputs,
            args.top.max(20),
            &args.runbook_url,
        );
        std::fs::write(path, page)
            .with_context(|| format!("write the HTML report {}", path.display()))?;
        log::info!("wrote the HTML report {}", path.display());
    }
    match args.format {
        OutputFormat::Json => crate::cmd::report_out::json(&report)?,
        OutputFormat::Table => {
            let text = crate::export::report::table::table(&report, args.top);
            crate::cmd::report_out::text(&text)?;
        }
    }
    let (frames, truncated_tail) = (a.counters.frames, a.summary.truncated_tail);
    // Freed by the exit: the flow table, the pairing state and the report's rows are millions
    // of small allocations on a large capture, and walking them to free them took a tenth of
    // the run after the last frame (measured on the bench's 1M-frame capture).
    std::mem::forget(report);
    std::mem::forget(a);
    if failed.is_none() && piped && truncated_tail {
        // A file cut inside its last record is a capture that was interrupted; a pipe that
        // closes inside one means its writer failed.
        return Err(UsageError::BadCapture {
            path: "standard input or FIFO".into(),
            reason: format!(
                "the stream closed inside a record (did its writer fail?) after {} frames; the report covers them",
                frames
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
                e.reason, frames
            ),
        }
        .into());
    }
    Ok(())
}

/// The IPFIX exporter of `--ipfix` / `--ipfix-file`, and its active timeout.
fn start_ipfix(
    args: &AnalyzeArgs,
    section: Option<&crate::config::ipfix::IpfixSection>,
) -> Result<Option<(crate::export::ipfix::Exporter, std::time::Duration)>> {
    let Some(s) = crate::config::ipfix::ipfix_settings(
        &args.ipfix,
        args.ipfix_file.clone(),
        section,
        args.ipfix_active_timeout_seconds,
    )?
    else {
        return Ok(None);
    };
    // A capture has no interface index.
    let x = crate::export::ipfix::Exporter::start(&s, vec![0]).map_err(|e| {
        UsageError::BadConfig(format!(
            "{e:#}; check the path given to --ipfix-file (its folder must exist and be writable)"
        ))
    })?;
    Ok(Some((x, s.active_timeout)))
}

/// One line per destination: what the capture's flow records came to.
fn report_ipfix(
    collectors: &[(
        String,
        std::sync::Arc<crate::export::ipfix::CollectorCounts>,
    )],
) {
    for (label, c) in collectors {
        let by: Vec<(&str, u64)> = c.by_result().into_iter().collect();
        let sent = by[0].1;
        let lost: u64 = by[1..].iter().map(|(_, n)| n).sum();
        if lost == 0 {
            log::info!("IPFIX: {sent} flow records to {label}");
        } else {
            log::warn!(
                "IPFIX: {sent} flow records to {label}, {lost} not sent ({})",
                by[1..]
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(r, n)| format!("{r} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemon_testkit::{fixtures, TempDir};

    /// The progress bar promises no time left (it was wrong by a factor of 14), and its
    /// template is one indicatif takes.
    #[test]
    fn the_progress_bar_shows_no_time_left() {
        assert!(!PROGRESS_TEMPLATE.contains("eta"), "{PROGRESS_TEMPLATE}");
        assert!(PROGRESS_TEMPLATE.contains("{elapsed}"));
        assert!(indicatif::ProgressStyle::with_template(PROGRESS_TEMPLATE).is_ok());
    }

    /// The flow table and the views on threads of their own give the report of the
    /// single-threaded analysis, to the bit, on every fixture (elephants, ticks, sFlow,
    /// tunnels, malformed frames, pauses, CE and CNPs, training).
    #[test]
    fn the_flow_thread_changes_nothing_in_the_report() {
        use rocemon_testkit::findings_lab as lab;
        let dir = TempDir::new("rocemon-flowside").unwrap();
        let mut paths: Vec<(String, std::path::PathBuf)> = fixtures::all()
            .iter()
            .map(|fx| (fx.name.to_string(), fx.write(dir.path()).unwrap()))
            .collect();
        // The views' own inputs: CE marks answered by CNPs (the pairing reads whether a
        // packet began its flow) and a training job (its trouble reads the PSN events).
        for (name, frames) in [
            ("ce_cnp", lab::ce_exchange(400, 5, Some(20_000))),
            ("ce_alone", lab::ce_exchange(400, 5, None)),
            (
                "job",
                lab::hosts_job(&["10.1.0.1", "10.1.0.2"], "10.1.0.9", Some("10.1.0.2")),
            ),
        ] {
            let fx = fixtures::whole(name, fixtures::Format::PcapNanos, frames, true);
            paths.push((name.to_string(), fx.write(dir.path()).unwrap()));
        }
        for (name, path) in &paths {
            let report = |parallel: bool| {
                let opts = AnalyzeOptions {
                    parallel,
                    ..AnalyzeOptions::default()
                };
                let a = analyze_file(path, opts, |_| {}).unwrap();
                serde_json::to_string(&crate::export::report::build::build(
                    &a,
                    crate::pipeline::findings::judge_analysis(&a),
                ))
                .unwrap()
            };
            assert_eq!(report(true), report(false), "{name}");
        }
    }

    /// The flow list written beside the judging gives the report streamed after it, to the
    /// byte, on every fixture; table output writes no JSON beside.
    #[test]
    fn the_flow_list_written_beside_changes_nothing() {
        let dir = TempDir::new("rocemon-flowjson").unwrap();
        for fx in fixtures::all() {
            let path = fx.write(dir.path()).unwrap();
            let a = analyze_file(&path, AnalyzeOptions::default(), |_| {}).unwrap();
            let streamed = serde_json::to_string(&crate::export::report::build::build(
                &a,
                crate::pipeline::findings::judge_analysis(&a),
            ))
            .unwrap();
            for (format, written) in [(OutputFormat::Json, true), (OutputFormat::Table, false)] {
                let (judged, flows) = judge_and_list_flows(&a, format);
                assert_eq!(flows.written(), written, "{}", fx.name);
                let report = crate::export::report::build::build_with(&a, judged, flows);
                let json = serde_json::to_string(&report).unwrap();
                assert_eq!(json, streamed, "{}", fx.name);
            }
        }
    }
}

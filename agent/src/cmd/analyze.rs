//! `rocemon analyze`: captures (files, FIFOs, standard input; plain or compressed; several
//! merged by timestamp) read into one [`Analysis`].

pub use crate::pipeline::analysis::{Analysis, AnalyzeOptions, ElephantPeriod};
use crate::sources::capture::{
    read_capture, read_capture_from, CaptureError, CaptureSummary, Frame,
};
use crate::sources::input::{self, Compression, ReadFailure};
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

    /// The flow table on its own thread gives the report of the single-threaded analysis, to
    /// the bit, on every fixture (elephants, ticks, sFlow, tunnels, malformed frames).
    #[test]
    fn the_flow_thread_changes_nothing_in_the_report() {
        let dir = TempDir::new("rocemon-flowside").unwrap();
        for fx in fixtures::all() {
            let path = fx.write(dir.path()).unwrap();
            let report = |parallel: bool| {
                let opts = AnalyzeOptions {
                    parallel,
                    ..AnalyzeOptions::default()
                };
                let a = analyze_file(&path, opts, |_| {}).unwrap();
                serde_json::to_string(&crate::export::report_build::build(&a)).unwrap()
            };
            assert_eq!(report(true), report(false), "{}", fx.name);
        }
    }
}

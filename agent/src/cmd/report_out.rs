//! Where `rocemon analyze` writes its report: standard output, streamed, and a reader that
//! leaves early (`| head`) ends it quietly.

use anyhow::{Context, Result};
use serde::Serialize;
use std::io::Write;

/// Writes `report` as one line of JSON, streamed: a report of a quarter million flows is not
/// built as one string first.
pub fn json(report: &impl Serialize) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut out: Box<dyn Write + '_> = match report_file(&stdout) {
        Some(file) => Box::new(std::io::BufWriter::with_capacity(1 << 20, file)),
        None => Box::new(std::io::BufWriter::new(&mut stdout)),
    };
    let written = serde_json::to_writer(&mut out, report)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out))
        .and_then(|()| out.flush());
    quiet_on_closed_stdout(written)
}

/// Writes a report's text as it is.
pub fn text(text: &str) -> Result<()> {
    quiet_on_closed_stdout(std::io::stdout().lock().write_all(text.as_bytes()))
}

/// Where the JSON report goes: standard output's descriptor, written in megabyte blocks and
/// not through `Stdout`'s line buffer, which searched every block for a line end (the report
/// has one, at its end): 200 MB of a quarter million flows took 14 ms of `memrchr`, after the
/// last frame, on one core. `None` where the descriptor cannot be had (closed): `Stdout`
/// then, which takes a closed descriptor's writes as done. The caller holds `Stdout`'s lock
/// while it writes.
fn report_file(stdout: &std::io::StdoutLock<'_>) -> Option<std::fs::File> {
    use std::os::fd::AsFd;
    let fd = stdout.as_fd().try_clone_to_owned().ok()?;
    Some(std::fs::File::from(fd))
}

/// Output into a pipe whose reader left (`| head`) is no error: stop quietly, as other
/// command-line tools do.
fn quiet_on_closed_stdout(r: std::io::Result<()>) -> Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("write the report"),
    }
}

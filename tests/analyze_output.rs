//! Where `rocemon analyze --format json` writes its report: standard output as a pipe, a file,
//! a reader that leaves early and a closed descriptor. The report is written on standard
//! output's descriptor in large blocks (`cmd::report_out`), not through `Stdout`'s
//! line buffer: each case here must end as it did through `Stdout`.

use rocemon_testkit::{fixtures, TempDir};
use std::io::Read;
use std::process::{Command, Stdio};

/// A capture whose report is larger than a pipe holds (400 flows: some 300 KB of JSON).
fn capture(dir: &TempDir) -> std::path::PathBuf {
    fixtures::many_flows().write(dir.path()).unwrap()
}

fn analyze(capture: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rocemon"));
    c.args(["analyze", "--format", "json", "--no-progress"])
        .arg(capture);
    c
}

/// The report in a file is the report in a pipe, byte for byte, one JSON document and one
/// line end.
#[test]
fn the_report_in_a_file_is_the_report_in_a_pipe() {
    let dir = TempDir::new("rocemon-out-file").unwrap();
    let p = capture(&dir);
    let piped = analyze(&p).output().unwrap();
    assert!(piped.status.success(), "{piped:?}");
    let file = dir.path().join("report.json");
    let status = analyze(&p)
        .stdout(std::fs::File::create(&file).unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let written = std::fs::read(&file).unwrap();
    assert_eq!(written, piped.stdout);
    assert!(written.len() > 128 * 1024, "{} bytes", written.len());
    assert_eq!(written.iter().filter(|&&b| b == b'\n').count(), 1);
    assert_eq!(written.last(), Some(&b'\n'));
    let j: serde_json::Value = serde_json::from_slice(&written).unwrap();
    assert_eq!(j["flows"].as_array().map(Vec::len), Some(400));
}

/// A reader that leaves after the first bytes (`| head -c 100`) ends the report quietly:
/// success, and nothing said on standard error.
#[test]
fn a_reader_that_leaves_early_ends_the_report_quietly() {
    let dir = TempDir::new("rocemon-out-head").unwrap();
    let p = capture(&dir);
    let mut child = analyze(&p)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 100];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let done = child.wait_with_output().unwrap();
    assert!(first.starts_with(b"{\"schema_version\""));
    assert!(done.status.success(), "{done:?}");
    assert_eq!(String::from_utf8_lossy(&done.stderr), "");
}

/// A closed standard output (`>&-`) is taken as `Stdout` takes it: the report goes nowhere,
/// and the run succeeds.
#[test]
fn a_closed_standard_output_is_no_error() {
    let dir = TempDir::new("rocemon-out-closed").unwrap();
    let p = capture(&dir);
    let script = format!(
        "exec '{}' analyze --format json --no-progress '{}' >&-",
        env!("CARGO_BIN_EXE_rocemon"),
        p.display()
    );
    let done = Command::new("sh").arg("-c").arg(script).output().unwrap();
    assert!(done.status.success(), "{done:?}");
    assert_eq!(String::from_utf8_lossy(&done.stderr), "");
}

//! rocemon's benchmarks (`cargo xtask bench`). Every figure is a ratio against a baseline
//! measured in the same run, because these machines are noisy. One module per phase:
//!
//! - [`kernel`]: per-packet cost (BPF_PROG_TEST_RUN) of every hook's program on plain RoCE,
//!   non-RoCE and rare frames with 1 to 100,000 flows in the map, against a program that bumps
//!   one counter, and each program's verified instructions;
//! - [`analyze`]: `rocemon analyze` on one million frames against tshark and `cat`;
//! - [`scale`]: the agent with 100,000 flows in the kernel map (poll, `/metrics`, memory, CPU);
//! - [`live`]: packets per second and kernel run time through a veth pair with rocemon, with the
//!   count-only program attached the same way ([`baseline`]) and with nothing; AF_XDP delivery;
//! - [`shapes`]: traffic shapes: 1 to 100,000 flows taking turns (and in bursts), small and
//!   4 KiB frames, through BPF_PROG_TEST_RUN over a rotating set of frames and live through a
//!   veth pair, against the count-only program: the cost against the flow count, as a curve;
//! - [`robustness`]: `/metrics` under one hostile client, `analyze` on captures built to blow
//!   it up, and the last fuzzing run's figures;
//! - [`sflow`]: samples per second one core takes through the sFlow collector;
//! - [`sflow_rates`]: the live collector and pmacct's `sfacctd` side by side at rising datagram
//!   rates (datagrams lost, CPU per 100,000 datagrams, memory at 500 switches x 64 ports);
//! - [`ipfix`]: flow records per second through the IPFIX exporter on one core, and the
//!   agent's poll with export on against off at 100,000 flows;
//! - [`diagnosis`]: precision and recall of slow steps and their causes over 500 scenarios
//!   of known truth;
//! - [`report`]: `report.json` and `REPORT.md` (with the verdicts) in the directory given as
//!   the first argument;
//! - [`fuzz_kernel`]: the kernel differential fuzzer (`--fuzz-kernel=SECS`); its source sits
//!   beside the cargo-fuzz targets (`fuzz/kernel_diff.rs`), run from here because it needs the
//!   BPF object and root, which the fuzz workspace builds without;
//! - `--ab=FILE[,FILE...]` ([`kernel::ab`]): this build's XDP program against saved builds of
//!   the object on each fast-path frame, interleaved, for a kernel change whose gain is smaller
//!   than the noise of one run;
//! - `--profile=FRAME[,SECONDS]` ([`profile`]): where the XDP program spends its time on one
//!   bench frame, by source line (`perf record` over BPF_PROG_TEST_RUN, the JIT image mapped
//!   to lines through the program's line info).

mod analyze;
mod baseline;
mod diagnosis;
#[path = "../fuzz/kernel_diff.rs"]
mod fuzz_kernel;
mod ipfix;
mod kernel;
mod live;
mod profile;
mod report;
mod report_goals;
mod report_sflow_rates;
mod report_shapes;
mod robustness;
mod scale;
mod sflow;
mod sflow_rates;
mod shapes;
#[path = "../tests/support/testrun.rs"]
mod testrun;

use agent_common::{FlowKey, FlowKey4, FlowStats, Hook, SliceReader, MAP_FLOWS, MAP_FLOWS4};
use anyhow::{bail, Context, Result};
use aya::maps::{PerCpuHashMap, PerCpuValues};
use aya::util::nr_cpus;
use rocemon::export::metrics::Metrics;
use rocemon::kernel::loader;
use rocemon::pipeline::flows::FlowTable;
use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::frames::{self, Roce, TPID_8021AD, TPID_8021Q};
use rocemon_testkit::netns::{http_get_in, metric_sum, run, Agent, VethPair};
use rocemon_testkit::Rng;
use testrun::test_run;

use serde_json::{json, Value};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");

pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// The median of some figures (0 for none).
pub(crate) fn median(v: impl AsRef<[f64]>) -> f64 {
    let mut v = v.as_ref().to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<()> {
    if let Some(secs) = std::env::args().find_map(|a| {
        a.strip_prefix("--fuzz-kernel=")
            .and_then(|v| v.parse::<u64>().ok())
    }) {
        return fuzz_kernel::fuzz_kernel(fuzz_kernel::Limit::Seconds(secs));
    }
    if let Some(n) = std::env::args().find_map(|a| {
        a.strip_prefix("--fuzz-kernel-batches=")
            .and_then(|v| v.parse::<u64>().ok())
    }) {
        return fuzz_kernel::fuzz_kernel(fuzz_kernel::Limit::Batches(n));
    }
    if let Some(dir) = std::env::args().find_map(|a| a.strip_prefix("--render=").map(PathBuf::from))
    {
        // Re-render REPORT.md from an existing report.json (after a change to the layout).
        let report: Value = serde_json::from_slice(&std::fs::read(dir.join("report.json"))?)?;
        std::fs::write(dir.join("REPORT.md"), report::markdown(&report))?;
        return Ok(());
    }
    if let Some(files) = std::env::args().find_map(|a| a.strip_prefix("--ab=").map(String::from)) {
        loader::raise_memlock();
        return kernel::ab(&files);
    }
    if let Some(arg) = std::env::args().find_map(|a| a.strip_prefix("--profile=").map(String::from))
    {
        loader::raise_memlock();
        return profile::profile(&arg);
    }
    if let Some(dir) =
        std::env::args().find_map(|a| a.strip_prefix("--captures=").map(PathBuf::from))
    {
        // The analyze phase's captures, kept for profiling `rocemon analyze` by hand.
        for (name, payloads) in analyze::SIZES.into_iter().chain([analyze::MIXED]) {
            println!("{}", analyze::big_capture(&dir, name, payloads)?.display());
        }
        return Ok(());
    }
    if let Some(dir) =
        std::env::args().find_map(|a| a.strip_prefix("--hostile-captures=").map(PathBuf::from))
    {
        // The hostile captures of the robustness phase, kept for profiling by hand.
        for p in robustness::hostile_captures(&dir)? {
            println!("{}", p.display());
        }
        return Ok(());
    }
    if std::env::args().any(|a| a == "--phase-scale") {
        loader::raise_memlock();
        println!("{}", scale::scale_bench()?);
        return Ok(());
    }
    // An A/B of a kernel change: the live shapes curve alone, printed, no report written
    // (`ROCEMON_BENCH_SHAPES_CASES` picks the cases).
    if std::env::args().any(|a| a == "--phase-shapes-live") {
        loader::raise_memlock();
        println!("{}", serde_json::to_string_pretty(&shapes::live_curve()?)?);
        return Ok(());
    }
    // The page again from report.json (a change to the report's wording, no run).
    if std::env::args().any(|a| a == "--phase-render") {
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/results"));
        let r: Value = serde_json::from_slice(&std::fs::read(dir.join("report.json"))?)?;
        std::fs::write(dir.join("REPORT.md"), report::markdown(&r))?;
        return Ok(());
    }
    let only: Option<String> =
        std::env::args().find_map(|a| a.strip_prefix("--only=").map(String::from));
    // `cargo bench` passes `--bench`; the output directory is the first other argument.
    let out = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        // `cargo bench` runs in agent/: default to the repository's bench/results.
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/results")));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the benchmarks load BPF programs and create namespaces: run `cargo xtask bench` as root");
    }
    loader::raise_memlock();
    std::fs::create_dir_all(&out)?;
    let tmp = rocemon_testkit::TempDir::new("rocemon-bench")?;
    let date = String::from_utf8_lossy(
        &Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d %H:%M UTC")
            .output()?
            .stdout,
    )
    .trim()
    .to_string();
    let want = |p: &str| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == p));
    let report = json!({
        "machine": report::machine(),
        "date": date,
        "kernel": if want("kernel") { kernel::kernel_bench()? } else { Value::Null },
        "analyze": if want("analyze") { analyze::analyze_bench(tmp.path())? } else { Value::Null },
        "scale": if want("scale") { scale::scale_in_subprocess()? } else { Value::Null },
        "live": if want("live") { live::live_bench()? } else { Value::Null },
        "shapes": if want("shapes") {
            json!({ "test_run": shapes::test_run_curve()?, "live": shapes::live_curve()? })
        } else {
            Value::Null
        },
        "sflow": if want("sflow") { sflow::sflow_bench()? } else { Value::Null },
        "sflow_rates": if want("sflow_rates") { sflow_rates::sflow_rates()? } else { Value::Null },
        "ipfix": if want("ipfix") { ipfix::ipfix_bench()? } else { Value::Null },
        "diagnosis": if want("diagnosis") { diagnosis::diagnosis_bench(tmp.path())? } else { Value::Null },
        "robustness": if want("robustness") {
            json!({
                "http": robustness::http_under_attack(BIN, tmp.path())?,
                "analyze": robustness::analyze_bounds(BIN, tmp.path())?,
                "fuzz": robustness::fuzz_figures(&out),
            })
        } else {
            Value::Null
        },
    });
    // With --only, the phases not run keep their figures from the last full report. The
    // goals' figures of the report replaced are kept beside this run's.
    let mut report = report;
    let read = |p: &std::path::Path| {
        std::fs::read(p)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    };
    let old = read(&out.join("report.json"));
    // `ROCEMON_BENCH_PREVIOUS`: the report to set beside this one instead (a series of
    // `--only` runs, each replacing the last, all held to the report before the series).
    let previous = match std::env::var_os("ROCEMON_BENCH_PREVIOUS") {
        Some(p) => Some(read(std::path::Path::new(&p)).with_context(|| {
            format!(
                "ROCEMON_BENCH_PREVIOUS={}: not a report.json",
                p.to_string_lossy()
            )
        })?),
        None => old.clone(),
    };
    if let Some(p) = &previous {
        report["previous"] = json!({
            "date": p["date"],
            "figures": report_goals::figures(p),
        });
    }
    if only.is_some() {
        if let Some(Value::Object(old)) = old {
            for (k, v) in old {
                if report[&k].is_null() {
                    report[&k] = v;
                }
            }
        }
    }
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    std::fs::write(out.join("REPORT.md"), report::markdown(&report))?;
    eprintln!("bench: wrote {}/REPORT.md and report.json", out.display());
    Ok(())
}

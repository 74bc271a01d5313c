//! `cargo xtask <task>`: setup, test, demo, bench, fuzz, install, dist, fixtures.

mod demo;
mod dist;
mod fuzz;
mod install;
mod setup;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::Command;

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing need (idempotent; only what is missing).
    Setup,
    /// Run the whole test suite (setup first when something is missing). Every test must run:
    /// one that cannot (not root) fails, unless --allow-skips.
    Test {
        /// Let tests that need root skip (listed after the run) instead of failing.
        #[arg(long)]
        allow_skips: bool,
        /// Extra arguments for `cargo test` (after --).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Two namespaces, rocemon on one end of a veth pair, built-in RoCEv2 traffic from the other.
    Demo(demo::DemoArgs),
    /// Run the benchmarks (as root) and write bench/results/REPORT.md and report.json.
    Bench {
        #[arg(long, default_value = "bench/results")]
        out: PathBuf,
        /// Only these phases (comma-separated: kernel, analyze, scale, live, shapes, sflow,
        /// sflow_rates, ipfix, diagnosis, robustness); the others keep their figures from the
        /// last report.
        #[arg(long, value_name = "PHASE[,PHASE...]")]
        only: Option<String>,
        /// Instead of the benchmarks: this build's XDP program against saved builds of the
        /// BPF object (comma-separated files), interleaved, on each fast-path frame.
        #[arg(long, value_name = "FILE[,FILE...]")]
        ab: Option<String>,
        /// Instead of the benchmarks: where the XDP program spends its time on bench frame
        /// FRAME (0: the plain RoCE WRITE), by source line, under `perf record`; with FLOWS,
        /// on that many flows taking turns; `live`: the agent's program on a veth pair.
        #[arg(long, value_name = "FRAME|live[,SECONDS[,FLOWS]]")]
        profile: Option<String>,
    },
    /// Fuzz the shared parser and the capture reader (cargo-fuzz), and the kernel programs
    /// against the host parser (BPF_PROG_TEST_RUN, as root).
    Fuzz(fuzz::FuzzArgs),
    /// Build the release binary and install it with the systemd unit and example config.
    Install(install::InstallArgs),
    /// Build the release binary and pack a tarball to install without the development
    /// toolchain: binary, unit, config, dashboards, rules, docs, example captures, install.sh.
    Dist(dist::DistArgs),
    /// Write the test fixtures (captures) into a directory.
    Fixtures {
        #[arg(long, default_value = "target/fixtures")]
        out: PathBuf,
    },
}

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs a command with inherited output, failing on a non-zero exit.
pub fn sh(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// `cargo xtask test`: the workspace's tests; skips fail unless allowed, and allowed skips
/// are listed at the end (libtest hides what a passing test printed).
fn test(allow_skips: bool, args: &[String]) -> Result<()> {
    setup::ensure()?;
    let log = root().join("target/skipped-tests.txt");
    std::fs::create_dir_all(root().join("target"))?;
    let _ = std::fs::remove_file(&log);
    let mut c = Command::new("cargo");
    c.current_dir(root())
        .args(["test", "--workspace", "--exclude", "agent-ebpf"])
        .env(rocemon_testkit::SKIP_LOG, &log);
    if !allow_skips {
        c.env(rocemon_testkit::REQUIRE_PRIVILEGED, "1");
    }
    setup::ebpf_env(&mut c);
    c.args(args);
    let mut result = sh(&mut c);
    if result.is_ok() && !allow_skips {
        result = kernel_differential();
    }
    let skipped = std::fs::read_to_string(&log).unwrap_or_default();
    if skipped.lines().count() > 0 {
        println!(
            "\nSKIPPED {} test(s), so this run does not cover them:",
            skipped.lines().count()
        );
        for l in skipped.lines() {
            println!("  {l}");
        }
    }
    result
}

/// The kernel differential pass of every test run: the same seeded, mutated fixture frames
/// (five batches of 20,000) through every kernel program and the host's counting; every
/// counter, session and flow must be equal (`fuzz/kernel_diff.rs`; `cargo xtask fuzz` runs
/// it for longer, with other seeds' worth of time).
fn kernel_differential() -> Result<()> {
    println!("kernel differential: five seeded batches through every program, two past the flow maps' capacity (LRU: later flows held exactly)");
    let mut c = Command::new("cargo");
    c.current_dir(root())
        .args(["bench", "-p", "rocemon", "--bench", "rocemon", "--"])
        .arg("--fuzz-kernel-batches=5");
    setup::ebpf_env(&mut c);
    sh(&mut c).context("the kernel differential found a difference (above)")
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::setup(),
        Task::Test { allow_skips, args } => test(allow_skips, &args),
        Task::Demo(a) => demo::demo(a),
        Task::Fuzz(a) => fuzz::fuzz(a),
        Task::Install(a) => install::install(a),
        Task::Dist(a) => dist::dist(a).map(|_| ()),
        Task::Bench {
            out,
            only,
            ab,
            profile,
        } => {
            setup::ensure()?;
            let out = if out.is_absolute() {
                out
            } else {
                root().join(out)
            };
            let mut c = Command::new("cargo");
            c.current_dir(root())
                .args(["bench", "-p", "rocemon", "--bench", "rocemon", "--"])
                .arg(&out);
            if let Some(phases) = only {
                c.arg(format!("--only={phases}"));
            }
            if let Some(files) = ab {
                c.arg(format!("--ab={files}"));
            }
            if let Some(p) = profile {
                c.arg(format!("--profile={p}"));
            }
            setup::ebpf_env(&mut c);
            sh(&mut c)
        }
        Task::Fixtures { out } => {
            for p in rocemon_testkit::fixtures::generate_all(&out)? {
                println!("{}", p.display());
            }
            Ok(())
        }
    }
}

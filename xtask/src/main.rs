//! `cargo xtask <task>`: setup, test, demo, bench, fuzz, install, fixtures.

mod demo;
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
    /// Run the whole test suite (setup first when something is missing).
    Test {
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
    },
    /// Fuzz the shared parser and the capture reader (cargo-fuzz), and the kernel programs
    /// against the host parser (BPF_PROG_TEST_RUN, as root).
    Fuzz(fuzz::FuzzArgs),
    /// Build the release binary and install it with the systemd unit and example config.
    Install(install::InstallArgs),
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

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::setup(),
        Task::Test { args } => {
            setup::ensure()?;
            let mut c = Command::new("cargo");
            c.current_dir(root())
                .args(["test", "--workspace", "--exclude", "agent-ebpf"]);
            setup::ebpf_env(&mut c);
            c.args(&args);
            sh(&mut c)
        }
        Task::Demo(a) => demo::demo(a),
        Task::Fuzz(a) => fuzz::fuzz(a),
        Task::Install(a) => install::install(a),
        Task::Bench { out } => {
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

//! `cargo xtask fuzz --seconds N`: cargo-fuzz (libFuzzer) on the shared parser, the sFlow collector and the capture
//! reader, seeded from `fuzz/seeds/`, then a differential fuzz of the kernel programs against
//! the host parser through BPF_PROG_TEST_RUN. Crashes land in `fuzz/artifacts/`; copy each into
//! `fuzz/regressions/<target>/` so the test suite replays it forever.

use crate::{root, setup, sh};
use anyhow::{bail, Context, Result};
use rocemon_testkit::fixtures;
use std::path::Path;
use std::process::Command;

#[derive(clap::Args)]
pub struct FuzzArgs {
    /// Seconds per target.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Only (re)write the seed corpus in fuzz/seeds/ and stop.
    #[arg(long)]
    write_seeds: bool,
}

/// Seeds: single frames from every fixture for the parser; small whole captures for the reader;
/// datagrams of the test encoder for the sFlow collector (next to pmacct's, kept in the repo).
fn write_seeds(dir: &Path) -> Result<()> {
    let parse = dir.join("parse");
    let capture = dir.join("capture");
    let sflow = dir.join("sflow");
    std::fs::create_dir_all(&parse)?;
    std::fs::create_dir_all(&capture)?;
    std::fs::create_dir_all(&sflow)?;
    for (i, d) in sflow_seeds().into_iter().enumerate() {
        std::fs::write(sflow.join(format!("encoder-{i}")), d)?;
    }
    for fx in fixtures::all() {
        for (i, (_, _, data)) in fx.records().enumerate().step_by(7).take(6) {
            std::fs::write(parse.join(format!("{}-{i}", fx.name)), data)?;
        }
        if ["malformed", "cooked_sll2", "snaplen54", "psn_health"].contains(&fx.name) {
            fx.write(&capture)?;
        }
    }
    Ok(())
}

/// sFlow datagrams: flow and expanded flow samples with RoCE headers, counter samples, an IPv6
/// agent, an unknown sample format.
fn sflow_seeds() -> Vec<Vec<u8>> {
    use rocemon_testkit::sflow::{Datagram, Sample};
    let header = fixtures::rc_ipv4()
        .records()
        .next()
        .map(|(_, _, d)| d[..d.len().min(128)].to_vec())
        .unwrap_or_default();
    let flow = |expanded: bool| Sample::Flow {
        expanded,
        sequence: 1,
        source_index: 3,
        sampling_rate: 4096,
        sample_pool: 4096,
        drops: 0,
        input: 3,
        output: 7,
        frame_length: 1090,
        header: header.clone(),
        switch: true,
    };
    let counters = |expanded: bool| Sample::Counters {
        expanded,
        sequence: 1,
        if_index: 7,
        speed: 400_000_000_000,
        in_octets: 1,
        out_octets: 2,
        ethernet: true,
    };
    [
        ("192.0.2.1", vec![flow(false), counters(false)]),
        ("2001:db8::1", vec![flow(true), counters(true)]),
        (
            "192.0.2.2",
            vec![
                Sample::Raw {
                    format: (9 << 12) | 5,
                    body: vec![0; 8],
                },
                flow(false),
            ],
        ),
    ]
    .into_iter()
    .map(|(agent, samples)| {
        Datagram {
            agent: agent.parse().expect("seed agent"),
            sub_agent: 0,
            sequence: 1,
            uptime_ms: 0,
            samples,
        }
        .encode()
    })
    .collect()
}

fn ensure_cargo_fuzz() -> Result<()> {
    let ok = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        println!("fuzz: cargo install cargo-fuzz");
        sh(Command::new("cargo").args(["install", "cargo-fuzz"]))?;
    }
    Ok(())
}

pub fn fuzz(a: FuzzArgs) -> Result<()> {
    let seeds = root().join("fuzz/seeds");
    if a.write_seeds {
        return write_seeds(&seeds);
    }
    setup::ensure()?;
    ensure_cargo_fuzz()?;
    let mut summary = Vec::new();
    let mut targets = Vec::new();
    for target in ["parse", "capture", "sflow"] {
        let corpus = root().join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        let out = Command::new("cargo")
            .current_dir(root().join("fuzz"))
            .args(["+nightly", "fuzz", "run", target])
            .arg(&corpus)
            .arg(seeds.join(target))
            .arg("--")
            .arg(format!("-max_total_time={}", a.seconds))
            .arg("-print_final_stats=1")
            // The capture and sflow targets link the agent library; its BPF object is not
            // needed here.
            .env("AYA_BUILD_SKIP", "1")
            .output()
            .context("run cargo fuzz")?;
        let log = String::from_utf8_lossy(&out.stderr);
        let runs = log
            .lines()
            .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "?".into());
        if !out.status.success() {
            eprintln!("{log}");
            if log.contains("failed to build fuzz script") {
                bail!("fuzz target {target} did not build (above)");
            }
            bail!("fuzz target {target} found a crash: see fuzz/artifacts/{target}/ and add it to fuzz/regressions/{target}/");
        }
        println!(
            "fuzz: {target}: {runs} executions in {} s, no crash",
            a.seconds
        );
        summary.push(format!("{target}: {runs} executions"));
        targets.push(serde_json::json!({"target": target, "executions": runs.parse::<u64>().ok()}));
    }
    // The kernel readers (XDP direct access, tc) against the host parser.
    let mut c = Command::new("cargo");
    c.current_dir(root())
        .args(["bench", "-p", "rocemon", "--bench", "rocemon", "--"])
        .arg(format!("--fuzz-kernel={}", a.seconds));
    setup::ebpf_env(&mut c);
    let out = c.output().context("run the kernel differential fuzzer")?;
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        eprintln!("{log}");
        bail!("the kernel differential fuzzer found a difference (above)");
    }
    let kernel_runs = log
        .lines()
        .find_map(|l| l.strip_prefix("fuzz-kernel: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok());
    if let Some(line) = log.lines().find(|l| l.starts_with("fuzz-kernel: ")) {
        println!("{line}");
    }
    // For the benchmark report (bench/results/REPORT.md, section 5).
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    std::fs::write(
        root().join("bench/results/fuzz.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "seconds": a.seconds,
            "date": date,
            "targets": targets,
            "kernel_runs": kernel_runs,
        }))?,
    )?;
    println!("fuzz: done ({})", summary.join(", "));
    Ok(())
}

//! `cargo xtask demo`: the main job on built-in traffic, with no setup beyond a clone.
//!
//! Two namespaces joined by a veth pair; `rocemon run` watches one end (XDP), tcpreplay plays
//! built-in RoCEv2 traffic (heavy WRITE flows, many light SEND/READ flows, ECN CE marks and
//! CNPs) into the other, in a loop. Ctrl-C or `--duration` stops and removes everything.

use crate::{root, setup, sh};
use anyhow::{bail, Context, Result};
use rocemon_testkit::netns::{http_get_in, metric_sum, VethPair};
use rocemon_testkit::{fixtures, TempDir};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    duration: Option<u64>,
    /// Traffic rate in Mbit/s.
    #[arg(long, default_value_t = 200.0)]
    mbps: f64,
    /// Address rocemon listens on inside the monitored namespace.
    #[arg(long, default_value = "127.0.0.1:9442")]
    listen: String,
}

fn stop(child: &mut Child) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

pub fn demo(a: DemoArgs) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the demo creates network namespaces and loads BPF programs: run it as root");
    }
    setup::ensure()?;
    println!("demo: building rocemon");
    let mut build = Command::new("cargo");
    build
        .current_dir(root())
        .args(["build", "--quiet", "-p", "rocemon"]);
    setup::ebpf_env(&mut build);
    sh(&mut build)?;
    let bin = root().join("target/debug/rocemon");

    let stopped = Arc::new(AtomicBool::new(false));
    let s = stopped.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::SeqCst))
        .context("install the Ctrl-C handler")?;

    let dir = TempDir::new("rocemon-demo")?;
    let pcap = fixtures::demo_traffic().write(dir.path())?;
    let pair = VethPair::new("rcdemo")?;
    println!(
        "demo: namespaces {} (rocemon on {}) and {} (traffic from {})",
        pair.ns_a, pair.a_if, pair.ns_b, pair.b_if
    );

    let mut agent = Command::new("ip")
        .args(["netns", "exec", &pair.ns_a])
        .arg(&bin)
        .args([
            "run",
            "--no-pin",
            "--iface",
            &pair.a_if,
            "--hooks",
            "xdp",
            "--listen",
            &a.listen,
            "--summary-every",
            "3",
        ])
        .spawn()
        .context("start rocemon")?;
    let started = Instant::now();
    loop {
        if let Ok((200, _)) = http_get_in(&pair.ns_a, &a.listen, "/metrics") {
            break;
        }
        if let Some(st) = agent.try_wait()? {
            bail!("rocemon exited with {st}");
        }
        if started.elapsed() > Duration::from_secs(30) || stopped.load(Ordering::SeqCst) {
            stop(&mut agent);
            bail!("rocemon did not serve /metrics within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "demo: metrics at http://{}/metrics inside namespace {}",
        a.listen, pair.ns_a
    );
    println!(
        "demo: scrape with   ip netns exec {} curl -s http://{}/metrics | grep ^rocemon_",
        pair.ns_a, a.listen
    );
    let mut traffic = Command::new("ip")
        .args([
            "netns",
            "exec",
            &pair.ns_b,
            "tcpreplay",
            "-q",
            "--loop=0",
            &format!("--mbps={}", a.mbps),
            "-i",
            &pair.b_if,
        ])
        .arg(&pcap)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start tcpreplay")?;
    match a.duration {
        Some(d) => println!(
            "demo: playing RoCEv2 traffic at {} Mbit/s for {d} s (Ctrl-C stops)",
            a.mbps
        ),
        None => println!(
            "demo: playing RoCEv2 traffic at {} Mbit/s; Ctrl-C stops",
            a.mbps
        ),
    }
    let deadline = a.duration.map(|d| Instant::now() + Duration::from_secs(d));
    while !stopped.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        if let Some(st) = agent.try_wait()? {
            stop(&mut traffic);
            bail!("rocemon exited with {st}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let last = http_get_in(&pair.ns_a, &a.listen, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    stop(&mut traffic);
    stop(&mut agent);
    let status = agent.wait()?;
    println!(
        "demo: stopped; rocemon counted {} RoCE packets, {} CE-marked, {} CNPs; exit {status}; namespaces removed",
        metric_sum(&last, "rocemon_packets_total", &[]),
        metric_sum(&last, "rocemon_ecn_packets_total", &[("codepoint", "ce")]),
        metric_sum(&last, "rocemon_cnp_packets_total", &[])
    );
    if metric_sum(&last, "rocemon_packets_total", &[]) == 0.0 {
        bail!("the demo counted no RoCE packets");
    }
    Ok(())
}

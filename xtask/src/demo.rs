//! `cargo xtask demo`: the main job on built-in traffic, with no setup beyond a clone.
//!
//! rocemon runs in the host's own namespace on the host ends of two veth pairs (a fabric
//! link and a training host's link), so `/metrics`, `/api/v1/*`, `rocemon top` and a browser
//! reach it on localhost; traffic comes from a namespace, in acts: steady background RDMA,
//! two heavy writers that become elephants on one predicted path, an incast (CE marks,
//! CNPs), a PFC storm with RoCE outside the lossless class, and a training job's rhythm. Each
//! finding is announced when rocemon shows it, with where to see it. `--prometheus` adds a
//! local Prometheus with the shipped rules. Ctrl-C (or SIGTERM, SIGHUP) or `--duration` stops
//! everything and removes what the demo created.

use crate::{root, setup, sh};
use anyhow::{bail, Context, Result};
use rocemon_testkit::demo;
use rocemon_testkit::host_links::HostLinks;
use rocemon_testkit::metrics::{http_get_ok, try_metric_sum};
use rocemon_testkit::sender::{Round, Sender};
use rocemon_testkit::TempDir;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    duration: Option<u64>,
    /// Address rocemon serves /metrics and the API on (the host's own namespace).
    #[arg(long, default_value = "127.0.0.1:9442")]
    listen: String,
    /// Also start a local Prometheus (the Debian package) with the shipped rules scraping
    /// the demo, and show the alerts as they go pending and fire.
    #[arg(long)]
    prometheus: bool,
    /// Address of that Prometheus.
    #[arg(long, default_value = "127.0.0.1:9090")]
    prometheus_listen: String,
}

/// One act: traffic sent round after round out of the namespace's end of a link, from `at`
/// seconds on (`pps`: frames per second; None: the frames' own pace, `length` a round).
struct Act {
    at: u64,
    what: &'static str,
    link: usize,
    round: fn(u64) -> Round,
    pps: Option<u32>,
    length: fn() -> Duration,
}

fn no_length() -> Duration {
    Duration::ZERO
}

const FABRIC: usize = 0;
const JOB: usize = 1;

const ACTS: [Act; 5] = [
    Act {
        at: 0,
        what: "steady background RDMA: 48 light connections (SEND, READ, ACK)",
        link: FABRIC,
        round: demo::background,
        pps: Some(2_000),
        length: no_length,
    },
    Act {
        at: 3,
        what: "two heavy writers start (RDMA WRITE, about 90 Mb/s each)",
        link: FABRIC,
        round: demo::writers,
        pps: Some(20_000),
        length: no_length,
    },
    Act {
        at: 8,
        what: "an incast: eight senders to one receiver, the switch queue marks CE",
        link: FABRIC,
        round: demo::incast,
        pps: Some(6_000),
        length: no_length,
    },
    Act {
        at: 12,
        what: "a PFC storm on priority 3, and a host sending RoCE with DSCP 0",
        link: FABRIC,
        round: demo::pfc_storm,
        pps: Some(6_000),
        length: no_length,
    },
    Act {
        at: 15,
        what: "a training job on the second link: 100 ms steps, 20 ms of communication each",
        link: JOB,
        round: demo::rhythm,
        pps: None,
        length: demo::rhythm_length,
    },
];

/// A child process that is stopped (SIGTERM, then waited for) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// A free port on 127.0.0.1 to suggest.
fn free_port() -> Option<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()
        .map(|a| a.port())
}

/// Fails with the fix when `addr` cannot be listened on (a port taken names a free one).
fn check_port(addr: &str, flag: &str) -> Result<()> {
    match std::net::TcpListener::bind(addr) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let free = free_port().map_or("PORT".to_string(), |p| p.to_string());
            bail!(
                "{addr} is taken (another rocemon, demo or exporter listens there); run `cargo xtask demo {flag} 127.0.0.1:{free}` ({free} is free now)"
            )
        }
        Err(e) => bail!("cannot listen on {addr}: {e}; choose another with {flag}"),
    }
}

fn json(addr: &str, path: &str) -> Value {
    http_get_ok(addr, path)
        .and_then(|b| serde_json::from_str(&b).ok())
        .unwrap_or(Value::Null)
}

pub fn demo(a: DemoArgs) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the demo creates network namespaces and loads BPF programs: run it as root");
    }
    check_port(&a.listen, "--listen")?;
    if a.prometheus {
        check_port(&a.prometheus_listen, "--prometheus-listen")?;
    }
    setup::ensure()?;
    println!("demo: building rocemon (a few minutes on a fresh clone)");
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
        .context("install the Ctrl-C (SIGINT, SIGTERM, SIGHUP) handler")?;

    let dir = TempDir::new("rocemon-demo")?;
    let links = HostLinks::new("rcd", &["f", "j"])?;
    let (fabric, job) = (links.links[FABRIC].0.clone(), links.links[JOB].0.clone());
    let (ns, hosts) = (
        links.ns.clone(),
        links.links.iter().map(|l| l.0.clone()).collect::<Vec<_>>(),
    );
    let outcome = run(&a, &bin, &links, dir.path(), &stopped);
    drop(links);
    let left = HostLinks::leftovers(&ns, &hosts);
    if !left.is_empty() {
        bail!("the demo left {} behind", left.join(", "));
    }
    println!("demo: removed namespace {ns} and links {fabric}, {job}; nothing left behind");
    outcome
}

/// The demo between creating the links and removing them (whatever happens here, the caller
/// removes them).
fn run(
    a: &DemoArgs,
    bin: &Path,
    links: &HostLinks,
    dir: &Path,
    stopped: &AtomicBool,
) -> Result<()> {
    let (fabric, job) = (&links.links[FABRIC].0, &links.links[JOB].0);
    println!(
        "demo: rocemon watches {fabric} (a fabric link) and {job} (a training host's link) in this namespace; traffic comes from namespace {}",
        links.ns
    );
    let cfg = dir.join("rocemon.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"# The demo's configuration: elephants above 5 MB/s for a second, a switch hash
# model (CRC-16/XMODEM over the 5-tuple, {paths} paths) for predicted ECMP paths.
interfaces = [{fabric:?}, {job:?}]
hooks = ["xdp"]
pin = false
listen = {listen:?}
poll_interval_ms = 500
[elephant]
threshold_bytes_per_second = 5000000.0
min_duration_seconds = 1.0
[ecmp.hash]
function = "{function}"
paths = {paths}
"#,
            listen = a.listen,
            function = demo::HASH_FUNCTION,
            paths = demo::HASH_PATHS,
        ),
    )?;
    let agent = Proc(
        Command::new(bin)
            .args(["run", "--config"])
            .arg(&cfg)
            .args(["--summary-every", "15"])
            .spawn()
            .context("start rocemon")?,
    );
    let agent = wait_serving(agent, &a.listen, stopped)?;
    let url = format!("http://{}", a.listen);
    println!(
        "demo: rocemon serves {url}/metrics and {url}/api/v1/{{flows,ecmp,lossless,training}}"
    );
    println!(
        "demo: watch it live with   {} top --addr {}",
        bin.display(),
        a.listen
    );
    let prom = if a.prometheus {
        Some(start_prometheus(a, dir)?)
    } else {
        None
    };
    let mut acts: Vec<(&Act, Option<Sender>)> = ACTS.iter().map(|act| (act, None)).collect();
    let mut seen = Findings::default();
    let mut alerts = std::collections::BTreeMap::new();
    let mut opened = std::collections::BTreeSet::new();
    let started = Instant::now();
    let deadline = a.duration.map(|d| started + Duration::from_secs(d));
    match a.duration {
        Some(d) => println!("demo: running for {d} s (Ctrl-C stops)"),
        None => println!("demo: running until Ctrl-C"),
    }
    let mut agent = agent;
    while !stopped.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        let t = started.elapsed().as_secs_f64();
        for (act, proc) in acts.iter_mut() {
            if proc.is_none() && t >= act.at as f64 {
                *proc = Some(play(act, links)?);
                println!("[{t:5.1} s] act: {}", act.what);
            }
        }
        seen.check(&a.listen, job, t);
        show_findings(&a.listen, &mut opened, t);
        if prom.is_some() {
            show_alerts(&a.prometheus_listen, &mut alerts, t);
        }
        if let Some(st) = agent.0.try_wait()? {
            bail!("rocemon exited with {st}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let last = http_get_ok(&a.listen, "/metrics").unwrap_or_default();
    for (act, sender) in acts {
        if let Some(Err(e)) = sender.map(Sender::finish) {
            bail!("the traffic of act {:?} failed: {e:#}", act.what);
        }
    }
    drop(prom);
    // SIGTERM: rocemon detaches its programs (not pinned) and exits.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(agent.0.id() as i32, libc::SIGTERM) };
    let status = agent.0.wait()?;
    let sum = |name: &str, f: &[(&str, &str)]| try_metric_sum(&last, name, f).unwrap_or(0.0);
    println!(
        "demo: stopped; rocemon counted {} RoCE packets, {} CE-marked, {} CNPs, {} PFC frames; {} of {} findings shown; rocemon exited with {status}",
        sum("rocemon_packets_total", &[]),
        sum("rocemon_ecn_packets_total", &[("codepoint", "ce")]),
        sum("rocemon_cnp_packets_total", &[]),
        sum("rocemon_pfc_frames_total", &[]),
        seen.count(),
        Findings::TOTAL
    );
    if !status.success() {
        bail!("rocemon exited with {status}");
    }
    if sum("rocemon_packets_total", &[]) == 0.0 {
        bail!("the demo counted no RoCE packets");
    }
    Ok(())
}

/// Waits until the agent serves /metrics (30 s at most).
fn wait_serving(mut agent: Proc, listen: &str, stopped: &AtomicBool) -> Result<Proc> {
    let t = Instant::now();
    while http_get_ok(listen, "/metrics").is_none() {
        if let Some(st) = agent.0.try_wait()? {
            bail!("rocemon exited with {st}");
        }
        if t.elapsed() > Duration::from_secs(30) || stopped.load(Ordering::SeqCst) {
            bail!("rocemon did not serve /metrics within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(agent)
}

/// An act's traffic, out of the namespace's end of its link.
fn play(act: &Act, links: &HostLinks) -> Result<Sender> {
    Sender::start(
        &links.ns,
        &links.links[act.link].1,
        act.pps,
        (act.length)(),
        act.round,
    )
}

/// What the demo has announced so far.
#[derive(Default)]
struct Findings {
    flows: bool,
    elephants: bool,
    ecmp: bool,
    congestion: bool,
    pfc: bool,
    lossy: bool,
    rhythm: bool,
    slow_step: bool,
}

impl Findings {
    const TOTAL: usize = 8;

    fn count(&self) -> usize {
        [
            self.flows,
            self.elephants,
            self.ecmp,
            self.congestion,
            self.pfc,
            self.lossy,
            self.rhythm,
            self.slow_step,
        ]
        .iter()
        .filter(|x| **x)
        .count()
    }

    /// Reads the agent and announces what it shows for the first time.
    fn check(&mut self, addr: &str, job: &str, t: f64) {
        let Some(m) = http_get_ok(addr, "/metrics") else {
            return;
        };
        let sum = |name: &str, f: &[(&str, &str)]| try_metric_sum(&m, name, f).unwrap_or(0.0);
        let say = |what: String, see: String| {
            println!("[{t:5.1} s] rocemon: {what}\n          see: {see}");
        };
        if !self.flows && sum("rocemon_flows", &[]) >= 40.0 {
            self.flows = true;
            say(
                format!("{} RoCE flows in the flow table", sum("rocemon_flows", &[])),
                format!("curl -s http://{addr}/api/v1/flows"),
            );
        }
        if !self.elephants && sum("rocemon_elephant_flows", &[]) >= 2.0 {
            self.elephants = true;
            let flows = json(addr, "/api/v1/flows?limit=10");
            let list: Vec<String> = flows["flows"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| f["elephant"] == true)
                .map(|f| {
                    format!(
                        "{} -> {} sport {} at {:.1} Mb/s",
                        f["src"].as_str().unwrap_or("?"),
                        f["dst"].as_str().unwrap_or("?"),
                        f["sport"],
                        f["rate_bytes_per_second"].as_f64().unwrap_or(0.0) * 8.0 / 1e6
                    )
                })
                .collect();
            say(
                format!("elephants: {}", list.join(", ")),
                "rocemon_elephant_flows, rocemon_flow_elephant (top-K flows)".into(),
            );
        }
        if !self.ecmp && sum("rocemon_ecmp_predicted_colliding_paths", &[]) >= 1.0 {
            self.ecmp = true;
            let e = json(addr, "/api/v1/ecmp");
            let paths: Vec<String> = e["predicted"]["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{} {}", p["member"].as_str().unwrap_or("?"), p["elephants"]))
                .collect();
            say(
                format!(
                    "ECMP collision predicted: the hash model puts both elephants on one path while others carry none (elephants per path: {})",
                    paths.join(", ")
                ),
                format!("rocemon_ecmp_predicted_colliding_paths, curl -s http://{addr}/api/v1/ecmp"),
            );
        }
        let ce = sum("rocemon_ecn_packets_total", &[("codepoint", "ce")]);
        let cnp = sum("rocemon_cnp_packets_total", &[]);
        if !self.congestion && ce > 0.0 && cnp > 0.0 {
            self.congestion = true;
            say(
                format!("congestion: {ce} CE-marked packets and {cnp} CNPs so far"),
                "rocemon_ecn_packets_total{codepoint=\"ce\"}, rocemon_cnp_packets_total".into(),
            );
        }
        let xoff = sum(
            "rocemon_pfc_priority_frames_total",
            &[("priority", "3"), ("type", "xoff")],
        );
        if !self.pfc && xoff > 0.0 {
            self.pfc = true;
            say(
                format!("PFC: {xoff} XOFF frames on priority 3 (a pause storm)"),
                format!("rocemon_pfc_priority_frames_total, curl -s http://{addr}/api/v1/lossless"),
            );
        }
        let lossy = sum("rocemon_lossy_roce_packets_total", &[]);
        if !self.lossy && lossy > 0.0 {
            self.lossy = true;
            say(
                format!("{lossy} RoCE packets outside the lossless class (DSCP 0, not 26)"),
                "rocemon_lossy_roce_packets_total, rocemon_dscp_packets_total".into(),
            );
        }
        let training = json(addr, "/api/v1/training");
        let iface = training["interfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["iface"] == job)
            .cloned()
            .unwrap_or(Value::Null);
        if let (false, Some(p)) = (self.rhythm, iface["period_seconds"].as_f64()) {
            self.rhythm = true;
            say(
                format!(
                    "training rhythm on {job}: steps of {:.1} ms, communication {:.0}% of each",
                    p * 1e3,
                    iface["duty_ratio"].as_f64().unwrap_or(0.0) * 100.0
                ),
                format!(
                    "rocemon_training_step_period_seconds, curl -s http://{addr}/api/v1/training"
                ),
            );
        }
        if !self.slow_step && iface["slow_steps"].as_u64().unwrap_or(0) > 0 {
            self.slow_step = true;
            say(
                format!("a slow training step on {job} (twice the period)"),
                "rocemon_training_slow_steps_total".into(),
            );
        }
    }
}

/// Prometheus with the shipped rules, scraping the demo every second.
/// Prints each finding of the agent's `/api/v1/findings` when it first shows as active.
fn show_findings(addr: &str, opened: &mut std::collections::BTreeSet<String>, t: f64) {
    let doc = json(addr, "/api/v1/findings");
    for f in doc["active"].as_array().into_iter().flatten() {
        let (kind, subject) = (
            f["kind"].as_str().unwrap_or("?"),
            f["subject"].as_str().unwrap_or("?"),
        );
        if opened.insert(format!("{kind} {subject}")) {
            println!(
                "[{t:5.1} s] rocemon finding ({}): {}  [{kind}, curl {addr}/api/v1/findings, docs/runbook.md#{kind}]",
                f["severity"].as_str().unwrap_or("?"),
                f["summary"].as_str().unwrap_or("")
            );
        }
    }
}

fn start_prometheus(a: &DemoArgs, dir: &Path) -> Result<Proc> {
    let rules = root().join("dashboards/rocemon.rules.yml");
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: rocemon\n    static_configs:\n      - targets: ['{}']\n",
            rules.display(),
            a.listen
        ),
    )?;
    let p = Proc(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={}", a.prometheus_listen))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start prometheus (Debian package prometheus; `cargo xtask setup`)")?,
    );
    let t = Instant::now();
    while http_get_ok(&a.prometheus_listen, "/-/ready").is_none() {
        if t.elapsed() > Duration::from_secs(30) {
            bail!("prometheus did not become ready within 30 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "demo: Prometheus at http://{} with the shipped rules (dashboards/rocemon.rules.yml) scraping rocemon every second",
        a.prometheus_listen
    );
    Ok(p)
}

/// Prints the alerts whose state changed (pending, firing) since the last look.
fn show_alerts(addr: &str, known: &mut std::collections::BTreeMap<String, String>, t: f64) {
    let v = json(addr, "/api/v1/alerts");
    for al in v["data"]["alerts"].as_array().into_iter().flatten() {
        let name = al["labels"]["alertname"].as_str().unwrap_or("?");
        let iface = al["labels"]["iface"].as_str().unwrap_or("");
        let state = al["state"].as_str().unwrap_or("?").to_string();
        let key = format!("{name} {iface}");
        if known.get(&key) != Some(&state) {
            println!(
                "[{t:5.1} s] prometheus: alert {name} {iface} is {state}: {}",
                al["annotations"]["summary"].as_str().unwrap_or("")
            );
            known.insert(key, state);
        }
    }
}

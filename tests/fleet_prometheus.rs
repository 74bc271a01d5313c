//! A fleet on real Prometheus, as the deployment guide lays it out: four agents (one per
//! host, each watching its own veth and receiving the same RoCE capture in a loop), two shard
//! Prometheus servers each scraping two agents with the shipped rules (their `instance:*`
//! series), and a global Prometheus that federates the shards' `instance:*` series (and `up`)
//! and evaluates the shipped `fabric:*` rules and fleet alerts over them. The global's fabric figures equal what
//! the agents' own `/metrics` add up to, and its CE share is the capture's (tshark).

use rocemon_testkit::dashboards::{replay_forever, Killed};
use rocemon_testkit::fleet::Fleet;
use rocemon_testkit::metrics::try_metric_sum;
use rocemon_testkit::metrics::url_encode as encode;
use rocemon_testkit::netns::{http_get_in, run_args, Agent};
use rocemon_testkit::{fixtures, TempDir};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../dashboards/rocemon.rules.yml"
);
const AGENTS: [&str; 4] = [
    "127.0.0.1:9450",
    "127.0.0.1:9451",
    "127.0.0.1:9452",
    "127.0.0.1:9453",
];
const SHARDS: [&str; 2] = ["127.0.0.1:9091", "127.0.0.1:9092"];
const GLOBAL: &str = "127.0.0.1:9093";

fn prometheus(ns: &str, dir: &std::path::Path, name: &str, addr: &str, config: String) -> Killed {
    let cfg = dir.join(format!("{name}.yml"));
    std::fs::write(&cfg, config).expect("write the configuration");
    let child = Command::new("ip")
        .args(["netns", "exec", ns, "prometheus"])
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join(name).display()))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus is not installed; run `cargo xtask setup` (Debian package prometheus)");
    Killed(child)
}

/// The samples of an instant query at `addr`: (labels, value).
fn query(ns: &str, addr: &str, q: &str) -> Vec<(serde_json::Value, f64)> {
    let path = format!("/api/v1/query?query={}", encode(q));
    let Ok((200, body)) = http_get_in(ns, addr, &path) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let x = r["value"][1].as_str()?.parse().ok()?;
            Some((r["metric"].clone(), x))
        })
        .collect()
}

/// The sum of `metric` over the four agents' own `/metrics`.
fn agents_sum(ns: &str, metric: &str) -> f64 {
    AGENTS
        .iter()
        .map(|a| {
            http_get_in(ns, a, "/metrics")
                .ok()
                .and_then(|(_, b)| try_metric_sum(&b, metric, &[]))
                .unwrap_or(0.0)
        })
        .sum()
}

/// Waits (120 s at most) until `ok` holds; panics with `what` and the last reading.
fn wait(what: &str, mut ok: impl FnMut() -> Result<(), String>) {
    let t = Instant::now();
    loop {
        match ok() {
            Ok(()) => return,
            Err(e) if t.elapsed() > Duration::from_secs(120) => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

#[test]
fn a_global_prometheus_federating_two_shards_adds_up_the_fleet() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    rocemon_testkit::require_tshark();
    let dir = TempDir::new("rocemon-fleet").unwrap();
    let capture = fixtures::rc_ipv4().write(dir.path()).unwrap();
    let want = rocemon_testkit::tshark::expected(&capture).unwrap();
    let fleet = Fleet::new(AGENTS.len()).unwrap();
    let mut agents = Vec::new();
    for ((a_if, _), addr) in fleet.links.iter().zip(AGENTS) {
        let mut args = run_args(a_if, addr, "200");
        // Every flow an elephant: the fleet's elephants are then the capture's flows.
        args.extend(["--elephant-bps", "1"]);
        let mut agent = Agent::start(&fleet.ns, BIN, &args).unwrap();
        agent.wait_ready(&fleet.ns, addr).unwrap();
        agents.push(agent);
    }
    let _replays: Vec<Killed> = fleet
        .links
        .iter()
        .map(|(_, b_if)| {
            replay_forever(
                &fleet.senders,
                b_if,
                std::slice::from_ref(&capture),
                Some(500),
            )
        })
        .collect();
    let shard = |i: usize| {
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n  external_labels:\n    shard: s{i}\nrule_files:\n  - {RULES}\nscrape_configs:\n  - job_name: rocemon\n    static_configs:\n      - targets: ['{}', '{}']\n",
            AGENTS[2 * i],
            AGENTS[2 * i + 1]
        )
    };
    let _shards: Vec<Killed> = (0..SHARDS.len())
        .map(|i| {
            prometheus(
                &fleet.ns,
                dir.path(),
                &format!("shard{i}"),
                SHARDS[i],
                shard(i),
            )
        })
        .collect();
    let global = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {RULES}\nscrape_configs:\n  - job_name: federate\n    honor_labels: true\n    metrics_path: /federate\n    params:\n      'match[]': ['{{__name__=~\"instance:rocemon_.*|up\"}}']\n    static_configs:\n      - targets: ['{}', '{}']\n",
        SHARDS[0], SHARDS[1]
    );
    let _global = prometheus(&fleet.ns, dir.path(), "global", GLOBAL, global);
    let ns = fleet.ns.clone();
    let one = |q: &str| -> Result<f64, String> {
        let r = query(&ns, GLOBAL, q);
        match r.as_slice() {
            [(_, v)] => Ok(*v),
            _ => Err(format!("{q}: {r:?}")),
        }
    };

    // The fleet's elephants: every flow of the capture on each of the four hosts (tshark), as
    // the agents count them, summed by the global Prometheus from the shards' instance series.
    let flows = want.flows.len() as f64;
    wait("the fleet's elephants", || {
        let agents = agents_sum(&ns, "rocemon_elephant_flows");
        let global = one("fabric:rocemon_elephant_flows")?;
        if agents == 4.0 * flows && global == agents {
            Ok(())
        } else {
            Err(format!(
                "agents {agents}, global {global}, tshark 4 x {flows}"
            ))
        }
    });
    // The instance series come from both shards, one per host.
    let hosts = query(&ns, GLOBAL, "instance:rocemon_elephant_flows");
    assert_eq!(hosts.len(), 4, "{hosts:?}");
    let shards: std::collections::BTreeSet<String> = hosts
        .iter()
        .filter_map(|(m, _)| m["shard"].as_str().map(String::from))
        .collect();
    assert_eq!(shards.len(), 2, "{hosts:?}");
    // The fleet alert's input: every agent up, as the shards saw them.
    wait("the fleet's agents up", || {
        match one("count(up{job=\"rocemon\"} == 1)")? {
            4.0 => Ok(()),
            n => Err(format!("{n} agents up")),
        }
    });
    // Findings active across hosts, by kind: the global's sum is the agents'.
    wait("the fleet's findings", || {
        let agents = agents_sum(&ns, "rocemon_findings_active");
        let global: f64 = query(&ns, GLOBAL, "fabric:rocemon_findings_active")
            .iter()
            .map(|(_, v)| v)
            .sum();
        if agents > 0.0 && global == agents {
            Ok(())
        } else {
            Err(format!("agents {agents}, global {global}"))
        }
    });
    // The fabric-wide CE share: the capture's, as tshark counts its ECN codepoints (rates over
    // a minute of a capture replayed in a loop: within two points).
    let ce_share = want.ecn[3] as f64 / want.ecn.iter().sum::<u64>() as f64;
    wait("the fabric's CE share", || {
        let global = one("fabric:rocemon_ecn_ce_ratio:rate1m")?;
        if (global - ce_share).abs() < 0.02 {
            Ok(())
        } else {
            Err(format!("global {global}, tshark {ce_share}"))
        }
    });
    // What the deployment guide sizes shards from: series per agent, and what each shard and
    // the global hold (printed; `--nocapture` shows them).
    for a in AGENTS {
        let (_, body) = http_get_in(&ns, a, "/metrics").unwrap();
        let series = body
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        assert!(series > 0);
        eprintln!("fleet: agent {a}: {series} series");
    }
    for p in SHARDS.iter().chain([&GLOBAL]) {
        let (_, body) = http_get_in(&ns, p, "/metrics").unwrap();
        let head = try_metric_sum(&body, "prometheus_tsdb_head_series", &[]);
        eprintln!("fleet: prometheus {p}: {head:?} head series");
    }
    for a in agents {
        let _ = a.stop_ok();
    }
}

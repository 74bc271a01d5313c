//! Findings of the live agent: planted causes replayed through a veth pair, read from
//! `/api/v1/findings`, the metrics and the log; each opens, and closes once its cause is gone.

use rocemon_testkit::findings_lab::ce_exchange;
use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::netns::{http_get_in, try_metric_sum, Agent, VethPair};
use rocemon_testkit::TempDir;
use serde_json::Value;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9450";

fn findings(ns: &str) -> Value {
    let (code, body) = http_get_in(ns, ADDR, "/api/v1/findings").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn kinds(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

/// rocemon on `ifn` in `ns` with `hooks`, unpinned, polling every 200 ms, ready.
fn start(ns: &str, ifn: &str, hooks: &str) -> Agent {
    let args = [
        "run",
        "--iface",
        ifn,
        "--hooks",
        hooks,
        "--no-pin",
        "--listen",
        ADDR,
        "--poll-interval-ms",
        "200",
    ];
    let mut agent = Agent::start(ns, BIN, &args).unwrap();
    agent.wait_ready(ns, ADDR).unwrap();
    agent
}

/// Waits (generously) until `/api/v1/findings` satisfies `cond`.
fn wait_findings(ns: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let t = std::time::Instant::now();
    loop {
        let f = findings(ns);
        if cond(&f) {
            return f;
        }
        assert!(t.elapsed() < Duration::from_secs(90), "{what}: {f:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// CE-marked traffic into a host that sends no CNP: `congestion` and `cnp_missing` open (a
/// log line each, the metrics, the API), and close a window after the traffic stopped.
#[test]
fn ce_marks_without_cnps_open_congestion_and_cnp_missing_then_close() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let dir = TempDir::new("rocemon-live-findings").unwrap();
    let pcap = whole(
        "ce-no-cnp",
        Format::PcapNanos,
        ce_exchange(400, 5, None),
        true,
    )
    .write(dir.path())
    .unwrap();
    let pair = VethPair::new("rcfind").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let mut agent = start(ns, ifn, "xdp,tc-egress");
    // Alive at once; ready once the first poll is made.
    assert_eq!(http_get_in(ns, ADDR, "/healthz").unwrap().0, 200);
    let t = std::time::Instant::now();
    while http_get_in(ns, ADDR, "/readyz").unwrap().0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(30), "never ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(kinds(&findings(ns)["active"]), Vec::<String>::new());
    pair.replay_from_b(&pcap).unwrap();
    let f = wait_findings(ns, "congestion and cnp_missing open", |f| {
        let k = kinds(&f["active"]);
        k.contains(&"congestion".into()) && k.contains(&"cnp_missing".into())
    });
    let c = f["active"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["kind"] == "congestion")
        .unwrap();
    // 400 data packets to B (80 CE-marked; B's 400 ACKs are not B's data): 20% of the RoCE
    // to that receiver, as `analyze` of the same capture says it.
    assert_eq!(c["evidence"]["ce_packets"], 80, "{c}");
    assert_eq!(c["evidence"]["packets"], 400, "{c}");
    assert_eq!(
        c["subject"],
        format!("receiver {}", rocemon_testkit::findings_lab::B)
    );
    assert!(c["start_s"].as_f64().unwrap() > 1.7e9, "Unix time: {c}");
    let body = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(30), |b| {
            try_metric_sum(b, "rocemon_findings_active", &[("kind", "cnp_missing")]) == Some(1.0)
        })
        .unwrap();
    assert_eq!(
        try_metric_sum(&body, "rocemon_findings_total", &[("kind", "congestion")]),
        Some(1.0)
    );
    // Nothing more arrives: a window later both close and are listed as recent.
    let f = wait_findings(ns, "both close", |f| {
        kinds(&f["active"]).is_empty() && kinds(&f["recent"]).contains(&"cnp_missing".into())
    });
    assert!(kinds(&f["recent"]).contains(&"congestion".into()), "{f:#}");
    let log = agent.stop_ok();
    assert!(
        log.contains("finding opened: [warning] congestion"),
        "{log}"
    );
    assert!(log.contains("finding closed: cnp_missing"), "{log}");
}

/// A watched interface that goes away is a critical `link_down` until it is back.
#[test]
fn a_deleted_interface_is_link_down_until_it_comes_back() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let pair = VethPair::new("rcldown").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let agent = start(ns, ifn, "xdp");
    pair.delete_link().unwrap();
    let f = wait_findings(ns, "link_down opens", |f| {
        kinds(&f["active"]).contains(&"link_down".into())
    });
    let l = &f["active"][0];
    assert_eq!(l["severity"], "critical");
    assert_eq!(l["subject"], format!("interface {ifn}"));
    assert_eq!(l["runbook"], "docs/runbook.md#link_down");
    pair.create_link(1).unwrap();
    wait_findings(ns, "link_down closes", |f| {
        !kinds(&f["active"]).contains(&"link_down".into())
            && kinds(&f["recent"]).contains(&"link_down".into())
    });
    let log = agent.stop_ok();
    assert!(
        log.contains("finding opened: [critical] link_down"),
        "{log}"
    );
}

/// Waits (generously) until `alerting(name)` lists an alert whose `label` is `value`.
fn wait_for(alerting: &dyn Fn(&str) -> Vec<Value>, name: &str, label: &str, value: &str) {
    let t = std::time::Instant::now();
    loop {
        if alerting(name).iter().any(|x| x["metric"][label] == value) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{name} with {label}={value} never pending"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A child process killed (and reaped) on every exit path.
struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Traffic that raises `congestion` and `cnp_missing` (CE marks, no CNP back), `lossy_roce`
/// (150 RoCE packets with DSCP 0 in a loop of about 1,000) and `shared_5tuple` (two QPs of
/// A on one UDP source port).
fn planted() -> Vec<(u64, Vec<u8>)> {
    use rocemon_testkit::findings_lab::{A, B, T0};
    use rocemon_testkit::frames::Roce;
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let mut f = ce_exchange(400, 5, None);
    for k in 0..150u64 {
        let mut d = Roce::new(ip(A), ip(B), 0xC300, 0x400, 0x0A);
        d.psn = k as u32;
        d.payload = 256;
        d.dma_len = 256;
        d.dscp = 0;
        f.push((T0 + k * 100_000, d.frame()));
    }
    for k in 0..20u64 {
        let mut d = Roce::new(ip(A), ip(B), 0xC555, 0x500 + (k % 2) as u32, 0x0A);
        d.psn = (k / 2) as u32;
        d.payload = 256;
        d.dma_len = 256;
        f.push((T0 + k * 500_000, d.frame()));
    }
    f.sort_by_key(|(t, _)| *t);
    f
}

/// The rules' alert per finding kind, in a real Prometheus scraping a live agent: each kind
/// the live agent raises (planted here; the storm, elephants, collisions and slow steps are
/// planted in the dashboards' lab) goes pending with its kind; the sFlow loss alert for a
/// switch that loses half its datagrams; `link_down` and the interface-down alert once the
/// watched interface is deleted.
#[test]
fn each_live_finding_kind_raises_its_alert_in_a_real_prometheus() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let dir = TempDir::new("rocemon-live-alerts").unwrap();
    let pcap = whole("planted", Format::PcapNanos, planted(), true)
        .write(dir.path())
        .unwrap();
    let pair = VethPair::new("rcfal").unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let sflow = "127.0.0.1:16343";
    let mut agent = Agent::start(
        ns,
        BIN,
        &[
            "run",
            "--iface",
            ifn,
            "--hooks",
            "xdp,tc-egress",
            "--no-pin",
            "--listen",
            ADDR,
            "--poll-interval-ms",
            "200",
            "--sflow-listen",
            sflow,
        ],
    )
    .unwrap();
    agent.wait_ready(ns, ADDR).unwrap();
    // A switch whose every other sFlow datagram is lost on the way, ten a second.
    let _switch = rocemon_testkit::sflow::switch(ns, sflow, "192.0.2.9", true);
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dashboards/rocemon.rules.yml"
    );
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\nscrape_configs:\n  - job_name: rocemon\n    static_configs:\n      - targets: ['{ADDR}']\n"
        ),
    )
    .unwrap();
    let prom_addr = "127.0.0.1:9091";
    let _prom = Killed(
        std::process::Command::new("ip")
            .args(["netns", "exec", ns, "prometheus"])
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prometheus is not installed; run `cargo xtask setup`"),
    );
    let replay = Killed(
        std::process::Command::new("ip")
            .args(["netns", "exec", &pair.ns_b, "tcpreplay", "-q", "--loop=0"])
            .args(["--pps=2000", "-i", &pair.b_if])
            .arg(&pcap)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("tcpreplay"),
    );
    // Pending or firing: the alert's expression held at an evaluation.
    let alerting = |name: &str| {
        let q = format!("/api/v1/query?query=ALERTS%7Balertname%3D%22{name}%22%7D");
        http_get_in(ns, prom_addr, &q)
            .ok()
            .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    };
    let wait_alert = |name: &str, kind: &str| {
        let t = std::time::Instant::now();
        loop {
            let a = alerting(name);
            if let Some(x) = a.first() {
                assert_eq!(x["metric"]["kind"], kind, "{x}");
                assert_eq!(x["metric"]["finding"], kind, "{x}");
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "{name} never pending; the agent's findings: {:#}",
                findings(ns)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    for (name, kind) in [
        ("RocemonFindingCongestion", "congestion"),
        ("RocemonFindingCnpMissing", "cnp_missing"),
        ("RocemonFindingLossyRoce", "lossy_roce"),
    ] {
        wait_alert(name, kind);
    }
    // Information pages nobody: `shared_5tuple` is raised (the API and the findings table of
    // the dashboard) and no alert goes pending for it.
    wait_findings(ns, "shared_5tuple raised", |f| {
        kinds(&f["active"]).contains(&"shared_5tuple".to_string())
    });
    let pending: Vec<Value> = http_get_in(ns, prom_addr, "/api/v1/query?query=ALERTS")
        .ok()
        .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["metric"]["kind"] == "shared_5tuple")
        .collect();
    assert!(pending.is_empty(), "an info finding alerts: {pending:#?}");
    // The sFlow loss alert: half the datagrams of 192.0.2.9.
    wait_for(&alerting, "RocemonSflowDatagramLoss", "agent", "192.0.2.9");
    drop(replay);
    pair.delete_link().unwrap();
    wait_alert("RocemonFindingLinkDown", "link_down");
    wait_for(&alerting, "RocemonInterfaceDown", "iface", ifn);
    agent.stop_ok();
}

static PACED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A sender's reaction to CNPs, live: 1,000 packets a second from A to B (and B's ACKs), CNPs
/// back from the third second on; A keeps its rate, or halves it. Both directions arrive on
/// the watched interface. Returns the findings once every frame was counted and a few polls
/// have passed (a burst is judged one poll after it began).
fn dcqcn_live(prefix: &str, reacts: bool) -> Value {
    use rocemon_testkit::findings_lab::dcqcn_paced;
    // One paced sender at a time: two real-time senders on two CPUs stall each other, and a
    // stalled interval is not the sender's rate.
    let _one = PACED.lock().unwrap_or_else(|e| e.into_inner());
    let frames = dcqcn_paced(reacts, 1_000_000, 3_000_000_000, 7_000_000_000);
    // CNPs: BTH opcode 0x81 (Ethernet 14 + IPv4 20 + UDP 8).
    let cnps = frames.iter().filter(|(_, f)| f[42] == 0x81).count() as f64;
    assert!(cnps > 0.0);
    let pair = VethPair::new(prefix).unwrap();
    let (ns, ifn) = (&pair.ns_a, &pair.a_if);
    let mut agent = start(ns, ifn, "xdp");
    rocemon_testkit::sender::send_paced(&pair.ns_b, &pair.b_if, frames).unwrap();
    let polls = |b: &str| try_metric_sum(b, "rocemon_poll_duration_seconds_count", &[]);
    let body = agent
        .wait_metrics(ns, ADDR, Duration::from_secs(60), |b| {
            try_metric_sum(b, "rocemon_cnp_packets_total", &[]).unwrap_or(0.0) >= cnps
        })
        .unwrap();
    // Three polls after the last CNP was counted: the judgement (one poll after a burst
    // began) has been made.
    let counted = polls(&body).unwrap_or(0.0);
    agent
        .wait_metrics(ns, ADDR, Duration::from_secs(60), |b| {
            polls(b).unwrap_or(0.0) >= counted + 3.0
        })
        .unwrap();
    let f = findings(ns);
    agent.stop_ok();
    f
}

fn all_kinds(f: &Value) -> Vec<String> {
    let mut k = kinds(&f["active"]);
    k.extend(kinds(&f["recent"]));
    k
}

#[test]
fn a_sender_that_keeps_its_rate_under_cnps_is_cnp_ignored_live() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let f = dcqcn_live("rcign", false);
    let x = f["active"]
        .as_array()
        .unwrap()
        .iter()
        .chain(f["recent"].as_array().unwrap())
        .find(|x| x["kind"] == "cnp_ignored")
        .unwrap_or_else(|| panic!("no cnp_ignored: {f:#}"));
    assert_eq!(x["subject"], "sender 10.90.0.1", "{x:#}");
    let ratio = x["evidence"]["rate_after_cnps_ratio"].as_f64().unwrap();
    assert!(ratio > 0.9, "{x:#}");
}

#[test]
fn a_sender_that_halves_its_rate_under_cnps_is_no_finding_live() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let f = dcqcn_live("rcreact", true);
    assert!(!all_kinds(&f).contains(&"cnp_ignored".to_string()), "{f:#}");
}

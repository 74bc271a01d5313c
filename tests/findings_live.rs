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
    // 400 data packets (80 CE-marked) and 400 ACKs arrived: 10% of the RoCE data.
    assert_eq!(c["evidence"]["ce_packets"], 80, "{c}");
    assert_eq!(c["evidence"]["packets"], 800, "{c}");
    assert_eq!(c["subject"], format!("receiver {ifn}"));
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

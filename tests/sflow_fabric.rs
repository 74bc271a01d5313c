//! The sFlow fabric view (ECMP groups of switch uplinks) offline and live: one case of two
//! simulated switches through `rocemon analyze` and through `rocemon run --sflow-listen`, the
//! same pipeline either way; the case's construction is the oracle.

use rocemon_testkit::sflow::{self, roce_header, Datagram, Sample};
use rocemon_testkit::TempDir;
use serde_json::Value;
use std::net::IpAddr;

/// The fabric case's datagrams with their times (ns from the first): 20 s of samples every
/// 100 ms from two switches.
fn fabric_datagrams() -> Vec<(u64, Vec<u8>)> {
    let mut timed = Vec::new();
    let a: IpAddr = "192.0.2.10".parse().unwrap();
    let b: IpAddr = "192.0.2.20".parse().unwrap();
    let sample = |seq: u32, flow_i: u32, output: u32| Sample::Flow {
        expanded: false,
        sequence: seq,
        source_index: 1,
        sampling_rate: 1000,
        sample_pool: seq * 1000,
        drops: 0,
        input: 10,
        output,
        frame_length: 1090,
        header: roce_header(flow_i * 5 + 1),
        switch: false,
    };
    for k in 0..200u32 {
        let t = u64::from(k) * 100_000_000;
        let mut sa = vec![sample(3 * k, 1, 1), sample(3 * k + 1, 2, 1)];
        if k % 20 == 0 {
            sa.push(sample(3 * k + 2, 3, 2));
        }
        for (agent, samples) in [
            (a, sa),
            (b, vec![sample(2 * k, 4, 1), sample(2 * k + 1, 5, 2)]),
        ] {
            timed.push((
                t,
                Datagram {
                    agent,
                    sub_agent: 0,
                    sequence: k + 1,
                    uptime_ms: k * 100,
                    samples,
                }
                .encode(),
            ));
        }
    }
    timed
}

/// The fabric case's configuration: 1 s rates, 1 MB/s elephants after 1 s, two groups.
const FABRIC_CONFIG: &str = "rate_window_seconds = 1.0\n[elephant]\nthreshold_bytes_per_second = 1000000.0\nmin_duration_seconds = 1.0\n\
     [[sflow.groups]]\nname = \"leaf-a\"\nagent = \"192.0.2.10\"\nuplinks = [1, 2]\n\
     [[sflow.groups]]\nname = \"leaf-b\"\nagent = \"192.0.2.20\"\nuplinks = [1, 2]\n";

/// The fabric view's groups as the case builds them: on leaf-a two elephants share uplink 1
/// while uplink 2 carries one mouse (a collision); on leaf-b one elephant per uplink (none).
/// An error says what differs.
fn fabric_as_built(groups: &[Value]) -> Result<(), String> {
    let group = |name: &str| {
        groups
            .iter()
            .find(|g| g["name"] == name)
            .cloned()
            .ok_or_else(|| format!("no group {name}: {groups:?}"))
    };
    let la = group("leaf-a")?;
    let lb = group("leaf-b")?;
    let checks = [
        (la["collision"] == true, "leaf-a collides"),
        (
            la["members"][0]["member"] == "192.0.2.10/1",
            "leaf-a's first uplink first",
        ),
        (
            la["members"][0]["elephants"] == 2,
            "two elephants on leaf-a's uplink 1",
        ),
        (
            la["members"][0]["colliding"] == true,
            "leaf-a's uplink 1 colliding",
        ),
        (
            la["members"][1]["elephants"] == 0,
            "no elephant on leaf-a's uplink 2",
        ),
        (
            la["members"][1]["flows"] == 1,
            "the mouse on leaf-a's uplink 2",
        ),
        (lb["collision"] == false, "leaf-b does not collide"),
        (
            lb["members"]
                .as_array()
                .is_some_and(|m| m.len() == 2 && m.iter().all(|m| m["elephants"] == 1)),
            "one elephant per leaf-b uplink",
        ),
    ];
    let failed: Vec<&str> = checks.iter().filter(|c| !c.0).map(|c| c.1).collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "not {}: leaf-a {la}, leaf-b {lb}",
            failed.join(", ")
        ))
    }
}

/// `rocemon analyze` of the fabric case's capture with its configuration.
fn analyze_fabric(name: &str) -> Value {
    let dir = TempDir::new(name).unwrap();
    let cap = sflow::capture_timed("sflow_fabric", &fabric_datagrams())
        .write(dir.path())
        .unwrap();
    let cfg = dir.path().join("fabric.toml");
    std::fs::write(&cfg, FABRIC_CONFIG).unwrap();
    rocemon_testkit::analyze_json(
        env!("CARGO_BIN_EXE_rocemon"),
        &["--config", cfg.to_str().unwrap()],
        &[&cap],
    )
}

/// Two simulated switches, one ECMP group of two uplinks each: on the first, two elephants
/// leave through uplink 1 while uplink 2 carries a mouse (a collision); on the second, one
/// elephant per uplink (none).
#[test]
fn the_fabric_view_finds_colliding_elephants_on_switch_uplinks() {
    let j = analyze_fabric("rocemon-sflow-fabric");
    let groups = j["sflow"]["fabric"]["groups"].as_array().unwrap().clone();
    if let Err(e) = fabric_as_built(&groups) {
        panic!("{e}");
    }
    assert_eq!(
        j["sflow"]["fabric"]["elephants"].as_array().unwrap().len(),
        4
    );
    // About 10.9 MB/s each: 1090 bytes x 1000 (sampling) x 10 samples a second.
    let r = j["sflow"]["fabric"]["elephants"][0]["estimated_bytes_per_second"]
        .as_f64()
        .unwrap();
    assert!((9e6..12e6).contains(&r), "{r}");
}

/// A colliding switch uplink is a finding, as a colliding path of a host's own groups is:
/// `ecmp_collision` about leaf-a's uplink 1, none about leaf-b.
#[test]
fn a_colliding_switch_uplink_is_an_ecmp_collision_finding() {
    let j = analyze_fabric("rocemon-sflow-fabric-finding");
    assert_eq!(
        collision_subjects(&j["findings"]),
        [FABRIC_COLLISION],
        "{}",
        j["findings"]
    );
}

/// The subject the fabric case's collision is named by.
const FABRIC_COLLISION: &str = "path 192.0.2.10/1 of leaf-a";

/// The subjects of the `ecmp_collision` findings in a findings list.
fn collision_subjects(findings: &Value) -> Vec<String> {
    findings
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["kind"] == "ecmp_collision")
        .filter_map(|f| f["subject"].as_str().map(str::to_string))
        .collect()
}

/// The live collector drives the same pipeline as `analyze`: the fabric case's datagrams,
/// sent at their pace to `rocemon run --sflow-listen` with the same configuration, show the
/// same groups in `/api/v1/sflow` (the case's construction is the oracle) and in
/// `rocemon_sflow_colliding_uplinks`.
#[test]
fn the_live_fabric_view_finds_the_collision_analyze_finds() {
    use rocemon_testkit::netns::{http_get_in, try_metric_sum, udp_send_in, Agent, LoopNs};
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let dir = TempDir::new("rocemon-sflow-fabric-live").unwrap();
    let cfg = dir.path().join("fabric.toml");
    std::fs::write(&cfg, FABRIC_CONFIG).unwrap();
    let ns = LoopNs::new("rcsff").unwrap();
    const HTTP: &str = "127.0.0.1:9443";
    let mut agent = Agent::sflow_collector_with(
        &ns.0,
        env!("CARGO_BIN_EXE_rocemon"),
        HTTP,
        "200",
        &["--config", cfg.to_str().unwrap()],
    )
    .unwrap();
    agent.wait_ready(&ns.0, HTTP).unwrap();
    // The switches' pace (the rates are estimated over time): each 100 ms step at its time,
    // from a thread, while this one reads the agent.
    let timed = fabric_datagrams();
    let sender = {
        let ns = ns.0.clone();
        std::thread::spawn(move || -> anyhow::Result<()> {
            let start = std::time::Instant::now();
            for (t, d) in timed {
                let due = start + std::time::Duration::from_nanos(t);
                std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
                udp_send_in(&ns, "127.0.0.1:6343", &[d])?;
            }
            Ok(())
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let (status, doc) = http_get_in(&ns.0, HTTP, "/api/v1/sflow").unwrap();
        assert_eq!(status, 200, "{doc}");
        let doc: Value = serde_json::from_str(&doc).unwrap();
        let groups = doc["fabric"]["groups"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match fabric_as_built(&groups) {
            Ok(()) => break,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "the live fabric view never showed the case as built: {e}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (_, body) = http_get_in(&ns.0, HTTP, "/metrics").unwrap();
    let colliding =
        |g: &str| try_metric_sum(&body, "rocemon_sflow_colliding_uplinks", &[("group", g)]);
    assert_eq!(colliding("leaf-a"), Some(1.0), "{body}");
    assert_eq!(colliding("leaf-b"), Some(0.0), "{body}");
    // And the finding `analyze` raises, live (judged at the poll after the view's tick).
    loop {
        let (_, doc) = http_get_in(&ns.0, HTTP, "/api/v1/findings").unwrap();
        let doc: Value = serde_json::from_str(&doc).unwrap();
        if collision_subjects(&doc["active"]) == [FABRIC_COLLISION] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no ecmp_collision finding about {FABRIC_COLLISION} alone: {doc}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    sender.join().expect("sender thread").unwrap();
    agent.stop_ok();
}

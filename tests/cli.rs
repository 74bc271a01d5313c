//! The `rocemon` binary's errors: each names the problem and the fix, with exit status 2.

use rocemon_testkit::netns::{metric_labels, metric_sum, Agent, LoopNs};
use rocemon_testkit::{assert_ok, is_root, require_root, TempDir};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");

fn rocemon(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run rocemon")
}

fn assert_usage_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit status for {needle:?}; stderr: {err}"
    );
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
}

/// A namespace of its own for the agent under test.
struct Ns(LoopNs);

impl Ns {
    fn new() -> Ns {
        Ns(LoopNs::new("rccli").unwrap())
    }
    fn name(&self) -> &str {
        &self.0 .0
    }
    fn rocemon(&self, args: &[&str]) -> Output {
        self.0.output(BIN, args).unwrap()
    }
}

#[test]
fn version_and_subcommands_are_listed() {
    let out = rocemon(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("rocemon {}", env!("CARGO_PKG_VERSION"))
    );
    let help = String::from_utf8_lossy(&rocemon(&["--help"]).stdout).into_owned();
    for cmd in ["run", "analyze", "top", "rdma", "detach", "check-config"] {
        assert!(help.contains(cmd), "{cmd} missing from --help: {help}");
    }
}

#[test]
fn flag_and_config_errors() {
    assert_usage_error(
        &rocemon(&["run", "--bogus"]),
        "unexpected argument '--bogus'",
    );
    assert_usage_error(&rocemon(&["run"]), "no interface to watch; pass --iface IF");
    assert_usage_error(
        &rocemon(&["run", "--iface", "lo", "--hooks", "xdp,kprobe"]),
        "unknown hook 'kprobe'",
    );
    assert_usage_error(
        &rocemon(&["run", "--iface", "lo", "--listen", "nowhere"]),
        "is not IP:PORT",
    );
    assert_usage_error(
        &rocemon(&["run", "--iface", "lo", "--xdp-mode", "turbo"]),
        "invalid value 'turbo'",
    );
    let dir = TempDir::new("rocemon-cli").unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "interfaces = [\"lo\"]\ntop_kk = 3\n").unwrap();
    assert_usage_error(
        &rocemon(&["run", "--config", bad.to_str().unwrap()]),
        "unknown field `top_kk`",
    );
    std::fs::write(&bad, "interfaces = \"lo\"\n").unwrap();
    assert_usage_error(
        &rocemon(&["run", "--config", bad.to_str().unwrap()]),
        "bad configuration",
    );
    assert_usage_error(
        &rocemon(&["run", "--config", "/nonexistent/rocemon.toml"]),
        "cannot read config file",
    );
    let out = rocemon(&["--version"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("rocemon "));
}

#[test]
fn no_such_interface() {
    assert_usage_error(
        &rocemon(&["run", "--iface", "nosuch0"]),
        "no such interface 'nosuch0'",
    );
}

/// `--interface` is `--iface` spelled out (both commands that take interfaces).
#[test]
fn no_such_interface_named_with_interface() {
    assert_usage_error(
        &rocemon(&["run", "--interface", "nosuch0"]),
        "no such interface 'nosuch0'",
    );
    let out = rocemon(&["run", "--help"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--interface"),
        "the alias is shown in the help"
    );
}

#[test]
fn missing_privileges() {
    let out = if is_root() {
        // Drop to nobody: no capabilities left.
        Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                BIN,
                "run",
                "--iface",
                "lo",
            ])
            .output()
            .unwrap()
    } else {
        rocemon(&["run", "--iface", "lo"])
    };
    assert_usage_error(&out, "missing privileges");
    assert_usage_error(&out, "CAP_BPF");
}

#[test]
fn xdp_native_unsupported_and_auto_fallback() {
    if !require_root("this CLI test (namespaces, BPF)") {
        return;
    }
    let ns = Ns::new();
    // Loopback has no native XDP support.
    let out = ns.rocemon(&on_lo("xdp", &["--xdp-mode", "native"]));
    assert_usage_error(&out, "XDP native mode is not supported on 'lo'");
    assert_usage_error(&out, "--xdp-mode auto or skb");
    // auto falls back to skb mode with a warning, and serves.
    let mut agent = Agent::start(
        ns.name(),
        BIN,
        &on_lo("xdp", &["--listen", "127.0.0.1:9443"]),
    )
    .unwrap();
    let body = agent
        .wait_metrics(ns.name(), "127.0.0.1:9443", Duration::from_secs(30), |_| {
            true
        })
        .unwrap();
    assert_eq!(
        metric_labels(&body, "rocemon_attached", "mode"),
        vec![("skb".to_string(), 1.0)]
    );
    // listen address in use: a second agent on the same address fails before attaching.
    let out = ns.rocemon(&on_lo("tc-ingress", &["--listen", "127.0.0.1:9443"]));
    assert_usage_error(&out, "cannot listen on 127.0.0.1:9443");
    let stderr = agent.stop_ok();
    assert!(stderr.contains("falling back to skb mode"), "{stderr}");
}

/// `rocemon run` on loopback with `hooks`, then `extra`.
fn on_lo<'a>(hooks: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--iface", "lo", "--hooks", hooks];
    args.extend_from_slice(extra);
    args
}

/// `rocemon rdma --format json ARGS`, which must succeed: its report.
/// The flags that point `rocemon rdma` at recorded `rdma -j res` output and a config file.
fn recorded_args<'a>(qp: &'a Path, cm: &'a Path, cfg: &'a Path) -> [&'a str; 6] {
    [
        "--qp-json",
        qp.to_str().unwrap(),
        "--cm-id-json",
        cm.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ]
}

/// The path a switch hashing (source IP, destination IP, protocol 17, source port, 4791)
/// with CRC-16/XMODEM puts an IPv4 RoCE flow on, out of `paths`: the test kit's own CRC,
/// written from the algorithm, not rocemon's model.
fn expected_path(src: [u8; 4], dst: [u8; 4], sport: u16, paths: u32) -> u64 {
    u64::from(rocemon_testkit::demo::path_among(src, dst, sport, paths))
}

fn rdma_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["rdma", "--format", "json"];
    all.extend_from_slice(args);
    let out = rocemon(&all);
    assert_ok(&out, "rocemon rdma");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn rdma_counters_and_connections_from_recorded_output() {
    let dir = TempDir::new("rocemon-rdma").unwrap();
    let root = dir.path().join("sys");
    for (rel, v) in [
        (
            "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent",
            "42\n",
        ),
        (
            "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data",
            "1000\n",
        ),
        (
            "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0",
            "ens1f0np0\n",
        ),
    ] {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    }
    let qp = dir.path().join("qp.json");
    std::fs::write(&qp, r#"[{"ifname":"mlx5_0","port":1,"lqpn":4660,"rqpn":22136,"type":"RC","state":"RTS"},{"ifname":"mlx5_0","port":1,"lqpn":1,"type":"GSI","state":"RTS"}]"#).unwrap();
    let cm = dir.path().join("cm.json");
    std::fs::write(
        &cm,
        r#"[{"lqpn":4660,"src-addr":"10.0.0.1:5000","dst-addr":"10.0.0.2:18515"}]"#,
    )
    .unwrap();
    let cfg = dir.path().join("rocemon.toml");
    std::fs::write(&cfg, "[ecmp.hash]\nfunction = \"crc16-1021\"\npaths = 4\n").unwrap();
    let mut args = vec!["--sysfs-root", root.to_str().unwrap()];
    args.extend(recorded_args(&qp, &cm, &cfg));
    let j = rdma_json(&args);
    let counters = j["port_counters"].as_array().unwrap();
    assert_eq!(counters.len(), 2);
    assert!(counters
        .iter()
        .any(|c| c["counter"] == "np_cnp_sent" && c["value"] == 42 && c["netdev"] == "ens1f0np0"));
    let conns = j["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1);
    // 0x1234 x 0x5678: the drivers' formula gives 0xC01A (see sources::rdma).
    assert_eq!(conns[0]["sport"], 0xC01A);
    assert_eq!(conns[0]["src"], "10.0.0.1");
    assert_eq!(
        conns[0]["predicted_path"].as_u64().unwrap(),
        expected_path([10, 0, 0, 1], [10, 0, 0, 2], 0xC01A, 4)
    );
    // A host without RDMA devices or the rdma tool: no error, nothing listed.
    let out = rocemon(&[
        "rdma",
        "--format",
        "json",
        "--sysfs-root",
        dir.path().join("empty").to_str().unwrap(),
        "--qp-json",
        dir.path().join("missing.json").to_str().unwrap(),
    ]);
    assert_usage_error(&out, "cannot read");
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "[]").unwrap();
    let j = rdma_json(&[
        "--sysfs-root",
        dir.path().join("none").to_str().unwrap(),
        "--qp-json",
        empty.to_str().unwrap(),
        "--cm-id-json",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(j["port_counters"].as_array().unwrap().len(), 0);
}

#[test]
fn run_exports_rdma_nic_counters_from_sysfs() {
    if !require_root("this CLI test (namespaces, BPF)") {
        return;
    }
    let dir = TempDir::new("rocemon-rdmarun").unwrap();
    let p = dir
        .path()
        .join("sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_seq_err");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, "7\n").unwrap();
    let ns = Ns::new();
    let root = dir.path().join("sys");
    // Three RC connections of a hardware NIC (recorded `rdma -j res` output): the hooks never
    // see their packets, the predicted ECMP view must still place them.
    let qp = dir.path().join("qp.json");
    std::fs::write(&qp, r#"[{"ifname":"mlx5_0","port":1,"lqpn":4660,"rqpn":22136,"type":"RC","state":"RTS"},{"ifname":"mlx5_0","port":1,"lqpn":4661,"rqpn":22137,"type":"RC","state":"RTS"},{"ifname":"mlx5_0","port":1,"lqpn":4662,"rqpn":22138,"type":"RC","state":"RTS"},{"ifname":"mlx5_0","port":1,"lqpn":1,"type":"GSI","state":"RTS"}]"#).unwrap();
    let cm = dir.path().join("cm.json");
    std::fs::write(&cm, r#"[{"lqpn":4660,"src-addr":"10.0.0.1:5000","dst-addr":"10.0.0.2:18515"},{"lqpn":4661,"src-addr":"10.0.0.1:5001","dst-addr":"10.0.0.3:18515"},{"lqpn":4662,"src-addr":"10.0.0.1:5002","dst-addr":"10.0.0.4:18515"}]"#).unwrap();
    let cfg = dir.path().join("rocemon.toml");
    std::fs::write(
        &cfg,
        format!(
            "[ecmp.hash]\nfunction = \"crc16-1021\"\npaths = 2\n[rdma]\nqp_json = {:?}\ncm_id_json = {:?}\n",
            qp.to_str().unwrap(),
            cm.to_str().unwrap()
        ),
    )
    .unwrap();
    // The paths the test's own model gives the three connections: 10.0.0.1 to .2, .3, .4,
    // source ports by the Linux drivers' formula from the QP numbers (4660 x 22136 gives
    // 0xC01A, see `rdma_counters_and_connections_from_recorded_output`), computed here.
    let sport = |l: u64, r: u64| {
        let mut v = l * r;
        v ^= v >> 20;
        v ^= v >> 40;
        let fl = v & 0xF_FFFF;
        (((fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)) | 0xC000) as u16
    };
    assert_eq!(
        sport(4660, 22136),
        0xC01A,
        "the drivers' formula as written here"
    );
    let mut per_path = [0u64; 2];
    for (k, dst) in [2u8, 3, 4].into_iter().enumerate() {
        let k = k as u64;
        let p = expected_path(
            [10, 0, 0, 1],
            [10, 0, 0, dst],
            sport(4660 + k, 22136 + k),
            2,
        );
        per_path[p as usize] += 1;
    }
    let mut agent = Agent::start(
        ns.name(),
        BIN,
        &on_lo(
            "tc-ingress",
            &[
                "--listen",
                "127.0.0.1:9444",
                "--poll-interval-ms",
                "100",
                "--sysfs-root",
                root.to_str().unwrap(),
                "--config",
                cfg.to_str().unwrap(),
            ],
        ),
    )
    .unwrap();
    let body = agent
        .wait_metrics(ns.name(), "127.0.0.1:9444", Duration::from_secs(30), |b| {
            b.contains("rocemon_rdma_port_counter_total{")
                && b.contains("rocemon_ecmp_predicted_path_flows{")
        })
        .unwrap();
    assert!(
        body.contains(
            r#"rocemon_rdma_port_counter_total{counter="rcvd_seq_err",device="rxe0",port="1"} 7"#
        ),
        "{body}"
    );
    assert_eq!(
        metric_sum(&body, "rocemon_rdma_connections", &[("device", "mlx5_0")]),
        3.0
    );
    for (p, n) in per_path.iter().enumerate() {
        let path = p.to_string();
        assert_eq!(
            metric_sum(
                &body,
                "rocemon_ecmp_predicted_path_flows",
                &[("path", &path)]
            ) as u64,
            *n,
            "path {p}: {body}"
        );
        // assume_elephants (default): each RC connection counts as an elephant.
        assert_eq!(
            metric_sum(
                &body,
                "rocemon_ecmp_predicted_path_elephants",
                &[("path", &path)]
            ) as u64,
            *n,
            "p {p:?}, n {n:?}"
        );
    }
    // Three elephants on two paths: at least one path carries two. A collision needs an empty
    // path too, which is the case exactly when all three hash alike.
    let colliding = metric_sum(&body, "rocemon_ecmp_predicted_colliding_paths", &[]);
    assert_eq!(colliding, if per_path.contains(&0) { 1.0 } else { 0.0 });
    agent.stop_ok();
}

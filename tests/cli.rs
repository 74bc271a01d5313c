//! The `rocemon` binary's errors: each names the problem and the fix, with exit status 2.

use rocemon_testkit::netns::{http_get_in, metric_labels, run, unique_tag, Agent};
use rocemon_testkit::{is_root, TempDir};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

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

/// A namespace with only loopback, removed on drop.
struct Ns(String);

impl Ns {
    fn new() -> Ns {
        let n = format!("rccli-{}", unique_tag());
        run("ip", &["netns", "add", &n]).unwrap();
        let ns = Ns(n);
        run("ip", &["-n", &ns.0, "link", "set", "lo", "up"]).unwrap();
        ns
    }
    fn rocemon(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.0, BIN])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .output();
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
    if !is_root() {
        eprintln!("SKIPPED: needs root (namespaces, BPF)");
        return;
    }
    let ns = Ns::new();
    // Loopback has no native XDP support.
    let out = ns.rocemon(&[
        "run",
        "--iface",
        "lo",
        "--hooks",
        "xdp",
        "--xdp-mode",
        "native",
    ]);
    assert_usage_error(&out, "XDP native mode is not supported on 'lo'");
    assert_usage_error(&out, "--xdp-mode auto or skb");
    // auto falls back to skb mode with a warning, and serves.
    let mut agent = Agent::start(
        &ns.0,
        BIN,
        &[
            "run",
            "--iface",
            "lo",
            "--hooks",
            "xdp",
            "--listen",
            "127.0.0.1:9443",
        ],
    )
    .unwrap();
    let t = Instant::now();
    let body = loop {
        if let Ok((200, b)) = http_get_in(&ns.0, "127.0.0.1:9443", "/metrics") {
            break b;
        }
        assert!(agent.try_wait().is_none(), "agent exited");
        assert!(t.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        metric_labels(&body, "rocemon_attached", "mode"),
        vec![("skb".to_string(), 1.0)]
    );
    // listen address in use: a second agent on the same address fails before attaching.
    let out = ns.rocemon(&[
        "run",
        "--iface",
        "lo",
        "--hooks",
        "tc-ingress",
        "--listen",
        "127.0.0.1:9443",
    ]);
    assert_usage_error(&out, "cannot listen on 127.0.0.1:9443");
    let (status, stderr) = agent.stop().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("falling back to skb mode"), "{stderr}");
}

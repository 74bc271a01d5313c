//! `cargo xtask demo` as a new user runs it: every headline finding reachable from the host's
//! own namespace while it runs (with the optional Prometheus), a clean exit on Ctrl-C with
//! nothing left behind, and a clear message when its port is taken.

use rocemon_testkit::metrics::{http_get_ok, metric_value, try_metric_sum};
use rocemon_testkit::require_root;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const XTASK: &str = env!("CARGO_BIN_EXE_xtask");

/// (what, metric, label filter): a finding and the series that shows it.
type Finding = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The demo, stopped with Ctrl-C (SIGINT) and waited for when dropped: a failing test leaves
/// nothing running.
struct Demo(std::process::Child);

impl Drop for Demo {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
            let _ = self.0.wait();
        }
    }
}

/// The line of `out` that starts with `prefix`, then the rest of it.
fn after<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.split_once(prefix).map(|x| x.1))
        .unwrap_or_else(|| panic!("no {prefix:?} in\n{out}"))
}

/// A demo that serves, with its address, its Prometheus' address, its output so far and
/// the thread reading it; None when one of its ports was taken meanwhile (it said so).
type Started = (
    Demo,
    String,
    String,
    Arc<Mutex<String>>,
    std::thread::JoinHandle<()>,
);

fn start_demo(prometheus: bool) -> Option<Started> {
    let (addr, prom) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let mut cmd = Command::new(XTASK);
    cmd.args(["demo", "--duration", "600", "--listen", &addr]);
    if prometheus {
        cmd.args(["--prometheus", "--prometheus-listen", &prom]);
    }
    let mut demo = Demo(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (out, stdout) = (out.clone(), demo.0.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("{line}");
                out.lock().unwrap().push_str(&(line + "\n"));
            }
        })
    };
    let err = Arc::new(Mutex::new(String::new()));
    let err_reader = {
        let (err, stderr) = (err.clone(), demo.0.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                err.lock().unwrap().push_str(&(line + "\n"));
            }
        })
    };
    // The demo builds rocemon first (a fresh clone: minutes), then serves.
    let t = Instant::now();
    while !out.lock().unwrap().contains("demo: rocemon serves") {
        if let Some(status) = demo.0.try_wait().unwrap() {
            let _ = reader.join();
            let _ = err_reader.join();
            let err = err.lock().unwrap().clone();
            if err.contains("is taken") {
                return None;
            }
            panic!("the demo exited early ({status}):\n{err}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(1200),
            "the demo never served"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Some((demo, addr, prom, out, reader))
}

#[test]
fn the_demo_shows_every_finding_on_the_host_and_leaves_nothing_behind() {
    if !require_root("the demo (namespaces, BPF)") {
        return;
    }
    // Ports the OS had free a moment ago; another process may take one before the demo
    // binds it, and the demo then exits saying so: start again on others.
    let (mut demo, addr, prom, out, reader) = (0..5)
        .find_map(|_| start_demo(true))
        .expect("the demo found its ports taken five times");
    // From the host's namespace: /metrics shows every finding.
    let want: [Finding; 6] = [
        ("an elephant", "rocemon_elephant_flows", &[]),
        (
            "CE marks",
            "rocemon_ecn_packets_total",
            &[("codepoint", "ce")],
        ),
        ("CNPs", "rocemon_cnp_packets_total", &[]),
        ("PFC frames", "rocemon_pfc_frames_total", &[]),
        (
            "an ECMP finding",
            "rocemon_ecmp_predicted_colliding_paths",
            &[],
        ),
        (
            "a training rhythm",
            "rocemon_training_step_period_seconds",
            &[],
        ),
    ];
    let t = Instant::now();
    let mut missing: Vec<&str> = want.iter().map(|w| w.0).collect();
    let mut alert = false;
    while (!missing.is_empty() || !alert) && t.elapsed() < Duration::from_secs(120) {
        assert!(
            demo.0.try_wait().unwrap().is_none(),
            "the demo exited early"
        );
        if let Some(m) = http_get_ok(&addr, "/metrics") {
            missing = want
                .iter()
                .filter(|(_, name, f)| try_metric_sum(&m, name, f).unwrap_or(0.0) <= 0.0)
                .map(|w| w.0)
                .collect();
        }
        // The optional Prometheus scrapes it with the shipped rules: the PFC storm alert
        // goes pending (it fires after its 2 minutes).
        alert = http_get_ok(&prom, "/api/v1/alerts").is_some_and(|b| b.contains("RocemonPfcStorm"));
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(missing.is_empty(), "not shown on the host: {missing:?}");
    assert!(alert, "Prometheus shows no RocemonPfcStorm alert");
    let m = http_get_ok(&addr, "/metrics").unwrap();
    assert!(metric_value(&m, "rocemon_elephant_flows", &[]).is_some());
    // The API and `rocemon top` from the host, too.
    assert!(http_get_ok(&addr, "/api/v1/flows").is_some_and(|b| b.contains("\"elephant\":true")));
    // Ctrl-C: a clean exit.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(demo.0.id() as i32, libc::SIGINT) };
    let status = demo.0.wait().unwrap();
    reader.join().unwrap();
    let out = out.lock().unwrap().clone();
    assert!(status.success(), "demo exit {status}\n{out}");
    for said in [
        "rocemon: elephants: ",
        "rocemon: ECMP collision predicted",
        "rocemon: congestion: ",
        "rocemon: PFC: ",
        "outside the lossless class",
        "rocemon: training rhythm on ",
        "prometheus: alert RocemonPfcStorm",
        "nothing left behind",
    ] {
        assert!(out.contains(said), "the demo did not say {said:?}\n{out}");
    }
    assert_nothing_left(&out, &[&addr, &prom]);
}

/// Nothing of the demo left: its namespace, its links, its listeners (`addrs`); `out` is
/// what it printed (it names them).
fn assert_nothing_left(out: &str, addrs: &[&str]) {
    let ns = after(out, "traffic comes from namespace ").trim();
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&netns.stdout).contains(ns),
        "{ns} left"
    );
    let watched = after(out, "rocemon watches ");
    for l in watched.split_whitespace().filter(|w| w.starts_with("rcd")) {
        let shown = Command::new("ip")
            .args(["link", "show", l])
            .output()
            .unwrap();
        assert!(!shown.status.success(), "link {l} left");
    }
    for a in addrs {
        assert!(
            std::net::TcpStream::connect(a).is_err(),
            "{a} still listens"
        );
    }
}

/// Stopped the way `timeout`, a CI runner or a service manager stop it (SIGTERM, not
/// Ctrl-C): the demo still removes its namespace and links and exits cleanly.
#[test]
fn the_demo_stopped_with_sigterm_leaves_nothing_behind() {
    if !require_root("the demo (namespaces, BPF)") {
        return;
    }
    let (mut demo, addr, _prom, out, _reader) = (0..5)
        .find_map(|_| start_demo(false))
        .expect("the demo found its port taken five times");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(demo.0.id() as i32, libc::SIGTERM) };
    let status = demo.0.wait().unwrap();
    // Not joining the reader: a demo killed outright leaves rocemon running with its output
    // pipe open. What it printed before it exited arrives at once.
    let t = Instant::now();
    while !out.lock().unwrap().contains("nothing left behind")
        && t.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = out.lock().unwrap().clone();
    assert!(status.success(), "demo exit {status}\n{out}");
    assert!(out.contains("nothing left behind"), "{out}");
    assert_nothing_left(&out, &[&addr]);
}

#[test]
fn the_demo_with_its_port_taken_names_a_free_one() {
    if !require_root("the demo (namespaces, BPF)") {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(XTASK)
        .args(["demo", "--duration", "5", "--listen", &addr])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{addr} is taken")), "{err}");
    let suggested = after(&err, "cargo xtask demo --listen 127.0.0.1:");
    let port: u16 = suggested
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
        "{port} is free"
    );
}

//! `rocemon top` as a person sees it: the terminal UI in a real terminal (tmux), against a
//! live agent on one end of a veth pair that receives RoCE (IPv4 and IPv6 flows with CE
//! marks and CNPs, replayed in a loop). At 80x24 and after a resize to 200x50: the header with
//! the totals, the tabs, the flow table with its units, the keys on the last line, every line
//! within the width; keys sort, switch views and quit. What the screen shows is checked
//! against the agent's own API at the same time (the rendering is the subject here; the
//! counts are checked against tshark elsewhere).

use rocemon_testkit::fixture::Fixture;
use rocemon_testkit::netns::{http_get_in, run_args, Agent, VethPair};
use rocemon_testkit::{fixtures, may_run, TempDir};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const ADDR: &str = "127.0.0.1:9442";
/// The flows `top` asks for (`--limit`).
const LIMIT: usize = 30;

/// A tmux server of the test's own (its own socket), killed on every way out.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Tmux {
        Tmux {
            socket: format!("rocemon-top-{}", rocemon_testkit::netns::unique_tag()),
        }
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// The pane's text, one string per row.
    fn screen(&self) -> Vec<String> {
        let out = self.cmd(&["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Waits (generously) until the screen satisfies `ok`; panics with the last screen.
    fn wait(&self, what: &str, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{what}: not on the screen after 60 s:\n{}",
                s.join("\n")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// A replay that loops until dropped.
struct Replay(Child);

impl Drop for Replay {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn api(ns: &str, path: &str) -> serde_json::Value {
    let (status, body) = http_get_in(ns, ADDR, path).expect("GET");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

fn fits(s: &[String], width: usize, height: usize) {
    assert_eq!(s.len(), height, "rows:\n{}", s.join("\n"));
    for l in s {
        assert!(
            l.chars().count() <= width,
            "a line wider than {width}: {l:?}"
        );
    }
}

#[test]
fn top_fits_the_terminal_follows_resizes_and_answers_keys() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let has_tmux = Command::new("tmux").arg("-V").output().is_ok();
    if !may_run(has_tmux, "tmux is not installed (cargo xtask setup)") {
        return;
    }
    let dir = TempDir::new("rocemon-top-tui").unwrap();
    let files: Vec<String> = [fixtures::rc_ipv4(), fixtures::mixed_ipv6_vlan()]
        .iter()
        .map(|f: &Fixture| f.write(dir.path()).unwrap().display().to_string())
        .collect();
    let started_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let pair = VethPair::new("rt").unwrap();
    let mut agent = Agent::start(&pair.ns_a, BIN, &run_args(&pair.a_if, ADDR, "200")).unwrap();
    agent.wait_ready(&pair.ns_a, ADDR).unwrap();
    let mut replay = vec!["netns", "exec", &pair.ns_b, "tcpreplay", "-q"];
    replay.extend(["--loop", "0", "--pps", "400", "-i", &pair.b_if]);
    replay.extend(files.iter().map(String::as_str));
    let _replay = Replay(
        Command::new("ip")
            .args(&replay)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start tcpreplay"),
    );

    let tmux = Tmux::new();
    // top's exit status lands in a file when it ends.
    let status = dir.path().join("status");
    let top = format!(
        "ip netns exec {} {BIN} top --addr {ADDR} --interval 0.5 --limit {LIMIT}; echo $? > {}",
        pair.ns_a,
        status.display()
    );
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "80",
        "-y",
        "24",
        &top,
    ]);
    assert!(out.status.success(), "tmux: {out:?}");

    // 80x24: the header's totals once the agent has rates, an IPv6 flow, the keys.
    let s = tmux.wait("totals, an IPv6 flow and the keys at 80x24", |s| {
        s.len() == 24
            && s[1].contains("RoCE rx")
            && !s[1].contains("rx 0.0 b/s")
            && s.iter().any(|l| l.contains("[fd"))
            && s[23].starts_with("q quit")
    });
    fits(&s, 80, 24);
    assert!(s[0].starts_with("rocemon top"), "{}", s.join("\n"));
    // The agent's verdict under the totals, then its most severe findings (one to three
    // lines), the answer before the rows.
    assert!(s[2].starts_with("Verdict: "), "{s:#?}");
    let t = tabs(&s);
    assert!((4..=6).contains(&t), "one to three finding lines: {s:#?}");
    assert!(
        s[3] == "No active findings."
            || ["critical ", "warning ", "info "]
                .iter()
                .any(|p| s[3].starts_with(p) && s[3].contains(" for ")),
        "{s:#?}"
    );
    assert!(
        s[t + 1].contains("RATE b/s") && s[t + 1].contains("PKT/s") && s[t + 1].contains("CE/s"),
        "units in the column names: {s:#?}"
    );
    assert!(s[22].starts_with("E elephant"), "the column key: {s:#?}");
    // The header's flow count is the agent's: read both until they agree (the first loop of
    // the replay still adds flows; the screen refreshes every half second).
    let t = Instant::now();
    let (s, flows, total) = loop {
        let flows = api(&pair.ns_a, "/api/v1/flows");
        let total = flows["flows_total"].as_u64().unwrap_or(0);
        let s = tmux.screen();
        if total > 0 && s.len() == 24 && s[0].contains(&format!("  {total} flows")) {
            break (s, flows, total);
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the header never showed the agent's {total} flows: {s:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The API's times are Unix time (the kernel's clock is since boot) and its QPs are also
    // written in hex, as the metrics' labels.
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    for f in flows["flows"].as_array().unwrap() {
        let first = f["first_seen_ns"].as_u64().unwrap();
        assert!(
            first >= started_ns && first <= now_ns + 1_000_000_000,
            "first seen {first} not between the test's start {started_ns} and now {now_ns}"
        );
        let qp = f["dest_qp"].as_u64().unwrap();
        assert_eq!(f["dest_qp_hex"], format!("0x{qp:x}"));
    }
    let (_, metrics) = http_get_in(&pair.ns_a, ADDR, "/metrics").unwrap();
    let empty: Vec<&str> = metrics.lines().filter(|l| l.contains("=\"\"")).collect();
    assert!(empty.is_empty(), "series with an empty label: {empty:#?}");
    // As many flow rows as asked for and held, where the body has room (24 rows: the tabs
    // and the table's header above, the column key and the keys below).
    let t = tabs(&s);
    let rows = s[t + 2..22].iter().filter(|l| l.contains(" -> ")).count();
    assert_eq!(rows, (total as usize).min(LIMIT).min(20 - t), "{s:#?}");

    // 200x50: more columns, more rows, the keys still on the last line.
    tmux.cmd(&["resize-window", "-t", "top", "-x", "200", "-y", "50"]);
    // As many rows as the agent holds flows (up to --limit), read with the screen.
    let total = std::cell::Cell::new(total);
    let s = tmux.wait("the wide columns and every flow at 200x50", |s| {
        total.set(
            api(&pair.ns_a, "/api/v1/flows")["flows_total"]
                .as_u64()
                .unwrap_or(0),
        );
        let t = tabs(s);
        s.len() == 50
            && s[t + 1].contains("SPORT")
            && s[t + 1].contains("PSN GAPS")
            && s[t + 2..48].iter().filter(|l| l.contains(" -> ")).count()
                == (total.get() as usize).min(LIMIT).min(46 - t)
    });
    fits(&s, 200, 50);
    assert!(s[49].starts_with("q quit"), "{s:#?}");

    // Keys: sort by the next column, another view, quit.
    tmux.cmd(&["send-keys", "-t", "top", "s"]);
    tmux.wait("sorted by packets", |s| {
        s.last().is_some_and(|l| l.contains("sort: PKT/s")) && s[tabs(s) + 1].contains("PKT/s ↓")
    });
    tmux.cmd(&["send-keys", "-t", "top", "4"]);
    tmux.wait("the lossless view", |s| {
        s.iter()
            .any(|l| l.starts_with("LOSSLESS ") || l.contains("Nothing to show"))
    });
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let t = Instant::now();
    let code = loop {
        match std::fs::read_to_string(&status) {
            Ok(s) if s.ends_with('\n') => break s,
            _ => {}
        }
        assert!(t.elapsed() < Duration::from_secs(30), "q did not quit");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(code.trim(), "0", "top's exit status");
    let _ = agent.stop_ok();
}

/// The row of the view tabs (under the header, the verdict and one to three findings).
fn tabs(s: &[String]) -> usize {
    s.iter()
        .position(|l| l.contains("1 Flows") && l.contains("6 Switches"))
        .unwrap_or(0)
}

#[test]
fn once_prints_one_plain_screen_for_scripts() {
    if !rocemon_testkit::netns::can_run_e2e() {
        return;
    }
    let pair = VethPair::new("ro").unwrap();
    let mut agent = Agent::start(&pair.ns_a, BIN, &run_args(&pair.a_if, ADDR, "200")).unwrap();
    agent.wait_ready(&pair.ns_a, ADDR).unwrap();
    let out = pair
        .exec(&pair.ns_a, BIN, &["top", "--addr", ADDR, "--once"])
        .unwrap();
    rocemon_testkit::assert_ok(&out, "top --once");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("rocemon top: "), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no escapes in plain output: {text:?}"
    );
    assert!(text.contains("RATE b/s") && text.contains("CE/s"), "{text}");
    // The answer first: the verdict, the most severe findings (none here), the column key.
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].starts_with("Verdict: "), "{text}");
    assert_eq!(lines[2], "  No active findings.", "{text}");
    assert!(lines[3].starts_with("E elephant"), "{text}");
    let _ = agent.stop_ok();
}

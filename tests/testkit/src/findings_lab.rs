//! Traffic with planted causes for the findings' tests (capture and live): the truth is
//! the parameters.

use crate::frames::Roce;
use std::net::IpAddr;

/// 2025-12-01T00:00:00Z in ns.
pub const T0: u64 = 1_764_547_200_000_000_000;
pub const A: &str = "10.90.0.1";
pub const B: &str = "10.90.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// A's data to B (QP 0x200 at B) on port 0xC123, 40 us apart, every `ce_every`-th CE-marked;
/// B's ACKs to A carry A's QP 0x100 on the same port; with `cnp_after`, B answers each CE
/// packet with a CNP to QP 0x100 that long after it.
pub fn ce_exchange(packets: u64, ce_every: u64, cnp_after: Option<u64>) -> Vec<(u64, Vec<u8>)> {
    let mut f = Vec::new();
    for k in 0..packets {
        let t = T0 + k * 40_000;
        let mut d = Roce::new(ip(A), ip(B), 0xC123, 0x200, 0x0A);
        d.psn = k as u32;
        d.payload = 1024;
        d.dma_len = 1024;
        let ce = k % ce_every == 0;
        if ce {
            d.ecn = 3;
        }
        f.push((t, d.frame()));
        let mut ack = Roce::new(ip(B), ip(A), 0xC123, 0x100, 0x11);
        ack.psn = k as u32;
        f.push((t + 2_000, ack.frame()));
        if let (true, Some(after)) = (ce, cnp_after) {
            f.push((t + after, Roce::cnp(ip(B), ip(A), 0xC777, 0x100).frame()));
        }
    }
    f.sort_by_key(|(t, _)| *t);
    f
}

/// Steps of a training job between several hosts: 14 steps of 100 ms; in each, every sender
/// in `senders` writes to `to` for 20 ms (one 2 KiB WRITE ONLY per millisecond). Step 6
/// takes 200 ms; with `late`, that sender's burst in step 6 starts 15 ms after the others'
/// and ends 100 ms after them (a straggler), else every burst of it is on time.
pub fn hosts_job(senders: &[&str], to: &str, late: Option<&str>) -> Vec<(u64, Vec<u8>)> {
    let mut f = Vec::new();
    let mut step_at = T0;
    let mut psns = vec![0u32; senders.len()];
    for step in 0..14u64 {
        for (h, src) in senders.iter().enumerate() {
            let (from_ms, to_ms) = if step == 6 && late == Some(*src) {
                (15, 120)
            } else {
                (0, 20)
            };
            for ms in from_ms..to_ms {
                let mut d = Roce::new(ip(src), ip(to), 0xC400 + h as u16, 0x500 + h as u32, 0x0A);
                d.psn = psns[h];
                psns[h] += 1;
                d.payload = 2048;
                d.dma_len = 2048;
                f.push((step_at + ms * 1_000_000 + h as u64 * 10_000, d.frame()));
            }
        }
        step_at += if step == 6 { 200 } else { 100 } * 1_000_000;
    }
    f.sort_by_key(|(t, _)| *t);
    f
}

/// Two elephants, from hosts of their own, at 1 KiB every 100 us each (about 90 Mb/s) for
/// `ms` milliseconds from `from_ns`, on source ports that a 4-path CRC-16/XMODEM hash (the
/// demo's model) puts on `path`: returns the frames.
pub fn elephants_on(path: u32, from_ns: u64, ms: u64) -> Vec<(u64, Vec<u8>)> {
    let mut f = elephant("10.92.0.1", path, from_ns, ms);
    f.extend(elephant("10.92.0.2", path, from_ns + 1_000, ms));
    f
}

/// One elephant from `src` to 10.92.0.9 (as [`elephants_on`]) on `path`.
pub fn elephant(src: &str, path: u32, from_ns: u64, ms: u64) -> Vec<(u64, Vec<u8>)> {
    let (a, b) = (ip(src), ip("10.92.0.9"));
    let sport = (0xD000u16..)
        .find(|&p| crate::demo::path_among(v4(src), v4("10.92.0.9"), p, 4) == path)
        .expect("a port on the path");
    (0..ms * 10)
        .map(|k| {
            let mut d = Roce::new(a, b, sport, 0x600 + u32::from(v4(src)[3]), 0x0A);
            d.psn = k as u32;
            d.payload = 1024;
            d.dma_len = 1024;
            (from_ns + k * 100_000, d.frame())
        })
        .collect()
}

/// An IPv4 address as bytes.
pub fn v4(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().expect("IPv4").octets()
}

/// A sender to B whose NIC does or does not answer CNPs (DCQCN's reaction point): A sends to
/// B's QP 0x200 on port 0xC123 every 10 us for 30 ms; from 10 ms on, B marks (as the switch
/// would) and answers every 5th packet with a CNP to A's QP 0x100 (B's ACKs carry it). A
/// sender that `reacts` halves its rate (every 20 us) from the first CNP on.
pub fn dcqcn(reacts: bool) -> Vec<(u64, Vec<u8>)> {
    dcqcn_paced(reacts, 10_000, 10_000_000, 30_000_000)
}

/// [`dcqcn`] at a packet every `every_ns`, CNPs from `clean_ns` on, `total_ns` long.
pub fn dcqcn_paced(
    reacts: bool,
    every_ns: u64,
    clean_ns: u64,
    total_ns: u64,
) -> Vec<(u64, Vec<u8>)> {
    let mut f = Vec::new();
    let (mut t, end) = (T0, T0 + total_ns);
    let first_cnp = T0 + clean_ns;
    let mut k = 0u32;
    while t < end {
        let mut d = Roce::new(ip(A), ip(B), 0xC123, 0x200, 0x0A);
        d.psn = k;
        d.payload = 1024;
        d.dma_len = 1024;
        let marked = t >= first_cnp && k.is_multiple_of(5);
        if marked {
            d.ecn = 3;
        }
        f.push((t, d.frame()));
        let mut ack = Roce::new(ip(B), ip(A), 0xC123, 0x100, 0x11);
        ack.psn = k;
        f.push((t + every_ns / 5, ack.frame()));
        if marked {
            f.push((
                t + every_ns * 2 / 5,
                Roce::cnp(ip(B), ip(A), 0xC777, 0x100).frame(),
            ));
        }
        k += 1;
        t += if reacts && t >= first_cnp {
            2 * every_ns
        } else {
            every_ns
        };
    }
    f.sort_by_key(|(t, _)| *t);
    f
}

/// The number of the step a slow-step finding's subject names ("step 6 of job-10.0.0.1").
pub fn step_number(subject: &str) -> Option<u64> {
    let rest = subject.strip_prefix("step ")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The findings of `kind` in an analyze JSON report.
pub fn findings_of<'a>(j: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

/// `rocemon analyze --html` of `frames` (a capture written in `dir`): the page.
pub fn html_of(
    bin: &str,
    dir: &std::path::Path,
    name: &'static str,
    frames: Vec<(u64, Vec<u8>)>,
) -> String {
    use crate::fixtures::{whole, Format};
    let p = whole(name, Format::PcapNanos, frames, false)
        .write(dir)
        .expect("write the capture");
    let html = dir.join(format!("{name}.html"));
    let out = std::process::Command::new(bin)
        .args(["analyze", "--no-progress", "--html"])
        .arg(&html)
        .arg(&p)
        .output()
        .expect("run rocemon");
    crate::assert_ok(&out, "rocemon analyze --html");
    std::fs::read_to_string(&html).expect("the page")
}

/// `rocemon analyze --format json` of `frames` (sorted here) with `args`, and with a
/// configuration file of `config`'s text when given.
pub fn analyze_frames(
    bin: &str,
    name: &'static str,
    mut frames: Vec<(u64, Vec<u8>)>,
    args: &[&str],
    config: Option<&str>,
) -> serde_json::Value {
    use crate::fixtures::{whole, Format};
    let dir = crate::TempDir::new("rocemon-lab").expect("a temporary directory");
    frames.sort_by_key(|(t, _)| *t);
    let p = whole(name, Format::PcapNanos, frames, false)
        .write(dir.path())
        .expect("write the capture");
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    if let Some(text) = config {
        let c = dir.path().join("rocemon.toml");
        std::fs::write(&c, text).expect("write the configuration");
        all.push("--config".into());
        all.push(c.display().to_string());
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    crate::analyze_json(bin, &all, &[&p])
}

/// A live agent (XDP on the near end of `pair`, the link read as 1 Gb/s from a sysfs under
/// `dir`, with `extra` flags) while the far end replays `cap` at its own pace; after `settle`
/// (pauses to run out, steps to be judged, a few polls), every finding it listed (active and
/// recent), its metrics, and what its link received, recorded by dumpcap beside it: the
/// frames at the times the agent saw them (a replay on a loaded machine keeps the capture's
/// frames but not always its pace), the capture to hold the live agent's figures against.
pub fn live_findings(
    pair: &crate::netns::VethPair,
    bin: &str,
    addr: &str,
    dir: &std::path::Path,
    cap: &std::path::Path,
    extra: &[&str],
    settle: std::time::Duration,
) -> (Vec<serde_json::Value>, String, std::path::PathBuf) {
    use std::time::{Duration, Instant};
    let sysfs = dir.join("sys");
    let net = sysfs.join("class/net").join(&pair.a_if);
    std::fs::create_dir_all(&net).expect("sysfs of the test's own");
    std::fs::write(net.join("speed"), "1000\n").expect("link speed");
    let mut args = vec!["--sysfs-root", sysfs.to_str().expect("UTF-8 path")];
    args.extend_from_slice(extra);
    let agent = crate::netns::Agent::on_iface(&pair.ns_a, bin, (&pair.a_if, "xdp"), addr, &args)
        .expect("a live agent");
    let recording = Recording::start(&pair.ns_a, &pair.a_if, &dir.join("received.pcap"));
    pair.replay_timed_from_b(cap).expect("tcpreplay");
    std::thread::sleep(settle);
    let received = recording.finish();
    let deadline = Instant::now() + Duration::from_secs(30);
    let doc: serde_json::Value = loop {
        let (status, body) =
            crate::netns::http_get_in(&pair.ns_a, addr, "/api/v1/findings").expect("findings");
        if status == 200 {
            break serde_json::from_str(&body).expect("JSON");
        }
        assert!(Instant::now() < deadline, "no findings answer: {status}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let (_, metrics) = crate::netns::http_get_in(&pair.ns_a, addr, "/metrics").expect("metrics");
    agent.stop_ok();
    let mut out = Vec::new();
    for list in ["active", "recent"] {
        out.extend(doc[list].as_array().cloned().unwrap_or_default());
    }
    (out, metrics, received)
}

/// dumpcap on an interface of a namespace, writing a pcap file, until finished (or dropped).
pub struct Recording {
    child: std::process::Child,
    path: std::path::PathBuf,
}

impl Recording {
    /// Starts dumpcap and waits (up to 30 s) until it writes its file.
    pub fn start(ns: &str, iface: &str, path: &std::path::Path) -> Recording {
        let child = std::process::Command::new("ip")
            .args([
                "netns", "exec", ns, "dumpcap", "-q", "-P", "-i", iface, "-w",
            ])
            .arg(path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("dumpcap (Debian package tshark)");
        let r = Recording {
            child,
            path: path.to_path_buf(),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::metadata(path).map_or(true, |m| m.len() < 24) {
            assert!(
                std::time::Instant::now() < deadline,
                "dumpcap on {iface} wrote no file"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Its capture runs once the file has its header; a moment for the socket to bind.
        std::thread::sleep(std::time::Duration::from_millis(200));
        r
    }

    /// Stops dumpcap (SIGINT: it writes out what it holds) and returns the file.
    pub fn finish(mut self) -> std::path::PathBuf {
        let pid = self.child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status();
        let _ = self.child.wait();
        self.path.clone()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! IPFIX as a collector sees it: messages framed by their length field, decoded by tshark's
//! IPFIX dissector (the oracle: it knows nothing of rocemon's encoder), and pmacct's
//! `nfacctd`, a real flow collector, aggregating what it received.

use crate::fixture::{whole, Fixture, Format};
use crate::frames;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// IPFIX's port, where tshark looks for it here.
pub const PORT: u16 = 4739;

/// The messages of an IPFIX stream or file (RFC 5655), each as long as its length field.
pub fn split(bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if at + 4 > bytes.len() {
            bail!("a message header cut at byte {at}");
        }
        let len = u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
        if len < 16 || at + len > bytes.len() {
            bail!("a message of length {len} at byte {at} does not fit");
        }
        out.push(bytes[at..at + len].to_vec());
        at += len;
    }
    Ok(out)
}

/// A capture of the messages as a collector receives them (IPv4, UDP to 4739).
pub fn capture(messages: &[Vec<u8>]) -> Fixture {
    let frames = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let udp = frames::udp(40_000, PORT, m);
            let ip = frames::ipv4([192, 0, 2, 10], [192, 0, 2, 1], 0, 17, 0, &udp);
            (
                1_764_547_200_000_000_000 + i as u64 * 1_000_000,
                frames::ethernet(&[], frames::ETH_IPV4, &ip),
            )
        })
        .collect();
    whole("ipfix", Format::PcapNanos, frames, true)
}

/// One data record as tshark decodes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dport: u16,
    pub protocol: u8,
    pub dscp: u8,
    pub octets: u64,
    pub packets: u64,
    pub end_reason: u8,
    /// The enterprise-specific elements in template order, as numbers.
    pub roce: Vec<u64>,
}

impl Record {
    /// The RoCE elements by their documented numbers (1: destination QP, ... 15: ECMP path).
    pub fn roce(&self, element: usize) -> u64 {
        self.roce.get(element - 1).copied().unwrap_or(u64::MAX)
    }
}

/// One message: its header's sequence number and observation domain, whether it carried a
/// template set, its data records.
#[derive(Clone, Debug, Default)]
pub struct Message {
    pub sequence: u32,
    pub domain: u32,
    pub templates: bool,
    pub records: Vec<Record>,
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn number(v: &Value, key: &str) -> u64 {
    let s = text(v, key);
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or(u64::MAX),
        None => s.parse().unwrap_or(u64::MAX),
    }
}

fn hex_bytes(s: &str) -> u64 {
    s.split(':').fold(0u64, |a, b| {
        (a << 8) | u64::from_str_radix(b, 16).unwrap_or(0)
    })
}

/// tshark's decode of every message in `capture` (see [`capture`]). Fails when tshark marks
/// anything malformed, or warns or errs about it.
pub fn decode(capture: &Path) -> Result<Vec<Message>> {
    let out = Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(capture)
        .args(["-d", &format!("udp.port=={PORT},cflow")])
        .args(["-T", "json", "--no-duplicate-keys"])
        .output()
        .context("run tshark")?;
    if !out.status.success() {
        bail!("tshark: {}", String::from_utf8_lossy(&out.stderr));
    }
    let frames: Vec<Value> = serde_json::from_slice(&out.stdout).context("tshark's JSON")?;
    let mut messages = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let layers = &f["_source"]["layers"];
        let whole = layers.to_string();
        if whole.contains("_ws.malformed") {
            bail!("frame {}: tshark marks it malformed: {whole}", i + 1);
        }
        // Expert severities: 6291456 is a warning, 8388608 an error.
        if whole.contains("\"6291456\"") || whole.contains("\"8388608\"") {
            bail!("frame {}: tshark warns about it: {whole}", i + 1);
        }
        let c = &layers["cflow"];
        let Some(obj) = c.as_object() else {
            bail!("frame {}: no IPFIX decoded", i + 1);
        };
        let mut m = Message {
            sequence: number(c, "cflow.sequence") as u32,
            domain: number(c, "cflow.od_id") as u32,
            ..Message::default()
        };
        for (k, set) in obj {
            if !k.starts_with("Set ") {
                continue;
            }
            if k.contains("[id=2]") {
                m.templates = true;
                continue;
            }
            let Some(set) = set.as_object() else { continue };
            for (fk, flow) in set {
                if !fk.starts_with("Flow ") {
                    continue;
                }
                let addr = |v4: &str, v6: &str| {
                    let a = text(flow, v4);
                    if a.is_empty() {
                        text(flow, v6).to_string()
                    } else {
                        a.to_string()
                    }
                };
                let roce = match &flow["cflow.enterprise_private_entry"] {
                    Value::Array(a) => a
                        .iter()
                        .map(|v| hex_bytes(v.as_str().unwrap_or("")))
                        .collect(),
                    Value::String(s) => vec![hex_bytes(s)],
                    _ => Vec::new(),
                };
                m.records.push(Record {
                    src: addr("cflow.srcaddr", "cflow.srcaddrv6"),
                    dst: addr("cflow.dstaddr", "cflow.dstaddrv6"),
                    sport: number(flow, "cflow.srcport") as u16,
                    dport: number(flow, "cflow.dstport") as u16,
                    protocol: number(flow, "cflow.protocol") as u8,
                    dscp: number(flow, "cflow.ip_dscp") as u8,
                    octets: number(flow, "cflow.octets"),
                    packets: number(flow, "cflow.packets"),
                    end_reason: number(flow, "cflow.flow_end_reason") as u8,
                    roce,
                });
            }
        }
        messages.push(m);
    }
    Ok(messages)
}

/// [`decode`] of messages in memory (written into a capture under `dir`).
pub fn decode_messages(messages: &[Vec<u8>], dir: &Path) -> Result<Vec<Message>> {
    std::fs::create_dir_all(dir)?;
    let path = capture(messages).write(dir)?;
    decode(&path)
}

/// Whether pmacct's `nfacctd` is installed.
pub fn nfacctd_available() -> bool {
    Command::new("nfacctd")
        .arg("-V")
        .output()
        .map(|o| o.status.success() || !o.stdout.is_empty())
        .unwrap_or(false)
}

/// What a collector aggregated: (src, dst, sport, destination QP) -> (packets, bytes).
pub type Totals = BTreeMap<(String, String, u16, u32), (u64, u64)>;

/// rocemon's destination-QP element (enterprise 32473, element 1) as an nfacctd primitive,
/// in the syntax `docs/ipfix.md` gives.
pub const DEST_QP_PRIMITIVE: &str = "name=dest_qp\tfield_type=32473:1\tlen=4\tsemantics=u_int\n";

/// pmacct's NetFlow/IPFIX collector, aggregating by 5-tuple and rocemon's destination QP
/// (an enterprise element, read as a custom primitive) into a CSV file.
pub struct Nfacctd {
    child: Option<Child>,
    pub addr: String,
    out: PathBuf,
    log: PathBuf,
}

impl Nfacctd {
    /// Starts nfacctd on `127.0.0.1:port` (inside namespace `ns` when given) with its files
    /// under `dir`; returns once it listens.
    pub fn start(ns: Option<&str>, port: u16, dir: &Path) -> Result<Nfacctd> {
        let out = dir.join(format!("nfacctd-{port}.csv"));
        let log = dir.join(format!("nfacctd-{port}.log"));
        let conf = dir.join(format!("nfacctd-{port}.conf"));
        let primitives = dir.join(format!("nfacctd-{port}.lst"));
        std::fs::write(&primitives, DEST_QP_PRIMITIVE)?;
        std::fs::write(
            &conf,
            format!(
                "daemonize: false\nnfacctd_ip: 127.0.0.1\nnfacctd_port: {port}\n\
                 nfacctd_time_new: true\naggregate_primitives: {}\nplugins: print[p]\n\
                 aggregate[p]: src_host, dst_host, src_port, dst_port, proto, dest_qp\n\
                 print_output[p]: csv\nprint_output_file[p]: {}\n\
                 print_output_file_append[p]: true\nprint_refresh_time[p]: 1\n",
                primitives.display(),
                out.display()
            ),
        )?;
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "nfacctd"]);
                c
            }
            None => Command::new("nfacctd"),
        };
        let child = cmd
            .arg("-f")
            .arg(&conf)
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(
                dir.join(format!("nfacctd-{port}.err")),
            )?)
            .spawn()
            .context("run nfacctd (Debian package pmacct; `cargo xtask setup` installs it)")?;
        let n = Nfacctd {
            child: Some(child),
            addr: format!("127.0.0.1:{port}"),
            out,
            log,
        };
        let started = Instant::now();
        loop {
            let said = std::fs::read_to_string(&n.log).unwrap_or_default()
                + &std::fs::read_to_string(dir.join(format!("nfacctd-{port}.err")))
                    .unwrap_or_default();
            if said.contains("waiting for NetFlow/IPFIX data") {
                return Ok(n);
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("nfacctd did not start listening within 30 s: {said}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops nfacctd (it writes out what it holds) and returns its totals per flow, every RoCE
    /// flow's destination port 4791.
    pub fn totals(mut self) -> Result<Totals> {
        if let Some(mut c) = self.child.take() {
            // SIGINT: nfacctd purges its cache into the file before it exits.
            let pid = c.id() as i32;
            // SAFETY: a signal to our own child process.
            unsafe { libc::kill(pid, libc::SIGINT) };
            let started = Instant::now();
            while c.try_wait()?.is_none() {
                if started.elapsed() > Duration::from_secs(30) {
                    let _ = c.kill();
                    bail!("nfacctd did not exit within 30 s of SIGINT");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // `ip netns exec` exits with its child; the plugin writes just before.
            std::thread::sleep(Duration::from_millis(200));
        }
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let mut totals = BTreeMap::new();
        for line in text.lines() {
            let c: Vec<&str> = line.split(',').collect();
            if c.len() < 8 || c[0] == "SRC_IP" {
                continue;
            }
            if c[3] != "4791" || c[4] != "udp" {
                bail!("nfacctd aggregated a flow that is no RoCE: {line}");
            }
            let e: &mut (u64, u64) = totals
                .entry((
                    c[0].to_string(),
                    c[1].to_string(),
                    c[2].parse()?,
                    c[5].parse()?,
                ))
                .or_default();
            e.0 += c[6].parse::<u64>()?;
            e.1 += c[7].parse::<u64>()?;
        }
        Ok(totals)
    }
}

impl Drop for Nfacctd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

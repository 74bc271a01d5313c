//! sFlow v5 for the tests, written from the specification (sflow.org "sFlow Version 5"),
//! sharing nothing with rocemon's decoder: an encoder for what pmacct does not send (counter
//! samples, expanded samples, IPv6 agents, sequence gaps, malformed datagrams), pmacct's
//! `pmacctd` with the `sfprobe` plugin as the real exporter, and captures of datagrams.

use crate::fixtures::{whole, Fixture, Format};
use crate::frames;
use anyhow::{bail, Context, Result};
use std::net::{IpAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// One sample to encode.
#[derive(Clone, Debug)]
pub enum Sample {
    Flow {
        expanded: bool,
        sequence: u32,
        source_index: u32,
        sampling_rate: u32,
        sample_pool: u32,
        drops: u32,
        input: u32,
        output: u32,
        frame_length: u32,
        /// The sampled header (Ethernet), cut by the agent.
        header: Vec<u8>,
        /// Add an extended switch record before the header.
        switch: bool,
    },
    Counters {
        expanded: bool,
        sequence: u32,
        if_index: u32,
        speed: u64,
        in_octets: u64,
        out_octets: u64,
        ethernet: bool,
    },
    /// Any sample format with any body (unknown formats, broken samples).
    Raw { format: u32, body: Vec<u8> },
}

/// One datagram to encode.
#[derive(Clone, Debug)]
pub struct Datagram {
    pub agent: IpAddr,
    pub sub_agent: u32,
    pub sequence: u32,
    pub uptime_ms: u32,
    pub samples: Vec<Sample>,
}

fn u32b(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_be_bytes());
}

fn u64b(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_be_bytes());
}

/// A record or sample: format, length, body (padded to four).
fn tlv(v: &mut Vec<u8>, format: u32, body: &[u8]) {
    u32b(v, format);
    u32b(v, body.len() as u32);
    v.extend_from_slice(body);
}

impl Sample {
    pub fn encode(&self) -> (u32, Vec<u8>) {
        let mut b = Vec::new();
        match self {
            Sample::Flow {
                expanded,
                sequence,
                source_index,
                sampling_rate,
                sample_pool,
                drops,
                input,
                output,
                frame_length,
                header,
                switch,
            } => {
                u32b(&mut b, *sequence);
                if *expanded {
                    u32b(&mut b, 0);
                    u32b(&mut b, *source_index);
                } else {
                    u32b(&mut b, *source_index & 0x00FF_FFFF);
                }
                u32b(&mut b, *sampling_rate);
                u32b(&mut b, *sample_pool);
                u32b(&mut b, *drops);
                if *expanded {
                    for p in [input, output] {
                        u32b(&mut b, 0);
                        u32b(&mut b, *p);
                    }
                } else {
                    u32b(&mut b, *input);
                    u32b(&mut b, *output);
                }
                u32b(&mut b, 1 + u32::from(*switch));
                if *switch {
                    let mut r = Vec::new();
                    for x in [100, 3, 200, 3] {
                        u32b(&mut r, x);
                    }
                    tlv(&mut b, 1001, &r);
                }
                let mut r = Vec::new();
                u32b(&mut r, 1); // Ethernet
                u32b(&mut r, *frame_length);
                u32b(&mut r, 4); // FCS stripped
                u32b(&mut r, header.len() as u32);
                r.extend_from_slice(header);
                while r.len() % 4 != 0 {
                    r.push(0);
                }
                tlv(&mut b, 1, &r);
                (if *expanded { 3 } else { 1 }, b)
            }
            Sample::Counters {
                expanded,
                sequence,
                if_index,
                speed,
                in_octets,
                out_octets,
                ethernet,
            } => {
                u32b(&mut b, *sequence);
                if *expanded {
                    u32b(&mut b, 0);
                    u32b(&mut b, *if_index);
                } else {
                    u32b(&mut b, *if_index);
                }
                u32b(&mut b, 1 + u32::from(*ethernet));
                let mut r = Vec::new();
                u32b(&mut r, *if_index);
                u32b(&mut r, 6); // ethernetCsmacd
                u64b(&mut r, *speed);
                u32b(&mut r, 1); // full duplex
                u32b(&mut r, 3); // admin and oper up
                u64b(&mut r, *in_octets);
                for x in [1000, 10, 5, 2, 1, 0] {
                    u32b(&mut r, x); // ucast, mcast, bcast, discards, errors, unknown protos
                }
                u64b(&mut r, *out_octets);
                for x in [900, 9, 4, 3, 0, 0] {
                    u32b(&mut r, x); // ucast, mcast, bcast, discards, errors, promiscuous
                }
                tlv(&mut b, 1, &r);
                if *ethernet {
                    tlv(&mut b, 2, &[0u8; 13 * 4]);
                }
                (if *expanded { 4 } else { 2 }, b)
            }
            Sample::Raw { format, body } => (*format, body.clone()),
        }
    }
}

impl Datagram {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        u32b(&mut v, 5);
        match self.agent {
            IpAddr::V4(a) => {
                u32b(&mut v, 1);
                v.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                u32b(&mut v, 2);
                v.extend_from_slice(&a.octets());
            }
        }
        u32b(&mut v, self.sub_agent);
        u32b(&mut v, self.sequence);
        u32b(&mut v, self.uptime_ms);
        u32b(&mut v, self.samples.len() as u32);
        for s in &self.samples {
            let (f, b) = s.encode();
            tlv(&mut v, f, &b);
        }
        v
    }
}

/// A capture of sFlow datagrams as a collector receives them (IPv4, UDP to 6343), one
/// millisecond apart.
pub fn capture(name: &'static str, datagrams: &[Vec<u8>]) -> Fixture {
    let timed: Vec<(u64, Vec<u8>)> = datagrams
        .iter()
        .enumerate()
        .map(|(i, d)| (i as u64 * 1_000_000, d.clone()))
        .collect();
    capture_timed(name, &timed)
}

/// [`capture`] with each datagram at its own time (nanoseconds from the capture's start).
pub fn capture_timed(name: &'static str, datagrams: &[(u64, Vec<u8>)]) -> Fixture {
    let frames = datagrams
        .iter()
        .enumerate()
        .map(|(i, (t, d))| {
            let udp = frames::udp(40_000 + (i % 7) as u16, 6343, d);
            let ip = frames::ipv4([192, 0, 2, 10], [192, 0, 2, 1], 0, 17, 0, &udp);
            (
                1_764_547_200_000_000_000 + t,
                frames::ethernet(&[], frames::ETH_IPV4, &ip),
            )
        })
        .collect();
    whole(name, Format::PcapNanos, frames, true)
}

/// Whether pmacct's `pmacctd` is installed.
pub fn pmacct_available() -> bool {
    Command::new("pmacctd")
        .arg("-V")
        .output()
        .map(|o| o.status.success() || !o.stdout.is_empty())
        .unwrap_or(false)
}

/// Replays `pcap` through pmacct (`pmacctd`, plugin `sfprobe`, headers cut at 128 bytes)
/// and returns the sFlow datagrams it sent to `collector` (a UDP address on loopback, bound
/// here; port 0 picks one). With `forward` set, each datagram is also sent on to that address
/// (a live collector under test).
pub fn pmacct(
    pcap: &Path,
    sampling_rate: u32,
    dir: &Path,
    forward: Option<std::net::SocketAddr>,
) -> Result<Vec<Vec<u8>>> {
    let sock = UdpSocket::bind("127.0.0.1:0").context("bind the pmacct receiver")?;
    let port = sock.local_addr()?.port();
    sock.set_read_timeout(Some(Duration::from_millis(300)))?;
    let conf = dir.join(format!("pmacct-{port}.conf"));
    std::fs::write(
        &conf,
        format!(
            "daemonize: false\npcap_savefile: {}\nplugins: sfprobe[s]\nsfprobe_receiver[s]: 127.0.0.1:{port}\nsfprobe_agentip[s]: 10.0.0.1\nsampling_rate: {sampling_rate}\nsnaplen: 128\n",
            pcap.display()
        ),
    )?;
    let mut child = Command::new("pmacctd")
        .arg("-f")
        .arg(&conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("run pmacctd (Debian package pmacct; `cargo xtask setup` installs it)")?;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let started = Instant::now();
    let mut exited_at: Option<Instant> = None;
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                if let Some(to) = forward {
                    sock.send_to(&buf[..n], to)?;
                }
                got.push(buf[..n].to_vec());
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(e.into()),
        }
        if exited_at.is_none() && child.try_wait()?.is_some() {
            exited_at = Some(Instant::now());
        }
        // pmacct flushes its last datagram as it exits; wait a little after that.
        if exited_at.is_some_and(|t| t.elapsed() > Duration::from_millis(1500)) {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            bail!("pmacctd did not finish within 60 s");
        }
    }
    let out = child.wait_with_output()?;
    if got.is_empty() {
        bail!(
            "pmacctd sent no datagram: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(got)
}

/// A switch sending sFlow datagrams ten times a second from `agent`: each with a counter
/// sample of port 3 and a flow sample of a RoCE WRITE on it (1 in 1,000); with `lossy`,
/// every other sequence number is missing (lost on the way). Stopped when dropped.
pub fn switch(ns: &str, collector: &str, agent: &str, lossy: bool) -> crate::Ticker {
    let (ns, addr) = (ns.to_string(), collector.to_string());
    let agent: IpAddr = agent.parse().expect("agent address");
    let mut roce = crate::frames::Roce::new(
        "10.95.0.1".parse().expect("address"),
        "10.95.0.2".parse().expect("address"),
        0xC950,
        0x950,
        0x0A,
    );
    roce.payload = 1024;
    roce.dma_len = 1024;
    let frame = roce.frame();
    crate::Ticker::start(Duration::from_millis(100), move |n| {
        let k = n as u32;
        let d = Datagram {
            agent,
            sub_agent: 0,
            sequence: if lossy { 2 * k } else { k },
            uptime_ms: 100 * k,
            samples: vec![
                Sample::Counters {
                    expanded: false,
                    sequence: k,
                    if_index: 3,
                    speed: 100_000_000_000,
                    in_octets: n * 1_000_000,
                    out_octets: n * 1_000_000,
                    ethernet: false,
                },
                Sample::Flow {
                    expanded: false,
                    sequence: k,
                    source_index: 3,
                    sampling_rate: 1_000,
                    sample_pool: k * 1_000,
                    drops: 0,
                    input: 3,
                    output: 4,
                    frame_length: frame.len() as u32 + 4,
                    header: frame[..frame.len().min(128)].to_vec(),
                    switch: false,
                },
            ],
        }
        .encode();
        let _ = crate::netns::udp_send_in(&ns, &addr, &[d]);
    })
}

/// A RoCE frame's first 128 bytes, as a switch samples them: flow `i` of a family of RC
/// flows from 10.9.0.1 to 10.9.0.2 (source port 0xC000 + i, QP 0x100 + i; every fifth a CNP),
/// ECN codepoint i mod 4, 1 KiB payloads.
pub fn roce_header(i: u32) -> Vec<u8> {
    let mut r = crate::frames::Roce::new(
        "10.9.0.1".parse().unwrap(),
        "10.9.0.2".parse().unwrap(),
        0xC000 + i as u16,
        0x100 + i,
        if i.is_multiple_of(5) { 0x81 } else { 0x0A },
    );
    r.ecn = (i % 4) as u8;
    r.payload = 1024;
    r.dma_len = 1024;
    let mut f = r.frame();
    f.truncate(128);
    f
}

//! Captures of a training job's rhythm, where the truth is the generator's parameters: steps of
//! a period (with jitter, a slow step, a missing step), each opening with a burst of RDMA
//! messages (WRITE, READ requests, SEND FIRST..LAST), and steady traffic with no rhythm.

use crate::fixtures::{whole, Fixture, Format};
use crate::frames::Roce;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

/// The generator's parameters.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub period_ms: u64,
    pub comm_ms: u64,
    pub jitter_ms: u64,
    pub steps: u64,
    /// This step takes twice as long.
    pub slow_at: Option<u64>,
    /// This step sends nothing (its compute runs into the next).
    pub missing_at: Option<u64>,
}

impl Job {
    /// The tests' usual job: `steps` steps of 100 ms, each with a 20 ms burst, no jitter, no
    /// slow or missing step (set those with struct update syntax).
    pub const fn steady(steps: u64) -> Job {
        Job {
            period_ms: 100,
            comm_ms: 20,
            jitter_ms: 0,
            steps,
            slow_at: None,
            missing_at: None,
        }
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// The job's capture: in every communication burst, per millisecond, one RDMA WRITE of 4 KiB
/// (FIRST + LAST), a SEND of 3 packets (FIRST, MIDDLE, LAST), and every 4th millisecond a READ
/// request of 64 KiB.
pub fn capture(name: &'static str, job: Job) -> Fixture {
    whole(
        name,
        Format::PcapNanos,
        frames(job, "10.78.0.1", "10.78.0.2", 0),
        false,
    )
}

/// The length of a job's capture from its first step to the end of its last (no jitter).
pub fn length_ms(job: &Job) -> u64 {
    job.period_ms * (job.steps + u64::from(job.slow_at.is_some()))
}

/// Two jobs on one link, from different hosts, their steps interleaved in time.
pub fn interleaved(name: &'static str, one: Job, two: Job) -> Fixture {
    let mut f = frames(one, "10.78.0.1", "10.78.0.2", 0);
    f.extend(frames(two, "10.78.0.3", "10.78.0.4", 0));
    f.sort_by_key(|(t, _)| *t);
    whole(name, Format::PcapNanos, f, false)
}

/// A job's frames from host `src` to host `dst`, each QP's PSNs from `psn0` on.
pub fn frames(job: Job, src: &str, dst: &str, psn0: u32) -> Vec<(u64, Vec<u8>)> {
    frames_with(job, src, dst, |_| psn0).0
}

/// Round `round` of a job sent again and again: each QP's PSNs go on from where the round
/// before left them (no gap: a clean network).
pub fn frames_round(job: Job, src: &str, dst: &str, round: u64) -> Vec<(u64, Vec<u8>)> {
    let (_, per_round) = frames_with(job, src, dst, |_| 0);
    frames_with(job, src, dst, |qp| {
        (round * u64::from(per_round.get(&qp).copied().unwrap_or(0))) as u32 & 0xFF_FFFF
    })
    .0
}

/// Frames and their times, ns.
type Frames = Vec<(u64, Vec<u8>)>;

/// The frames, and each QP's packets; QP `q`'s PSNs start at `first(q)`.
fn frames_with(
    job: Job,
    src: &str,
    dst: &str,
    first: impl Fn(u32) -> u32,
) -> (Frames, BTreeMap<u32, u32>) {
    let mut f = Vec::new();
    let (a, b) = (ip(src), ip(dst));
    let mut t = 1_764_547_200_000_000_000u64;
    let mut rng = 99u64;
    // Each QP's PSNs run on without a gap (a clean network).
    let mut psns: BTreeMap<u32, u32> = BTreeMap::new();
    let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
    let mut pkt = |op: u8, payload: usize, dma: u32, qp: u32| {
        let mut r = Roce::new(a, b, 0xC100 + (qp as u16 & 0xFF), qp, op);
        r.payload = payload;
        r.dma_len = dma;
        let psn = psns.entry(qp).or_insert(first(qp) & 0xFF_FFFF);
        r.psn = *psn;
        *counts.entry(qp).or_default() += 1;
        *psn = (*psn + 1) & 0xFF_FFFF;
        r.frame()
    };
    for i in 0..job.steps {
        if job.missing_at != Some(i) {
            for ms in 0..job.comm_ms {
                let at = t + ms * 1_000_000;
                let mut k = 0;
                let mut push = |fr: Vec<u8>| {
                    f.push((at + k * 1000, fr));
                    k += 1;
                };
                push(pkt(0x06, 2048, 4096, 0x11));
                push(pkt(0x08, 2048, 0, 0x11));
                push(pkt(0x00, 1024, 0, 0x12));
                push(pkt(0x01, 1024, 0, 0x12));
                push(pkt(0x02, 512, 0, 0x12));
                if ms % 4 == 0 {
                    push(pkt(0x0C, 0, 65536, 0x13));
                }
            }
        }
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = if job.jitter_ms > 0 {
            (rng >> 33) % (2 * job.jitter_ms + 1)
        } else {
            job.jitter_ms
        };
        let mut len = job.period_ms + j - job.jitter_ms;
        if job.slow_at == Some(i) {
            len *= 2;
        }
        t += len * 1_000_000;
    }
    (f, counts)
}

/// Steady RoCE with no rhythm: one WRITE ONLY every millisecond for `seconds`.
pub fn steady(seconds: u64) -> Fixture {
    let (a, b) = (ip("10.78.1.1"), ip("10.78.1.2"));
    let f = (0..seconds * 1000)
        .map(|ms| {
            let mut r = Roce::new(a, b, 0xC200, 0x21, 0x0A);
            r.payload = 1024;
            r.dma_len = 1024;
            r.psn = ms as u32 & 0xFF_FFFF;
            (1_764_547_200_000_000_000 + ms * 1_000_000, r.frame())
        })
        .collect();
    whole("steady", Format::PcapNanos, f, false)
}

/// RDMA messages as tshark decodes a capture, rebuilt from its fields (SEND FIRST..LAST summed
/// per connection: source, destination and QP): the oracle of the message counts, sizes and histogram.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TsharkMessages {
    /// (op, bucket upper bound: 1 KiB x 4^i) -> messages.
    pub histogram: BTreeMap<(String, u64), u64>,
    /// (dest QP, op) -> (messages, bytes).
    pub flows: BTreeMap<(u64, String), (u64, u64)>,
}

impl TsharkMessages {
    /// (messages, bytes) of an operation over all flows.
    pub fn total(&self, op: &str) -> (u64, u64) {
        self.flows
            .iter()
            .filter(|((_, o), _)| o == op)
            .fold((0, 0), |a, (_, v)| (a.0 + v.0, a.1 + v.1))
    }
}

pub fn tshark_messages(pcap: &Path) -> Result<TsharkMessages> {
    tshark_messages_of(pcap, "")
}

/// The same over the frames a display filter keeps (`ip.src == 10.0.0.1`; empty: every frame).
pub fn tshark_messages_of(pcap: &Path, filter: &str) -> Result<TsharkMessages> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(pcap);
    if !filter.is_empty() {
        cmd.args(["-Y", filter]);
    }
    let out = cmd
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp"])
        .args(["-e", "infiniband.reth.dmalen", "-e", "data.len"])
        .args(["-e", "ip.src", "-e", "ip.dst"])
        .output()
        .context("run tshark")?;
    if !out.status.success() {
        bail!("tshark: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut m = TsharkMessages::default();
    // A SEND in progress per connection (source, destination, QP): two senders to one QP
    // number interleave their packets.
    let mut partial: BTreeMap<(String, String, u64), u64> = BTreeMap::new();
    let le = |size: u64| {
        let mut b = 1024;
        while b < size {
            b *= 4;
        }
        b
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let c: Vec<&str> = line.split('\t').collect();
        if c.len() < 4 || c[0].is_empty() {
            continue;
        }
        // tshark prints the opcode in decimal, the QP in hex; data.len is the payload (it
        // shows the ICRC apart).
        let op: u8 = c[0].parse()?;
        let qp = u64::from_str_radix(c[1].trim_start_matches("0x"), 16)?;
        let n = |s: &str| s.parse::<u64>().unwrap_or(0);
        let conn = (
            c.get(4).unwrap_or(&"").to_string(),
            c.get(5).unwrap_or(&"").to_string(),
            qp,
        );
        let done = match op {
            0x06 | 0x0A | 0x0B => Some(("rdma_write", n(c[2]))),
            0x0C => Some(("rdma_read", n(c[2]))),
            0x00 => {
                partial.insert(conn, n(c[3]));
                None
            }
            0x01 => {
                if let Some(p) = partial.get_mut(&conn) {
                    *p += n(c[3]);
                }
                None
            }
            0x02 | 0x03 => partial.remove(&conn).map(|p| ("send", p + n(c[3]))),
            0x04 | 0x05 => Some(("send", n(c[3]))),
            _ => None,
        };
        if let Some((op, size)) = done {
            *m.histogram.entry((op.to_string(), le(size))).or_default() += 1;
            let f = m.flows.entry((qp, op.to_string())).or_default();
            f.0 += 1;
            f.1 += size;
        }
    }
    Ok(m)
}

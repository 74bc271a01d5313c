//! The demo's scenario, one traffic source per act, each sent round after round (PSNs go on
//! from round to round, as a long-running job's would) from its own time on:
//! steady background RDMA (many light flows), two heavy writers whose flows a CRC-16 hash
//! model puts on one path of four, an incast (CE marks and the CNPs that answer them), a PFC
//! storm on priority 3 with a host sending RoCE outside the lossless class, and a training
//! job's rhythm. Frames fit a 1500-byte MTU.

use crate::frames::{pfc, Roce};
use crate::sender::Round;
use crate::training::{self, Job};
use std::net::IpAddr;
use std::time::Duration;

const T0: u64 = 1_764_547_200_000_000_000;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("demo address")
}

/// Frames one microsecond apart (the sender sets the rate).
fn timed(frames: Vec<Vec<u8>>) -> Round {
    frames
        .into_iter()
        .enumerate()
        .map(|(i, f)| (T0 + i as u64 * 1_000, f))
        .collect()
}

/// Paths of the demo's hash model, and its function as the agent's config names it.
pub const HASH_PATHS: u32 = 4;
pub const HASH_FUNCTION: &str = "crc16-1021";

/// CRC-16/XMODEM (polynomial 0x1021, init 0; check value 0x31C3), written here from the
/// algorithm so that the demo's choice of flows does not lean on rocemon's model.
pub fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The path the demo's hash model gives an IPv4 RoCE flow: CRC-16/XMODEM over source
/// address, destination address, protocol 17, source port, destination port 4791 (rocemon's
/// default fields), modulo [`HASH_PATHS`].
pub fn path_of(src: [u8; 4], dst: [u8; 4], sport: u16) -> u32 {
    path_among(src, dst, sport, HASH_PATHS)
}

/// [`path_of`] with `paths` paths.
pub fn path_among(src: [u8; 4], dst: [u8; 4], sport: u16, paths: u32) -> u32 {
    let mut k = Vec::with_capacity(13);
    k.extend_from_slice(&src);
    k.extend_from_slice(&dst);
    k.push(17);
    k.extend_from_slice(&sport.to_be_bytes());
    k.extend_from_slice(&4791u16.to_be_bytes());
    u32::from(crc16_xmodem(&k)) % paths
}

/// The heavy writers: two hosts to one, source ports chosen so that both flows hash onto the
/// same path. Returns (source address, source port) of each, and the shared path.
pub fn writer_flows() -> ([(IpAddr, u16); 2], u32) {
    let (a, b, d) = ([10, 88, 0, 2], [10, 88, 0, 3], [10, 88, 0, 1]);
    let sa = 0xC001;
    let p = path_of(a, d, sa);
    let sb = (0xC001..0xFFFF)
        .find(|&s| path_of(b, d, s) == p)
        .expect("a port on the same path");
    ([(IpAddr::from(a), sa), (IpAddr::from(b), sb)], p)
}

pub const WRITER_DST: &str = "10.88.0.1";

/// Act 1: steady background RDMA, 48 light connections (SEND ONLY and its ACK).
pub fn background(n: u64) -> Round {
    let mut f = Vec::new();
    for r in 0..20u32 {
        let round = n as u32 * 20 + r;
        for i in 0..48u32 {
            let (a, b) = (ip(&format!("10.88.1.{}", 2 + i)), ip("10.88.2.1"));
            let sport = 0xD000 + 7 * i as u16;
            let mut s = Roce::new(a, b, sport, 0x400 + i, 0x04);
            s.payload = 256;
            s.psn = round;
            f.push(s.frame());
            let mut ack = Roce::new(b, a, sport, 0x200 + i, 0x11);
            ack.psn = round;
            f.push(ack.frame());
        }
    }
    timed(f)
}

/// Act 2: the heavy writers (RDMA WRITE FIRST/MIDDLE/LAST, 1 KiB payloads).
pub fn writers(n: u64) -> Round {
    let ([(a, sa), (b, sb)], _) = writer_flows();
    let d = ip(WRITER_DST);
    let mut f = Vec::new();
    for s in 0..512u32 {
        let step = n as u32 * 512 + s;
        for (src, sport, qp) in [(a, sa, 0x40), (b, sb, 0x41)] {
            let op = match step % 8 {
                0 => 0x06,
                7 => 0x08,
                _ => 0x07,
            };
            let mut r = Roce::new(src, d, sport, qp, op);
            r.psn = step;
            r.payload = 1024;
            r.dma_len = 8 * 1024;
            f.push(r.frame());
        }
    }
    timed(f)
}

/// Act 3: an incast: eight senders to one receiver, every data packet CE-marked by the
/// congested switch queue, and the receiver's CNPs (in the CNP class, DSCP 48).
pub fn incast(n: u64) -> Round {
    let d = ip("10.88.3.1");
    let mut f = Vec::new();
    for s in 0..200u32 {
        let step = n as u32 * 200 + s;
        for i in 0..8u32 {
            let s = ip(&format!("10.88.3.{}", 10 + i));
            let sport = 0xE000 + i as u16;
            let mut r = Roce::new(s, d, sport, 0x600 + i, 0x0A);
            r.psn = step;
            r.payload = 512;
            r.dma_len = 512;
            r.ecn = 3;
            f.push(r.frame());
            if step.is_multiple_of(2) {
                let mut c = Roce::cnp(d, s, sport, 0x700 + i);
                c.dscp = 48;
                f.push(c.frame());
            }
        }
    }
    timed(f)
}

/// Act 4: a PFC storm on priority 3 (XOFF with the longest pause time), and a host whose
/// RoCE leaves with DSCP 0: outside the lossless class.
pub fn pfc_storm(n: u64) -> Round {
    let mut f = Vec::new();
    for s in 0..200u32 {
        let step = n as u32 * 200 + s;
        f.push(pfc(0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]));
        if step.is_multiple_of(4) {
            let mut r = Roce::new(ip("10.88.4.2"), ip("10.88.4.1"), 0xC777, 0x77, 0x0A);
            r.psn = step;
            r.dscp = 0;
            r.payload = 512;
            r.dma_len = 512;
            f.push(r.frame());
        }
    }
    timed(f)
}

/// Act 5's job: 100 ms steps, 20 ms of communication, the 61st step twice as long.
pub const JOB: Job = Job {
    period_ms: 100,
    comm_ms: 20,
    jitter_ms: 0,
    steps: 100,
    slow_at: Some(60),
    missing_at: None,
};

/// Act 5: a training job's rhythm, to be sent at its own pace, a round [`rhythm_length`] long.
pub fn rhythm(n: u64) -> Round {
    training::frames_round(JOB, "10.88.5.1", "10.88.5.2", n)
}

pub fn rhythm_length() -> Duration {
    Duration::from_millis(training::length_ms(&JOB))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_xmodem_check_value() {
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
    }

    #[test]
    fn the_writers_share_a_path() {
        let ([(a, sa), (b, sb)], p) = writer_flows();
        let v4 = |x: IpAddr| match x {
            IpAddr::V4(v) => v.octets(),
            IpAddr::V6(_) => unreachable!(),
        };
        let d = [10, 88, 0, 1];
        assert_eq!(path_of(v4(a), d, sa), p);
        assert_eq!(path_of(v4(b), d, sb), p);
    }

    #[test]
    fn rounds_go_on_with_their_sequence_numbers() {
        // The writers' first frame of round 1 follows the last of round 0 in PSN.
        // Ethernet, IPv4, UDP, then the BTH's PSN in its bytes 9-11.
        let psn = |f: &[u8]| u32::from_be_bytes([0, f[42 + 9], f[42 + 10], f[42 + 11]]);
        let (r0, r1) = (writers(0), writers(1));
        assert_eq!(psn(&r1[0].1), psn(&r0[r0.len() - 2].1) + 1);
    }
}

//! Captures of a training job's rhythm, where the truth is the generator's parameters: steps of
//! a period (with jitter, a slow step, a missing step), each opening with a burst of RDMA
//! messages (WRITE, READ requests, SEND FIRST..LAST), and steady traffic with no rhythm.

use crate::fixtures::{whole, Fixture, Format};
use crate::frames::Roce;
use std::net::IpAddr;

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

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// The job's capture: in every communication burst, per millisecond, one RDMA WRITE of 4 KiB
/// (FIRST + LAST), a SEND of 3 packets (FIRST, MIDDLE, LAST), and every 4th millisecond a READ
/// request of 64 KiB.
pub fn capture(name: &'static str, job: Job) -> Fixture {
    let mut f = Vec::new();
    let (a, b) = (ip("10.78.0.1"), ip("10.78.0.2"));
    let mut t = 1_764_547_200_000_000_000u64;
    let mut rng = 99u64;
    let mut psn = 0u32;
    let mut pkt = |op: u8, payload: usize, dma: u32, qp: u32| {
        let mut r = Roce::new(a, b, 0xC100 + (qp as u16 & 0xFF), qp, op);
        r.payload = payload;
        r.dma_len = dma;
        r.psn = psn;
        psn = (psn + 1) & 0xFF_FFFF;
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
    whole(name, Format::PcapNanos, f, false)
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

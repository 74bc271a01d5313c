//! Captures built to make explaining slow steps expensive: a job of one host pair in 2,000
//! steps (60 s, the rhythm's whole window), each opening with a 4 ms burst of 4 KiB WRITEs,
//! four a millisecond (64 KiB a step: a job, not a trickle). With `hostile`, every other step
//! takes 40 ms instead of 20 (1,000 slow steps, each to explain) and the job's priority 3 is
//! paused 25 times in every millisecond of a burst (an XOFF, an XON 10 us later: 200,000
//! pause runs); without, the steps are regular and a tenant's RoCE takes the pause frames'
//! places at the same times (an ordinary capture of the same frames and nearly the same
//! bytes).

use crate::fixtures::{whole, Fixture, Format};
use crate::frames::{self, Roce};
use std::net::IpAddr;

const T0: u64 = 1_700_000_000_000_000_000;
const MS: u64 = 1_000_000;
/// XOFF/XON pairs (or tenant packets) per millisecond of a burst, after its WRITEs.
const PAUSES_PER_MS: u64 = 25;

/// The job with 200,000 pause runs (or the tenant's packets in their places).
pub fn job(hostile: bool) -> Fixture {
    job_with(hostile, PAUSES_PER_MS)
}

/// The job with `pauses_per_ms` XOFF/XON pairs in every millisecond of a burst (8,000
/// milliseconds of bursts: 125 make a million pause runs), spaced evenly within the
/// millisecond (30 us apart at most), each XON a third of the spacing after its XOFF.
pub fn job_with(hostile: bool, pauses_per_ms: u64) -> Fixture {
    let spacing = (960_000 / pauses_per_ms.max(1)).min(30_000);
    let ip = |s: &str| s.parse::<IpAddr>().expect("address");
    let (a, b, t) = (ip("10.252.0.1"), ip("10.252.0.2"), ip("10.252.9.1"));
    let mut xoff_times = [0u16; 8];
    xoff_times[3] = 1;
    let xoff = frames::pfc(1 << 3, xoff_times);
    let xon = frames::pfc(1 << 3, [0; 8]);
    let mut f = Vec::new();
    let mut at = T0;
    let mut psn = 0u32;
    for step in 0..2_000u64 {
        for ms in 0..4u64 {
            let now = at + ms * MS;
            for k in 0..4u64 {
                let mut w = Roce::new(a, b, 0xC100, 0x100, 0x0A);
                w.psn = psn;
                psn += 1;
                w.payload = 4096;
                w.dma_len = 4096;
                f.push((now + k * 4_000, w.frame()));
            }
            for k in 0..pauses_per_ms {
                let p = now + 20_000 + k * spacing;
                if hostile {
                    f.push((p, xoff.clone()));
                    f.push((p + spacing / 3, xon.clone()));
                } else {
                    for (i, d) in [0, spacing / 3].into_iter().enumerate() {
                        let mut r = Roce::new(t, b, 0xC200, 0x200, 0x11);
                        // The tenant's own sequence, in order: an ordinary flow.
                        r.psn = (((step * 4 + ms) * pauses_per_ms + k) * 2 + i as u64) as u32
                            & 0xFF_FFFF;
                        f.push((p + d, r.frame()));
                    }
                }
            }
        }
        at += if hostile && step % 2 == 1 { 40 } else { 20 } * MS;
    }
    let name = match (hostile, pauses_per_ms == PAUSES_PER_MS) {
        (true, true) => "slow_steps_pauses",
        (false, true) => "steady_steps",
        (true, false) => "slow_steps_many_pauses",
        (false, false) => "steady_steps_many",
    };
    whole(name, Format::PcapNanos, f, false)
}

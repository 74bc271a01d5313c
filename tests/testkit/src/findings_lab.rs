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

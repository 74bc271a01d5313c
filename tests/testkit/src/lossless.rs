//! The lossless-fabric fixture: PFC storms, XON, multi-priority vectors, a time on a
//! disabled class, 802.3x PAUSE, another MAC control opcode, PFC mirrored in ERSPAN and GRE,
//! and RoCE (and CNPs) in the right and wrong traffic classes, tagged and untagged, IPv4 and
//! IPv6. Expected numbers come from tshark (`macc.*`, `ip.dsfield.dscp`, `ipv6.tclass.dscp`,
//! `vlan.priority`).

use crate::fixtures::{whole, Fixture, Format};
use crate::frames::{self, tci, tunnel, Roce, TPID_8021Q};
use std::net::IpAddr;

const T0: u64 = 1_764_547_200_000_000_000; // 2025-12-01T00:00:00Z

fn ip(s: &str) -> IpAddr {
    s.parse().expect("fixture address")
}

/// See the module doc.
pub fn lossless() -> Fixture {
    let mut f: Vec<Vec<u8>> = Vec::new();
    // A PFC storm on priority 3: XOFF with the longest time, again and again.
    for _ in 0..40 {
        f.push(frames::pfc(0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]));
    }
    // XON on priority 3.
    for _ in 0..3 {
        f.push(frames::pfc(0x08, [0; 8]));
    }
    // Multi-priority vectors: XOFF on 0, 2, 3 and XON on 1; a time on disabled class 5.
    f.push(frames::pfc(0x0F, [100, 0, 300, 65535, 0, 500, 0, 0]));
    f.push(frames::pfc(0xFF, [1, 2, 3, 4, 5, 6, 7, 8]));
    f.push(frames::pfc(0x01, [0, 0, 0, 0, 0, 777, 0, 0]));
    // 802.3x PAUSE: XOFF and XON.
    f.push(frames::pause(0xFFFF));
    f.push(frames::pause(1000));
    f.push(frames::pause(0));
    // Another MAC control opcode (MPCP GATE).
    f.push(frames::mac_control(0x0002, &[0u8; 10]));
    // PFC seen on a switch mirror port: inside ERSPAN II and GRE.
    let storm = frames::pfc(0x10, [0, 0, 0, 0, 0x2000, 0, 0, 0]);
    f.push(tunnel::erspan2(&storm, 7, 1));
    f.push(tunnel::gre_teb(&storm, 9));
    // RoCE in its class (DSCP 26, untagged or priority 3) and outside it.
    let a4 = (ip("10.77.8.2"), ip("10.77.8.3"));
    let a6 = (ip("fd77:8::2"), ip("fd77:8::3"));
    let cases: [(IpAddr, IpAddr, u8, Option<u8>); 8] = [
        (a4.0, a4.1, 26, None),
        (a4.0, a4.1, 26, Some(3)),
        (a4.0, a4.1, 0, None),
        (a4.0, a4.1, 26, Some(0)),
        (a6.0, a6.1, 26, None),
        (a6.0, a6.1, 26, Some(3)),
        (a6.0, a6.1, 10, None),
        (a6.0, a6.1, 34, Some(5)),
    ];
    for (i, (s, d, dscp, pcp)) in cases.into_iter().enumerate() {
        for k in 0..(1 + i % 3) {
            let mut r = Roce::new(s, d, 0xC800 + i as u16, 0x800 + i as u32, 0x0A);
            r.psn = k as u32;
            r.dscp = dscp;
            r.payload = 256 * (1 + i);
            r.dma_len = r.payload as u32;
            if let Some(p) = pcp {
                r.vlans = vec![(TPID_8021Q, tci(p, 100 + i as u16))];
            }
            f.push(r.frame());
        }
    }
    // CNPs in their class (DSCP 48, priority 6) and outside it (DSCP 26).
    for (i, (dscp, pcp)) in [(48, None), (48, Some(6)), (26, None), (26, Some(3))]
        .into_iter()
        .enumerate()
    {
        let (s, d) = if i % 2 == 0 { a4 } else { a6 };
        let mut r = Roce::cnp(d, s, 0xC8F0 + i as u16, 0x8F0 + i as u32);
        r.dscp = dscp;
        if let Some(p) = pcp {
            r.vlans = vec![(TPID_8021Q, tci(p, 200))];
        }
        f.push(r.frame());
    }
    let frames = f
        .into_iter()
        .enumerate()
        .map(|(i, fr)| (T0 + i as u64 * 10_000, fr))
        .collect();
    whole("lossless", Format::PcapNg, frames, true)
}

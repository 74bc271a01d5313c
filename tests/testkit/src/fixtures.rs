//! The fixture generator: deterministic captures that cover what the parser must handle.
//!
//! `generate_all(dir)` writes every fixture; the expected numbers for each come from tshark
//! (see [`crate::tshark`]), never from this file or from rocemon.

pub use crate::fixture::{whole, Fixture, Format, Link};
use crate::frames::{self, Roce, TPID_8021AD, TPID_8021Q};
use crate::Rng;
use anyhow::{Context, Result};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("fixture address")
}

const T0: u64 = 1_764_460_800_000_000_000; // 2025-11-30T00:00:00Z

/// A sequence of packets of one RC connection (requester -> responder and back).
struct Conn {
    a: IpAddr,
    b: IpAddr,
    sport: u16,
    qp_a: u32,
    qp_b: u32,
    psn_a: u32,
    psn_b: u32,
}

impl Conn {
    fn req(&mut self, opcode: u8, payload: usize) -> Roce {
        let mut r = Roce::new(self.a, self.b, self.sport, self.qp_b, opcode);
        r.psn = self.psn_a;
        self.psn_a = (self.psn_a + 1) & 0xFF_FFFF;
        r.payload = payload;
        r.dma_len = payload as u32;
        r
    }
    fn resp(&mut self, opcode: u8, payload: usize, syndrome: u8) -> Roce {
        let mut r = Roce::new(self.b, self.a, self.sport, self.qp_a, opcode);
        r.psn = self.psn_b;
        self.psn_b = (self.psn_b + 1) & 0xFF_FFFF;
        r.payload = payload;
        r.syndrome = syndrome;
        r
    }
}

fn push(frames: &mut Vec<(u64, Vec<u8>)>, r: &Roce) {
    let t = T0 + frames.len() as u64 * 1_000;
    frames.push((t, r.frame()));
}

/// RC over IPv4: every RC operation family, ACK/NAK syndromes, all ECN codepoints, CNPs.
pub fn rc_ipv4() -> Fixture {
    let mut f = Vec::new();
    let mut conns: Vec<Conn> = (0..6)
        .map(|i| Conn {
            a: ip(&format!("10.77.0.{}", 2 + i)),
            b: ip(&format!("10.77.0.{}", 12 + i)),
            sport: 0xC000 + 17 * i as u16,
            qp_a: 0x20 + i,
            qp_b: 0x120 + i,
            psn_a: 100 * i,
            psn_b: 5000 + i,
        })
        .collect();
    for round in 0..4u32 {
        for (i, c) in conns.iter_mut().enumerate() {
            let ecn = ((round as usize + i) % 4) as u8;
            let mut seq = vec![
                c.req(0x00, 1024),
                c.req(0x01, 1024),
                c.req(0x02, 100),
                c.req(0x03, 64),
                c.req(0x04, 256),
                c.req(0x05, 32),
                c.req(0x06, 2048),
                c.req(0x07, 2048),
                c.req(0x08, 1000),
                c.req(0x09, 10),
                c.req(0x0A, 2048),
                c.req(0x0B, 7),
                c.req(0x0C, 0),
                c.resp(0x0D, 1024, 0x1F),
                c.resp(0x0E, 1024, 0),
                c.resp(0x0F, 512, 0x1F),
                c.resp(0x10, 64, 0x1F),
                c.resp(0x11, 0, 0x1F),
                c.req(0x13, 0),
                c.req(0x14, 0),
                c.resp(0x12, 0, 0x1F),
                c.req(0x16, 40),
                c.req(0x17, 40),
            ];
            // NAKs of every code, an RNR NAK, and a CNP back to the requester's peer QP.
            seq.push(c.resp(0x11, 0, 0x60 | ((round as usize + i) % 5) as u8));
            seq.push(c.resp(0x11, 0, 0x20 | 0x0E));
            for r in seq.iter_mut() {
                r.ecn = ecn;
                r.ack_req = r.opcode == 0x0A;
            }
            for r in &seq {
                push(&mut f, r);
            }
            push(&mut f, &Roce::cnp(c.b, c.a, c.sport, c.qp_a));
        }
    }
    whole("rc_ipv4", Format::PcapMicros, f, true)
}

/// IPv6, 802.1Q and QinQ; UD, UC, RD and XRC opcodes; reserved and vendor opcodes.
pub fn mixed_ipv6_vlan() -> Fixture {
    let mut f = Vec::new();
    let a6 = ip("fd77::2");
    let b6 = ip("fd77::12");
    let ops: &[u8] = &[
        0x64, 0x65, // UD
        0x20, 0x21, 0x22, 0x24, 0x26, 0x27, 0x28, 0x2A, 0x2B, // UC
        0x40, 0x44, 0x4A, 0x4C, 0x4D, 0x51, 0x53, 0x55, // RD
        0xA0, 0xA4, 0xAA, 0xAC, 0xAD, 0xB1, 0xB2, 0xB3, 0xB6, 0xB7, // XRC
        0x1C, 0x1D, // FLUSH, ATOMIC_WRITE
        0x18, 0x2C, 0x80, 0xC0, // reserved
        0xE0, 0xF3, 0xFF, // vendor
    ];
    for (i, &op) in ops.iter().enumerate() {
        for (j, vlans) in [
            vec![],
            vec![(TPID_8021Q, 100)],
            vec![(TPID_8021AD, 200), (TPID_8021Q, 300)],
        ]
        .into_iter()
        .enumerate()
        {
            let (src, dst) = if j == 1 {
                (ip("10.77.1.2"), ip("10.77.1.3"))
            } else {
                (a6, b6)
            };
            let mut r = Roce::new(src, dst, 0xD000 + i as u16, 0x300 + i as u32, op);
            r.vlans = vlans;
            r.ecn = ((i + j) % 4) as u8;
            r.psn = 0xFF_FFF0 + i as u32;
            r.payload = 8 * (i % 5);
            r.dma_len = 64;
            push(&mut f, &r);
        }
    }
    // IPv6 CNPs
    for i in 0..5 {
        push(&mut f, &Roce::cnp(b6, a6, 0xD000 + i, 0x77));
    }
    whole("mixed_ipv6_vlan", Format::PcapNg, f, true)
}

/// Frames that are not RoCE, or are malformed, between valid RoCE frames.
pub fn malformed() -> Fixture {
    let mut f = Vec::new();
    let a = ip("10.77.2.2");
    let b = ip("10.77.2.3");
    let good = |op: u8| {
        let mut r = Roce::new(a, b, 0xC123, 0x44, op);
        r.payload = 32;
        r.dma_len = 32;
        r
    };
    let ok = good(0x04).frame();
    push(&mut f, &good(0x04));
    // ARP (not IP)
    f.push((T0 + 10, frames::ethernet(&[], frames::ETH_ARP, &[0u8; 28])));
    // An IPv4 frame of protocol `proto` between the fixture hosts.
    let v4 = |proto: u8, payload: &[u8]| {
        frames::ethernet(
            &[],
            frames::ETH_IPV4,
            &frames::ipv4([10, 77, 2, 2], [10, 77, 2, 3], 0, proto, 0, payload),
        )
    };
    // TCP (not UDP)
    f.push((T0 + 11, v4(6, &[0u8; 20])));
    // UDP to another port, and UDP *from* 4791 to another port
    f.push((T0 + 12, v4(17, &frames::udp(5353, 53, &[0u8; 20]))));
    f.push((T0 + 13, v4(17, &frames::udp(4791, 40000, &[0u8; 20]))));
    // RoCE with IPv4 options (valid, 40 bytes of options: IHL 15)
    let mut opt = good(0x0A);
    opt.ipv4_options = 40;
    push(&mut f, &opt);
    let mut opt = good(0x11);
    opt.ipv4_options = 8;
    push(&mut f, &opt);
    // A non-first IPv4 fragment (offset 185 * 8)
    let mut frag = ok.clone();
    frag[20] = 0x00;
    frag[21] = 0xB9;
    f.push((T0 + 14, frag));
    // UDP length too short for a BTH (8 + 6): truncated BTH
    let mut short = ok.clone();
    short[38..40].copy_from_slice(&14u16.to_be_bytes());
    f.push((T0 + 15, short));
    // Frame ends inside the BTH (IP and UDP lengths say more)
    f.push((T0 + 16, ok[..14 + 20 + 8 + 5].to_vec()));
    // UDP length larger than the IP payload
    let mut long = ok.clone();
    long[38..40].copy_from_slice(&2000u16.to_be_bytes());
    f.push((T0 + 17, long));
    // UDP length below 8
    let mut tiny = ok.clone();
    tiny[38..40].copy_from_slice(&4u16.to_be_bytes());
    f.push((T0 + 18, tiny));
    // IHL 3 (below the minimum)
    let mut ihl = ok.clone();
    ihl[14] = 0x43;
    f.push((T0 + 19, ihl));
    // IP version 7 under an IPv4 EtherType
    let mut ver = ok.clone();
    ver[14] = 0x75;
    f.push((T0 + 20, ver));
    // Frame cut inside the IPv4 header
    f.push((T0 + 21, ok[..14 + 12].to_vec()));
    // Frame cut inside the UDP header
    f.push((T0 + 22, ok[..14 + 20 + 4].to_vec()));
    // Frame cut inside the Ethernet header
    f.push((T0 + 23, ok[..10].to_vec()));
    // RETH cut short by the UDP length (BTH complete): RoCE with truncated extension headers
    let w = good(0x0A).frame();
    let mut cut = w[..14 + 20 + 8 + 12 + 8].to_vec();
    let ulen = (8 + 12 + 8) as u16;
    cut[38..40].copy_from_slice(&ulen.to_be_bytes());
    let tl = 20 + ulen;
    cut[16..18].copy_from_slice(&tl.to_be_bytes());
    cut[24..26].copy_from_slice(&[0, 0]);
    let cs = frames::checksum(&cut[14..34]);
    cut[24..26].copy_from_slice(&cs.to_be_bytes());
    while cut.len() < 60 {
        cut.push(0);
    }
    f.push((T0 + 24, cut));
    // (Three stacked VLAN tags are deeper than rocemon walks, a documented limit where it
    // disagrees with tshark on purpose; the parser's unit tests cover that case.)
    // IPv6 truncated header
    let mut v6 = Roce::new(ip("fd77::2"), ip("fd77::3"), 0xC555, 9, 0x04).frame();
    v6.truncate(14 + 30);
    f.push((T0 + 25, v6));
    push(&mut f, &good(0x81));
    whole("malformed", Format::PcapMicros, f, false)
}

/// Many flows with random common opcodes, sizes and ECN marks (nanosecond pcap).
pub fn many_flows() -> Fixture {
    let mut rng = Rng(0x5EED_4791);
    let mut f = Vec::new();
    let common: &[u8] = &[
        0x04, 0x0A, 0x06, 0x07, 0x08, 0x0C, 0x10, 0x11, 0x00, 0x01, 0x02, 0x81,
    ];
    for flow in 0..400u32 {
        let a = ip(&format!("10.78.{}.{}", flow / 200, 1 + flow % 200));
        let b = ip(&format!("10.79.{}.{}", flow % 3, 1 + flow % 7));
        let sport = 0xC000 | (rng.below(0x4000) as u16);
        let qp = 0x100 + rng.below(5000) as u32;
        let n = 1 + rng.below(12);
        for k in 0..n {
            let op = common[rng.below(common.len() as u64) as usize];
            let mut r = if op == 0x81 {
                Roce::cnp(a, b, sport, qp)
            } else {
                Roce::new(a, b, sport, qp, op)
            };
            r.psn = k as u32;
            r.payload = if op == 0x81 {
                16
            } else {
                rng.below(1500) as usize
            };
            r.dma_len = r.payload as u32;
            r.ecn = rng.below(4) as u8;
            push(&mut f, &r);
        }
    }
    whole("many_flows", Format::PcapNanos, f, true)
}

/// A short mixed set (RC over IPv4 and IPv6 with a VLAN) in another framing.
fn small_mix(name: &'static str, link: Link, format: Format, snaplen: u32) -> Fixture {
    let mut f = Vec::new();
    let mut c = Conn {
        a: ip("10.77.3.2"),
        b: ip("10.77.3.3"),
        sport: 0xE001,
        qp_a: 0x51,
        qp_b: 0x52,
        psn_a: 0xFF_FFFE,
        psn_b: 7,
    };
    for i in 0..30u32 {
        let mut r = match i % 6 {
            0 => c.req(0x0A, 1024),
            1 => c.req(0x04, 300),
            2 => c.resp(0x11, 0, 0x1F),
            3 => c.req(0x0C, 0),
            4 => c.resp(0x10, 900, 0x1F),
            _ => Roce::cnp(c.b, c.a, c.sport, c.qp_a),
        };
        r.ecn = (i % 4) as u8;
        if i % 5 == 0 {
            r.vlans = vec![(TPID_8021Q, 42)];
        }
        push(&mut f, &r);
    }
    for i in 0..10u16 {
        let mut r = Roce::new(ip("fd77::5"), ip("fd77::6"), 0xF000 + i, 0x99, 0x06);
        r.payload = 2000;
        r.dma_len = 65536;
        push(&mut f, &r);
    }
    Fixture {
        name,
        link,
        format,
        snaplen,
        frames: f,
        replayable: false,
    }
}

/// Every fixture.
pub fn all() -> Vec<Fixture> {
    vec![
        rc_ipv4(),
        mixed_ipv6_vlan(),
        malformed(),
        psn_health(),
        tunnels(),
        many_flows(),
        crate::lossless::lossless(),
        small_mix("cooked_sll", Link::Sll, Format::PcapMicros, 65535),
        small_mix("cooked_sll2", Link::Sll2, Format::PcapNg, 65535),
        // 54 bytes keep Ethernet+IPv4+UDP+BTH of untagged IPv4 frames and cut the rest.
        small_mix("snaplen54", Link::Ethernet, Format::PcapNanos, 54),
        small_mix("snaplen48", Link::Ethernet, Format::PcapMicros, 48),
    ]
}

/// Writes every fixture into `dir` (created if needed) and returns their paths.
pub fn generate_all(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    all().iter().map(|f| f.write(dir)).collect()
}

/// PSN and NAK health: a gap, go-back-N retransmissions, a duplicate, a PSN wrap, NAKs of every
/// code and RNR NAKs. Expected (by construction, and NAK codes checked against tshark):
/// 2 missing packets, 4 retransmissions, NAKs [2, 1, 1, 1, 1] by code, 3 RNR NAKs.
pub fn psn_health() -> Fixture {
    let mut f = Vec::new();
    let a = ip("10.77.4.2");
    let b = ip("10.77.4.3");
    let req = |sport: u16, psn: u32| {
        let mut r = Roce::new(a, b, sport, 0x500, 0x07);
        r.psn = psn;
        r.payload = 256;
        r
    };
    // Flow 1: 13 lost (gap 1), go-back-N resends 13, 14, 15 (3 retransmissions).
    for psn in [10, 11, 12, 14, 15, 13, 14, 15, 16] {
        push(&mut f, &req(0xC101, psn));
    }
    // Flow 2: wraps at 2^24, then 2 is lost (gap 1).
    for psn in [0xFF_FFFE, 0xFF_FFFF, 0, 1, 3] {
        push(&mut f, &req(0xC102, psn));
    }
    // Flow 3: a duplicate (1 retransmission).
    for psn in [5, 5, 6] {
        push(&mut f, &req(0xC103, psn));
    }
    // The responder's ACKs back to the requester: NAK codes 0 (twice), 1, 2, 3, 4; three RNR
    // NAKs; two plain ACKs.
    for syndrome in [
        0x60, 0x60, 0x61, 0x62, 0x63, 0x64, 0x2E, 0x21, 0x3F, 0x1F, 0x05,
    ] {
        let mut r = Roce::new(b, a, 0xC101, 0x400, 0x11);
        r.syndrome = syndrome;
        push(&mut f, &r);
    }
    whole("psn_health", Format::PcapMicros, f, true)
}

/// A timeline for elephant detection: a heavy flow at 1 MB/s for 10 s that then stops, and a
/// light flow at 1 kB/s for 20 s (one packet per 1 ms / 100 ms).
pub fn elephant_timeline() -> Fixture {
    let mut f = Vec::new();
    let heavy = {
        let mut r = Roce::new(ip("10.77.5.2"), ip("10.77.5.3"), 0xC201, 0x600, 0x07);
        r.payload = 1000 - 14 - 20 - 8 - 12 - 4; // 1000-byte frames
        r
    };
    let light = {
        let mut r = Roce::new(ip("10.77.5.4"), ip("10.77.5.3"), 0xC202, 0x601, 0x04);
        r.payload = 100 - 14 - 20 - 8 - 12 - 4;
        r
    };
    let (hf, lf) = (heavy.frame(), light.frame());
    for ms in 0..20_000u64 {
        let t = T0 + ms * 1_000_000;
        if ms < 10_000 {
            f.push((t, hf.clone()));
        }
        if ms % 100 == 50 {
            f.push((t + 500_000, lf.clone()));
        }
    }
    whole("elephant_timeline", Format::PcapNanos, f, false)
}

/// Mirrored and tunnelled RoCEv2 (VXLAN, GRE with Ethernet or IP, ERSPAN II, ERSPAN III with
/// and without subheader) between plain frames, and malformed encapsulations.
pub fn tunnels() -> Fixture {
    use crate::frames::tunnel;
    let mut f = Vec::new();
    let mut c = Conn {
        a: ip("10.77.6.2"),
        b: ip("10.77.6.3"),
        sport: 0xC601,
        qp_a: 0x61,
        qp_b: 0x62,
        psn_a: 1,
        psn_b: 1,
    };
    let mut t = T0;
    for i in 0..12u32 {
        let mut r = match i % 4 {
            0 => c.req(0x0A, 512),
            1 => c.resp(0x11, 0, 0x1F),
            2 => c.req(0x04, 64),
            _ => Roce::cnp(c.b, c.a, c.sport, c.qp_a),
        };
        r.ecn = (i % 4) as u8;
        let inner = r.frame();
        let frames = [
            tunnel::vxlan(&inner, 0x1234),
            tunnel::gre_teb(&inner, 77),
            tunnel::gre_ip(&inner),
            tunnel::erspan2(&inner, 100 + i as u16, i),
            tunnel::erspan3(&inner, 300, i, i % 2 == 0),
            inner.clone(),
        ];
        for fr in frames {
            t += 1000;
            f.push((t, fr));
        }
    }
    // IPv6 RoCE inside IPv4 tunnels: the outer IPv4 header must not be read as the inner one
    // (addresses, ECN).
    let mut c6 = Conn {
        a: ip("fd77:6::2"),
        b: ip("fd77:6::3"),
        sport: 0xC606,
        qp_a: 0x66,
        qp_b: 0x67,
        psn_a: 1,
        psn_b: 1,
    };
    for i in 0..6u32 {
        let mut r = match i % 3 {
            0 => c6.req(0x0A, 256),
            1 => c6.resp(0x11, 0, 0x1F),
            _ => Roce::cnp(c6.b, c6.a, c6.sport, c6.qp_a),
        };
        r.ecn = (3 - i % 4) as u8;
        let inner = r.frame();
        for fr in [
            tunnel::vxlan(&inner, 0x6666),
            tunnel::gre_ip(&inner),
            tunnel::erspan2(&inner, 600, i),
        ] {
            t += 1000;
            f.push((t, fr));
        }
    }
    // Odd and malformed: VXLAN without its I flag and GRE version 1 (both decoded anyway, as
    // Wireshark does), ERSPAN II cut inside its header, GRE carrying PPP.
    let inner = c.req(0x04, 16).frame();
    let mut bad_vxlan = tunnel::vxlan(&inner, 5);
    bad_vxlan[14 + 20 + 8] = 0x00;
    let cut = tunnel::erspan2(&inner, 9, 1)[..14 + 20 + 8 + 4].to_vec();
    let mut cut = cut;
    // keep the IP total length consistent with what is left
    let tl = (cut.len() - 14) as u16;
    cut[16..18].copy_from_slice(&tl.to_be_bytes());
    let mut other = tunnel::gre_ip(&inner);
    other[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&0x880Bu16.to_be_bytes()); // PPP
    let mut v1 = tunnel::gre_ip(&inner);
    v1[14 + 20 + 1] = 0x01;
    for fr in [bad_vxlan, cut, other, v1] {
        t += 1000;
        f.push((t, fr));
    }
    whole("tunnels", Format::PcapMicros, f, true)
}

//! Table and property tests of the parser, over frames from the independent builder.

use super::*;
use crate::reader::SliceReader;
use proptest::prelude::*;
use rocemon_testkit::frames::{self, Roce, TPID_8021AD, TPID_8021Q};
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn v4() -> Roce {
    Roce::new(ip("10.0.0.2"), ip("10.0.0.12"), 0xE001, 0x12_3456, 0x04)
}

fn p(frame: &[u8]) -> Result<RoceInfo, Outcome> {
    parse(&SliceReader(frame), LinkType::Ethernet)
}

#[test]
fn rc_send_only_ipv4_every_field() {
    let mut r = v4();
    r.psn = 0xAB_CDEF;
    r.ecn = 3;
    r.fecn = true;
    r.ack_req = true;
    r.payload = 100;
    let i = p(&r.frame()).unwrap();
    assert_eq!(i.outcome, Outcome::Roce);
    assert_eq!(i.ip_version, 4);
    assert_eq!(&i.src[..4], &[10, 0, 0, 2]);
    assert_eq!(&i.dst[..4], &[10, 0, 0, 12]);
    assert_eq!(&i.src[4..], &[0; 12]);
    assert_eq!(i.sport, 0xE001);
    assert_eq!(i.ecn, 3);
    assert_eq!(i.bth.opcode, 0x04);
    assert_eq!(i.bth.dest_qp, 0x12_3456);
    assert_eq!(i.bth.psn, 0xAB_CDEF);
    assert!(i.bth.fecn && !i.bth.becn && i.bth.ack_req);
    assert_eq!(i.bth.pkey, 0xFFFF);
    assert_eq!(i.bth.pad_count, 0);
    assert_eq!(i.udp_len as usize, 8 + 12 + 100 + 4);
    assert_eq!(i.vlan_tags, 0);
    assert!(!i.is_cnp());
    let k = i.flow_key(crate::Hook::TcEgress);
    assert_eq!(
        (k.sport, k.dest_qp, k.ip_version, k.hook),
        (0xE001, 0x12_3456, 4, 2)
    );
}

#[test]
fn ipv6_traffic_class_ecn_and_addresses() {
    for ecn in 0..4 {
        let mut r = Roce::new(ip("fd77::2"), ip("fd77::12"), 0xC000, 7, 0x0A);
        r.ecn = ecn;
        r.dscp = 0x2E;
        r.dma_len = 4096;
        let i = p(&r.frame()).unwrap();
        assert_eq!(i.ip_version, 6, "ecn {ecn:?}");
        assert_eq!(i.ecn, ecn, "ecn {ecn:?}");
        assert_eq!(
            i.src,
            ip("fd77::2")
                .to_string()
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
            "ecn {ecn:?}"
        );
        assert_eq!(i.reth_dma_len, Some(4096), "ecn {ecn:?}");
    }
}

#[test]
fn vlan_and_qinq() {
    let mut r = v4();
    r.vlans = vec![(TPID_8021Q, 10)];
    assert_eq!(p(&r.frame()).unwrap().vlan_tags, 1);
    r.vlans = vec![(TPID_8021AD, 10), (TPID_8021Q, 20)];
    assert_eq!(p(&r.frame()).unwrap().vlan_tags, 2);
    r.vlans = vec![(0x9100, 10), (TPID_8021Q, 20)];
    assert_eq!(p(&r.frame()).unwrap().vlan_tags, 2);
    r.vlans = vec![(TPID_8021AD, 1), (TPID_8021Q, 2), (TPID_8021Q, 3)];
    assert_eq!(p(&r.frame()), Err(Outcome::VlanDepthExceeded));
}

#[test]
fn cnp() {
    let i = p(&Roce::cnp(ip("10.0.0.12"), ip("10.0.0.2"), 0xE001, 0x20).frame()).unwrap();
    assert!(i.is_cnp() && i.bth.becn);
    assert_eq!(i.bth.dest_qp, 0x20);
}

#[test]
fn extension_headers() {
    let mut r = v4();
    r.opcode = 0x0C;
    r.dma_len = 0x0001_0000;
    assert_eq!(p(&r.frame()).unwrap().reth_dma_len, Some(0x0001_0000));
    r.opcode = 0x11;
    r.syndrome = 0x60 | 2;
    r.msn = 0x00_1234;
    let i = p(&r.frame()).unwrap();
    assert_eq!(
        i.aeth,
        Some(Aeth {
            syndrome: 0x62,
            msn: 0x1234
        })
    );
    assert_eq!(
        crate::headers::ext::aeth_kind(0x62),
        crate::headers::ext::AethKind::Nak
    );
    r.opcode = 0x64; // UD SEND_ONLY
    let i = p(&r.frame()).unwrap();
    assert_eq!(
        i.deth,
        Some(Deth {
            qkey: 0x1111_2222,
            src_qp: 0xAB_CD
        })
    );
    r.opcode = 0x4C; // RD READ_REQUEST: RDETH, DETH, RETH
    r.dma_len = 77;
    let i = p(&r.frame()).unwrap();
    assert_eq!(i.deth.map(|d| d.src_qp), Some(0xAB_CD));
    assert_eq!(i.reth_dma_len, Some(77));
    r.opcode = 0xAA; // XRC WRITE_ONLY: XRCETH, RETH
    let i = p(&r.frame()).unwrap();
    assert_eq!(i.reth_dma_len, Some(77));
}

#[test]
fn every_opcode_parses_complete() {
    for op in 0u16..=255 {
        let mut r = v4();
        r.opcode = op as u8;
        r.payload = 3;
        let i = p(&r.frame()).unwrap_or_else(|e| panic!("opcode {op:#x}: {e:?}"));
        assert_eq!(i.outcome, Outcome::Roce, "opcode {op:#x}");
        assert_eq!(i.bth.opcode, op as u8, "op {op:?}");
        assert_eq!(i.bth.pad_count, 1, "op {op:?}");
    }
}

#[test]
fn ipv4_options_are_skipped() {
    for opts in [4, 8, 40] {
        let mut r = v4();
        r.ipv4_options = opts;
        r.psn = 99;
        assert_eq!(p(&r.frame()).unwrap().bth.psn, 99, "opts {opts:?}");
    }
}

fn set_udp_len(f: &mut [u8], len: u16) {
    let off = frames::l3_offset(f) + 20;
    f[off + 4..off + 6].copy_from_slice(&len.to_be_bytes());
}

#[test]
fn malformed_and_other_reasons() {
    let ok = v4().frame();
    let l3 = 14;
    let cases: Vec<(&str, Vec<u8>, Outcome)> = vec![
        (
            "arp",
            frames::ethernet(&[], frames::ETH_ARP, &[0; 28]),
            Outcome::NotIp,
        ),
        (
            "tcp",
            frames::ethernet(
                &[],
                frames::ETH_IPV4,
                &frames::ipv4([1, 1, 1, 1], [2, 2, 2, 2], 0, 6, 0, &[0; 20]),
            ),
            Outcome::NotUdp,
        ),
        (
            "udp 53",
            frames::ethernet(
                &[],
                frames::ETH_IPV4,
                &frames::ipv4(
                    [1, 1, 1, 1],
                    [2, 2, 2, 2],
                    0,
                    17,
                    0,
                    &frames::udp(4791, 53, &[0; 20]),
                ),
            ),
            Outcome::UdpOtherPort,
        ),
        ("short eth", ok[..13].to_vec(), Outcome::TruncatedL2),
        (
            "short vlan",
            {
                let mut r = v4();
                r.vlans = vec![(TPID_8021Q, 1)];
                r.frame()[..15].to_vec()
            },
            Outcome::TruncatedL2,
        ),
        ("short ipv4", ok[..l3 + 19].to_vec(), Outcome::TruncatedIpv4),
        (
            "version",
            {
                let mut f = ok.clone();
                f[l3] = 0x65;
                f
            },
            Outcome::BadIpVersion,
        ),
        (
            "ihl 4",
            {
                let mut f = ok.clone();
                f[l3] = 0x44;
                f
            },
            Outcome::BadIhl,
        ),
        (
            "total < ihl",
            {
                let mut f = ok.clone();
                f[l3 + 2] = 0;
                f[l3 + 3] = 10;
                f
            },
            Outcome::BadIpv4TotalLength,
        ),
        (
            "options cut",
            {
                let mut r = v4();
                r.ipv4_options = 40;
                r.frame()[..l3 + 40].to_vec()
            },
            Outcome::TruncatedIpv4,
        ),
        (
            "fragment",
            {
                let mut f = ok.clone();
                f[l3 + 7] = 1;
                f
            },
            Outcome::IpFragment,
        ),
        (
            "short udp",
            ok[..l3 + 20 + 7].to_vec(),
            Outcome::TruncatedUdp,
        ),
        (
            "udp len 7",
            {
                let mut f = ok.clone();
                set_udp_len(&mut f, 7);
                f
            },
            Outcome::BadUdpLength,
        ),
        (
            "udp len 19",
            {
                let mut f = ok.clone();
                set_udp_len(&mut f, 19);
                f
            },
            Outcome::TruncatedBth,
        ),
        (
            "bth cut",
            ok[..l3 + 20 + 8 + 11].to_vec(),
            Outcome::TruncatedBth,
        ),
        (
            "short ipv6",
            Roce::new(ip("fd77::1"), ip("fd77::2"), 1, 1, 4).frame()[..l3 + 39].to_vec(),
            Outcome::TruncatedIpv6,
        ),
        (
            "v6 version",
            {
                let mut f = Roce::new(ip("fd77::1"), ip("fd77::2"), 1, 1, 4).frame();
                f[l3] = 0x40;
                f
            },
            Outcome::BadIpVersion,
        ),
    ];
    for (name, frame, want) in cases {
        assert_eq!(p(&frame).map(|i| i.outcome), Err(want), "{name}");
    }
}

#[test]
fn udp_length_beyond_ip_payload_is_clipped() {
    let mut f = v4().frame();
    set_udp_len(&mut f, 2000);
    let i = p(&f).unwrap();
    assert_eq!(i.outcome, Outcome::Roce);
    assert_eq!(i.udp_len as usize, 8 + 12 + 4);
}

#[test]
fn extension_headers_cut_short() {
    let mut r = v4();
    r.opcode = 0x0A;
    let mut f = r.frame();
    // UDP length covers BTH and 8 of the 16 RETH bytes.
    set_udp_len(&mut f, 8 + 12 + 8);
    let i = p(&f).unwrap();
    assert_eq!(i.outcome, Outcome::RoceExtTruncated);
    assert_eq!(i.reth_dma_len, None);
    // captured bytes end inside the RETH
    let f = r.frame();
    let i = p(&f[..14 + 20 + 8 + 12 + 10]).unwrap();
    assert_eq!(i.outcome, Outcome::RoceExtTruncated);
}

fn ipv6_with_ext(exts: &[(u8, usize)], last_next: u8) -> Vec<u8> {
    // exts: (this header's type, its length in bytes); chain ends in `last_next`.
    let udp = frames::udp(0xC001, 4791, &v4().udp_payload());
    let mut payload = Vec::new();
    for (k, &(_, len)) in exts.iter().enumerate() {
        let next = exts.get(k + 1).map(|e| e.0).unwrap_or(last_next);
        let mut h = vec![0u8; len];
        h[0] = next;
        if exts[k].0 == 44 {
            // fragment header: offset 0, M flag set
            h[3] = 1;
        } else {
            h[1] = (len / 8 - 1) as u8;
        }
        payload.extend(h);
    }
    payload.extend(udp);
    let first = exts.first().map(|e| e.0).unwrap_or(last_next);
    let l3 = frames::ipv6([0xfd; 16], [0xfe; 16], 2, first, &payload);
    frames::ethernet(&[], frames::ETH_IPV6, &l3)
}

#[test]
fn ipv6_extension_headers() {
    assert_eq!(p(&ipv6_with_ext(&[], 17)).unwrap().outcome, Outcome::Roce);
    assert_eq!(
        p(&ipv6_with_ext(&[(0, 8)], 17)).unwrap().outcome,
        Outcome::Roce
    );
    assert_eq!(
        p(&ipv6_with_ext(&[(0, 8), (60, 16), (44, 8)], 17))
            .unwrap()
            .outcome,
        Outcome::Roce
    );
    assert_eq!(
        p(&ipv6_with_ext(&[(0, 8), (60, 16), (43, 8), (60, 8)], 17)),
        Err(Outcome::Ipv6ExtUnsupported)
    );
    assert_eq!(p(&ipv6_with_ext(&[(0, 8)], 6)), Err(Outcome::NotUdp));
    let mut later = ipv6_with_ext(&[(44, 8)], 17);
    later[14 + 40 + 3] = 0x08; // fragment offset 1
    assert_eq!(p(&later), Err(Outcome::IpFragment));
    let cut = ipv6_with_ext(&[(0, 8)], 17);
    assert_eq!(p(&cut[..14 + 40 + 1]), Err(Outcome::TruncatedIpv6Ext));
    let mut lie = ipv6_with_ext(&[(0, 16)], 17);
    lie[14 + 4..14 + 6].copy_from_slice(&8u16.to_be_bytes());
    assert_eq!(p(&lie), Err(Outcome::BadIpv6PayloadLength));
}

#[test]
fn linux_cooked_captures() {
    let mut r = v4();
    r.vlans = vec![(TPID_8021Q, 5)];
    let f = r.frame();
    let a = parse(&SliceReader(&frames::to_sll(&f)), LinkType::LinuxSll).unwrap();
    let b = parse(&SliceReader(&frames::to_sll2(&f)), LinkType::LinuxSll2).unwrap();
    let c = p(&f).unwrap();
    assert_eq!(a, c);
    assert_eq!(b, c);
    assert_eq!(
        parse(&SliceReader(&[0u8; 19]), LinkType::LinuxSll2),
        Err(Outcome::TruncatedL2)
    );
    assert_eq!(
        parse(&SliceReader(&[0u8; 15]), LinkType::LinuxSll),
        Err(Outcome::TruncatedL2)
    );
}

#[test]
fn outcome_table_is_consistent() {
    for (i, o) in Outcome::ALL.iter().enumerate() {
        assert_eq!(*o as usize, i, "i {i:?}, o {o:?}");
        assert!(!o.name().is_empty(), "i {i:?}, o {o:?}");
    }
    assert_eq!(Outcome::Roce.kind(), OutcomeKind::Roce);
    assert_eq!(Outcome::UdpOtherPort.kind(), OutcomeKind::NotRoce);
    assert_eq!(Outcome::TruncatedBth.kind(), OutcomeKind::Malformed);
}

/// A reader that records every access past the end of the data (and refuses it, as the
/// kernel's load-bytes helpers and bounds checks do). It reads the bytes itself, not through
/// [`SliceReader`], so the check does not rest on a reader under test.
struct Checked<'a> {
    data: &'a [u8],
    past_end: core::cell::Cell<u32>,
}

impl<'a> Checked<'a> {
    fn new(data: &'a [u8]) -> Self {
        Checked {
            data,
            past_end: core::cell::Cell::new(0),
        }
    }
}

impl PacketReader for Checked<'_> {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        if off.checked_add(N).is_none_or(|end| end > self.data.len()) {
            self.past_end.set(self.past_end.get() + 1);
            return None;
        }
        let mut out = [0u8; N];
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.data[off + i];
        }
        Some(out)
    }
}

/// Parses through [`Checked`] and checks the result against the accesses: a parse that
/// asked for bytes past the end never reports a packet (RoCE) built from them, and a parse
/// through the production [`SliceReader`] gives the same result.
fn parse_checked(data: &[u8], link: LinkType) -> Result<RoceInfo, Outcome> {
    let r = Checked::new(data);
    let out = parse(&r, link);
    if r.past_end.get() > 0 {
        assert!(
            out.is_err(),
            "a parse that read past the end of a {}-byte frame reported RoCE: {out:?}",
            data.len()
        );
    }
    assert_eq!(out, parse(&SliceReader(data), link));
    out
}

fn any_link() -> impl Strategy<Value = LinkType> {
    prop_oneof![
        Just(LinkType::Ethernet),
        Just(LinkType::LinuxSll),
        Just(LinkType::LinuxSll2)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600), link in any_link()) {
        let _ = parse_checked(&data, link);
    }

    #[test]
    fn mutated_roce_frames_never_panic(
        op in any::<u8>(), v6 in any::<bool>(), tags in 0usize..3, payload in 0usize..64,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6), cut in any::<usize>(),
    ) {
        let mut r = if v6 { Roce::new(ip("fd77::1"), ip("fd77::2"), 9, 9, op) } else { v4() };
        r.opcode = op;
        r.payload = payload;
        r.vlans = vec![(TPID_8021Q, 1); tags];
        let mut f = r.frame();
        let clean = p(&f);
        prop_assert!(clean.is_ok());
        for (at, x) in flips {
            let n = f.len();
            f[at % n] ^= x;
        }
        let n = f.len();
        let f = &f[..cut % (n + 1)];
        if let Ok(i) = parse_checked(f, LinkType::Ethernet) {
            prop_assert!(matches!(i.outcome, Outcome::Roce | Outcome::RoceExtTruncated));
            prop_assert!(i.ecn < 4 && i.bth.dest_qp < (1 << 24) && i.bth.psn < (1 << 24));
        }
    }

    #[test]
    fn counters_account_for_every_frame(frames_ in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 0..40)) {
        let mut c = crate::HookCounters::ZERO;
        for f in &frames_ {
            c.record(&crate::parse_record(&SliceReader(f), LinkType::Ethernet), f.len() as u64, &crate::TrafficClasses::DEFAULT);
        }
        prop_assert_eq!(c.frames, frames_.len() as u64);
        prop_assert_eq!(c.outcomes.iter().sum::<u64>(), c.frames);
        prop_assert_eq!(c.opcode_packets.iter().sum::<u64>(), c.roce_packets());
        prop_assert_eq!(c.ecn_packets.iter().sum::<u64>(), c.roce_packets());
        prop_assert_eq!(c.roce_dscp_packets.iter().sum::<u64>(), c.roce_packets());
        prop_assert_eq!(c.roce_dscp_bytes.iter().sum::<u64>(), c.roce_bytes());
        prop_assert_eq!(c.cnp_dscp_packets.iter().sum::<u64>(), c.cnp_packets);
        prop_assert_eq!(
            c.pfc_frames + c.pause_frames + c.mac_control_other,
            c.outcomes[Outcome::MacControl as usize]
        );
    }
}

#[test]
fn mirror_and_tunnel_encapsulations() {
    use crate::headers::encap::TunnelKind;
    use rocemon_testkit::frames::tunnel;
    let mut r = v4();
    r.ecn = 3;
    r.psn = 77;
    let inner = r.frame();
    let plain = p(&inner).unwrap();
    let cases = [
        (tunnel::vxlan(&inner, 0x1234), TunnelKind::Vxlan, 0x1234),
        (tunnel::gre_teb(&inner, 77), TunnelKind::Gre, 77),
        (tunnel::gre_ip(&inner), TunnelKind::Gre, 0),
        (
            tunnel::erspan2(&inner, 0x2AB, 5),
            TunnelKind::ErspanII,
            0x2AB,
        ),
        (
            tunnel::erspan3(&inner, 300, 5, false),
            TunnelKind::ErspanIII,
            300,
        ),
        (
            tunnel::erspan3(&inner, 301, 5, true),
            TunnelKind::ErspanIII,
            301,
        ),
    ];
    for (frame, kind, id) in cases {
        let i = p(&frame).unwrap_or_else(|e| panic!("{kind:?}: {e:?}"));
        assert_eq!((i.tunnel.kind, i.tunnel.id), (kind, id));
        // the inner packet, not the outer one
        assert_eq!(
            (i.src, i.dst, i.ecn, i.bth),
            (plain.src, plain.dst, plain.ecn, plain.bth),
            "{kind:?}"
        );
        assert_eq!(
            i.flow_key(crate::Hook::Xdp),
            plain.flow_key(crate::Hook::Xdp)
        );
    }
    assert_eq!(plain.tunnel.kind, TunnelKind::None);
    // malformed or foreign encapsulations
    let cut = tunnel::erspan2(&inner, 9, 1);
    assert_eq!(p(&cut[..14 + 20 + 8 + 4]), Err(Outcome::TruncatedErspan));
    let mut other = tunnel::gre_ip(&inner);
    other[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&0x880Bu16.to_be_bytes());
    assert_eq!(p(&other), Err(Outcome::GreOtherProtocol));
    assert_eq!(
        p(&tunnel::vxlan(&inner, 1)[..14 + 20 + 8 + 5]),
        Err(Outcome::BadVxlan)
    );
    assert_eq!(
        p(&tunnel::gre_teb(&inner, 1)[..14 + 20 + 6]),
        Err(Outcome::BadGre)
    );
    // a tunnel inside a tunnel: the inner tunnel is not RoCE to us
    assert_eq!(
        p(&tunnel::vxlan(&tunnel::vxlan(&inner, 1), 2)),
        Err(Outcome::UdpOtherPort)
    );
}

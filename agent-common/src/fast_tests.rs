//! The fast path answers only what the general parser would answer, and answers the common
//! shapes itself. Frames come from the independent builder and the shipped fixtures.

use super::*;
use crate::info::RoceInfo;
use crate::parse::{parse_frame, LinkType};
use crate::reader::SliceReader;
use core::cell::Cell;
use proptest::prelude::*;
use rocemon_testkit::fixtures;
use rocemon_testkit::frames::{self, tunnel, Roce, TPID_8021AD, TPID_8021Q};
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn v4(op: u8) -> Roce {
    Roce::new(ip("10.0.0.2"), ip("10.0.0.12"), 0xE001, 0x12_3456, op)
}

fn v6(op: u8) -> Roce {
    Roce::new(ip("fd77::2"), ip("fd77::12"), 0xC001, 0x42, op)
}

/// The fast path's answer, RoCE view.
fn fast(frame: &[u8]) -> Option<Result<RoceInfo, Outcome>> {
    parse_fast(&SliceReader(frame)).map(Parsed::roce)
}

/// The one property: when the fast path answers, it answers what `parse_frame` says; and
/// the record userspace counts from (`parse_record`: fast path, else the general parser)
/// reads as what `parse_frame` says.
fn agrees(frame: &[u8]) -> Result<(), String> {
    let g = parse_frame(&SliceReader(frame), LinkType::Ethernet);
    let rec = crate::parse::parse_record(&SliceReader(frame), LinkType::Ethernet).load();
    if rec != g {
        return Err(format!(
            "parse_record {rec:?} vs parse {g:?} on {frame:02x?}"
        ));
    }
    slot_asked_only_for_records(frame, &g)?;
    match parse_fast(&SliceReader(frame)) {
        None => Ok(()),
        Some(f) => {
            if f == g {
                Ok(())
            } else {
                Err(format!("fast {f:?} vs parse {g:?} on {frame:02x?}"))
            }
        }
    }
}

/// The record is asked for only when the fast path writes one: an outcome alone (the kernel
/// counts it without its per-CPU record) never asked, is what `parse_frame` says, and is never
/// one the AF_XDP classifier hands to userspace (that program counts it at once).
fn slot_asked_only_for_records(frame: &[u8], general: &Parsed) -> Result<(), String> {
    let asked = Cell::new(false);
    let mut rec = PacketRecord::default();
    let answer = parse_fast_with(&SliceReader(frame), || {
        asked.set(true);
        Some(&mut rec)
    });
    match answer {
        Fast::Outcome(o) if asked.get() => Err(format!("{o:?} asked for a record on {frame:02x?}")),
        Fast::Outcome(o) if o.captured() => Err(format!("{o:?} is captured, on {frame:02x?}")),
        Fast::Outcome(o) if Parsed::Other(o) != *general => Err(format!(
            "outcome {o:?} vs parse {general:?} on {frame:02x?}"
        )),
        Fast::Record(_) if !asked.get() => Err(format!("a record never asked for on {frame:02x?}")),
        _ => Ok(()),
    }
}

/// No record is to be had (the kernel's lookup failed): the frame goes to the slow program
/// unless it needs none.
#[test]
fn without_a_record_only_outcomes_answer() {
    let none = || None::<&mut PacketRecord>;
    assert_eq!(
        parse_fast_with(&SliceReader(&v4(0x0A).frame()), none),
        Fast::Slow
    );
    assert_eq!(
        parse_fast_with(&SliceReader(&frames::pause(3)), none),
        Fast::Slow
    );
    let arp = frames::ethernet(&[], frames::ETH_ARP, &[0u8; 28]);
    assert_eq!(
        parse_fast_with(&SliceReader(&arp), none),
        Fast::Outcome(Outcome::NotIp)
    );
}

/// The common non-RoCE frames are answered with their outcome alone: the kernel counts them
/// without its per-CPU record (no record is to be had here, and none is needed).
#[test]
fn common_non_roce_frames_need_no_record() {
    let none = || None::<&mut PacketRecord>;
    let u = frames::udp(5000, 53, &[0u8; 20]);
    let v4 = |proto, l4: &[u8]| frames::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0, proto, 0, l4);
    let v6 = |proto, l4: &[u8]| frames::ipv6([1; 16], [2; 16], 0, proto, l4);
    let cases = [
        (
            frames::ethernet(&[], frames::ETH_ARP, &[0u8; 28]),
            Outcome::NotIp,
        ),
        (
            frames::ethernet(&[(TPID_8021Q, 3)], frames::ETH_ARP, &[0u8; 28]),
            Outcome::NotIp,
        ),
        (
            frames::ethernet(&[], frames::ETH_IPV4, &v4(17, &u)),
            Outcome::UdpOtherPort,
        ),
        (
            frames::ethernet(&[(TPID_8021Q, 3)], frames::ETH_IPV4, &v4(17, &u)),
            Outcome::UdpOtherPort,
        ),
        (
            frames::ethernet(&[], frames::ETH_IPV6, &v6(17, &u)),
            Outcome::UdpOtherPort,
        ),
        (
            frames::ethernet(&[], frames::ETH_IPV4, &v4(6, &[0u8; 20])),
            Outcome::NotUdp,
        ),
        (
            frames::ethernet(&[], frames::ETH_IPV6, &v6(6, &[0u8; 20])),
            Outcome::NotUdp,
        ),
    ];
    for (f, want) in cases {
        assert_eq!(
            parse_fast_with(&SliceReader(&f), none),
            Fast::Outcome(want),
            "{f:02x?}"
        );
    }
}

/// Every opcode, with its extension headers, both families, no tag and one tag (either
/// TPID): the fast path takes it and agrees with the general parser.
#[test]
fn every_opcode_of_every_plain_shape_takes_the_fast_path() {
    for op in 0..=255u8 {
        for mut r in [v4(op), v6(op)] {
            r.dma_len = 65536;
            r.payload = 8;
            for vlans in [vec![], vec![(TPID_8021Q, 7)], vec![(TPID_8021AD, 7)]] {
                r.vlans = vlans;
                let f = r.frame();
                let got = fast(&f).unwrap_or_else(|| panic!("opcode {op:#x}: not fast"));
                assert!(got.is_ok(), "opcode {op:#x}: {got:?}");
                agrees(&f).unwrap();
            }
        }
    }
}

#[test]
fn roce_with_extension_headers_cut_short_is_answered_and_agrees() {
    let mut r = v4(0x0A);
    r.dma_len = 4096;
    let f = r.frame();
    // Cut inside the RETH: RoCE with its extension headers truncated.
    let cut = &f[..14 + 20 + 8 + 12 + 6];
    assert_eq!(
        fast(cut).map(|x| x.map(|i| i.outcome)),
        Some(Ok(Outcome::RoceExtTruncated))
    );
    agrees(cut).unwrap();
}

#[test]
fn arp_is_not_ip_on_the_fast_path() {
    let f = frames::ethernet(&[], frames::ETH_ARP, &[0u8; 28]);
    assert_eq!(fast(&f), Some(Err(Outcome::NotIp)));
}

#[test]
fn tagged_arp_is_not_ip_on_the_fast_path() {
    let f = frames::ethernet(&[(TPID_8021Q, 3)], frames::ETH_ARP, &[0u8; 28]);
    assert_eq!(fast(&f), Some(Err(Outcome::NotIp)));
}

#[test]
fn udp_to_another_port_is_answered() {
    let u = frames::udp(5000, 53, &[0u8; 20]);
    let f = frames::ethernet(
        &[],
        frames::ETH_IPV4,
        &frames::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0, 17, 0, &u),
    );
    assert_eq!(fast(&f), Some(Err(Outcome::UdpOtherPort)));
    let f6 = frames::ethernet(
        &[],
        frames::ETH_IPV6,
        &frames::ipv6([1; 16], [2; 16], 0, 17, &u),
    );
    assert_eq!(fast(&f6), Some(Err(Outcome::UdpOtherPort)));
}

#[test]
fn tcp_is_not_udp_on_the_fast_path() {
    let f = frames::ethernet(
        &[],
        frames::ETH_IPV4,
        &frames::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0, 6, 0, &[0u8; 20]),
    );
    assert_eq!(fast(&f), Some(Err(Outcome::NotUdp)));
    let f6 = frames::ethernet(
        &[],
        frames::ETH_IPV6,
        &frames::ipv6([1; 16], [2; 16], 0, 6, &[0u8; 20]),
    );
    assert_eq!(fast(&f6), Some(Err(Outcome::NotUdp)));
}

#[test]
fn qinq_goes_to_the_general_parser() {
    let mut r = v4(0x04);
    r.vlans = vec![(TPID_8021AD, 10), (TPID_8021Q, 20)];
    assert_eq!(fast(&r.frame()), None);
}

#[test]
fn ipv4_options_go_to_the_general_parser() {
    let mut r = v4(0x04);
    r.ipv4_options = 8;
    assert_eq!(fast(&r.frame()), None);
}

#[test]
fn ipv4_fragments_go_to_the_general_parser() {
    let mut f = v4(0x04).frame();
    f[14 + 6] = 0x00;
    f[14 + 7] = 0x10; // fragment offset 16 (x8 bytes)
    assert_eq!(fast(&f), None);
}

#[test]
fn ipv6_extension_headers_go_to_the_general_parser() {
    let u = frames::udp(5000, 4791, &v6(0x04).udp_payload());
    let mut hop = vec![17u8, 0, 0, 0, 0, 0, 0, 0];
    hop.extend_from_slice(&u);
    let f = frames::ethernet(
        &[],
        frames::ETH_IPV6,
        &frames::ipv6([1; 16], [2; 16], 0, 0, &hop),
    );
    assert_eq!(fast(&f), None);
}

#[test]
fn every_tunnel_goes_to_the_general_parser() {
    let inner = v4(0x04).frame();
    for (name, f) in [
        ("vxlan", tunnel::vxlan(&inner, 5)),
        ("gre_teb", tunnel::gre_teb(&inner, 5)),
        ("gre_ip", tunnel::gre_ip(&inner)),
        ("erspan2", tunnel::erspan2(&inner, 5, 1)),
        ("erspan3", tunnel::erspan3(&inner, 5, 1, true)),
    ] {
        assert_eq!(fast(&f), None, "{name}");
    }
}

#[test]
fn frames_cut_inside_their_headers_go_to_the_general_parser() {
    let f = v6(0x04).frame();
    for cut in [0, 13, 14 + 39, 14 + 40 + 7] {
        assert_eq!(fast(&f[..cut]), None, "cut at {cut}");
    }
}

#[test]
fn every_shipped_fixture_frame_agrees() {
    let mut fast_frames = 0;
    let mut total = 0;
    for fx in fixtures::all() {
        if !matches!(fx.link, fixtures::Link::Ethernet) {
            continue;
        }
        for (_, _, frame) in fx.records() {
            agrees(&frame).unwrap_or_else(|e| panic!("{}: {e}", fx.name));
            total += 1;
            fast_frames += fast(&frame).is_some() as usize;
        }
    }
    assert!(total > 1000, "{total} frames");
    assert!(
        fast_frames * 10 > total * 7,
        "{fast_frames} of {total} fast"
    );
}

/// A reader that remembers the deepest byte asked for.
struct Deepest<'a> {
    inner: SliceReader<'a>,
    deepest: Cell<usize>,
}

impl PacketReader for Deepest<'_> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        self.deepest.set(self.deepest.get().max(off + N));
        self.inner.read(off)
    }
}

/// The kernel trusts a direct view of `FAST_PATH_BYTES` (or of the whole frame): no read of
/// the fast path may go deeper, whatever the opcode.
#[test]
fn no_read_goes_past_fast_path_bytes() {
    for op in 0..=255u8 {
        let mut r = v6(op);
        r.vlans = vec![(TPID_8021Q, 1)];
        r.payload = 256;
        let f = r.frame();
        let d = Deepest {
            inner: SliceReader(&f),
            deepest: Cell::new(0),
        };
        assert!(parse_fast(&d).is_some(), "op {op:?}");
        assert!(
            d.deepest.get() <= FAST_PATH_BYTES,
            "opcode {op:#x} reads to {}",
            d.deepest.get()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6000))]

    #[test]
    fn arbitrary_bytes_agree(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        prop_assert_eq!(agrees(&data), Ok(()));
    }

    #[test]
    fn mutated_roce_frames_agree(
        op in any::<u8>(), six in any::<bool>(), tags in 0usize..3, payload in 0usize..64,
        flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..6), cut in any::<usize>(),
    ) {
        let mut r = if six { v6(op) } else { v4(op) };
        r.payload = payload;
        r.vlans = vec![(TPID_8021Q, 1); tags];
        let mut f = r.frame();
        for (at, x) in flips {
            let n = f.len();
            f[at % n] ^= x;
        }
        let n = f.len();
        prop_assert_eq!(agrees(&f[..cut % (n + 1)]), Ok(()));
    }
}

/// PFC, PAUSE and other MAC control frames are answered by the fast path (one compare on the
/// EtherType, one constant-offset read) and agree with the general parser.
#[test]
fn mac_control_frames_take_the_fast_path_and_agree() {
    for f in [
        frames::pfc(0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]),
        frames::pfc(0x0F, [1, 0, 3, 4, 0, 9, 0, 0]),
        frames::pause(0x1234),
        frames::pause(0),
        frames::mac_control(0x0002, &[0; 8]),
    ] {
        let got = parse_fast(&SliceReader(&f)).expect("fast");
        assert!(matches!(got, Parsed::MacControl(_)), "{got:?}");
        agrees(&f).unwrap();
    }
    let Some(Parsed::MacControl(m)) =
        parse_fast(&SliceReader(&frames::pfc(0x88, [0, 0, 0, 7, 0, 0, 0, 9])))
    else {
        panic!("not PFC");
    };
    assert_eq!((m.class_enable, m.times[3], m.times[7]), (0x88, 7, 9));
}

/// A tagged, mirrored or cut MAC control frame is the general parser's.
#[test]
fn rare_mac_control_shapes_go_to_the_general_parser() {
    let pfc = frames::pfc(0x08, [0, 0, 0, 100, 0, 0, 0, 0]);
    let mut tagged = pfc[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    tagged.extend_from_slice(&pfc[12..]);
    let mirrored = tunnel::erspan2(&pfc, 3, 1);
    let cut = pfc[..14 + 10].to_vec();
    for f in [&tagged, &mirrored, &cut] {
        assert_eq!(parse_fast(&SliceReader(f)), None);
    }
    let general = |f: &[u8]| parse_frame(&SliceReader(f), LinkType::Ethernet);
    let want = general(&pfc);
    assert!(matches!(want, Parsed::MacControl(_)));
    assert_eq!(general(&tagged), want);
    assert_eq!(general(&mirrored), want);
    assert_eq!(general(&cut), Parsed::Other(Outcome::TruncatedMacControl));
    // A PAUSE frame needs only its four bytes.
    let pause = frames::pause(77);
    assert!(matches!(general(&pause[..14 + 4]), Parsed::MacControl(_)));
    assert_eq!(
        general(&pause[..14 + 3]),
        Parsed::Other(Outcome::TruncatedMacControl)
    );
}

/// DSCP and the outermost tag's priority, on both paths (QinQ on the general one).
#[test]
fn dscp_and_the_outermost_priority_are_read() {
    let mut r = v4(0x04);
    r.dscp = 46;
    r.vlans = vec![(TPID_8021Q, frames::tci(5, 10))];
    let Some(Ok(i)) = fast(&r.frame()) else {
        panic!("not fast RoCE");
    };
    assert_eq!((i.dscp, i.pcp), (46, Some(5)));
    let mut q = v6(0x04);
    q.dscp = 26;
    q.vlans = vec![
        (TPID_8021AD, frames::tci(6, 10)),
        (TPID_8021Q, frames::tci(1, 20)),
    ];
    let f = q.frame();
    let i = parse_frame(&SliceReader(&f), LinkType::Ethernet)
        .roce()
        .unwrap();
    assert_eq!((i.dscp, i.pcp), (26, Some(6)));
    let u = v4(0x04);
    assert_eq!(fast(&u.frame()).unwrap().unwrap().pcp, None);
}

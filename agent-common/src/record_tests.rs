//! Tests of the flat packet record: setters, accessors and the rebuilt rich view.

use super::*;
use crate::{parse_frame as parse, LinkType, SliceReader};
use proptest::prelude::*;
use rocemon_testkit::fixtures;

/// Ethernet, IPv4 (66 bytes), UDP 4791 (46 bytes), a BTH: the smallest RoCE frame here.
fn minimal_roce() -> Vec<u8> {
    let mut f = vec![0u8; 80];
    f[12] = 0x08;
    f[14] = 0x45;
    f[17] = 66;
    f[23] = 17;
    f[36..38].copy_from_slice(&4791u16.to_be_bytes());
    f[38..40].copy_from_slice(&46u16.to_be_bytes());
    f
}

fn round_trip(p: &Parsed) -> Parsed {
    let mut r = PacketRecord::default();
    r.store(p);
    r.load()
}

#[test]
fn layout_has_no_implicit_padding() {
    assert_eq!(
        core::mem::size_of::<PacketRecord>(),
        40 + 7 * 4 + 2 * 2 + 12 + 2 * 2 + 8 * 2
    );
    assert_eq!(core::mem::offset_of!(PacketRecord, key), 0);
}

#[test]
fn discriminants_are_contiguous() {
    for (i, o) in Outcome::ALL.iter().enumerate() {
        assert_eq!(*o as u32, i as u32, "i {i:?}, o {o:?}");
        assert_eq!(outcome_of(i as u32), *o, "i {i:?}, o {o:?}");
    }
    for (i, k) in TunnelKind::ALL.iter().enumerate() {
        assert_eq!(*k as u8, i as u8, "i {i:?}, k {k:?}");
        assert_eq!(tunnel_kind_of(i as u8), *k, "i {i:?}, k {k:?}");
    }
    assert_eq!(outcome_of(Outcome::COUNT as u32), Outcome::NotIp);
    assert_eq!(tunnel_kind_of(200), TunnelKind::None);
}

#[test]
fn captured_agrees_with_the_result() {
    let mut r = PacketRecord::default();
    for o in Outcome::ALL {
        let p = Parsed::Other(o);
        r.store(&p);
        assert_eq!(r.captured(), p.captured(), "{o:?}");
    }
}

#[test]
fn an_offloaded_tag_is_the_outermost_priority_of_plain_roce_only() {
    let f = minimal_roce();
    let mut r = PacketRecord::default();
    r.store(&parse(&SliceReader(&f), LinkType::Ethernet));
    assert_eq!(r.pcp(), None);
    r.outer_tag((5 << 13) | 100);
    assert_eq!(r.pcp(), Some(5));
    r.store(&Parsed::Other(Outcome::NotIp));
    r.outer_tag(3 << 13);
    assert_eq!(r.load(), Parsed::Other(Outcome::NotIp));
}

#[test]
fn every_outcome_round_trips() {
    for o in Outcome::ALL {
        assert_eq!(round_trip(&Parsed::Other(o)), Parsed::Other(o), "o {o:?}");
    }
}

#[test]
fn every_shipped_fixture_frame_round_trips() {
    for fx in fixtures::all() {
        let link = match fx.link {
            fixtures::Link::Ethernet => LinkType::Ethernet,
            fixtures::Link::Sll => LinkType::LinuxSll,
            fixtures::Link::Sll2 => LinkType::LinuxSll2,
        };
        for (_, _, frame) in fx.records() {
            let p = parse(&SliceReader(&frame), link);
            assert_eq!(round_trip(&p), p, "{}", fx.name);
        }
    }
}

#[test]
fn an_error_after_a_packet_reads_back_as_the_error() {
    let mut r = PacketRecord::default();
    let f = minimal_roce();
    let ok = parse(&SliceReader(&f), LinkType::Ethernet);
    assert!(matches!(ok, Parsed::Roce(_)));
    r.store(&ok);
    r.store(&Parsed::Other(Outcome::NotIp));
    assert_eq!(r.load(), Parsed::Other(Outcome::NotIp));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn arbitrary_frames_round_trip(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let p = parse(&SliceReader(&data), LinkType::Ethernet);
        prop_assert_eq!(round_trip(&p), p);
    }

    #[test]
    fn any_record_loads_as_a_parse_result_it_carries_again(bytes in proptest::collection::vec(any::<u8>(), core::mem::size_of::<PacketRecord>())) {
        let mut r = PacketRecord::default();
        // SAFETY: PacketRecord is plain integers: every bit pattern is valid.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut r as *mut PacketRecord).cast::<u8>(), bytes.len());
        }
        // Whatever a record holds, it loads as a parse result that a record carries intact.
        let p = r.load();
        prop_assert_eq!(round_trip(&p), p);
    }
}

/// The record answers every question counting asks as the parse result it holds.
#[test]
fn the_record_reads_as_the_parse_result_on_every_fixture_frame() {
    use crate::parse;
    use rocemon_testkit::fixtures;
    let mut n = 0;
    for fx in fixtures::all() {
        if fx.link != fixtures::Link::Ethernet {
            continue;
        }
        for (_, _, frame) in fx.records() {
            let Ok(info) = parse(&SliceReader(&frame), LinkType::Ethernet) else {
                continue;
            };
            let mut r = PacketRecord::default();
            r.store(&Parsed::Roce(info));
            assert_eq!(r.outcome(), info.outcome);
            assert_eq!(r.opcode(), info.bth.opcode);
            assert_eq!(r.ecn(), info.ecn);
            assert_eq!(r.dscp(), info.dscp);
            assert_eq!(r.pcp(), info.pcp);
            assert_eq!(r.becn(), info.bth.becn);
            assert_eq!(r.fecn(), info.bth.fecn);
            assert_eq!(r.psn(), info.bth.psn);
            assert_eq!(r.tunnel_kind(), info.tunnel.kind);
            assert_eq!(r.tunnel_id(), info.tunnel.id);
            assert_eq!(r.aeth_syndrome(), info.aeth.map(|a| a.syndrome));
            assert_eq!(r.reth_dma_len(), info.reth_dma_len);
            assert_eq!(r.udp_len(), info.udp_len);
            assert_eq!(r.pad_count(), info.bth.pad_count);
            assert_eq!(r.is_cnp(), info.is_cnp());
            for h in Hook::ALL {
                assert_eq!(r.flow_key(h), info.flow_key(h));
            }
            n += 1;
        }
    }
    assert!(n > 1000, "{n} RoCE frames");
}

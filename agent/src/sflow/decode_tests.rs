//! The decoder over the test encoder's datagrams, and over arbitrary bytes.

use super::*;
use proptest::prelude::*;
use rocemon_testkit::sflow::{Datagram as Dg, Sample as S};

fn v4_flow(expanded: bool) -> Vec<u8> {
    Dg {
        agent: "192.0.2.1".parse().unwrap(),
        sub_agent: 3,
        sequence: 42,
        uptime_ms: 9,
        samples: vec![S::Flow {
            expanded,
            sequence: 7,
            source_index: 12,
            sampling_rate: 4096,
            sample_pool: 99,
            drops: 1,
            input: 5,
            output: 0x3FFF_FFFF,
            frame_length: 1500,
            header: vec![0xAB; 63],
            switch: true,
        }],
    }
    .encode()
}

#[test]
fn a_flow_sample_and_its_expanded_form_read_the_same() {
    for expanded in [false, true] {
        let buf = v4_flow(expanded);
        let d = decode(&buf).unwrap();
        assert_eq!(d.header.sub_agent, 3, "expanded {expanded:?}");
        assert_eq!(d.header.sequence, 42, "expanded {expanded:?}");
        assert!(d.problems.is_empty(), "expanded {expanded:?}");
        let Sample::Flow(f) = &d.samples[0] else {
            panic!("{:?}", d.samples);
        };
        assert_eq!(
            (f.sampling_rate, f.source_index),
            (4096, 12),
            "expanded {expanded:?}"
        );
        assert_eq!(
            (f.input, f.output),
            (Port::IfIndex(5), Port::Other),
            "expanded {expanded:?}"
        );
        let h = f.header.unwrap();
        assert_eq!(
            (h.frame_length, h.header.len()),
            (1500, 63),
            "expanded {expanded:?}"
        );
        assert_eq!(f.switch.unwrap().src_vlan, 100, "expanded {expanded:?}");
    }
}

#[test]
fn an_ipv6_agent_and_counters() {
    let buf = Dg {
        agent: "2001:db8::1".parse().unwrap(),
        sub_agent: 0,
        sequence: 1,
        uptime_ms: 0,
        samples: vec![S::Counters {
            expanded: true,
            sequence: 1,
            if_index: 9,
            speed: 100_000_000_000,
            in_octets: 5,
            out_octets: 6,
            ethernet: true,
        }],
    }
    .encode();
    let d = decode(&buf).unwrap();
    assert_eq!(d.header.agent, "2001:db8::1".parse::<IpAddr>().unwrap());
    let Sample::Counters(c) = &d.samples[0] else {
        panic!();
    };
    let g = c.generic.unwrap();
    assert_eq!(
        (g.if_index, g.speed, g.in_octets, g.out_octets),
        (9, 100_000_000_000, 5, 6)
    );
    assert_eq!((g.in_packets, g.out_packets), (1015, 913));
    assert!(c.ethernet);
}

#[test]
fn every_cut_of_a_datagram_decodes_or_fails_without_panic() {
    let buf = v4_flow(true);
    let whole = decode(&buf);
    assert!(whole.is_ok());
    for n in 0..buf.len() {
        // A cut datagram never reads as the whole one: it fails, or says what was cut.
        assert_ne!(decode(&buf[..n]), whole, "cut at {n} of {}", buf.len());
    }
    assert_eq!(decode(&buf[..20]), Err(Malformed::TruncatedHeader));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn arbitrary_bytes_decode_within_their_bounds(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        // Never more samples than the header claims, never from fewer bytes than a header
        // with an IPv4 agent takes (28).
        if let Ok(d) = decode(&data) {
            prop_assert!(d.samples.len() <= d.header.num_samples as usize);
            prop_assert!(data.len() >= 28, "{} bytes decoded", data.len());
        }
    }

    #[test]
    fn mutated_datagrams_never_panic(at in 0usize..200, x in any::<u8>(), cut in 0usize..400) {
        let mut buf = v4_flow(at % 2 == 0);
        let n = buf.len();
        buf[at % n] ^= x;
        let d = &buf[..cut.min(n)];
        let mut c = super::super::collector::Collector::default();
        c.datagram(d, 0);
        // The collector counts what the decoder says: a datagram, or its error by reason.
        match decode(d) {
            Ok(_) => prop_assert_eq!(c.datagrams, 1),
            Err(m) => {
                prop_assert_eq!(c.datagrams, 0);
                prop_assert_eq!(c.malformed.get(&m).copied(), Some(1));
            }
        }
    }
}

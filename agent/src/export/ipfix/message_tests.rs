//! The messages' framing (tshark decodes their contents in `tests/ipfix.rs`).
use super::*;
use crate::pipeline::flow_counts::{EndReason, FlowCounts};
use agent_common::FlowKey;

/// A record of flow `i` (QP `i`, one packet per `i`), IPv4 or IPv6.
pub(crate) fn record(i: u32, ipv6: bool) -> FlowRecord {
    FlowRecord {
        iface: 0,
        key: FlowKey {
            ip_version: if ipv6 { 6 } else { 4 },
            src: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            dst: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            sport: 1000 + i as u16,
            dest_qp: i,
            ..FlowKey::default()
        },
        dscp: 26,
        start_ms: 1,
        end_ms: 2,
        reason: EndReason::ActiveTimeout,
        counts: FlowCounts {
            packets: u64::from(i),
            ..FlowCounts::default()
        },
        ecmp_path: None,
    }
}

fn u16_at(m: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([m[at], m[at + 1]])
}

fn u32_at(m: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]])
}

/// The sets of a message: (set id, length), checking that they fill it exactly.
fn sets(m: &[u8]) -> Vec<(u16, usize)> {
    assert_eq!(u16_at(m, 0), 10, "version");
    assert_eq!(u16_at(m, 2) as usize, m.len(), "message length");
    let mut at = HEADER_LEN;
    let mut out = Vec::new();
    while at < m.len() {
        let (id, len) = (u16_at(m, at), u16_at(m, at + 2) as usize);
        assert!(len >= 4 && at + len <= m.len(), "set at {at}: {len}");
        out.push((id, len));
        at += len;
    }
    assert_eq!(at, m.len());
    out
}

fn encoder(max: usize) -> Encoder {
    Encoder::new(7, 32473, max, vec![3])
}

#[test]
fn the_templates_message_holds_both_templates() {
    let e = encoder(1400);
    let m = e.templates_message(100, 5);
    assert_eq!(u32_at(&m, 4), 100, "export time");
    assert_eq!(u32_at(&m, 8), 5, "sequence number");
    assert_eq!(u32_at(&m, 12), 7, "observation domain");
    let s = sets(&m);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].0, 2);
    let at = HEADER_LEN + 4;
    assert_eq!(u16_at(&m, at), 256);
    let fields = u16_at(&m, at + 2) as usize;
    assert_eq!(fields, elements::elements(false).len());
    let enterprise = elements::elements(false)
        .iter()
        .filter(|e| e.enterprise)
        .count();
    let v4_len = 4 + fields * 4 + enterprise * 4;
    assert_eq!(u16_at(&m, at + v4_len), 257);
}

#[test]
fn a_batch_larger_than_a_message_is_split_and_nothing_is_lost() {
    let e = encoder(1400);
    let recs: Vec<FlowRecord> = (0..100).map(|i| record(i, i % 3 == 0)).collect();
    let mut at = 0;
    let mut seq = 0;
    let mut messages = 0;
    while at < recs.len() {
        let (m, used) = e.message(&recs[at..], 1, seq, at == 0);
        assert!(used > 0);
        assert!(m.len() <= 1400, "{}", m.len());
        assert_eq!(u32_at(&m, 8), seq);
        let data: usize = sets(&m)
            .iter()
            .filter(|(id, _)| *id >= 256)
            .map(|(id, len)| (len - 4) / elements::record_len(*id == 257))
            .sum();
        assert_eq!(data, used, "each data set holds whole records");
        at += used;
        seq += used as u32;
        messages += 1;
    }
    assert_eq!(at, 100);
    assert!(messages >= 100 * 169 / 1400, "{messages}");
}

#[test]
fn data_sets_follow_the_family_of_each_record() {
    let e = encoder(1400);
    let recs = [record(1, false), record(2, true), record(3, true)];
    let (m, used) = e.message(&recs, 1, 0, false);
    assert_eq!(used, 3);
    let s = sets(&m);
    assert_eq!(s, vec![(256, 4 + 169), (257, 4 + 2 * 193)]);
}

#[test]
fn a_message_size_below_the_minimum_is_raised_to_it() {
    let e = encoder(100);
    let (m, used) = e.message(&[record(1, true)], 1, 0, true);
    assert_eq!(used, 1);
    assert!(m.len() <= MIN_MESSAGE_BYTES);
}

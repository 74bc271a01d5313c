//! The live per-receiver and per-flow judgement: the capture's rules over poll deltas.
use super::*;
use crate::detect::engine::{judge, Window};
use crate::detect::findings::Finding;

/// One poll, then what the engine judges of the trouble it holds.
fn poll(l: &mut LiveFlows, now_s: f64, flows: &[FlowTotals], window_s: f64) -> Vec<Finding> {
    l.poll(now_s, flows, window_s);
    judge(&Window {
        span: (now_s - window_s, now_s),
        trouble: Some(&l.trouble),
        ..Window::default()
    })
}

fn key(src: u8, dst: u8, sport: u16, qp: u32) -> FlowKey {
    let mut k = FlowKey {
        ip_version: 4,
        sport,
        dest_qp: qp,
        ..FlowKey::default()
    };
    k.src[..4].copy_from_slice(&[10, 0, 0, src]);
    k.dst[..4].copy_from_slice(&[10, 0, 0, dst]);
    k
}

fn kinds(f: &[Finding]) -> Vec<(&'static str, String)> {
    let mut v: Vec<_> = f.iter().map(|x| (x.kind, x.subject.clone())).collect();
    v.sort();
    v
}

/// 400 data packets to B, 80 CE-marked, B's ACKs back, no CNP: congestion (20% of the data
/// to B, the ACKs are not B's) and cnp_missing, both about receiver 10.0.0.2.
fn ce_polls(cnps: u64) -> Vec<Vec<FlowTotals>> {
    (1..=4u64)
        .map(|p| {
            let mut v = vec![
                FlowTotals {
                    key: key(1, 2, 100, 0x200),
                    packets: p * 100,
                    ce: p * 20,
                    ..FlowTotals::default()
                },
                FlowTotals {
                    key: key(2, 1, 100, 0x100),
                    packets: p * 100,
                    ..FlowTotals::default()
                },
            ];
            if cnps > 0 {
                v.push(FlowTotals {
                    key: key(2, 1, 999, 0x100),
                    packets: p * cnps,
                    cnps: p * cnps,
                    ..FlowTotals::default()
                });
            }
            v
        })
        .collect()
}

#[test]
fn ce_without_cnps_is_congestion_and_cnp_missing_of_the_receiver() {
    let mut l = LiveFlows::default();
    let mut last = Vec::new();
    for (i, flows) in ce_polls(0).iter().enumerate() {
        last = poll(&mut l, i as f64, flows, 10.0);
    }
    assert_eq!(
        kinds(&last),
        [
            ("cnp_missing", "receiver 10.0.0.2".to_string()),
            ("congestion", "receiver 10.0.0.2".to_string())
        ]
    );
    let c = last.iter().find(|x| x.kind == "congestion").unwrap();
    assert_eq!(c.evidence["packets"], 400);
    assert_eq!(c.evidence["ce_packets"], 80);
}

#[test]
fn ce_answered_by_cnps_is_congestion_only() {
    let mut l = LiveFlows::default();
    let mut last = Vec::new();
    for (i, flows) in ce_polls(20).iter().enumerate() {
        last = poll(&mut l, i as f64, flows, 10.0);
    }
    assert_eq!(
        kinds(&last),
        [("congestion", "receiver 10.0.0.2".to_string())]
    );
}

/// A receiver the agent never sees send (an ingress-only view of a host) is not judged for
/// CNPs: they would leave unseen.
#[test]
fn a_receiver_never_seen_sending_is_not_cnp_missing() {
    let mut l = LiveFlows::default();
    let mut last = Vec::new();
    for (i, flows) in ce_polls(0).iter().enumerate() {
        last = poll(&mut l, i as f64, &flows[..1], 10.0);
    }
    assert_eq!(
        kinds(&last),
        [("congestion", "receiver 10.0.0.2".to_string())]
    );
}

/// Trouble that stopped leaves after the window: the findings close.
#[test]
fn a_window_after_the_trouble_nothing_holds() {
    let mut l = LiveFlows::default();
    let polls = ce_polls(0);
    for (i, flows) in polls.iter().enumerate() {
        poll(&mut l, i as f64, flows, 10.0);
    }
    let quiet = polls.last().unwrap().clone();
    assert!(!poll(&mut l, 5.0, &quiet, 10.0).is_empty());
    assert!(poll(&mut l, 14.0, &quiet, 10.0).is_empty());
}

/// A data flow's gap with the NAKs its receiver sent back: one incident, on the data flow.
#[test]
fn a_loss_and_its_naks_are_one_incident_on_the_data_flow() {
    let mut l = LiveFlows::default();
    let flows = [
        FlowTotals {
            key: key(1, 2, 100, 0x200),
            packets: 50,
            psn_gaps: 2,
            retransmits: 3,
            ..FlowTotals::default()
        },
        FlowTotals {
            key: key(2, 1, 100, 0x100),
            packets: 40,
            naks: 2,
            ..FlowTotals::default()
        },
    ];
    poll(&mut l, 0.0, &[], 10.0);
    let f = poll(&mut l, 1.0, &flows, 10.0);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].kind, "retransmissions");
    assert_eq!(f[0].subject, "flow 10.0.0.1 -> 10.0.0.2 port 100 qp 0x200");
    assert_eq!(f[0].evidence["naks_returned"], 2);
}

/// A flood of receivers with CE marks: at most MAX_FOLLOWED followed, the rest counted.
#[test]
fn a_flood_of_receivers_is_bounded() {
    let mut l = LiveFlows::default();
    let flows: Vec<FlowTotals> = (0..(MAX_FOLLOWED as u32 + 100))
        .map(|i| {
            let mut k = key(1, 2, 100, i);
            k.dst[..4].copy_from_slice(&(0x0B00_0000 + i).to_be_bytes());
            FlowTotals {
                key: k,
                packets: 10,
                ce: 10,
                ..FlowTotals::default()
            }
        })
        .collect();
    poll(&mut l, 0.0, &flows, 10.0);
    assert_eq!(l.trouble.receivers.len(), MAX_FOLLOWED);
    assert_eq!(l.trouble.not_followed, 100);
}

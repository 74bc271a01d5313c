//! The NIC pause sources over recorded answers: driver statistic name lists as the drivers
//! define them, DCB netlink answers laid out as the kernel writes them, and (as root) a real
//! exchange with the kernel for a device without DCB.

use super::*;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// An excerpt of mlx5's `ethtool -S` names (en_stats.c: per-priority and global pause).
const MLX5: &[&str] = &[
    "rx_packets",
    "rx_bytes",
    "rx_prio0_bytes",
    "rx_prio0_packets",
    "rx_prio3_pause",
    "rx_prio3_pause_duration",
    "tx_prio3_pause",
    "tx_prio3_pause_duration",
    "rx_prio3_pause_transition",
    "rx_prio4_pause",
    "tx_prio4_pause",
    "tx_pause_storm_warning_events",
    "tx_pause_storm_error_events",
    "rx_pause_ctrl_phy",
    "tx_pause_ctrl_phy",
];

#[test]
fn mlx5_priority_pause_counters_are_pfc_per_priority() {
    let v: Vec<u64> = (1..=MLX5.len() as u64).collect();
    let n = classify_ethtool(&names(MLX5), &v);
    assert_eq!(
        n.pfc,
        vec![
            PfcCounter {
                priority: 3,
                rx: Some(5),
                tx: Some(7),
                origin: Origin::Ethtool
            },
            PfcCounter {
                priority: 4,
                rx: Some(10),
                tx: Some(11),
                origin: Origin::Ethtool
            },
        ]
    );
    // rx_prio3_pause_duration is the 6th name, tx_prio3_pause_duration the 8th.
    assert_eq!(
        n.durations,
        vec![PauseDuration {
            priority: 3,
            rx_micros: Some(6),
            tx_micros: Some(8),
        }]
    );
    assert_eq!(n.rx_paused_micros(3), Some(6));
    assert_eq!(n.rx_paused_micros(4), None);
    let other: Vec<&str> = n.other.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        other,
        [
            "rx_prio3_pause_transition",
            "tx_pause_storm_warning_events",
            "tx_pause_storm_error_events",
            "rx_pause_ctrl_phy",
            "tx_pause_ctrl_phy"
        ]
    );
}

#[test]
fn bnxt_and_ice_names_are_recognised() {
    let n = classify_ethtool(
        &names(&[
            "rx_pfc_ena_frames_pri3",
            "tx_pfc_ena_frames_pri3",
            "rx_priority_5_xoff.nic",
            "tx_priority_5_xoff.nic",
            "tx_priority_5_xon.nic",
            "rx_pfc_ena_frames_pri9",
        ]),
        &[1, 2, 3, 4, 5, 6],
    );
    let got: Vec<(u8, Option<u64>, Option<u64>)> =
        n.pfc.iter().map(|c| (c.priority, c.rx, c.tx)).collect();
    assert_eq!(got, [(3, Some(1), Some(2)), (5, Some(3), Some(4))]);
    // a priority above 7 is no PFC priority: kept by name
    assert!(n
        .other
        .iter()
        .any(|(k, v)| k == "rx_pfc_ena_frames_pri9" && *v == 6));
}

/// veth's `ethtool -S` names: nothing about pausing.
#[test]
fn a_device_without_pause_statistics_gives_nothing() {
    let n = classify_ethtool(
        &names(&[
            "peer_ifindex",
            "rx_queue_0_xdp_packets",
            "rx_queue_0_xdp_bytes",
            "rx_queue_0_drops",
            "tx_queue_0_xdp_xmit",
        ]),
        &[5, 0, 0, 0, 0],
    );
    assert!(n.is_empty());
}

/// A DCB answer as the kernel builds it (dcbnl_ieee_fill: DCB_ATTR_IFNAME, then the nested
/// DCB_ATTR_IEEE holding DCB_ATTR_IEEE_PFC = struct ieee_pfc).
fn dcb_answer(requests: [u64; 8], indications: [u64; 8]) -> Vec<u8> {
    let mut pfc = vec![0u8; 136];
    pfc[0] = 8; // pfc_cap
    pfc[1] = 0x08; // pfc_en: priority 3
    for i in 0..8 {
        pfc[8 + 8 * i..16 + 8 * i].copy_from_slice(&requests[i].to_ne_bytes());
        pfc[72 + 8 * i..80 + 8 * i].copy_from_slice(&indications[i].to_ne_bytes());
    }
    let mut ets = vec![0u8; 4 + 60];
    ets[0..2].copy_from_slice(&64u16.to_ne_bytes());
    ets[2..4].copy_from_slice(&1u16.to_ne_bytes()); // DCB_ATTR_IEEE_ETS first
    let mut nested = ets;
    nested.extend_from_slice(&(4u16 + 136).to_ne_bytes());
    nested.extend_from_slice(&2u16.to_ne_bytes());
    nested.extend_from_slice(&pfc);
    let mut attrs = Vec::new();
    attrs.extend_from_slice(&9u16.to_ne_bytes());
    attrs.extend_from_slice(&1u16.to_ne_bytes());
    attrs.extend_from_slice(b"eth2\0\0\0\0");
    attrs.extend_from_slice(&(4 + nested.len() as u16).to_ne_bytes());
    attrs.extend_from_slice(&(13u16 | 0x8000).to_ne_bytes()); // NLA_F_NESTED
    attrs.extend_from_slice(&nested);
    let len = 16 + 4 + attrs.len();
    let mut m = Vec::new();
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&78u16.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[0, 21, 0, 0]);
    m.extend_from_slice(&attrs);
    m
}

#[test]
fn a_dcb_answer_gives_requests_as_tx_and_indications_as_rx() {
    let mut req = [0u64; 8];
    let mut ind = [0u64; 8];
    req[3] = 1200;
    ind[3] = 45;
    ind[7] = 1;
    let got = dcb::decode_reply(&dcb_answer(req, ind)).unwrap().unwrap();
    assert_eq!(got.len(), 8);
    assert_eq!(
        (got[3].tx, got[3].rx, got[3].origin),
        (Some(1200), Some(45), Origin::Dcb)
    );
    assert_eq!((got[7].tx, got[7].rx), (Some(0), Some(1)));
}

#[test]
fn an_eopnotsupp_answer_means_no_dcb() {
    let mut m = vec![0u8; 36];
    m[0..4].copy_from_slice(&36u32.to_ne_bytes());
    m[4..6].copy_from_slice(&2u16.to_ne_bytes());
    m[16..20].copy_from_slice(&(-libc::EOPNOTSUPP).to_ne_bytes());
    assert_eq!(dcb::decode_reply(&m).unwrap(), None);
    m[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
    assert!(dcb::decode_reply(&m).is_err());
}

#[test]
fn truncated_and_foreign_answers_are_errors_or_nothing() {
    let full = dcb_answer([1; 8], [2; 8]);
    for cut in 0..full.len() {
        // never a panic; a cut answer decodes to an error or to no PFC
        let r = dcb::decode_reply(&full[..cut]);
        assert!(
            matches!(r, Err(_) | Ok(None)),
            "cut at {cut} of {}: {r:?}",
            full.len()
        );
    }
    assert!(dcb::decode_reply(&full[..10]).is_err());
    let mut other = full.clone();
    other[4..6].copy_from_slice(&16u16.to_ne_bytes()); // RTM_NEWLINK
    assert!(dcb::decode_reply(&other).is_err());
}

#[test]
fn the_request_is_what_dcb_pfc_show_sends() {
    let r = dcb::request("eth2", 7);
    assert_eq!(r.len(), 16 + 4 + 12);
    assert_eq!(u16::from_ne_bytes([r[4], r[5]]), 78);
    assert_eq!(r[17], 21);
    assert_eq!(&r[24..29], b"eth2\0");
}

/// The kernel itself, for loopback (no DCB operations): the answer is "no DCB", exactly as
/// iproute2's `dcb` gets it, and the ethtool reader finds no pause statistics.
#[test]
fn loopback_has_neither_source() {
    match dcb::query("lo") {
        Ok(None) => {}
        Ok(Some(p)) => panic!("loopback with DCB PFC counters: {p:?}"),
        Err(e) => panic!("DCB query of lo: {e}"),
    }
    let n = read("lo");
    assert!(n.is_empty(), "{n:?}");
}

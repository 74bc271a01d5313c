//! The finding builders over hand-made figures.

use super::*;

#[test]
fn rates_read_in_bits_per_second() {
    assert_eq!(bits_per_second(12.5e6), "100.0 Mb/s");
    assert_eq!(bits_per_second(50e9 / 8.0), "50.0 Gb/s");
}

#[test]
fn a_receiver_that_answers_is_not_cnp_missing() {
    let r = Receiver {
        host: "10.0.0.2",
        senders: 2,
        ce_packets: 50,
        answered_ce: 50,
        cnps: 5,
        span: (0.0, 1.0),
    };
    assert!(cnp_missing(&r).is_none());
    let silent = Receiver {
        answered_ce: 0,
        cnps: 0,
        ..r
    };
    let f = cnp_missing(&silent).unwrap();
    assert!(
        f.summary.contains("10.0.0.2 received 50 CE-marked"),
        "{}",
        f.summary
    );
    assert_eq!(f.runbook, "docs/runbook.md#cnp_missing");
}

#[test]
fn one_lossy_packet_is_no_finding() {
    assert!(lossy_roce(1, 1, "DSCP 26", (0.0, 0.0)).is_none());
    assert!(lossy_roce(99, 100, "DSCP 26", (0.0, 0.0)).is_none());
    assert!(lossy_roce(150, 10_000, "DSCP 26", (0.0, 1.0)).is_some());
    assert!(
        lossy_roce(150, 100_000, "DSCP 26", (0.0, 1.0)).is_none(),
        "0.15%"
    );
}

#[test]
fn findings_sort_most_serious_first() {
    let mut v = vec![
        elephant("a", 1e9, 1, (0.0, 1.0)),
        pfc_storm(&Storm {
            priority: 3,
            span: (2.0, 2.5),
            xoff_frames: 9,
            mac: Some("m"),
            threshold_s: 0.2,
        }),
    ];
    sort(&mut v);
    assert_eq!(v[0].kind, "pfc_storm");
}

/// A sender too slow to congest anything is no `cnp_ignored`, however it treats CNPs.
#[test]
fn a_slow_sender_is_no_cnp_ignored() {
    let u = Unreacting {
        flow: "Flow 10.0.0.1 -> 10.0.0.2 port 4791 QP 0x10",
        sender: "10.0.0.1",
        bursts: 3,
        ignored: 3,
        ratio: 1.0,
        rate_before_bytes_per_second: 8_000.0,
        span: (0.0, 1.0),
    };
    assert!(cnp_ignored(&u).is_none(), "64 kb/s");
    let fast = Unreacting {
        rate_before_bytes_per_second: CNP_IGNORED_MIN_BYTES_PER_SECOND,
        ..u
    };
    assert!(cnp_ignored(&fast).is_some(), "5 Mb/s");
}

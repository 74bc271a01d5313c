//! Incidents over findings made by the findings' own builders.
use super::*;
use crate::detect::findings as f;

fn congested(host: &str, ce: u64, span: (f64, f64)) -> Finding {
    f::congestion(&f::Congested {
        host,
        packets: 1_000,
        ce_packets: ce,
        cnps: 0,
        senders: 1,
        span,
    })
    .expect("congestion")
}

fn slow(index: usize, cause: &'static str) -> Finding {
    f::slow_step(&f::SlowStep {
        index,
        span: (index as f64, index as f64 + 0.2),
        seconds: 0.2,
        typical_seconds: 0.1,
        causes: &[(cause, 1.0)],
        straggler: None,
    })
}

#[test]
fn receivers_congested_at_once_are_one_incident_listing_the_worst_first() {
    let got = incidents(vec![
        congested("10.0.0.1", 50, (0.0, 2.0)),
        congested("10.0.0.2", 300, (0.5, 2.5)),
        congested("10.0.0.3", 100, (1.0, 3.0)),
    ]);
    assert_eq!(got.len(), 1, "{got:#?}");
    let c = &got[0];
    assert_eq!(c.subject, "3 receivers");
    assert_eq!((c.start_s, c.end_s), (0.0, 3.0));
    assert_eq!(c.evidence["members"], 3);
    assert_eq!(
        c.evidence["listed"],
        json!([
            "receiver 10.0.0.2",
            "receiver 10.0.0.3",
            "receiver 10.0.0.1"
        ])
    );
    assert_eq!(c.evidence["totals"]["ce_packets"], 450);
    assert!(
        c.summary.starts_with("3 receivers at once"),
        "{}",
        c.summary
    );
}

#[test]
fn congestion_at_two_separate_times_is_two_incidents() {
    let got = incidents(vec![
        congested("10.0.0.1", 50, (0.0, 1.0)),
        congested("10.0.0.2", 50, (10.0, 11.0)),
    ]);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|c| c.subject.starts_with("receiver ")));
}

#[test]
fn slow_steps_come_before_the_evidence_of_the_same_severity() {
    let got = incidents(vec![
        congested("10.0.0.1", 50, (0.0, 1.0)),
        slow(3, "congestion"),
    ]);
    assert_eq!(got[0].kind, "slow_step");
    assert_eq!(got[1].kind, "congestion");
}

#[test]
fn the_verdict_names_the_slow_steps_their_causes_and_what_is_behind_them() {
    let found = incidents(vec![
        slow(3, "pfc_pause"),
        slow(7, "congestion"),
        slow(9, "congestion"),
        congested("10.0.0.1", 50, (0.0, 12.0)),
        congested("10.0.0.2", 60, (0.0, 12.0)),
    ]);
    assert_eq!(
        verdict(&found, Some(14)),
        "3 slow steps in 14 (PFC pause, congestion x2); behind them: CE on 2 receivers."
    );
}

#[test]
fn a_clean_capture_says_so() {
    assert_eq!(
        verdict(&[], Some(20)),
        "20 training steps, none slow; nothing in the network got in the way."
    );
    assert_eq!(verdict(&[], None), "Nothing in the network got in the way.");
}

#[test]
fn without_slow_steps_the_verdict_lists_the_incidents() {
    let found = incidents(vec![congested("10.0.0.1", 50, (0.0, 1.0))]);
    assert_eq!(verdict(&found, None), "CE on one receiver.");
}

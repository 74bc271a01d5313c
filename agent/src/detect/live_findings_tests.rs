//! The live engine over hand-made counter samples: the truth is the samples' figures.

use super::*;

const T: f64 = 1_764_547_200.0;
/// 100 Gb/s.
const SPEED: u64 = 100_000_000_000;

fn poll<'a>(now_s: f64, s: Sample, slow: Vec<LiveSlowStep>) -> Poll<'a> {
    Poll {
        now_s,
        ifaces: vec![("eth0", Some(s), SPEED)],
        elephants: Vec::new(),
        collisions: Vec::new(),
        colliding_ifaces: Vec::new(),
        storm_s: 0.2,
        shared_5tuples: (0, None),
        slow_steps: slow,
        flows: Vec::new(),
        job_priorities: 0x08,
        flow_maps: Vec::new(),
    }
}

/// A 200 ms step at T + 1.5 against a 100 ms period.
fn step() -> LiveSlowStep {
    LiveSlowStep {
        iface: "eth0".into(),
        index: 1,
        start_s: T + 1.5,
        seconds: 0.2,
        period_s: 0.1,
        job: None,
    }
}

/// Samples at T, T + 1, T + 2 with `quanta` of priority 3 paused in the second interval.
fn run(quanta: u64, roce: u64) -> (LiveFindings, Vec<Finding>) {
    let mut l = LiveFindings::default();
    let mut s = Sample {
        roce: 1_000,
        rx_packets: 1_000,
        ..Sample::default()
    };
    l.poll(&poll(T, s, vec![]));
    s.roce += roce;
    l.poll(&poll(T + 1.0, s, vec![]));
    s.pfc_quanta[3] += quanta;
    s.roce += roce;
    l.poll(&poll(T + 2.0, s, vec![]));
    let (opened, _) = l.poll(&poll(T + 2.5, s, vec![step()]));
    (l, opened)
}

#[test]
fn a_slow_step_in_an_interval_paused_on_the_job_priority_is_a_pause() {
    // 20 M quanta of 512 bit times at 100 Gb/s: 102 ms paused, more than the 100 ms extra.
    let (_, opened) = run(20_000_000, 500);
    let x = opened
        .iter()
        .find(|x| x.kind == "slow_step")
        .expect("opened");
    assert_eq!(x.subject, "step 1 on eth0");
    assert_eq!((x.start_s, x.end_s), (T + 1.5, T + 1.7));
    let causes = &x.evidence["causes"];
    assert_eq!(causes[0]["kind"], "pfc_pause", "{causes}");
    assert!((causes[0]["share"].as_f64().unwrap() - 1.0).abs() < 1e-9);
}

/// The slow step's finding after a clean run whose last poll says `colliding` of the
/// interfaces and has a collision on another link's group.
fn slow_with_collisions(colliding: &[&str]) -> Finding {
    let mut l = LiveFindings::default();
    let s = Sample {
        roce: 1_000,
        rx_packets: 1_000,
        ..Sample::default()
    };
    l.poll(&poll(T, s, vec![]));
    l.poll(&poll(T + 2.0, s, vec![]));
    let mut p = poll(T + 2.5, s, vec![step()]);
    p.collisions = vec![("uplinks".into(), "eth9".into(), 2)];
    p.colliding_ifaces = colliding.iter().map(|i| i.to_string()).collect();
    let (opened, _) = l.poll(&p);
    opened
        .into_iter()
        .find(|x| x.kind == "slow_step")
        .expect("opened")
}

/// Elephants colliding on another link are no cause of this link's step (the demo's job on
/// its own link was "mostly ecmp collision").
#[test]
fn a_collision_on_another_link_is_no_cause_of_the_step() {
    let x = slow_with_collisions(&[]);
    assert_eq!(x.evidence["causes"][0]["kind"], "unexplained", "{x:?}");
}

/// The same with the job's flows on a colliding path of its own link: ecmp_collision.
#[test]
fn a_collision_on_the_steps_own_link_is_a_cause() {
    let x = slow_with_collisions(&["eth0"]);
    assert_eq!(x.evidence["causes"][0]["kind"], "ecmp_collision", "{x:?}");
}

#[test]
fn a_slow_step_in_a_clean_interval_is_unexplained() {
    let (_, opened) = run(0, 500);
    let x = opened
        .iter()
        .find(|x| x.kind == "slow_step")
        .expect("opened");
    assert_eq!(x.evidence["causes"][0]["kind"], "unexplained");
    assert!(x.summary.contains("look at the hosts"), "{}", x.summary);
}

#[test]
fn a_slow_step_stays_active_for_a_window_then_closes() {
    let (mut l, _) = run(0, 500);
    let s = Sample {
        roce: 2_000,
        rx_packets: 1_000,
        ..Sample::default()
    };
    let (_, closed) = l.poll(&poll(T + 2.5 + WINDOW_S - 1.0, s, vec![]));
    assert!(closed.is_empty(), "{closed:?}");
    assert_eq!(l.view(T + 11.0).active.len(), 1);
    let (_, closed) = l.poll(&poll(T + 2.5 + WINDOW_S + 1.0, s, vec![]));
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0].kind, "slow_step");
    assert_eq!(closed[0].end_s, T + 1.7, "an event keeps its own span");
    assert_eq!(l.held.opened.get("slow_step"), Some(&1));
}

#[test]
fn no_slow_step_no_finding() {
    let mut l = LiveFindings::default();
    let s = Sample::default();
    for k in 0..5 {
        let (opened, _) = l.poll(&poll(T + k as f64, s, vec![]));
        assert!(opened.is_empty(), "{opened:?}");
    }
}

fn storm_poll<'a>(now_s: f64, s: Sample) -> Poll<'a> {
    poll(now_s, s, vec![])
}

/// The NIC's own pause time (mlx5's rx_prio3_pause_duration) paused the whole of every
/// second from T + 1 on: a storm once that is longer than the threshold.
#[test]
fn the_nics_pause_time_makes_a_storm() {
    let mut l = LiveFindings::default();
    let mut s = Sample {
        nic_paused_us: [None, None, None, Some(0), None, None, None, None],
        ..Sample::default()
    };
    l.poll(&storm_poll(T, s));
    let mut storms = Vec::new();
    for k in 1..=3 {
        s.nic_paused_us[3] = Some(k * 1_000_000);
        let (opened, _) = l.poll(&storm_poll(T + k as f64, s));
        storms.extend(opened.into_iter().filter(|x| x.kind == "pfc_storm"));
    }
    assert_eq!(storms.len(), 1, "{storms:?}");
    assert_eq!(storms[0].subject, "priority 3 on eth0");
}

/// Quanta that sum to more than the interval (refreshed XOFFs overlap) while the NIC says
/// the priority was paused a tenth of it: the NIC's wall time wins, no storm.
#[test]
fn the_nics_pause_time_overrides_overlapping_quanta() {
    let mut l = LiveFindings::default();
    let mut s = Sample {
        nic_paused_us: [None, None, None, Some(0), None, None, None, None],
        ..Sample::default()
    };
    l.poll(&storm_poll(T, s));
    for k in 1..=4u64 {
        s.nic_paused_us[3] = Some(k * 100_000);
        s.pfc_quanta[3] = k * 400_000_000; // 2 s of quanta a second at 100 Gb/s
        let (opened, _) = l.poll(&storm_poll(T + k as f64, s));
        assert!(opened.iter().all(|x| x.kind != "pfc_storm"), "{opened:?}");
    }
}

/// Without the NIC's pause time, the kernel's quanta count.
#[test]
fn quanta_alone_make_a_storm_where_the_nic_counts_no_time() {
    let mut l = LiveFindings::default();
    let mut s = Sample::default();
    l.poll(&storm_poll(T, s));
    let mut storms = 0;
    for k in 1..=3u64 {
        s.pfc_quanta[3] = k * 200_000_000; // 1.02 s a second at 100 Gb/s
        let (opened, _) = l.poll(&storm_poll(T + k as f64, s));
        storms += opened.iter().filter(|x| x.kind == "pfc_storm").count();
    }
    assert_eq!(storms, 1);
}

/// Figures of eth0's flow maps, `pushed` flows pushed out of the IPv4 one.
fn maps(pushed: u64) -> Vec<MapFigures> {
    vec![
        MapFigures {
            map: "FLOWS4",
            entries: 16,
            capacity: 16,
            pushed_out: pushed,
        },
        MapFigures {
            map: "FLOWS",
            entries: 0,
            capacity: 16,
            pushed_out: 0,
        },
    ]
}

/// Flows pushed out open `flow_table_full` in the poll that sees them; it holds for a window
/// after the last push-out, then closes.
#[test]
fn a_full_flow_map_opens_a_finding_within_one_poll() {
    let mut l = LiveFindings::default();
    let at = |l: &mut LiveFindings, t: f64, pushed: u64| {
        let mut p = poll(T + t, Sample::default(), Vec::new());
        p.flow_maps = vec![("eth0", maps(pushed))];
        l.poll(&p)
    };
    let (opened, _) = at(&mut l, 0.0, 0);
    assert!(opened.is_empty());
    let (opened, _) = at(&mut l, 1.0, 500);
    assert_eq!(opened.len(), 1, "{opened:#?}");
    let x = &opened[0];
    assert_eq!(
        (x.kind, x.subject.as_str()),
        ("flow_table_full", "flow maps of eth0")
    );
    assert!(
        x.summary.contains("16 of 16 IPv4 flows (100%)")
            && x.summary.contains("500 flows were pushed out"),
        "{}",
        x.summary
    );
    let (opened, closed) = at(&mut l, 5.0, 0);
    assert!(
        opened.is_empty() && closed.is_empty(),
        "held within the window"
    );
    let (_, closed) = at(&mut l, 12.0, 0);
    assert_eq!(closed.len(), 1, "closed a window after the last push-out");
}

/// `n` elephants (one finding each) and, with `down`, a watched interface that is gone.
fn crowded<'a>(t: f64, n: usize, down: bool) -> Poll<'a> {
    let mut p = poll(T + t, Sample::default(), Vec::new());
    p.elephants = (0..n)
        .map(|i| {
            (
                format!(
                    "10.0.{}.{} -> 10.1.0.1 port 4791 QP 0x{i:x}",
                    i / 250,
                    i % 250
                ),
                1e9,
            )
        })
        .collect();
    if down {
        p.ifaces.push(("eth9", None, SPEED));
    }
    p
}

/// 500 findings of one kind at once (a flood of spoofed flows): 20 of them and one "500 - 20
/// more" finding are open, the finding of another kind stays, and the counts by kind still
/// say 500.
#[test]
fn a_flood_of_one_kind_is_bounded_and_keeps_the_others() {
    let mut l = LiveFindings::default();
    let (opened, _) = l.poll(&crowded(0.0, 500, true));
    let elephants: Vec<&Finding> = opened.iter().filter(|x| x.kind == "elephant").collect();
    assert_eq!(elephants.len(), OPEN_PER_KIND + 1);
    let more = elephants
        .iter()
        .find(|x| x.subject == MORE_SUBJECT)
        .expect("the 'more' finding");
    assert_eq!(more.evidence["more"], 480);
    assert!(
        more.summary.starts_with("480 more elephant findings"),
        "{}",
        more.summary
    );
    assert!(
        opened.iter().any(|x| x.kind == "link_down"),
        "the other kind kept"
    );
    let counts = l.held.active_counts();
    assert_eq!(counts[&("elephant", "info")], 500);
    assert_eq!(counts[&("link_down", "critical")], 1);
    // The same flood again: the 20 listed stay the same ones (no flapping).
    let listed = |l: &LiveFindings| -> Vec<String> {
        l.view(T)
            .active
            .iter()
            .filter(|x| x.kind == "elephant")
            .map(|x| x.subject.clone())
            .collect()
    };
    let before = listed(&l);
    let (opened, closed) = l.poll(&crowded(1.0, 500, true));
    assert!(
        opened.is_empty() && closed.is_empty(),
        "{opened:#?} {closed:#?}"
    );
    assert_eq!(listed(&l), before);
}

/// Closed findings are kept per kind: a flood of one kind closing cannot push the others out
/// of the recent list.
#[test]
fn the_recent_list_keeps_every_kind() {
    let mut l = LiveFindings::default();
    l.poll(&crowded(0.0, 0, true));
    l.poll(&crowded(1.0, 0, false));
    for round in 0..20 {
        // Twenty elephants open and close, each round other ones.
        let mut p = crowded(2.0 + 2.0 * round as f64, 0, false);
        p.elephants = (0..20)
            .map(|i| (format!("flow {round}-{i}"), 1e9))
            .collect();
        l.poll(&p);
        l.poll(&crowded(3.0 + 2.0 * round as f64, 0, false));
    }
    let recent = l.view(T + 100.0).recent;
    assert_eq!(
        recent.iter().filter(|x| x.kind == "elephant").count(),
        RECENT_PER_KIND
    );
    assert!(recent.iter().any(|x| x.kind == "link_down"), "{recent:#?}");
}

//! The judgement: one window's evidence through the builders of
//! [`crate::detect::findings`], every kind here and nowhere else (a layout test holds it), so
//! that `run` and `analyze` raise a finding by the same rule. The subjects name what a
//! person checks (a receiver, a flow, a priority on an interface), the spans come from the
//! evidence.

use super::trouble::Trouble;
use super::window::Window;
use crate::detect::findings::{self as f, Finding};
use crate::detect::recovery;
use agent_common::flow_key::addr;

/// Every finding the window's evidence holds, unranked.
pub fn judge(w: &Window<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for iface in &w.links_down {
        out.push(f::link_down(iface, w.span.1));
    }
    for s in &w.storms {
        let x = f::pfc_storm(&f::Storm {
            priority: s.priority,
            span: s.span,
            xoff_frames: s.xoff_frames,
            mac: s.mac.as_deref(),
            threshold_s: w.storm_s,
        });
        out.push(placed(x, s.place.as_deref(), |p| {
            format!("priority {} on {p}", s.priority)
        }));
    }
    if let Some(t) = w.trouble {
        out.extend(receivers(t));
        out.extend(recoveries(t));
    }
    for r in &w.reactions {
        let name = format!("Flow {}", f::flow_name(&r.src, &r.dst, r.sport, r.dest_qp));
        out.extend(f::cnp_ignored(&f::Unreacting {
            flow: &name,
            sender: &r.src,
            bursts: r.bursts,
            ignored: r.ignored,
            ratio: r.ratio,
            rate_before_bytes_per_second: r.rate_before_bytes_per_second,
            span: r.span,
        }));
    }
    for l in &w.lossy {
        if let Some(x) = f::lossy_roce(l.lossy, l.roce, &l.expected, w.span) {
            out.push(placed(x, l.place.as_deref(), |p| format!("interface {p}")));
        }
    }
    for m in &w.flow_maps {
        out.extend(f::flow_table_full(m.iface, m.pushed_out, &m.fill, w.span));
    }
    for e in &w.elephants {
        out.push(match e.over {
            Some((bytes, span)) => f::elephant(&e.flow, e.bytes_per_second, bytes, span),
            None => f::elephant_now(&e.flow, e.bytes_per_second, w.span.1),
        });
    }
    for (group, member, n) in &w.collisions {
        out.push(f::ecmp_collision(group, member, *n, w.span));
    }
    out.extend(f::shared_5tuple(
        w.shared_5tuples.0,
        w.shared_5tuples.1.as_deref(),
        w.span,
    ));
    for s in &w.slow_steps {
        let x = f::slow_step(&f::SlowStep {
            index: s.index,
            span: s.span,
            seconds: s.seconds,
            typical_seconds: s.typical_seconds,
            causes: &s.causes,
            straggler: s.straggler.as_ref().map(|(h, a, b)| (h.as_str(), *a, *b)),
        });
        let step = match &s.job {
            Some(job) => format!("step {} of {job}", s.index),
            None => format!("step {}", s.index),
        };
        out.push(match (&s.job, &s.place) {
            (_, Some(p)) => x.retitle(format!("{step} on {p}")),
            (Some(_), None) => x.retitle(step),
            (None, None) => x,
        });
    }
    out
}

/// The finding with a subject that names where it was seen, when the source knows it.
fn placed(x: Finding, place: Option<&str>, subject: impl Fn(&str) -> String) -> Finding {
    match place {
        Some(p) => x.retitle(subject(p)),
        None => x,
    }
}

/// Congestion and missing CNPs, per receiver (in the order of their addresses).
fn receivers(t: &Trouble) -> Vec<Finding> {
    let mut hosts: Vec<_> = t.receivers.iter().collect();
    hosts.sort_unstable_by_key(|(h, _)| **h);
    let mut out = Vec::new();
    for (host, r) in hosts {
        let name = host.to_string();
        let span = (r.first_s, r.last_ce_s);
        out.extend(f::congestion(&f::Congested {
            host: &name,
            packets: r.packets,
            ce_packets: r.ce,
            cnps: r.cnps_back,
            senders: r.senders.len(),
            span,
        }));
        if t.seen_sending(host) {
            out.extend(f::cnp_missing(&f::Receiver {
                host: &name,
                senders: r.senders.len(),
                ce_packets: r.ce,
                answered_ce: r.answered,
                cnps: r.cnps_back,
                span,
            }));
        }
    }
    out
}

/// One incident per loss, on the data flow, with its receiver's NAKs folded in; the span
/// runs to the last packet of the flow or of a flow folded into it.
fn recoveries(t: &Trouble) -> Vec<Finding> {
    let mut flows: Vec<_> = t
        .lossy
        .iter()
        .map(|(k, l)| {
            let (src, dst) = (addr(k.ip_version, &k.src), addr(k.ip_version, &k.dst));
            ((src, dst, k.sport, k.dest_qp), l)
        })
        .collect();
    flows.sort_unstable_by_key(|(k, _)| *k);
    let names: Vec<(String, String)> = flows
        .iter()
        .map(|((s, d, _, _), _)| (s.to_string(), d.to_string()))
        .collect();
    let losses: Vec<recovery::Loss<'_>> = flows
        .iter()
        .zip(&names)
        .map(|((_, l), (src, dst))| recovery::Loss {
            src,
            dst,
            psn_gaps: l.psn_gaps,
            retransmits: l.retransmits,
            naks: l.naks,
        })
        .collect();
    let mut out = Vec::new();
    for inc in recovery::incidents(&losses) {
        let ((_, _, sport, qp), l) = flows[inc.flow];
        let (src, dst) = &names[inc.flow];
        let last = inc
            .folded
            .iter()
            .map(|&i| flows[i].1.last_s)
            .fold(l.last_s, f64::max);
        out.extend(f::retransmissions(&f::Recovery {
            flow: &format!("Flow {}", f::flow_name(src, dst, sport, qp)),
            psn_gaps: l.psn_gaps,
            retransmits: l.retransmits,
            naks: l.naks,
            naks_back: inc.naks_back,
            packets: l.packets,
            span: (l.first_s, last),
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::window as w;
    use super::*;

    /// A storm seen live names its interface; a capture's names the priority alone.
    #[test]
    fn a_storm_names_where_it_was_seen() {
        let storm = |place: Option<&str>| w::Storm {
            priority: 3,
            span: (1.0, 2.0),
            xoff_frames: 4,
            mac: None,
            place: place.map(str::to_string),
        };
        let win = Window {
            storms: vec![storm(Some("eth0")), storm(None)],
            storm_s: 0.2,
            ..Window::default()
        };
        let subjects: Vec<String> = judge(&win).into_iter().map(|x| x.subject).collect();
        assert_eq!(subjects, ["priority 3 on eth0", "priority 3"]);
    }

    /// A capture's elephant is judged over its life; a live one at its rate now.
    #[test]
    fn an_elephant_over_a_capture_and_now() {
        let e = |over| w::Elephant {
            flow: "a -> b".into(),
            bytes_per_second: 1e9,
            over,
        };
        let win = Window {
            span: (0.0, 10.0),
            elephants: vec![e(Some((5_000, (1.0, 3.0)))), e(None)],
            ..Window::default()
        };
        let got = judge(&win);
        assert_eq!((got[0].start_s, got[0].end_s), (1.0, 3.0));
        assert_eq!(got[0].evidence["bytes"], 5_000);
        assert_eq!((got[1].start_s, got[1].end_s), (10.0, 10.0));
    }

    /// A slow step names its job where the link carries several, and its interface live.
    #[test]
    fn a_slow_step_names_its_job_and_place() {
        let step = |job: Option<&str>, place: Option<&str>| w::SlowStep {
            index: 3,
            span: (1.0, 1.2),
            seconds: 0.2,
            typical_seconds: 0.1,
            causes: vec![("unexplained", 1.0)],
            straggler: None,
            job: job.map(str::to_string),
            place: place.map(str::to_string),
        };
        let win = Window {
            slow_steps: vec![
                step(Some("job-10.0.0.1"), Some("eth0")),
                step(Some("job-10.0.0.1"), None),
                step(None, Some("eth0")),
                step(None, None),
            ],
            ..Window::default()
        };
        let subjects: Vec<String> = judge(&win).into_iter().map(|x| x.subject).collect();
        assert_eq!(
            subjects,
            [
                "step 3 of job-10.0.0.1 on eth0",
                "step 3 of job-10.0.0.1",
                "step 3 on eth0",
                "step 3"
            ]
        );
    }

    /// An empty window raises nothing (no trouble, no storm, no lossy packet).
    #[test]
    fn an_empty_window_raises_nothing() {
        let win = Window {
            lossy: vec![w::Lossy {
                lossy: 0,
                roce: 1_000,
                expected: "priority 3".into(),
                place: None,
            }],
            ..Window::default()
        };
        assert!(judge(&win).is_empty());
    }
}

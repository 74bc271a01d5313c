//! Findings of the live agent: at every poll, the detectors of [`super::findings`] run over
//! the last [`WINDOW_S`] seconds of each interface's counters (what the kernel programs
//! counted at ingress and egress), the elephants and the ECMP views; a finding opens when its
//! condition first holds (one log line), stays active while it holds, and closes when it has
//! not held for a whole window (one log line), so that a condition that comes and goes
//! within seconds is one finding, not a flapping series. Times are Unix seconds.

pub use super::engine::held::{FindingsView, RECENT_PER_KIND};
use super::engine::window::{self as w, Window};
use super::engine::{judge, Held};
use super::findings::Finding;
pub use super::live_sample::Sample;
use super::pause::{PauseRun, PauseTracker};
use agent_common::headers::mac_control::PRIORITIES;
use std::collections::{BTreeMap, VecDeque};

/// The window the counters' conditions are judged over, seconds.
pub const WINDOW_S: f64 = 10.0;
pub use super::findings::{MORE_SUBJECT, OPEN_PER_KIND};

/// The engine's state between polls.
#[derive(Debug, Default)]
pub struct LiveFindings {
    /// Per interface: (Unix time, totals) over the last window.
    history: BTreeMap<String, VecDeque<(f64, Sample)>>,
    /// Per interface: the pauses the counters show (a poll interval paused throughout is one
    /// pause over it), in Unix ns: where the pause time is the NIC's counter or the quanta.
    counted_pause: BTreeMap<String, PauseTracker>,
    /// The findings open, and the recently closed.
    pub held: Held,
    /// Findings of events (a slow step), held active for a window after they were found.
    events: Vec<(w::SlowStep, f64)>,
    /// The senders' reaction to CNPs.
    reaction: super::live_reaction::LiveReaction,
    /// Congestion, missing CNPs and loss per receiver and flow, as a capture's.
    flow_trouble: super::live_flows::LiveFlows,
    /// The host's rates over the last poll.
    pub totals: super::live_totals::Totals,
    /// Per interface: (Unix time, flows pushed out of its flow maps) over the last window.
    pushed_out: BTreeMap<String, VecDeque<(f64, u64)>>,
    /// Per interface: its pause time from the kernel's frames (the union of the intervals).
    pub pause: BTreeMap<String, super::live_pause::LivePause>,
}

/// A slow training step found on an interface's ring.
#[derive(Clone, Debug)]
pub struct LiveSlowStep {
    pub iface: String,
    /// Its number among the interface's slow steps.
    pub index: u64,
    /// Unix time.
    pub start_s: f64,
    pub seconds: f64,
    pub period_s: f64,
    /// The job whose step it is, where the interface carries several jobs.
    pub job: Option<String>,
}

/// What a poll saw besides the counters.
pub struct Poll<'a> {
    pub now_s: f64,
    /// Each watched interface: its counters (None: gone) and its link speed (bits/s).
    pub ifaces: Vec<(&'a str, Option<Sample>, u64)>,
    /// Elephants now: (flow name, rate bytes/s).
    pub elephants: Vec<(String, f64)>,
    /// Colliding members: (group, member, elephants).
    pub collisions: Vec<(String, String, usize)>,
    /// The interfaces where a flow that is no elephant shares a path with colliding
    /// elephants of its own link (an observed group's colliding member, or a predicted
    /// path): where an ECMP collision can be a cause of a step.
    pub colliding_ifaces: Vec<String>,
    pub storm_s: f64,
    /// Groups of connections sharing one UDP 5-tuple, and an example of one.
    pub shared_5tuples: (usize, Option<String>),
    /// Slow steps found since the last poll.
    pub slow_steps: Vec<LiveSlowStep>,
    /// Every flow's totals (the senders' reaction to CNPs).
    pub flows: Vec<super::live_reaction::FlowTotals>,
    /// The priorities that carry the job (bit p: priority p).
    pub job_priorities: u8,
    /// Each interface's flow maps at this poll (IPv4, IPv6).
    pub flow_maps: Vec<(&'a str, Vec<MapFigures>)>,
}

/// One flow map at a poll: its fill and the flows it pushed out since the last poll.
#[derive(Clone, Copy, Debug, Default)]
pub struct MapFigures {
    pub map: &'static str,
    pub entries: u64,
    pub capacity: u64,
    pub pushed_out: u64,
}

impl LiveFindings {
    /// One poll: returns what opened and what closed (for the log).
    pub fn poll(&mut self, p: &Poll<'_>) -> (Vec<Finding>, Vec<Finding>) {
        let mut win = Window {
            span: (p.now_s - WINDOW_S, p.now_s),
            storm_s: p.storm_s,
            ..Window::default()
        };
        let mut totals = super::live_totals::Totals::default();
        for (iface, sample, speed) in &p.ifaces {
            let Some(s) = sample else {
                self.history.remove(*iface);
                win.links_down.push(iface);
                continue;
            };
            let h = self.history.entry(iface.to_string()).or_default();
            let prev = h.back().map(|(t, s)| (*t, *s));
            h.push_back((p.now_s, *s));
            while h.len() > 2 && h[1].0 <= p.now_s - WINDOW_S {
                h.pop_front();
            }
            let Some(&(t0, base)) = h.front() else {
                continue;
            };
            if t0 >= p.now_s {
                continue;
            }
            let d = s.minus(&base);
            win.lossy.push(w::Lossy {
                lossy: d.lossy,
                roce: d.roce,
                expected: "the configured classes".into(),
                place: Some(iface.to_string()),
            });
            if let Some((tp, ps)) = prev {
                totals.add(&s.minus(&ps), p.now_s - tp, *speed);
                win.storms
                    .extend(self.storms(iface, (tp, &ps), s, *speed, p));
            }
        }
        for (iface, maps) in &p.flow_maps {
            let h = self.pushed_out.entry(iface.to_string()).or_default();
            h.push_back((p.now_s, maps.iter().map(|m| m.pushed_out).sum()));
            while h.front().is_some_and(|(t, _)| *t <= p.now_s - WINDOW_S) {
                h.pop_front();
            }
            let pushed: u64 = h.iter().map(|(_, n)| n).sum();
            let fill = maps
                .iter()
                .map(|m| (m.map, m.entries, m.capacity))
                .collect();
            win.flow_maps.push(w::FlowMaps {
                iface,
                pushed_out: pushed,
                fill,
            });
        }
        self.flow_trouble.poll(p.now_s, &p.flows, WINDOW_S);
        self.reaction.poll(p.now_s, &p.flows);
        win.reactions = self.reactions(p.now_s);
        for s in &p.slow_steps {
            let x = self.slow_step(s, p);
            self.events.push((x, p.now_s + WINDOW_S));
        }
        self.events.retain(|(_, until)| *until > p.now_s);
        win.slow_steps = self.events.iter().map(|(x, _)| x.clone()).collect();
        win.elephants = p
            .elephants
            .iter()
            .map(|(flow, rate)| w::Elephant {
                flow: flow.clone(),
                bytes_per_second: *rate,
                over: None,
            })
            .collect();
        win.collisions = p.collisions.clone();
        win.shared_5tuples = p.shared_5tuples.clone();
        win.trouble = Some(&self.flow_trouble.trouble);
        let now = judge(&win);
        let settled = self.held.settle(now, p.now_s);
        totals.findings_active = self.held.len();
        self.totals = totals;
        settled
    }

    /// The storms of an interface's priorities, from the one pause time each has
    /// ([`Sample::paused_seconds`]): the kernel's frames through the interface's pause
    /// tracker, or, where the pause time is the NIC's counter or the quanta, each poll
    /// interval paused throughout as one pause through a tracker of its own: either way a
    /// storm is a pause without a break longer than the threshold, as in a capture.
    fn storms(
        &mut self,
        iface: &str,
        (tp, prev): (f64, &Sample),
        s: &Sample,
        speed: u64,
        p: &Poll<'_>,
    ) -> Vec<w::Storm> {
        let storm_ns = (p.storm_s * 1e9) as u64;
        let unix_ns = |t: f64| (t * 1e9) as u64;
        let delta = s.minus(prev);
        let counted = self
            .counted_pause
            .entry(iface.to_string())
            .or_insert_with(|| PauseTracker::new(1, storm_ns).without_runs());
        counted.set_storm_ns(storm_ns);
        let by_frames: [bool; PRIORITIES] =
            std::array::from_fn(|q| s.nic_paused_us[q].is_none() && s.union_paused_ns[q].is_some());
        let dt = p.now_s - tp;
        for q in (0..PRIORITIES).filter(|q| !by_frames[*q]) {
            if dt > 0.0 && delta.paused_seconds(q, speed) >= 0.9 * dt {
                counted.paused_span(q, unix_ns(tp), unix_ns(p.now_s));
            }
        }
        counted.close_ended(unix_ns(p.now_s));
        let unix = |r: &PauseRun, offset_s: f64| w::Storm {
            priority: r.priority,
            span: (
                r.start_ns as f64 / 1e9 + offset_s,
                r.end_ns as f64 / 1e9 + offset_s,
            ),
            xoff_frames: r.xoff_frames,
            mac: None,
            place: Some(iface.to_string()),
        };
        let framed = |r: &PauseRun| by_frames[usize::from(r.priority) % PRIORITIES];
        let mut out: Vec<w::Storm> = std::mem::take(&mut counted.storms)
            .iter()
            .chain(&counted.running_storms(unix_ns(p.now_s)))
            .filter(|r| !framed(r))
            .map(|r| w::Storm {
                xoff_frames: 0,
                ..unix(r, 0.0)
            })
            .collect();
        if let Some(lp) = self.pause.get_mut(iface) {
            // The frames' times are the kernel's clock: placed against now.
            let offset_s = lp.read_at_ns().map_or(0.0, |at| p.now_s - at as f64 / 1e9);
            out.extend(
                lp.storms()
                    .iter()
                    .filter(|r| framed(r))
                    .map(|r| unix(r, offset_s)),
            );
        }
        out
    }

    /// The senders judged for their answer to CNPs in the last window.
    fn reactions(&self, now_s: f64) -> Vec<w::Reaction> {
        self.reaction
            .judged
            .iter()
            .filter(|(_, j)| now_s - j.at_s <= WINDOW_S && j.bursts > 0)
            .map(|(k, j)| w::Reaction {
                src: agent_common::flow_key::addr(k.ip_version, &k.src).to_string(),
                dst: agent_common::flow_key::addr(k.ip_version, &k.dst).to_string(),
                sport: k.sport,
                dest_qp: k.dest_qp,
                bursts: j.bursts,
                ignored: j.ignored,
                ratio: j.mean_ratio().unwrap_or(0.0),
                rate_before_bytes_per_second: j.rate_before,
                span: (now_s - WINDOW_S, now_s),
            })
            .collect()
    }

    /// A slow step and its causes ([`super::slow_steps`]) from the interface's counters
    /// between the polls around it: the pause time of the job's priorities (at most the
    /// step's length: the counters do not say when within the interval it fell), the CE
    /// marks, loss recovery and lossy RoCE of the interval, and an ECMP collision on the
    /// step's own link now (a job flow on a colliding path of that link). The
    /// live ring has no per-host series: no straggler is named.
    fn slow_step(&self, s: &LiveSlowStep, p: &Poll<'_>) -> w::SlowStep {
        use super::slow_steps as why;
        let end = s.start_s + s.seconds;
        let (mut paused_s, mut trouble) = (0.0, why::Trouble::default());
        if let Some(h) = self.history.get(&s.iface) {
            let a = h.iter().rev().find(|(t, _)| *t <= s.start_s).or(h.front());
            let b = h.iter().find(|(t, _)| *t >= end).or(h.back());
            if let (Some((ta, sa)), Some((tb, sb))) = (a, b) {
                let d = sb.minus(sa);
                let speed = p
                    .ifaces
                    .iter()
                    .find(|(i, _, _)| *i == s.iface)
                    .map_or(0, |(_, _, b)| *b);
                paused_s = (0..PRIORITIES)
                    .filter(|q| p.job_priorities & (1 << q) != 0)
                    .map(|q| d.paused_seconds(q, speed))
                    .fold(0.0, f64::max)
                    .min(s.seconds)
                    .min((tb - ta).max(0.0));
                trouble = why::Trouble {
                    packets: d.roce,
                    ce: d.rx_ce,
                    recoveries: d.psn_gaps + d.retransmits + d.naks,
                    lossy: d.lossy,
                };
            }
        }
        let extra = s.seconds - s.period_s;
        let causes = why::causes(
            extra,
            paused_s,
            why::evidence(&trouble, p.colliding_ifaces.contains(&s.iface)),
        );
        w::SlowStep {
            index: s.index as usize,
            span: (s.start_s, end),
            seconds: s.seconds,
            typical_seconds: s.period_s,
            causes: causes.iter().map(|c| (c.kind, c.share)).collect(),
            straggler: None,
            job: s.job.clone(),
            place: Some(s.iface.clone()),
        }
    }

    /// Active findings, most serious first, then the recent closed ones (newest first).
    pub fn view(&self, now_s: f64) -> FindingsView {
        self.held.view(now_s)
    }
}

#[cfg(test)]
#[path = "live_findings_tests.rs"]
mod tests;

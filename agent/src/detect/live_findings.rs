//! Findings of the live agent: at every poll, the detectors of [`super::findings`] run over
//! the last [`WINDOW_S`] seconds of each interface's counters (what the kernel programs
//! counted at ingress and egress), the elephants and the ECMP views; a finding opens when its
//! condition first holds (one log line), stays active while it holds, and closes when it has
//! not held for a whole window (one log line), so that a condition that comes and goes
//! within seconds is one finding, not a flapping series. Times are Unix seconds.

use super::findings::{self as f, Finding};
pub use super::live_sample::Sample;
use agent_common::headers::mac_control::PRIORITIES;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// The window the counters' conditions are judged over, seconds.
pub const WINDOW_S: f64 = 10.0;
/// Closed findings kept for `/api/v1/findings`, per kind: one kind that floods cannot push
/// the others out.
pub const RECENT_PER_KIND: usize = 50;
pub use super::findings::{MORE_SUBJECT, OPEN_PER_KIND};

#[derive(Clone, Debug, Serialize)]
pub struct Active {
    #[serde(flatten)]
    pub finding: Finding,
    /// Still holding at the last poll.
    pub active: bool,
}

/// The engine's state between polls.
#[derive(Debug, Default)]
pub struct LiveFindings {
    /// Per interface: (Unix time, totals) over the last window.
    history: BTreeMap<String, VecDeque<(f64, Sample)>>,
    /// Per (interface, priority): since when every poll was fully paused.
    paused_since: BTreeMap<(String, usize), f64>,
    /// Open findings by (kind, subject), with when their condition last held.
    open: BTreeMap<(&'static str, String), (Finding, f64)>,
    recent: BTreeMap<&'static str, VecDeque<Finding>>,
    /// Findings opened so far, by kind.
    pub opened: BTreeMap<&'static str, u64>,
    /// Findings of events (a slow step), held active for a window after they were found.
    events: Vec<(Finding, f64)>,
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
        let mut now: Vec<Finding> = Vec::new();
        let span = (p.now_s - WINDOW_S, p.now_s);
        let mut totals = super::live_totals::Totals::default();
        for (iface, sample, speed) in &p.ifaces {
            let Some(s) = sample else {
                self.history.remove(*iface);
                now.push(f::link_down(iface, p.now_s));
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
            now.extend(
                f::lossy_roce(d.lossy, d.roce, "the configured classes", span)
                    .map(|x| x.retitle(format!("interface {iface}"))),
            );
            // A priority paused for (nearly) all of every poll since some time.
            if let Some((tp, ps)) = prev {
                let dt = p.now_s - tp;
                let name = iface.to_string();
                let delta = s.minus(&ps);
                totals.add(&delta, dt, *speed);
                for prio in 0..PRIORITIES {
                    let key = (name.clone(), prio);
                    if dt > 0.0 && delta.paused_seconds(prio, *speed) >= 0.9 * dt {
                        let since = *self.paused_since.entry(key).or_insert(tp);
                        if p.now_s - since > p.storm_s {
                            now.push(
                                f::pfc_storm(&f::Storm {
                                    priority: prio as u8,
                                    span: (since, p.now_s),
                                    xoff_frames: 0,
                                    mac: None,
                                    threshold_s: p.storm_s,
                                })
                                .retitle(format!("priority {prio} on {iface}")),
                            );
                        }
                    } else {
                        self.paused_since.remove(&key);
                    }
                }
            }
        }
        for (iface, maps) in &p.flow_maps {
            let h = self.pushed_out.entry(iface.to_string()).or_default();
            h.push_back((p.now_s, maps.iter().map(|m| m.pushed_out).sum()));
            while h.front().is_some_and(|(t, _)| *t <= p.now_s - WINDOW_S) {
                h.pop_front();
            }
            let pushed: u64 = h.iter().map(|(_, n)| n).sum();
            let fill: Vec<(&str, u64, u64)> = maps
                .iter()
                .map(|m| (m.map, m.entries, m.capacity))
                .collect();
            now.extend(f::flow_table_full(iface, pushed, &fill, span));
        }
        now.extend(self.flow_trouble.poll(p.now_s, &p.flows, WINDOW_S));
        self.reaction.poll(p.now_s, &p.flows);
        for (k, j) in &self.reaction.judged {
            if p.now_s - j.at_s > WINDOW_S || j.bursts == 0 {
                continue;
            }
            let (src, dst) = (
                agent_common::flow_key::addr(k.ip_version, &k.src).to_string(),
                agent_common::flow_key::addr(k.ip_version, &k.dst).to_string(),
            );
            let name = format!("Flow {}", f::flow_name(&src, &dst, k.sport, k.dest_qp));
            now.extend(f::cnp_ignored(&f::Unreacting {
                flow: &name,
                sender: &src,
                bursts: j.bursts,
                ignored: j.ignored,
                ratio: j.ratio_sum / j.bursts as f64,
                rate_before_bytes_per_second: j.rate_before,
                span,
            }));
        }
        for s in &p.slow_steps {
            let x = self.slow_step(s, p);
            self.events.push((x, p.now_s + WINDOW_S));
        }
        self.events.retain(|(_, until)| *until > p.now_s);
        now.extend(self.events.iter().map(|(x, _)| x.clone()));
        for (flow, rate) in &p.elephants {
            now.push(f::elephant_now(flow, *rate, p.now_s));
        }
        for (g, m, n) in &p.collisions {
            now.push(f::ecmp_collision(g, m, *n, (p.now_s, p.now_s)));
        }
        now.extend(f::shared_5tuple(
            p.shared_5tuples.0,
            p.shared_5tuples.1.as_deref(),
            (p.now_s, p.now_s),
        ));
        let settled = self.settle(now, p.now_s);
        totals.findings_active = self.open.len();
        self.totals = totals;
        settled
    }

    /// A slow step and its causes ([`super::slow_steps`]) from the interface's counters
    /// between the polls around it: the pause time of the job's priorities (at most the
    /// step's length: the counters do not say when within the interval it fell), the CE
    /// marks, loss recovery and lossy RoCE of the interval, and an ECMP collision on the
    /// step's own link now (a job flow on a colliding path of that link). The
    /// live ring has no per-host series: no straggler is named.
    fn slow_step(&self, s: &LiveSlowStep, p: &Poll<'_>) -> Finding {
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
        let causes: Vec<(&'static str, f64)> = causes.iter().map(|c| (c.kind, c.share)).collect();
        f::slow_step(&f::SlowStep {
            index: s.index as usize,
            span: (s.start_s, end),
            seconds: s.seconds,
            typical_seconds: s.period_s,
            causes: &causes,
            straggler: None,
        })
        .retitle(format!("step {} on {}", s.index, s.iface))
    }

    /// Opens the new, keeps the holding, closes those that no longer hold (the counters'
    /// conditions are judged over a window, so they close a window after the last cause).
    fn settle(&mut self, now: Vec<Finding>, t: f64) -> (Vec<Finding>, Vec<Finding>) {
        let now = self.bounded(now);
        let mut opened = Vec::new();
        let mut holding = std::collections::BTreeSet::new();
        for mut x in now {
            let key = (x.kind, x.subject.clone());
            holding.insert(key.clone());
            // An event's finding keeps its own span (a slow step's start and end).
            let event = x.kind == "slow_step";
            if !event {
                x.end_s = t;
            }
            match self.open.get_mut(&key) {
                Some((held, last)) => {
                    x.start_s = held.start_s;
                    *held = x;
                    *last = t;
                }
                None => {
                    if x.kind != "pfc_storm" && !event {
                        x.start_s = t;
                    }
                    *self.opened.entry(x.kind).or_default() += 1;
                    opened.push(x.clone());
                    self.open.insert(key, (x, t));
                }
            }
        }
        let gone: Vec<_> = self
            .open
            .keys()
            .filter(|k| !holding.contains(*k))
            .cloned()
            .collect();
        let mut closed = Vec::new();
        for k in gone {
            if let Some((x, _)) = self.open.remove(&k) {
                closed.push(x.clone());
                let recent = self.recent.entry(x.kind).or_default();
                recent.push_back(x);
                while recent.len() > RECENT_PER_KIND {
                    recent.pop_front();
                }
            }
        }
        (opened, closed)
    }

    /// Active findings, most serious first, then the recent closed ones (newest first).
    pub fn view(&self, now_s: f64) -> FindingsView {
        let mut active: Vec<Finding> = self
            .open
            .values()
            .map(|(x, _)| Finding {
                end_s: if x.kind == "slow_step" {
                    x.end_s
                } else {
                    now_s
                },
                ..x.clone()
            })
            .collect();
        f::sort(&mut active);
        let mut recent: Vec<Finding> = self.recent.values().flatten().cloned().collect();
        recent.sort_by(|a, b| b.end_s.total_cmp(&a.end_s));
        FindingsView { active, recent }
    }

    /// At most [`OPEN_PER_KIND`] findings of a kind: those open already first (a finding does
    /// not flap in and out of the list), then the most serious and earliest; the rest of the
    /// kind becomes one finding that says how many more and names the first few.
    fn bounded(&self, mut now: Vec<Finding>) -> Vec<Finding> {
        let mut per_kind: BTreeMap<&'static str, usize> = BTreeMap::new();
        for x in &now {
            *per_kind.entry(x.kind).or_default() += 1;
        }
        if per_kind.values().all(|n| *n <= OPEN_PER_KIND) {
            return now;
        }
        let open = |x: &Finding| self.open.contains_key(&(x.kind, x.subject.clone()));
        now.sort_by(|a, b| {
            a.kind
                .cmp(b.kind)
                .then(open(b).cmp(&open(a)))
                .then(b.severity.cmp(&a.severity))
                .then(a.start_s.total_cmp(&b.start_s))
                .then(a.subject.cmp(&b.subject))
        });
        let mut out = Vec::new();
        let mut rest: BTreeMap<&'static str, Vec<Finding>> = BTreeMap::new();
        let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
        for x in now {
            let n = seen.entry(x.kind).or_default();
            *n += 1;
            if *n <= OPEN_PER_KIND {
                out.push(x);
            } else {
                rest.entry(x.kind).or_default().push(x);
            }
        }
        out.extend(rest.into_iter().map(|(kind, xs)| f::more(kind, &xs)));
        out
    }

    /// Each open finding's (kind, severity, subject): at most [`OPEN_PER_KIND`] of a kind
    /// and its "more subjects" finding, so the labels they become stay bounded.
    pub fn active_subjects(&self) -> impl Iterator<Item = (&'static str, &'static str, &str)> {
        self.open
            .values()
            .map(|(x, _)| (x.kind, x.severity.name(), x.subject.as_str()))
    }

    /// Active findings by (kind, severity); a kind's "N more" finding counts N.
    pub fn active_counts(&self) -> BTreeMap<(&'static str, &'static str), u64> {
        let mut m = BTreeMap::new();
        for (x, _) in self.open.values() {
            let n = if x.subject == MORE_SUBJECT {
                x.evidence
                    .get("more")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(1)
            } else {
                1
            };
            *m.entry((x.kind, x.severity.name())).or_default() += n;
        }
        m
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FindingsView {
    pub active: Vec<Finding>,
    pub recent: Vec<Finding>,
}

#[cfg(test)]
#[path = "live_findings_tests.rs"]
mod tests;

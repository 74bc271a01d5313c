//! Findings across windows: a finding opens when its condition first holds, stays active
//! while it holds, and closes when it no longer does (one log line each); closed ones are
//! kept for the API, [`RECENT_PER_KIND`] per kind, so one kind that floods cannot push the
//! others out. Each kind is bounded to [`OPEN_PER_KIND`] at a time: those open already first
//! (a finding does not flap in and out of the list), then the most serious and earliest; the
//! rest of the kind becomes one finding that says how many more and names the first few.

use crate::detect::findings::{self as f, Finding};
pub use crate::detect::findings::{MORE_SUBJECT, OPEN_PER_KIND};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// Closed findings kept for `/api/v1/findings`, per kind.
pub const RECENT_PER_KIND: usize = 50;

/// The open and recently closed findings.
#[derive(Debug, Default)]
pub struct Held {
    /// Open findings by (kind, subject), with when their condition last held.
    open: BTreeMap<(&'static str, String), (Finding, f64)>,
    recent: BTreeMap<&'static str, VecDeque<Finding>>,
    /// Findings opened so far, by kind.
    pub opened: BTreeMap<&'static str, u64>,
}

impl Held {
    /// Findings open now.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Opens the new, keeps the holding, closes those that no longer hold (the counters'
    /// conditions are judged over a window, so they close a window after the last cause).
    pub fn settle(&mut self, now: Vec<Finding>, t: f64) -> (Vec<Finding>, Vec<Finding>) {
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
    pub fn bounded(&self, now: Vec<Finding>) -> Vec<Finding> {
        let mut per_kind: BTreeMap<&'static str, usize> = BTreeMap::new();
        for x in &now {
            *per_kind.entry(x.kind).or_default() += 1;
        }
        if per_kind.values().all(|n| *n <= OPEN_PER_KIND) {
            return now;
        }
        // Whether each is open, asked once per finding (not twice per comparison: a capture's
        // thousands of findings of a kind made the sort a third of the judging); none is
        // where nothing is held yet (a capture's one window). The positions are sorted, not
        // the findings (about 140 bytes each, moved at every step of the sort).
        let open: Vec<bool> = now
            .iter()
            .map(|x| !self.open.is_empty() && self.open.contains_key(&(x.kind, x.subject.clone())))
            .collect();
        let mut order: Vec<usize> = (0..now.len()).collect();
        order.sort_by(|&i, &j| {
            let (a, b) = (&now[i], &now[j]);
            a.kind
                .cmp(b.kind)
                .then(open[j].cmp(&open[i]))
                .then(b.severity.cmp(&a.severity))
                .then(a.start_s.total_cmp(&b.start_s))
                .then(a.subject.cmp(&b.subject))
        });
        let mut slots: Vec<Option<Finding>> = now.into_iter().map(Some).collect();
        let mut out = Vec::new();
        let mut rest: BTreeMap<&'static str, Vec<Finding>> = BTreeMap::new();
        let mut seen: BTreeMap<&'static str, usize> = BTreeMap::new();
        for i in order {
            let Some(x) = slots[i].take() else { continue };
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

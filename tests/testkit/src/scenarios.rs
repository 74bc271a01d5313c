//! Diagnosis scenarios with known truth, drawn at random from a seed: one or two training
//! jobs on one link (each its own hosts, period and phase), a light steady tenant, slow steps
//! with none, one or two planted causes of the job's own (a PFC pause of its priority in the
//! step where the job is alone on the link, CE marks on its packets, a NAK and a go-back,
//! packets outside the lossless class),
//! and unrelated trouble at the same times (the tenant's CE marks, NAKs and lossy packets,
//! pauses of another priority). The truth is the generator's parameters, never rocemon's
//! parser: which steps were slowed, by how much, and by what.
//!
//! `score` matches what `rocemon analyze` said (`training.jobs[].steps`) against the truth:
//! slow steps by start time, and each matched step's causes by kind.

use crate::frames::{pfc, Roce};
use crate::Rng;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// The causes a slow step can be given.
pub const CAUSES: [&str; 4] = ["pfc_pause", "congestion", "retransmission", "lossy_class"];

/// One slow step of the truth.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowTruth {
    /// The job's lowest source host (its id without `job-`).
    pub job: String,
    pub start_ns: u64,
    pub causes: Vec<&'static str>,
}

/// A drawn scenario: its frames (time, bytes) and its truth.
pub struct Scenario {
    pub frames: Vec<(u64, Vec<u8>)>,
    pub slow: Vec<SlowTruth>,
    /// Steps of every job (slow or not) whose end is seen.
    pub steps: usize,
    /// The findings the planted trouble calls for, by the findings' documented rules over the
    /// generator's own counts (never a parse of its frames): (kind, what it is about: a
    /// receiver's or a flow's source address, `priority P`, `traffic classes`).
    pub findings: BTreeSet<(&'static str, String)>,
}

/// The finding kinds scored besides the slow steps.
pub const FINDING_KINDS: [&str; 5] = [
    "congestion",
    "cnp_missing",
    "retransmissions",
    "lossy_roce",
    "pfc_storm",
];

/// What the generator planted, counted as it plants it.
#[derive(Default)]
struct Tally {
    /// Per receiver: RoCE packets to it (no CNP is ever sent here) and the CE-marked ones.
    to: BTreeMap<IpAddr, (u64, u64)>,
    roce: u64,
    lossy: u64,
    /// Source addresses of the data flows that lost packets, and of NAK-only flows whose
    /// data flow lost none (each is its own incident).
    lost: BTreeSet<String>,
    /// A pause of the job's priority longer than the storm threshold.
    storm: bool,
    /// An unrelated storm: the tenant's priority paused longer than the threshold.
    other_storm: bool,
}

impl Tally {
    fn packet(&mut self, dst: IpAddr, ce: bool, lossy: bool) {
        let e = self.to.entry(dst).or_default();
        e.0 += 1;
        e.1 += u64::from(ce);
        self.roce += 1;
        self.lossy += u64::from(lossy);
    }

    /// The findings' rules (docs/runbook.md): congestion from 10 CE marks and 1% of a
    /// receiver's packets; cnp_missing from 10 CE marks with no CNP back (none is ever sent
    /// here); lossy_roce from 100 packets and 1% of the RoCE; a storm beyond 0.2 s; every
    /// loss.
    fn findings(&self) -> BTreeSet<(&'static str, String)> {
        let mut out = BTreeSet::new();
        for (host, &(packets, ce)) in &self.to {
            if ce >= 10 && ce as f64 >= 0.01 * packets as f64 {
                out.insert(("congestion", host.to_string()));
            }
            if ce >= 10 {
                out.insert(("cnp_missing", host.to_string()));
            }
        }
        for src in &self.lost {
            out.insert(("retransmissions", src.clone()));
        }
        if self.lossy >= 100 && self.lossy as f64 >= 0.01 * self.roce as f64 {
            out.insert(("lossy_roce", "traffic classes".into()));
        }
        if self.storm {
            out.insert(("pfc_storm", "priority 3".into()));
        }
        if self.other_storm {
            out.insert(("pfc_storm", "priority 5".into()));
        }
        out
    }
}

/// A whole XOFF's pause at the diagnosis's 100 Gb/s: 65,535 quanta of 512 bit times.
const XOFF_NS: u64 = 65_535 * 512 / 100;
/// The storm threshold (`--pfc-storm-seconds` 0.2).
const STORM_NS: u64 = 200 * MS;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

const T0: u64 = 1_764_547_200_000_000_000;
const MS: u64 = 1_000_000;
/// The job's priority is 3 (DSCP 26, the default classes); unrelated pauses use 5.
const JOB_PRIORITY_BIT: u8 = 0x08;
const OTHER_PRIORITY_BIT: u8 = 0x20;

/// XOFFs every 200 us with full quanta over `[from, to)` on the priorities of `bits`.
fn xoffs(f: &mut Vec<(u64, Vec<u8>)>, bits: u8, from: u64, to: u64) {
    let mut q = [0u16; 8];
    for (p, x) in q.iter_mut().enumerate() {
        if bits & (1 << p) != 0 {
            *x = 0xFFFF;
        }
    }
    let mut t = from;
    while t < to {
        f.push((t, pfc(bits, q)));
        t += 200_000;
    }
}

/// A job's sender: its flow's PSN, on and on.
struct Sender {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    qp: u32,
    psn: u32,
}

impl Sender {
    fn write(&mut self, at: u64, set: impl Fn(&mut Roce)) -> (u64, Vec<u8>) {
        let mut r = Roce::new(self.src, self.dst, self.sport, self.qp, 0x0A);
        r.payload = 1024;
        r.dma_len = 1024;
        r.psn = self.psn;
        self.psn = (self.psn + 1) & 0xFF_FFFF;
        set(&mut r);
        (at, r.frame())
    }
}

/// Draws scenario `seed`.
pub fn draw(seed: u64) -> Scenario {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9) ^ 0x4791);
    let mut tally = Tally::default();
    let jobs = 1 + rng.below(2) as usize;
    let mut f: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut slow = Vec::new();
    let mut steps_seen = 0;
    // Slow steps of different jobs never overlap (a pause on the link touches every job on
    // it: the truth would be ambiguous).
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let mut end_all = T0;
    let periods = [100 + rng.below(60), 230 + rng.below(80)];
    for (j, &period_ms) in periods.iter().enumerate().take(jobs) {
        let period = period_ms * MS;
        let comm = period * (15 + rng.below(15)) / 100;
        let steps = 30 + rng.below(10);
        let senders = 1 + rng.below(2);
        let dst = ip(&format!("10.70.{j}.100"));
        let mut hosts: Vec<Sender> = (0..senders)
            .map(|h| Sender {
                src: ip(&format!("10.70.{j}.{}", h + 1)),
                dst,
                sport: 0xC000 + (j as u16) * 16 + h as u16,
                qp: 0x100 + (j as u32) * 16 + h as u32,
                psn: 0,
            })
            .collect();
        let job = format!("10.70.{j}.1");
        let mut t = T0 + rng.below(period / MS) * MS;
        for i in 0..steps {
            // A slow step: about one in five, never among the first five (the rhythm needs a
            // few steps to know the typical one) nor the last (its end is not seen).
            let is_slow = i >= 5 && i + 1 < steps && rng.below(5) == 0;
            let extra = if is_slow {
                period * (80 + rng.below(70)) / 100
            } else {
                0
            };
            let len = period + extra;
            let span = (t, t + len);
            let is_slow = is_slow && taken.iter().all(|&(a, b)| span.1 <= a || span.0 >= b);
            let len = if is_slow { len } else { period };
            // A pause of the job's priority holds every job on the link (their bursts would
            // stop too, which the generator does not model): pauses only where one job runs.
            let alone = jobs == 1;
            let causes: Vec<&'static str> = if is_slow {
                match rng.below(7) {
                    0 | 1 => vec![],
                    2 if alone => vec!["pfc_pause"],
                    2 => vec!["retransmission", "lossy_class"],
                    3 => vec!["congestion"],
                    4 => vec!["retransmission"],
                    5 => vec!["lossy_class"],
                    _ if alone => vec!["pfc_pause", "congestion"],
                    _ => vec!["congestion", "retransmission"],
                }
            } else {
                vec![]
            };
            // The burst: two WRITEs a millisecond per sender, the planted causes in it.
            let burst_ms = comm / MS;
            for ms in 0..burst_ms {
                for (h, s) in hosts.iter_mut().enumerate() {
                    for k in 0..2u64 {
                        let at = t + ms * MS + h as u64 * 10_000 + k * 400_000;
                        let ce = causes.contains(&"congestion") && (ms + k) % 3 == 0;
                        let lossy = causes.contains(&"lossy_class") && (ms + k) % 2 == 0;
                        tally.packet(s.dst, ce, lossy);
                        f.push(s.write(at, |r| {
                            if ce {
                                r.ecn = 3;
                            }
                            if lossy {
                                r.dscp = 0;
                            }
                        }));
                    }
                }
            }
            if causes.contains(&"retransmission") {
                // A PSN gap, the receiver's NAK and the sender going back.
                let s = &mut hosts[0];
                let at = t + comm / 2;
                s.psn = (s.psn + 1) & 0xFF_FFFF;
                tally.lost.insert(s.src.to_string());
                for _ in 0..4 {
                    tally.packet(s.dst, false, false);
                }
                tally.packet(s.src, false, false);
                f.push(s.write(at, |_| {}));
                let mut nak = Roce::new(s.dst, s.src, s.sport, s.qp + 0x1000, 0x11);
                nak.syndrome = 0x60;
                nak.psn = s.psn.wrapping_sub(2) & 0xFF_FFFF;
                f.push((at + 50_000, nak.frame()));
                s.psn = s.psn.wrapping_sub(2) & 0xFF_FFFF;
                for k in 0..3 {
                    f.push(s.write(at + 100_000 + k * 10_000, |_| {}));
                }
            }
            if causes.contains(&"pfc_pause") {
                // The step's silence held: all of the extra time, or half of it beside
                // congestion.
                let held = if causes.len() > 1 { extra / 2 } else { extra };
                xoffs(&mut f, JOB_PRIORITY_BIT, t + comm, t + comm + held);
                // Paused from the first XOFF to the last one's end (they come every 200 us).
                let last = held.saturating_sub(1) / 200_000 * 200_000;
                tally.storm |= last + XOFF_NS > STORM_NS;
            }
            if is_slow {
                taken.push(span);
                slow.push(SlowTruth {
                    job: job.clone(),
                    start_ns: t,
                    causes,
                });
            }
            if i + 1 < steps {
                steps_seen += 1;
            }
            t += len;
        }
        end_all = end_all.max(t);
    }
    // The tenant: a light steady flow, with trouble of its own at random times (often in the
    // jobs' slow steps), and pauses of another priority.
    let (a, b) = (ip("10.80.0.1"), ip("10.80.0.2"));
    let mut psn = 0u32;
    let mut t = T0;
    let trouble_at: Vec<u64> = slow
        .iter()
        .map(|s| s.start_ns + 2 * MS)
        .chain((0..4).map(|_| T0 + rng.below((end_all - T0) / MS) * MS))
        .collect();
    while t < end_all {
        let near = trouble_at.iter().any(|&x| t >= x && t < x + 20 * MS);
        let mut w = Roce::new(a, b, 0xC900, 0x900, 0x0A);
        w.payload = 512;
        w.dma_len = 512;
        w.psn = psn;
        psn = (psn + 1) & 0xFF_FFFF;
        if near {
            w.ecn = 3;
            if psn.is_multiple_of(4) {
                w.dscp = 0;
            }
        }
        tally.packet(b, near, near && psn.is_multiple_of(4));
        f.push((t + 300_000, w.frame()));
        t += MS;
    }
    for &x in &trouble_at {
        let mut nak = Roce::new(b, a, 0xC900, 0x901, 0x11);
        nak.syndrome = 0x60;
        f.push((x + 5 * MS, nak.frame()));
        tally.packet(a, false, false);
        // The tenant's data flow loses nothing: its receiver's NAKs are their own incident.
        tally.lost.insert(b.to_string());
        xoffs(&mut f, OTHER_PRIORITY_BIT, x, x + 30 * MS);
    }
    // One scenario in four: a storm of the tenant's priority (300 ms of XOFFs) during the
    // last slow step, or at a random time: its own finding, never a cause of the job's step.
    if rng.below(4) == 0 {
        let at = slow
            .last()
            .map_or(T0 + rng.below((end_all - T0) / MS) * MS, |s| s.start_ns)
            + 5 * MS;
        xoffs(&mut f, OTHER_PRIORITY_BIT, at, at + 300 * MS);
        tally.other_storm = true;
    }
    f.sort_by_key(|(t, _)| *t);
    Scenario {
        frames: f,
        slow,
        steps: steps_seen,
        findings: tally.findings(),
    }
}

/// True and false positives and negatives.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    pub tp: u64,
    pub fp: u64,
    pub fn_: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.tp += o.tp;
        self.fp += o.fp;
        self.fn_ += o.fn_;
    }
    /// 1 where nothing was said (no false positive possible).
    pub fn precision(&self) -> f64 {
        if self.tp + self.fp == 0 {
            1.0
        } else {
            self.tp as f64 / (self.tp + self.fp) as f64
        }
    }
    pub fn recall(&self) -> f64 {
        if self.tp + self.fn_ == 0 {
            1.0
        } else {
            self.tp as f64 / (self.tp + self.fn_) as f64
        }
    }
}

/// What one analysis scored: slow steps, and the causes of the matched ones by kind.
#[derive(Clone, Debug, Default)]
pub struct Score {
    pub slow_steps: Counts,
    pub causes: BTreeMap<&'static str, Counts>,
    /// Matched slow steps whose planted "no cause" came out as `unexplained`.
    pub unexplained: Counts,
    /// The findings besides the slow steps, by kind (what each is about against the truth);
    /// `other` for any other kind said (none is planted).
    pub findings: BTreeMap<&'static str, Counts>,
}

impl Score {
    pub fn add(&mut self, o: &Score) {
        self.slow_steps.add(&o.slow_steps);
        self.unexplained.add(&o.unexplained);
        for (k, c) in &o.causes {
            self.causes.entry(k).or_default().add(c);
        }
        for (k, c) in &o.findings {
            self.findings.entry(k).or_default().add(c);
        }
    }
}

/// A detected step starts within this of the truth's start.
const MATCH_NS: u64 = 3 * MS;
/// A cause counts as named from this share of the extra time on.
const NAMED_SHARE: f64 = 0.05;

/// Scores `report` (`rocemon analyze --format json`) against `truth`.
pub fn score(report: &Value, truth: &Scenario) -> Score {
    let mut s = Score::default();
    for k in CAUSES {
        s.causes.insert(k, Counts::default());
    }
    // Every slow step rocemon reported, with its job.
    let mut said: Vec<(String, u64, Vec<String>)> = Vec::new();
    for j in report["training"]["jobs"].as_array().into_iter().flatten() {
        let job = j["id"]
            .as_str()
            .unwrap_or("")
            .trim_start_matches("job-")
            .to_string();
        for st in j["steps"].as_array().into_iter().flatten() {
            if st["slow"] != true {
                continue;
            }
            let causes = st["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["share"].as_f64().unwrap_or(0.0) >= NAMED_SHARE)
                .filter_map(|c| c["kind"].as_str().map(str::to_string))
                .collect();
            said.push((job.clone(), st["start_ns"].as_u64().unwrap_or(0), causes));
        }
    }
    let mut used = vec![false; said.len()];
    for t in &truth.slow {
        let hit = said.iter().enumerate().position(|(i, (job, start, _))| {
            !used[i] && *job == t.job && start.abs_diff(t.start_ns) <= MATCH_NS
        });
        let Some(i) = hit else {
            s.slow_steps.fn_ += 1;
            continue;
        };
        used[i] = true;
        s.slow_steps.tp += 1;
        let named = &said[i].2;
        for k in CAUSES {
            let c = s.causes.get_mut(k).expect("every kind");
            match (t.causes.contains(&k), named.iter().any(|n| n == k)) {
                (true, true) => c.tp += 1,
                (false, true) => c.fp += 1,
                (true, false) => c.fn_ += 1,
                (false, false) => {}
            }
        }
        let unexplained = named.iter().any(|n| n == "unexplained");
        match (t.causes.is_empty(), unexplained) {
            (true, true) => s.unexplained.tp += 1,
            (false, true) => s.unexplained.fp += 1,
            (true, false) => s.unexplained.fn_ += 1,
            (false, false) => {}
        }
    }
    s.slow_steps.fp += used.iter().filter(|u| !**u).count() as u64;
    s.findings = score_findings(report, truth);
    s
}

/// The first IPv4 address in `text`.
fn first_address(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|w| w.parse::<std::net::Ipv4Addr>().is_ok())
        .map(str::to_string)
}

/// What the report's findings are about, as the truth names it: each incident's subject and
/// the subjects it lists.
fn said_findings(report: &Value) -> BTreeSet<(&'static str, String)> {
    let mut out = BTreeSet::new();
    for f in report["findings"].as_array().into_iter().flatten() {
        let kind = f["kind"].as_str().unwrap_or("?");
        if kind == "slow_step" {
            continue;
        }
        let kind: &'static str = FINDING_KINDS
            .iter()
            .find(|k| **k == kind)
            .copied()
            .unwrap_or("other");
        let mut subjects = vec![f["subject"].as_str().unwrap_or("").to_string()];
        for l in f["evidence"]["listed"].as_array().into_iter().flatten() {
            subjects.push(l.as_str().map_or_else(|| l.to_string(), str::to_string));
        }
        for subject in subjects {
            let about = match kind {
                "congestion" | "cnp_missing" | "retransmissions" => first_address(&subject),
                "other" => Some(format!("{} {subject}", f["kind"].as_str().unwrap_or("?"))),
                _ => Some(subject),
            };
            // An incident's own subject ("3 receivers at once") names nobody: its listed
            // members do.
            if let Some(a) = about {
                out.insert((kind, a));
            }
        }
    }
    out
}

fn score_findings(report: &Value, truth: &Scenario) -> BTreeMap<&'static str, Counts> {
    let said = said_findings(report);
    let mut out: BTreeMap<&'static str, Counts> = FINDING_KINDS
        .iter()
        .map(|k| (*k, Counts::default()))
        .collect();
    out.insert("other", Counts::default());
    for key in said.union(&truth.findings) {
        let c = out.entry(key.0).or_default();
        match (truth.findings.contains(key), said.contains(key)) {
            (true, true) => c.tp += 1,
            (false, true) => c.fp += 1,
            (true, false) => c.fn_ += 1,
            (false, false) => {}
        }
    }
    out
}

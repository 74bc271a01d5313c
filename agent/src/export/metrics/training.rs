//! The training rhythm and the RDMA message sizes (declared in the catalog, `mod.rs`).

use super::{follow, Metrics};
use crate::detect::steps::StepTracker;
use agent_common::message::{MsgOp, MSG_BUCKETS, MSG_BUCKET_SLOTS};
use agent_common::{Hook, HookCounters};

/// Where a rhythm was seen: an interface, or a switch port (agent, ifIndex) of the sFlow
/// collector. The labels of the other kind are empty (absent, to Prometheus).
#[derive(Clone, Copy, Debug)]
pub enum RhythmSource<'a> {
    Iface(&'a str),
    SflowPort { agent: &'a str, ifindex: &'a str },
}

impl std::fmt::Display for RhythmSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RhythmSource::Iface(i) => write!(f, "{i}"),
            RhythmSource::SflowPort { agent, ifindex } => {
                write!(f, "switch {agent} port {ifindex}")
            }
        }
    }
}

impl RhythmSource<'_> {
    fn labels(&self) -> [&str; 3] {
        match *self {
            RhythmSource::Iface(i) => [i, "", ""],
            RhythmSource::SflowPort { agent, ifindex } => ["", agent, ifindex],
        }
    }
}

impl Metrics {
    /// A source's rhythm: the gauges while it has one (removed when it has none: no rhythm,
    /// no period), and its slow steps and lost milliseconds.
    pub fn set_training(&self, src: RhythmSource<'_>, t: &StepTracker) {
        let l = src.labels();
        match t.summary() {
            Some(s) => {
                self.training_period
                    .with_label_values(&l)
                    .set(s.period_seconds);
                self.training_duty.with_label_values(&l).set(s.duty_ratio);
                self.training_step_bytes
                    .with_label_values(&l)
                    .set(s.step_bytes);
            }
            None => {
                for g in [
                    &self.training_period,
                    &self.training_duty,
                    &self.training_step_bytes,
                ] {
                    let _ = g.remove_label_values(&l);
                }
            }
        }
        follow(
            &self.training_slow_steps.with_label_values(&l),
            t.slow_steps,
        );
        if let RhythmSource::Iface(iface) = src {
            follow(
                &self.training_lost.with_label_values(&[iface]),
                t.lost_ms as f64 / 1e3,
            );
        }
    }

    /// The messages a counter block gained since `prev`, into the histogram.
    pub(super) fn observe_messages(
        &self,
        iface: &str,
        hook: Hook,
        cur: &HookCounters,
        prev: &HookCounters,
    ) {
        let d = super::delta;
        for op in MsgOp::ALL {
            let i = op as usize;
            let n = d(cur.messages[i], prev.messages[i]);
            if n == 0 {
                continue;
            }
            let at = i * MSG_BUCKET_SLOTS;
            let counts: Vec<u64> = (at..at + MSG_BUCKETS)
                .map(|b| d(cur.message_buckets[b], prev.message_buckets[b]))
                .collect();
            let sum = d(cur.message_bytes[i], prev.message_bytes[i]) as f64;
            self.message_bytes.add(
                &[iface, hook.direction(), hook.name(), op.name()],
                &counts,
                sum,
            );
        }
    }
}

//! The capture's views beside the flow table: the RoCE timeline, the training rhythm and the
//! trouble between hosts, the pause intervals, the CE/CNP pairing. They read each frame's
//! [`Step`] after the flow table ([`crate::pipeline::flow_side`]) and what it said of a RoCE
//! packet ([`Told`]: whether it began its flow, its PSN trouble), in the same order, on a
//! thread of their own where the machine has one to spare: the pairing and the trouble per
//! host pair were a third of the flow thread's time.

use crate::pipeline::analyze_options::AnalyzeOptions;
use crate::pipeline::flow_side::{Step, Told};
use crate::pipeline::prefetch::prefetch;
use agent_common::Hook;

/// The views' state.
pub struct Views {
    /// RoCE traffic over capture time, and the step rhythm and message sizes.
    pub timeline: crate::pipeline::timeline::Timeline,
    pub training: crate::pipeline::training::Training,
    /// Pause intervals per priority (the union at the link's speed).
    pub pause: crate::detect::pause::PauseTracker,
    /// CE-marked packets paired with their CNPs.
    pub cnp: crate::detect::cnp_response::CnpResponse,
}

impl Views {
    pub fn new(opts: &AnalyzeOptions) -> Views {
        Views {
            timeline: crate::pipeline::timeline::Timeline::new(),
            training: Default::default(),
            pause: crate::detect::pause::PauseTracker::new(opts.link_speed_bps, opts.pfc_storm_ns),
            cnp: crate::detect::cnp_response::CnpResponse::bounded(opts.max_flows),
        }
    }

    /// One frame's step, and what the flow table said of it.
    pub fn step(&mut self, s: &Step, told: &Told) {
        match s {
            Step::Roce { ts_ns, info, len } => {
                let key = info.flow_key(Hook::Xdp);
                self.timeline.record(info, *len, *ts_ns);
                self.training.record(&key, *len, *ts_ns);
                self.cnp.packet(info, &key, *len, *ts_ns, told.created);
                self.training.note(*ts_ns, &key, told.trouble());
            }
            Step::Pause {
                ts_ns,
                control,
                mac,
            } => self.pause.frame(*ts_ns, control, *mac),
            Step::At(_) | Step::Sflow { .. } => {}
        }
    }

    /// A batch of steps with what the flow table said of each. The steps were written on
    /// another core: each is asked for [`AHEAD`] steps before its turn.
    pub fn run_batch(&mut self, batch: &[Step], told: &[Told]) {
        for (i, (s, t)) in batch.iter().zip(told).enumerate() {
            if let Some(next) = batch.get(i + AHEAD) {
                prefetch(next);
            }
            self.step(s, t);
        }
    }
}

/// Steps prefetched ahead of the one in hand (a step is about two cache lines).
const AHEAD: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch gives what its steps one by one give (the prefetch reads past no end).
    #[test]
    fn a_batch_is_its_steps_in_turn() {
        let opts = AnalyzeOptions::default();
        let steps: Vec<Step> = (0..20u64)
            .map(|i| Step::Roce {
                ts_ns: 1_000_000 * i,
                info: agent_common::PacketRecord::default(),
                len: 100,
            })
            .collect();
        let told = vec![Told::default(); steps.len()];
        let (mut one, mut each) = (Views::new(&opts), Views::new(&opts));
        one.run_batch(&steps, &told);
        for (s, t) in steps.iter().zip(&told) {
            each.step(s, t);
        }
        let all = |v: &Views| v.timeline.packets_and_ce(0, u64::MAX);
        assert_eq!(all(&one), all(&each));
        assert_eq!(all(&one).0, 20);
    }
}

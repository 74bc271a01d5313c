//! One findings engine, live and offline. Every source hands it the same kind of
//! [`Window`]: the kernel maps at each poll (`cmd/run`), a capture as a whole
//! (`pipeline::findings`). [`judge`] raises every kind of finding from a window by one rule
//! each; [`Held`] opens, holds and closes them across windows and bounds each kind, so a
//! flood of spoofed subjects is one "more" finding; [`crate::detect::incidents`] ranks them
//! and merges the ones of one incident.
//!
//! Adding a kind: its builder and evidence in [`crate::detect::findings`], its evidence in
//! [`window`], its rule in [`judge`] (plus its runbook entry, alert rule and tests).
pub mod held;
pub mod judge;
pub mod reaction;
pub mod trouble;
pub mod window;

pub use held::Held;
pub use judge::judge;
pub use trouble::{FlowTotals, Trouble};
pub use window::Window;

use crate::detect::findings::Finding;

/// Findings ranked and merged into incidents ([`crate::detect::incidents`]), under the one
/// sentence that sums them up.
#[derive(Clone, Debug, Default)]
pub struct Ranked {
    pub incidents: Vec<Finding>,
    pub verdict: String,
}

/// Ranks `findings`; `steps`: the training steps seen, where a rhythm was found.
pub fn rank(findings: Vec<Finding>, steps: Option<usize>) -> Ranked {
    let incidents = crate::detect::incidents::incidents(findings);
    let verdict = crate::detect::incidents::verdict(&incidents, steps);
    Ranked { incidents, verdict }
}

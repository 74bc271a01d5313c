//! The findings' series (declared in the catalog, `mod.rs`): how many are active by kind and
//! severity, each active one with its subject (bounded as the open findings are), and how many
//! opened by kind.

use super::{follow, Metrics};
use crate::detect::findings::{Severity, KINDS};
use crate::detect::live_findings::LiveFindings;

impl Metrics {
    pub fn set_findings(&self, f: &LiveFindings) {
        let active = f.held.active_counts();
        // Closed findings leave no series behind: the set is written again from the open ones.
        self.active_finding.reset();
        for (kind, severity, subject) in f.held.active_subjects() {
            self.active_finding
                .with_label_values(&[kind, severity, subject])
                .set(1);
        }
        for kind in KINDS {
            for sev in [Severity::Info, Severity::Warning, Severity::Critical] {
                let n = active.get(&(kind, sev.name())).copied().unwrap_or(0);
                self.findings_active
                    .with_label_values(&[kind, sev.name()])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
            follow(
                &self.findings_total.with_label_values(&[kind]),
                f.held.opened.get(kind).copied().unwrap_or(0),
            );
        }
    }
}

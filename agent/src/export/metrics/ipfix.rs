//! The IPFIX exporter's series (declared in the catalog, `mod.rs`): read from the exporter's
//! counters at each scrape, as its thread counts them.

use super::{follow, Metrics};
use crate::export::ipfix::CollectorCounts;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Each collector's label and counts.
pub type Collectors = Vec<(String, Arc<CollectorCounts>)>;

impl Metrics {
    /// The exporter whose counts each scrape reads.
    pub fn attach_ipfix(&mut self, collectors: Collectors) {
        self.ipfix = collectors;
    }

    pub(super) fn set_ipfix(&self) {
        for (label, c) in &self.ipfix {
            for (result, n) in c.by_result() {
                follow(&self.ipfix_records.with_label_values(&[label, result]), n);
            }
            follow(
                &self.ipfix_messages.with_label_values(&[label]),
                c.messages.load(Relaxed),
            );
        }
    }
}

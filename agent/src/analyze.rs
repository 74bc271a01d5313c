//! Offline analysis: capture frames through `agent-common`'s parser, counter block and flow
//! update: exactly what the kernel programs do for live traffic.

use crate::flows::FlowTable;
use crate::sources::capture::{read_capture, CaptureSummary, Frame};
use agent_common::{parse, Hook, HookCounters, SliceReader};
use anyhow::Result;
use std::path::Path;

/// The result of analysing one capture.
pub struct Analysis {
    pub counters: HookCounters,
    pub flows: FlowTable,
    pub summary: CaptureSummary,
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: u64,
}

impl Default for Analysis {
    fn default() -> Self {
        Analysis {
            counters: HookCounters::ZERO,
            flows: FlowTable::new(vec!["capture".into()]),
            summary: CaptureSummary::default(),
            first_ts_ns: None,
            last_ts_ns: 0,
        }
    }
}

impl Analysis {
    /// Counts one frame.
    pub fn frame(&mut self, f: Frame<'_>) {
        let parsed = parse(&SliceReader(f.data), f.link);
        let len = f.orig_len as u64;
        self.counters.record(&parsed, len);
        if let Ok(info) = &parsed {
            // Captures carry no hook; flows are keyed as if seen at XDP.
            self.flows
                .record(0, info.flow_key(Hook::Xdp), info, len, f.ts_ns);
        }
        self.first_ts_ns.get_or_insert(f.ts_ns);
        self.last_ts_ns = f.ts_ns;
    }

    /// Capture span in seconds.
    pub fn duration_seconds(&self) -> f64 {
        self.first_ts_ns
            .map(|t| self.last_ts_ns.saturating_sub(t) as f64 / 1e9)
            .unwrap_or(0.0)
    }
}

/// Analyses a capture file; `progress` receives (bytes read, file size).
pub fn analyze_file(
    path: &Path,
    mut progress: impl FnMut(u64),
) -> Result<Analysis, crate::sources::capture::CaptureError> {
    let mut a = Analysis::default();
    let summary = read_capture(path, &mut progress, |f| a.frame(f))?;
    a.summary = summary;
    a.flows.finish_capture_rates();
    Ok(a)
}

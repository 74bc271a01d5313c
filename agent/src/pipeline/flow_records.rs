//! Flow records: what each flow of the table did, as records for the fleet's flow collectors
//! (the IPFIX exporter in `export::ipfix` encodes and sends them).
//!
//! A pipeline stage that `run` and `analyze` drive alike, after each round of the table (a
//! poll, a capture tick), on the store's own clock (the kernel's monotonic clock, or capture
//! time):
//! - a flow that left the table gives its last record at once, with why
//!   ([`EndReason`]: idle, pushed out of a full table); so do the flows of an interface
//!   that went away;
//! - a flow that goes on gives a record every active timeout (the convention: 60 s) with what
//!   it did since its previous record, if it did anything;
//! - at a stop (the agent's, the capture's end) every flow gives its last record.
//!
//! Per round the work is the records given, not the flows held: flows wait in a queue ordered
//! by when their next record is due. What a flow's previous record carried is kept on its
//! table entry ([`ExportMark`]), so a record is a delta and a flow's records add up to its
//! totals.

use crate::detect::ecmp;
use crate::detect::hash::HashModel;
use crate::pipeline::flow_counts::{EndReason, ExportMark, FlowCounts};
use crate::pipeline::flows::{FlowEntry, FlowTable};
use agent_common::FlowKey;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Seconds between two records of a flow that goes on (the setting's default).
pub const DEFAULT_ACTIVE_TIMEOUT_S: u64 = crate::config::ipfix::DEFAULT_ACTIVE_TIMEOUT_S;

/// One flow record: a flow's counts since its previous record.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowRecord {
    /// Index of the flow's interface in the table's interfaces.
    pub iface: usize,
    pub key: FlowKey,
    /// DSCP of the flow's last packet.
    pub dscp: u8,
    /// The span the counts cover, Unix milliseconds: from the flow's first packet (or its
    /// previous record's end) to its last packet.
    pub start_ms: u64,
    pub end_ms: u64,
    pub reason: EndReason,
    pub counts: FlowCounts,
    /// The ECMP path the configured switch hash model predicts (`None`: no model).
    pub ecmp_path: Option<u32>,
}

/// Where records go: called with each round's records (the exporter's queue).
#[derive(Clone)]
pub struct RecordSink(pub Arc<dyn Fn(Vec<FlowRecord>) + Send + Sync>);

impl std::fmt::Debug for RecordSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordSink")
    }
}

/// What the stage runs with.
#[derive(Clone, Debug)]
pub struct RecordSettings {
    pub active_timeout_ns: u64,
    /// A flow whose last packet is this old when the records stop ended idle (else forced).
    pub idle_timeout_ns: u64,
    pub sink: RecordSink,
}

/// Queue entries below which [`Recorder::compact`] does not bother.
const COMPACT_MIN: usize = 4_096;

/// The stage's state: the queue of flows by when their next record is due.
#[derive(Debug)]
pub struct Recorder {
    settings: RecordSettings,
    due: BinaryHeap<Reverse<(u64, usize, FlowKey)>>,
}

impl Recorder {
    pub fn new(settings: RecordSettings) -> Recorder {
        Recorder {
            settings,
            due: BinaryHeap::new(),
        }
    }

    /// Entries queued for a record: one per flow held, and the entries of flows that left
    /// until they are due or the queue is compacted.
    pub fn queued(&self) -> usize {
        self.due.len()
    }

    /// One round at `now_ns` on the store's clock (`unix_offset_ns` turns it into Unix time):
    /// the last records of the flows that left, the flows created queued, the records that
    /// are due. Hands what it made to the sink.
    pub fn round(
        &mut self,
        table: &mut FlowTable,
        now_ns: u64,
        unix_offset_ns: u64,
        model: Option<&HashModel>,
    ) {
        let mut out = Vec::new();
        let timeout = self.settings.active_timeout_ns.max(1);
        for (e, reason) in table.take_ended() {
            out.push(last_record(&e, reason, unix_offset_ns, model));
        }
        for (iface, key) in table.take_created() {
            let Some(e) = table.get_mut(iface, &key) else {
                continue; // created and gone within the round: its record went out above
            };
            let first = e.stats.first_seen_ns;
            let m = e.export.get_or_insert_with(|| {
                Box::new(ExportMark {
                    counts: FlowCounts::default(),
                    at_ns: first,
                    due_ns: 0,
                })
            });
            if m.due_ns == 0 {
                m.due_ns = first.max(m.at_ns).saturating_add(timeout).max(1);
                self.due.push(Reverse((m.due_ns, iface, key)));
            }
        }
        while let Some(&Reverse((due, iface, key))) = self.due.peek() {
            if due > now_ns {
                break;
            }
            self.due.pop();
            let Some(e) = table.get_mut(iface, &key) else {
                continue; // it left: its last record went out when it did
            };
            let Some(m) = e.export.as_deref().copied() else {
                continue;
            };
            if m.due_ns != due {
                continue; // an older entry of a flow created again under the same key
            }
            let counts = FlowCounts::of(&e.stats);
            let delta = counts.since(&m.counts);
            let mut next = m;
            if delta.packets > 0 {
                out.push(record(
                    e,
                    &m,
                    delta,
                    EndReason::ActiveTimeout,
                    unix_offset_ns,
                    model,
                ));
                next.counts = counts;
                next.at_ns = e.stats.last_seen_ns;
            }
            next.due_ns = now_ns.saturating_add(timeout);
            e.export = Some(Box::new(next));
            self.due.push(Reverse((next.due_ns, iface, key)));
        }
        self.compact(table);
        if !out.is_empty() {
            (self.settings.sink.0)(out);
        }
    }

    /// The queue holds an entry for every flow created within an active timeout, gone or
    /// not: under a flood of short flows (spoofed ones, a port scan) that is the flood's
    /// rate times the timeout, not the table's size. Once it holds more than twice the
    /// table (and [`COMPACT_MIN`]), it is built again from the flows held, one entry each,
    /// so the stage's memory follows the table's bound. Amortised: each rebuild follows at
    /// least as many pushes as the entries it drops.
    fn compact(&mut self, table: &FlowTable) {
        if self.due.len() <= COMPACT_MIN.max(2 * table.len()) {
            return;
        }
        self.due = table
            .iter()
            .filter_map(|e| {
                let m = e.export.as_deref()?;
                (m.due_ns != 0 && m.due_ns != u64::MAX)
                    .then_some(Reverse((m.due_ns, e.iface, e.key)))
            })
            .collect();
    }

    /// Interface `iface` went away: its flows give their last record (forced end). They stay
    /// in the table, marked, so that counts that go on when it comes back (over pinned maps)
    /// are deltas from here and not counted twice.
    pub fn end_iface(
        &mut self,
        table: &mut FlowTable,
        iface: usize,
        now_ns: u64,
        unix_offset_ns: u64,
        model: Option<&HashModel>,
    ) {
        let due = now_ns.saturating_add(self.settings.active_timeout_ns.max(1));
        let mut out = Vec::new();
        for e in table.iter_mut().filter(|e| e.iface == iface) {
            out.push(close(e, EndReason::ForcedEnd, due, unix_offset_ns, model));
            self.due.push(Reverse((due, e.iface, e.key)));
        }
        if !out.is_empty() {
            (self.settings.sink.0)(out);
        }
    }

    /// The records stop at `now_ns` (the agent stops, the capture ends): the flows that left,
    /// then every flow's last record, ended idle if its last packet is an idle timeout old,
    /// else with `reason`. The flows stay in the table, marked as recorded.
    pub fn finish(
        &mut self,
        table: &mut FlowTable,
        now_ns: u64,
        unix_offset_ns: u64,
        model: Option<&HashModel>,
        reason: EndReason,
    ) {
        let mut out: Vec<FlowRecord> = table
            .take_ended()
            .iter()
            .map(|(e, why)| last_record(e, *why, unix_offset_ns, model))
            .collect();
        table.take_created();
        let idle = self.settings.idle_timeout_ns;
        for e in table.iter_mut() {
            let why = if now_ns.saturating_sub(e.stats.last_seen_ns) >= idle {
                EndReason::IdleTimeout
            } else {
                reason
            };
            out.push(close(e, why, u64::MAX, unix_offset_ns, model));
        }
        self.due.clear();
        if !out.is_empty() {
            (self.settings.sink.0)(out);
        }
    }
}

/// A flow that stays in the table gives its last record, and is marked as recorded up to
/// now (its next record, if it goes on, due at `due_ns`).
fn close(
    e: &mut FlowEntry,
    reason: EndReason,
    due_ns: u64,
    unix_offset_ns: u64,
    model: Option<&HashModel>,
) -> FlowRecord {
    let r = last_record(e, reason, unix_offset_ns, model);
    e.export = Some(Box::new(ExportMark {
        counts: FlowCounts::of(&e.stats),
        at_ns: e.stats.last_seen_ns,
        due_ns,
    }));
    r
}

/// A flow's last record: what it did since its previous one (all of it, if it had none).
fn last_record(
    e: &FlowEntry,
    reason: EndReason,
    unix_offset_ns: u64,
    model: Option<&HashModel>,
) -> FlowRecord {
    let mark = e.export.as_deref().copied().unwrap_or(ExportMark {
        counts: FlowCounts::default(),
        at_ns: e.stats.first_seen_ns,
        due_ns: 0,
    });
    let delta = FlowCounts::of(&e.stats).since(&mark.counts);
    record(e, &mark, delta, reason, unix_offset_ns, model)
}

fn record(
    e: &FlowEntry,
    since: &ExportMark,
    counts: FlowCounts,
    reason: EndReason,
    unix_offset_ns: u64,
    model: Option<&HashModel>,
) -> FlowRecord {
    let end_ns = e.stats.last_seen_ns.max(e.stats.first_seen_ns);
    // The first record starts at the flow's first packet; a later one where the previous
    // record ended (the store keeps no time of the first packet after it).
    let start_ns = if since.counts.packets == 0 {
        e.stats.first_seen_ns
    } else {
        since.at_ns
    }
    .min(end_ns);
    let ms = |ns: u64| ns.saturating_add(unix_offset_ns) / 1_000_000;
    FlowRecord {
        iface: e.iface,
        key: e.key,
        dscp: e.stats.dscp,
        start_ms: ms(start_ns),
        end_ms: ms(end_ns),
        reason,
        counts,
        ecmp_path: model.map(|m| m.path(&ecmp::fields(&e.key))),
    }
}

#[cfg(test)]
#[path = "flow_records_tests.rs"]
mod tests;

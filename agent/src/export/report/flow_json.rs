//! The flow list's JSON made on every core: chunks of rows serialized by worker threads, in
//! order, into the one serializer the report is written with.
//!
//! Why: after the last frame the report is the run's serial tail, and the flow list is most
//! of it (a quarter million flows are 200 MB of JSON, which took 0.37 s of a capture's 0.94 s
//! on one core). Each row is serialized by `serde_json` as before ([`to_raw_value`]: the same
//! text, a row at a time) and handed to the report's serializer as a raw value, which it
//! writes as it is. Memory stays bounded: each worker is at most two chunks ahead of the
//! writer.

use super::Flow;
use crate::pipeline::flows::FlowEntry;
use serde::ser::{Error as _, SerializeSeq};
use serde::Serializer;
use serde_json::value::{to_raw_value, RawValue};
use std::sync::mpsc::{sync_channel, Receiver};

/// Rows per chunk: enough that a hand-over costs nothing next to its rows (a row takes
/// microseconds), few enough that the chunks in flight stay a few megabytes.
const CHUNK: usize = 1024;

/// Lists shorter than this are written on the calling thread (threads cost more than they
/// save).
pub const PARALLEL_FROM: usize = 2 * CHUNK;

/// At most this many workers, whatever the machine has.
const MAX_WORKERS: usize = 8;

/// A chunk's rows, serialized.
type Rows = Result<Vec<Box<RawValue>>, String>;

/// Writes `entries` as a JSON array of [`Flow`] rows through `s`, the rows serialized on
/// worker threads (one per core, at most [`MAX_WORKERS`]) in chunks of [`CHUNK`], written in
/// order as they come. The same text as `s.collect_seq` of the rows, for a `serde_json`
/// serializer (other serializers see each row as a raw value). Where no thread can be had,
/// the rows are written on this one.
pub fn serialize_rows<S: Serializer>(entries: &[&FlowEntry], s: S) -> Result<S::Ok, S::Error> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_WORKERS);
    let chunks: Vec<&[&FlowEntry]> = entries.chunks(CHUNK).collect();
    std::thread::scope(|scope| {
        let Some(lanes) = spawn_lanes(scope, &chunks, workers) else {
            return s.collect_seq(entries.iter().map(|e| Flow::from_entry(e)));
        };
        let mut seq = s.serialize_seq(Some(entries.len()))?;
        for k in 0..chunks.len() {
            let rows = lanes[k % workers]
                .recv()
                .map_err(|_| S::Error::custom("a flow list worker ended early"))?
                .map_err(S::Error::custom)?;
            for row in &rows {
                seq.serialize_element(row)?;
            }
        }
        seq.end()
    })
}

/// Worker `w` of `workers` serializes chunks w, w + workers, ...: the writer takes chunk k
/// from lane k % workers, so the rows come out in order. None when a thread could not be
/// had (the workers already started end as their lanes close).
fn spawn_lanes<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    chunks: &[&'scope [&'scope FlowEntry]],
    workers: usize,
) -> Option<Vec<Receiver<Rows>>> {
    let mut lanes = Vec::with_capacity(workers);
    for w in 0..workers {
        let (tx, rx) = sync_channel::<Rows>(1);
        let mine: Vec<&[&FlowEntry]> = chunks.iter().skip(w).step_by(workers).copied().collect();
        std::thread::Builder::new()
            .name("analyze-json".into())
            .spawn_scoped(scope, move || {
                for chunk in mine {
                    if tx.send(rows(chunk)).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        lanes.push(rx);
    }
    Some(lanes)
}

/// One chunk's rows, each serialized as `serde_json` writes a [`Flow`].
fn rows(chunk: &[&FlowEntry]) -> Rows {
    chunk
        .iter()
        .map(|e| to_raw_value(&Flow::from_entry(e)).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::report::build::flow_list;
    use crate::pipeline::flows::FlowTable;
    use agent_common::{FlowKey, FlowStats};

    /// A table of `n` flows, IPv4 and IPv6, with counts, times and classes that differ.
    fn table(n: u32) -> FlowTable {
        let mut t = FlowTable::new(vec!["a".into()]);
        for i in 0..n {
            let v6 = i % 7 == 0;
            let mut src = [0u8; 16];
            src[..4].copy_from_slice(&(0x0a00_0000 + i * 37).to_be_bytes());
            if v6 {
                src[15] = (i % 251) as u8;
                src[0] = 0xfd;
            }
            let mut dst = [0u8; 16];
            dst[..4].copy_from_slice(&[10, 250, (i % 3) as u8, 1]);
            let key = FlowKey {
                ip_version: if v6 { 6 } else { 4 },
                src,
                dst,
                sport: (0xc000 + i % 16_000) as u16,
                dest_qp: i * 13 + 1,
                ..FlowKey::default()
            };
            let stats = FlowStats {
                packets: u64::from(i % 97) + 1,
                bytes: u64::from(i) * 1_013 + 60,
                first_seen_ns: 1_700_000_000_000_000_000 + u64::from(i) * 1_000,
                last_seen_ns: 1_700_000_000_000_000_000 + u64::from(i) * 3_331,
                ecn_ce: u64::from(i % 5),
                main_class: (i % 7) as u8,
                last_psn: i * 3,
                ..FlowStats::default()
            };
            t.update(0, key, stats);
        }
        t
    }

    /// What `serde_json` writes for the rows one by one on this thread.
    fn serial(t: &FlowTable) -> String {
        let rows: Vec<Flow> = flow_list(t).iter().collect();
        serde_json::to_string(&rows).unwrap()
    }

    #[test]
    fn rows_written_on_every_core_are_the_rows_in_order() {
        // Several chunks, the last one short.
        let t = table(5 * CHUNK as u32 + 17);
        let list = flow_list(&t);
        assert!(list.len() >= PARALLEL_FROM);
        let parallel = serde_json::to_string(&list).unwrap();
        assert_eq!(parallel, serial(&t));
    }

    #[test]
    fn the_list_written_beside_the_judging_is_the_same_text() {
        let t = table(3 * CHUNK as u32 + 5);
        let json = flow_list(&t).to_json().unwrap();
        assert_eq!(json.get(), serial(&t));
    }

    #[test]
    fn a_short_list_is_the_same_text() {
        let t = table(PARALLEL_FROM as u32 - 1);
        assert_eq!(serde_json::to_string(&flow_list(&t)).unwrap(), serial(&t));
    }

    /// A writer that fails once it has taken `room` bytes (a closed pipe).
    struct Closing {
        room: usize,
    }

    impl std::io::Write for Closing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room < buf.len() {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.room -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_ends_the_workers_and_says_so() {
        let t = table(8 * CHUNK as u32);
        let r = serde_json::to_writer(Closing { room: 100_000 }, &flow_list(&t));
        assert!(r.is_err_and(|e| e.is_io()));
    }
}

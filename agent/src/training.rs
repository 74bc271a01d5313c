//! What a training job's traffic looks like in a capture: the step rhythm (RoCE bytes in 1 ms
//! buckets through [`crate::detect::rhythm`]) and the RDMA message sizes: the DMA length of
//! RDMA WRITE and READ requests (RETH), and SEND messages (the payloads of FIRST..LAST, or
//! ONLY).

use crate::detect::rhythm::{self, Rhythm, Series};
use agent_common::opcode::{class, ext_layout, OpClass};
use agent_common::{FlowKey, Hook, RoceInfo};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// The series kept: ten minutes of 1 ms buckets (80 KB per minute).
const SERIES_BUCKETS: usize = 600_000;
/// The rhythm is looked for in the last minute of it (autocorrelation cost).
const RHYTHM_WINDOW: usize = 60_000;
/// SEND messages in flight per flow, at most (a flow table of its own, bounded).
const MAX_PARTIAL: usize = 65_536;

/// Messages of one operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Messages {
    pub messages: u64,
    pub bytes: u64,
}

/// The training view of a capture.
#[derive(Clone, Debug)]
pub struct Training {
    pub series: Series,
    pub write: Messages,
    pub read: Messages,
    pub send: Messages,
    partial: FxHashMap<FlowKey, u64>,
}

impl Default for Training {
    fn default() -> Self {
        Training {
            series: Series::new(SERIES_BUCKETS),
            write: Messages::default(),
            read: Messages::default(),
            send: Messages::default(),
            partial: FxHashMap::default(),
        }
    }
}

/// The payload bytes of a packet: the datagram less UDP, BTH, extension headers, pad, ICRC.
fn payload(info: &RoceInfo) -> u64 {
    let ext = u64::from(ext_layout(info.bth.opcode).len);
    u64::from(info.udp_len)
        .saturating_sub(8 + 12 + 4)
        .saturating_sub(ext)
        .saturating_sub(u64::from(info.bth.pad_count))
}

impl Training {
    /// Adds one RoCE packet of `len` wire bytes at `ts_ns`.
    pub fn record(&mut self, info: &RoceInfo, len: u64, ts_ns: u64) {
        self.series.add(ts_ns, len);
        let op = info.bth.opcode;
        match class(op) {
            OpClass::Write | OpClass::ReadRequest => {
                if let Some(dma) = info.reth_dma_len {
                    let m = if class(op) == OpClass::Write {
                        &mut self.write
                    } else {
                        &mut self.read
                    };
                    m.messages += 1;
                    m.bytes = m.bytes.saturating_add(u64::from(dma));
                }
            }
            OpClass::Send => {
                let key = info.flow_key(Hook::Xdp);
                let p = payload(info);
                match op & 0x1F {
                    // FIRST
                    0x00 => {
                        if self.partial.len() < MAX_PARTIAL || self.partial.contains_key(&key) {
                            self.partial.insert(key, p);
                        }
                    }
                    // MIDDLE
                    0x01 => {
                        if let Some(v) = self.partial.get_mut(&key) {
                            *v = v.saturating_add(p);
                        }
                    }
                    // LAST, LAST with immediate, LAST with invalidate
                    0x02 | 0x03 | 0x16 => {
                        if let Some(v) = self.partial.remove(&key) {
                            self.send.messages += 1;
                            self.send.bytes = self.send.bytes.saturating_add(v.saturating_add(p));
                        }
                    }
                    // ONLY (with immediate, with invalidate); UD's SEND ONLY
                    _ => {
                        self.send.messages += 1;
                        self.send.bytes = self.send.bytes.saturating_add(p);
                    }
                }
            }
            _ => {}
        }
    }

    /// The rhythm over the last minute of the series.
    pub fn rhythm(&self) -> Rhythm {
        let b = &self.series.buckets;
        let from = b.len().saturating_sub(RHYTHM_WINDOW);
        let tail = Series {
            start_ns: self.series.start_ns + from as u64 * rhythm::BUCKET_NS,
            buckets: b[from..].to_vec(),
            ..Series::default()
        };
        rhythm::detect(&tail)
    }

    /// The messages as reported: `[{op, messages, bytes}]`.
    pub fn messages(&self) -> Vec<MessageReport> {
        [
            ("rdma_write", self.write),
            ("rdma_read", self.read),
            ("send", self.send),
        ]
        .into_iter()
        .map(|(op, m)| MessageReport {
            op,
            messages: m.messages,
            bytes: m.bytes,
        })
        .collect()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct MessageReport {
    pub op: &'static str,
    pub messages: u64,
    pub bytes: u64,
}

/// The table's lines: the rhythm (or that there is none) and the message sizes.
pub fn table(s: &mut String, r: &Rhythm, messages: &[MessageReport]) {
    use std::fmt::Write as _;
    match (r.period_seconds, r.duty_ratio) {
        (Some(p), Some(d)) => {
            let _ = writeln!(
                s,
                "Training    period {:.1} ms, communication {:.0}% of a step, {} steps ({} slow)",
                p * 1e3,
                d * 100.0,
                r.steps.len(),
                r.slow_steps
            );
        }
        _ => {
            let _ = writeln!(s, "Training    no step rhythm");
        }
    }
    let parts: Vec<String> = messages
        .iter()
        .filter(|m| m.messages > 0)
        .map(|m| {
            format!(
                "{} {} (mean {})",
                m.op,
                m.messages,
                crate::report::human_bytes(m.bytes as f64 / m.messages as f64)
            )
        })
        .collect();
    if !parts.is_empty() {
        let _ = writeln!(s, "Messages    {}", parts.join("  "));
    }
}

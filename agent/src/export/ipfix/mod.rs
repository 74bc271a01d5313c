//! Flow records for the fleet's flow collectors: IPFIX (RFC 7011) over UDP, TCP or into a
//! file (RFC 5655), for nfacctd, GoFlow2, Akvorado, ntopng and the pipelines behind them.
//!
//! The pipeline's flow-record stage ([`crate::pipeline::flow_records`]) decides what to
//! record and when; this room encodes ([`elements`], [`message`]) and sends ([`link`]). The
//! sending runs on a thread of its own behind a bounded queue: a live agent hands a poll's
//! records over and goes on (a full queue drops them, counted), so a slow or gone collector
//! never holds up counting or scraping; `analyze` waits for the queue instead (a file has no
//! hurry, and a capture's records should all arrive).

pub mod elements;
mod link;
pub mod message;

pub use crate::config::ipfix::{Destination, IpfixSettings};
use crate::pipeline::flow_records::{FlowRecord, RecordSink};
use anyhow::{Context, Result};
use link::Link;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What happened to the records of one collector, since the exporter started.
#[derive(Debug, Default)]
pub struct CollectorCounts {
    pub sent: AtomicU64,
    /// Dropped before the thread saw them: the queue was full.
    pub queue_full: AtomicU64,
    /// A send or write failed.
    pub send_failed: AtomicU64,
    /// A TCP collector was not connected.
    pub collector_down: AtomicU64,
    /// Messages written (templates and data).
    pub messages: AtomicU64,
}

impl CollectorCounts {
    /// Records by result, as `rocemon_ipfix_records_total` labels them.
    pub fn by_result(&self) -> [(&'static str, u64); 4] {
        [
            ("sent", self.sent.load(Relaxed)),
            ("queue_full", self.queue_full.load(Relaxed)),
            ("send_failed", self.send_failed.load(Relaxed)),
            ("collector_down", self.collector_down.load(Relaxed)),
        ]
    }
}

enum Msg {
    Records(Vec<FlowRecord>),
    Stop,
}

/// The exporter: its thread and the queue to it.
pub struct Exporter {
    tx: SyncSender<Msg>,
    in_flight: Arc<AtomicUsize>,
    /// Per destination, in the settings' order.
    pub collectors: Vec<(String, Arc<CollectorCounts>)>,
    queue_records: usize,
    handle: Option<JoinHandle<()>>,
}

/// Batches the channel holds; records are bounded by `queue_records` besides.
const BATCHES: usize = 64;

impl Exporter {
    /// Opens every destination and starts the thread. `ifindex`: each of the pipeline's
    /// interfaces' index (0 where unknown).
    pub fn start(s: &IpfixSettings, ifindex: Vec<u32>) -> Result<Exporter> {
        let encoder = message::Encoder::new(
            s.observation_domain,
            s.enterprise,
            s.max_message_bytes,
            ifindex,
        );
        let mut links = Vec::new();
        let mut collectors = Vec::new();
        for d in &s.destinations {
            let counts = Arc::new(CollectorCounts::default());
            let link = Link::open(d.clone(), s.template_refresh, counts.clone())
                .with_context(|| format!("open the IPFIX destination {d}"))?;
            collectors.push((d.to_string(), counts));
            links.push(link);
        }
        let (tx, rx) = sync_channel::<Msg>(BATCHES);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let flight = in_flight.clone();
        let idle_every = Duration::from_millis(500);
        let handle = std::thread::Builder::new()
            .name("rocemon-ipfix".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(idle_every) {
                        Ok(Msg::Records(r)) => {
                            for l in &mut links {
                                l.send(&r, &encoder);
                            }
                            flight.fetch_sub(r.len(), Relaxed);
                        }
                        Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                        Err(RecvTimeoutError::Timeout) => {
                            for l in &mut links {
                                l.idle(&encoder);
                            }
                        }
                    }
                }
                for l in &mut links {
                    l.close();
                }
            })
            .context("start the IPFIX exporter thread")?;
        Ok(Exporter {
            tx,
            in_flight,
            collectors,
            queue_records: s.queue_records,
            handle: Some(handle),
        })
    }

    /// The live agent's sink: hands records to the thread, or drops them (counted) when the
    /// queue is full. Never waits.
    pub fn sink(&self) -> RecordSink {
        let (tx, in_flight, cap) = (self.tx.clone(), self.in_flight.clone(), self.queue_records);
        let counts: Vec<Arc<CollectorCounts>> =
            self.collectors.iter().map(|(_, c)| c.clone()).collect();
        RecordSink(Arc::new(move |mut records: Vec<FlowRecord>| {
            let dropped = |n: usize| {
                for c in &counts {
                    c.queue_full.fetch_add(n as u64, Relaxed);
                }
            };
            // What fits goes; the rest of the batch is dropped (one poll is the only
            // producer, so the room read here is the room there is).
            let room = cap.saturating_sub(in_flight.load(Relaxed));
            if records.len() > room {
                dropped(records.len() - room);
                records.truncate(room);
            }
            let n = records.len();
            if n == 0 {
                return;
            }
            in_flight.fetch_add(n, Relaxed);
            if tx.try_send(Msg::Records(records)).is_err() {
                in_flight.fetch_sub(n, Relaxed);
                dropped(n);
            }
        }))
    }

    /// `analyze`'s sink: waits while the queue is full (a capture's records all go).
    pub fn waiting_sink(&self) -> RecordSink {
        let (tx, in_flight) = (self.tx.clone(), self.in_flight.clone());
        RecordSink(Arc::new(move |records: Vec<FlowRecord>| {
            in_flight.fetch_add(records.len(), Relaxed);
            let _ = tx.send(Msg::Records(records));
        }))
    }

    /// Records queued and not yet sent.
    pub fn queued(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    /// Sends what is queued, closes every destination, ends the thread.
    pub fn finish(mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                log::error!("the IPFIX exporter thread panicked");
            }
        }
    }
}

#[cfg(test)]
#[path = "exporter_tests.rs"]
mod tests;

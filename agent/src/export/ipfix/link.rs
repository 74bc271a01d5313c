//! One collector as the exporter thread keeps it: its transport session (UDP, TCP or a file),
//! its sequence number, when it needs the templates, and what happened to each record.
//!
//! - UDP: templates before the first data, again every refresh interval (RFC 7011 8.4), and
//!   before the first data after a failed send (a collector that was gone and comes back
//!   learns the templates first). A failed datagram loses its records only.
//! - TCP: a new session (sequence from 0, templates first) at each connect; a failed write
//!   ends the session (a stream cut inside a message cannot go on), and the exporter tries
//!   again every [`RECONNECT`]; meanwhile records are dropped and counted.
//! - A file (RFC 5655): the templates once, then the data messages.

use super::message::Encoder;
use super::{CollectorCounts, Destination};
use crate::pipeline::flow_records::FlowRecord;
use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a TCP collector that is gone waits before the next connect.
pub const RECONNECT: Duration = Duration::from_secs(2);
/// A connect or a write that takes longer has failed (the exporter thread must not hang on
/// one collector: the others wait behind it).
const IO_TIMEOUT: Duration = Duration::from_secs(2);

enum Conn {
    Udp(UdpSocket),
    Tcp(Option<TcpStream>),
    File(std::io::BufWriter<std::fs::File>),
}

pub struct Link {
    pub dest: Destination,
    conn: Conn,
    seq: u32,
    templates_due: bool,
    templates_at: Option<Instant>,
    refresh: Duration,
    retry_at: Instant,
    /// Failing now: one log line when it starts, one when it ends.
    failing: bool,
    pub counts: Arc<CollectorCounts>,
}

fn export_time() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

impl Link {
    /// Opens the collector's transport (a UDP socket, a file; TCP connects at its first
    /// records).
    pub fn open(
        dest: Destination,
        refresh: Duration,
        counts: Arc<CollectorCounts>,
    ) -> std::io::Result<Link> {
        let conn = match &dest {
            Destination::Udp(addr) => {
                let bind = if addr.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                };
                let s = UdpSocket::bind(bind)?;
                s.connect(addr)?;
                Conn::Udp(s)
            }
            Destination::Tcp(_) => Conn::Tcp(None),
            Destination::File(path) => {
                Conn::File(std::io::BufWriter::new(std::fs::File::create(path)?))
            }
        };
        Ok(Link {
            dest,
            conn,
            seq: 0,
            templates_due: true,
            templates_at: None,
            refresh,
            retry_at: Instant::now(),
            failing: false,
            counts,
        })
    }

    /// Sends `records`, as many messages as they take.
    pub fn send(&mut self, records: &[FlowRecord], enc: &Encoder) {
        let now = Instant::now();
        if !self.connected(now) {
            self.counts
                .collector_down
                .fetch_add(records.len() as u64, Relaxed);
            return;
        }
        self.refresh_due(now);
        let mut at = 0;
        while at < records.len() {
            let (m, used) =
                enc.message(&records[at..], export_time(), self.seq, self.templates_due);
            at += used;
            match self.write(&m) {
                Ok(()) => {
                    self.seq = self.seq.wrapping_add(used as u32);
                    self.counts.sent.fetch_add(used as u64, Relaxed);
                    self.delivered(now);
                }
                Err(e) => {
                    self.failed(&e);
                    if matches!(self.conn, Conn::Tcp(_)) {
                        // The session is over: the rest of the batch goes with it.
                        let lost = used + (records.len() - at);
                        self.counts.send_failed.fetch_add(lost as u64, Relaxed);
                        return;
                    }
                    self.counts.send_failed.fetch_add(used as u64, Relaxed);
                }
            }
        }
    }

    /// No records for a while: templates when their refresh is due (UDP), a connect when a
    /// TCP collector was gone (templates first once it is back).
    pub fn idle(&mut self, enc: &Encoder) {
        let now = Instant::now();
        if !self.connected(now) {
            return;
        }
        self.refresh_due(now);
        if self.templates_due {
            let m = enc.templates_message(export_time(), self.seq);
            match self.write(&m) {
                Ok(()) => self.delivered(now),
                Err(e) => self.failed(&e),
            }
        }
    }

    /// Writes what is buffered (a file) and ends the session.
    pub fn close(&mut self) {
        if let Conn::File(f) = &mut self.conn {
            if let Err(e) = f.flush() {
                log::warn!("IPFIX file {}: {e}", self.dest);
            }
        }
    }

    /// Whether the transport can take a message now (a TCP collector connected).
    fn connected(&mut self, now: Instant) -> bool {
        let Conn::Tcp(stream) = &mut self.conn else {
            return true;
        };
        if stream.is_some() {
            return true;
        }
        if now < self.retry_at {
            return false;
        }
        let Destination::Tcp(addr) = &self.dest else {
            return false;
        };
        match TcpStream::connect_timeout(addr, IO_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_write_timeout(Some(IO_TIMEOUT));
                let _ = s.set_nodelay(true);
                *stream = Some(s);
                // A new transport session: its own sequence, the templates first.
                self.seq = 0;
                self.templates_due = true;
                log::info!("IPFIX collector {} connected", self.dest);
                self.failing = false;
                true
            }
            Err(e) => {
                self.retry_at = now + RECONNECT;
                if !self.failing {
                    log::warn!(
                        "IPFIX collector {} cannot be reached ({e}); its records are dropped (rocemon_ipfix_records_total{{result=\"collector_down\"}}) until it is back",
                        self.dest
                    );
                    self.failing = true;
                }
                false
            }
        }
    }

    fn refresh_due(&mut self, now: Instant) {
        if matches!(self.conn, Conn::Udp(_))
            && self
                .templates_at
                .is_none_or(|t| now.duration_since(t) >= self.refresh)
        {
            self.templates_due = true;
        }
    }

    fn write(&mut self, m: &[u8]) -> std::io::Result<()> {
        let r = match &mut self.conn {
            Conn::Udp(s) => s.send(m).map(|_| ()),
            Conn::Tcp(Some(s)) => s.write_all(m),
            Conn::Tcp(None) => Err(std::io::ErrorKind::NotConnected.into()),
            Conn::File(f) => f.write_all(m),
        };
        if r.is_ok() {
            self.counts.messages.fetch_add(1, Relaxed);
        }
        r
    }

    fn delivered(&mut self, now: Instant) {
        if self.templates_due {
            self.templates_due = false;
            self.templates_at = Some(now);
        }
        if self.failing {
            log::info!("IPFIX collector {} takes records again", self.dest);
            self.failing = false;
        }
    }

    fn failed(&mut self, e: &std::io::Error) {
        // What was lost may have been the templates, or the collector restarted: it gets
        // them again before the next data.
        self.templates_due = true;
        if let Conn::Tcp(stream) = &mut self.conn {
            *stream = None;
            self.retry_at = Instant::now() + RECONNECT;
        }
        if !self.failing {
            log::warn!(
                "IPFIX collector {}: {e}; records that could not be sent are counted in rocemon_ipfix_records_total{{result=\"send_failed\"}}",
                self.dest
            );
            self.failing = true;
        }
    }
}

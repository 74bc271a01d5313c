//! The live sFlow receiver: one UDP socket read by a thread of its own, in batches
//! (`recvmmsg`: one system call for up to [`BATCH`] datagrams), every datagram into the shared
//! [`Collector`]. The socket's receive buffer is bounded (the kernel drops from it when the
//! collector falls behind; those drops are read back and exported), so the thread never
//! waits for the collector while datagrams arrive: when a poll holds the collector (the
//! exporters read it), what arrives meanwhile waits in a backlog of its own, up to
//! [`BACKLOG_BYTES`], and goes in as soon as the collector is free. A poll's few milliseconds
//! every second then cost CPU, never datagrams.

use super::collector::Collector;
pub use crate::config::sflow::{SflowSettings, DEFAULT_RECEIVE_BUFFER};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

/// Datagrams read per system call at most.
pub const BATCH: usize = 32;
/// The most a UDP datagram carries: no datagram is cut.
const DATAGRAM_MAX: usize = 65_536;
/// Datagrams held while the collector is busy, in bytes (about 11,000 datagrams of 1,400
/// bytes: a quarter of a second at 50,000 per second); past it the thread waits for the
/// collector and the socket's buffer fills.
pub const BACKLOG_BYTES: usize = 16 << 20;
/// How long the thread waits for a datagram or the collector when the socket is empty and the
/// collector busy (a poll holds it for milliseconds).
const BUSY_WAIT_MS: i32 = 1;
/// The backlog's room kept between waits, in bytes.
const BACKLOG_KEPT: usize = 1 << 20;
/// How long a receive waits before the thread looks whether it is to stop.
const WAKE_EVERY: Duration = Duration::from_millis(100);

/// A running receiver.
pub struct Receiver {
    pub collector: Arc<Mutex<Collector>>,
    pub local: SocketAddr,
    socket: Arc<std::net::UdpSocket>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Receive errors other than drops.
    pub errors: Arc<AtomicU64>,
}

impl Receiver {
    /// Binds the socket (a taken address fails here, before anything else starts) and starts
    /// receiving.
    pub fn start(s: &SflowSettings) -> Result<Receiver> {
        let socket = std::net::UdpSocket::bind(s.listen)
            .with_context(|| format!("bind the sFlow listener {}", s.listen))?;
        socket
            .set_read_timeout(Some(WAKE_EVERY))
            .context("set the sFlow socket's receive timeout")?;
        let got = set_receive_buffer(socket.as_raw_fd(), s.receive_buffer_bytes);
        if got < s.receive_buffer_bytes {
            log::warn!(
                "the sFlow socket's receive buffer is {got} bytes, not the {} asked for: \
                 raise net.core.rmem_max, or run with CAP_NET_ADMIN",
                s.receive_buffer_bytes
            );
        }
        let local = socket.local_addr()?;
        let socket = Arc::new(socket);
        let collector = Arc::new(Mutex::new(Collector::new(s.limits.clone())));
        let errors = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (sock, c, e, stop) = (
                socket.clone(),
                collector.clone(),
                errors.clone(),
                stop.clone(),
            );
            std::thread::Builder::new()
                .name("sflow-rx".into())
                .spawn(move || receive(&sock, &c, &e, &stop))
                .context("start the sFlow receiver thread")?
        };
        log::info!("receiving sFlow on udp://{local}");
        Ok(Receiver {
            collector,
            local,
            socket,
            stop,
            thread: Some(thread),
            errors,
        })
    }

    /// Datagrams the kernel dropped because the receive buffer was full (SO_MEMINFO).
    pub fn dropped(&self) -> u64 {
        // SK_MEMINFO_DROPS is the ninth value.
        let mut v = [0u32; 9];
        let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
        // SAFETY: a buffer of `len` bytes for the kernel to fill; the socket lives as long as
        // `self`.
        let r = unsafe {
            libc::getsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MEMINFO,
                v.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 && len as usize >= std::mem::size_of_val(&v) {
            u64::from(v[8])
        } else {
            0
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // Within one receive timeout.
            let _ = t.join();
        }
    }
}

/// Sets the receive buffer: SO_RCVBUFFORCE first (past `net.core.rmem_max`; the agent runs
/// with CAP_NET_ADMIN), else SO_RCVBUF. Returns the size the kernel took (it reports double,
/// for its bookkeeping; halved here to compare with what was asked).
fn set_receive_buffer(fd: RawFd, bytes: usize) -> usize {
    let size = bytes.min(i32::MAX as usize) as libc::c_int;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: a valid socket and a c_int option value.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                len,
            )
        };
        if r == 0 {
            break;
        }
    }
    let mut got: libc::c_int = 0;
    let mut got_len = len;
    // SAFETY: a c_int for the kernel to fill.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut libc::c_int).cast(),
            &mut got_len,
        )
    };
    if r == 0 {
        usize::try_from(got).unwrap_or(0) / 2
    } else {
        0
    }
}

/// Datagrams received and not yet in the collector, one after another.
#[derive(Default)]
struct Backlog {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Backlog {
    fn push(&mut self, d: &[u8]) {
        self.bytes.extend_from_slice(d);
        self.ends.push(self.bytes.len());
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.bytes[a..b])
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

/// The receiver thread: batches from the socket into the backlog, the backlog into the
/// collector whenever it is free (or waiting for it once the backlog is full), until `stop`.
fn receive(
    sock: &std::net::UdpSocket,
    c: &Mutex<Collector>,
    errors: &AtomicU64,
    stop: &AtomicBool,
) {
    let mut batch = Batch::new();
    let mut backlog = Backlog::default();
    // The collector's clock (idle entries): time since the receiver started.
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // Wait on the socket (up to WAKE_EVERY) only when nothing waits to go in.
        let waiting = !backlog.ends.is_empty();
        let got = match batch.recv(sock.as_raw_fd(), !waiting) {
            Ok(n) => {
                for d in batch.datagrams(n) {
                    backlog.push(d);
                }
                n
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            Err(e) => {
                errors.fetch_add(1, Ordering::Relaxed);
                log::debug!("sFlow receive: {e}");
                // Not a busy loop on a lasting error.
                std::thread::sleep(Duration::from_millis(10));
                0
            }
        };
        if backlog.ends.is_empty() {
            continue;
        }
        let guard = if backlog.bytes.len() >= BACKLOG_BYTES {
            c.lock().ok()
        } else {
            match c.try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::WouldBlock) => {
                    if got == 0 {
                        // The socket is empty and the collector busy: a short wait for
                        // either.
                        wait_readable(sock.as_raw_fd(), BUSY_WAIT_MS);
                    }
                    continue;
                }
                Err(TryLockError::Poisoned(_)) => None,
            }
        };
        if let Some(mut c) = guard {
            let now_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            for d in backlog.iter() {
                c.datagram(d, now_ns);
            }
        }
        // A poisoned collector (a panic elsewhere) takes nothing more: not held forever.
        backlog.clear();
        // A long wait's backlog is not kept as memory once it is worked off.
        backlog.bytes.shrink_to(BACKLOG_KEPT);
        backlog.ends.shrink_to(BACKLOG_KEPT / 64);
    }
}

/// Waits until the socket has a datagram or `ms` milliseconds passed.
fn wait_readable(fd: RawFd, ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// Buffers and headers for one `recvmmsg`.
struct Batch {
    bufs: Vec<Vec<u8>>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new() -> Batch {
        // Pages are touched only as far as datagrams fill them.
        let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; DATAGRAM_MAX]).collect();
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let msgs = iovs
            .iter_mut()
            .map(|iov| {
                // SAFETY: msghdr is plain data; zero is its empty value.
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_iov = iov;
                h.msg_iovlen = 1;
                libc::mmsghdr {
                    msg_hdr: h,
                    msg_len: 0,
                }
            })
            .collect();
        Batch { bufs, iovs, msgs }
    }

    /// Takes up to [`BATCH`] datagrams: with `wait`, waits for the first (up to the socket's
    /// timeout) and takes what else is there without waiting; else takes what is there.
    /// Returns how many.
    fn recv(&mut self, fd: RawFd, wait: bool) -> std::io::Result<usize> {
        debug_assert_eq!(self.iovs.len(), self.msgs.len());
        let flags = if wait {
            libc::MSG_WAITFORONE
        } else {
            libc::MSG_DONTWAIT
        };
        // SAFETY: `msgs` holds BATCH headers whose buffers live in `self.bufs`.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
    }

    /// The first `n` datagrams received.
    fn datagrams(&self, n: usize) -> impl Iterator<Item = &[u8]> {
        self.msgs
            .iter()
            .zip(&self.bufs)
            .take(n)
            .map(|(m, b)| &b[..(m.msg_len as usize).min(b.len())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(receive_buffer_bytes: usize) -> SflowSettings {
        SflowSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            receive_buffer_bytes,
            limits: Default::default(),
        }
    }

    /// An sFlow v5 datagram of no samples from 192.0.2.1, sequence `seq`.
    fn datagram(seq: u32) -> Vec<u8> {
        let mut d = Vec::new();
        for w in [5u32, 1, 0xC000_0201, 0, seq, 1000, 0] {
            d.extend_from_slice(&w.to_be_bytes());
        }
        d
    }

    fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ok() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn every_datagram_reaches_the_collector() {
        let r = Receiver::start(&settings(DEFAULT_RECEIVE_BUFFER)).unwrap();
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for seq in 1..=100 {
            s.send_to(&datagram(seq), r.local).unwrap();
        }
        wait_for("100 datagrams", || {
            r.collector.lock().unwrap().datagrams == 100
        });
        assert_eq!(r.dropped(), 0);
    }

    /// A poll holding the collector for a second while 500 datagrams arrive (two every 4 ms;
    /// the smallest receive buffer holds about a hundred): none is lost, all go in after.
    #[test]
    fn datagrams_arriving_while_the_collector_is_held_wait_and_are_not_lost() {
        let r = Receiver::start(&settings(65_536)).unwrap();
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let held = r.collector.lock().unwrap();
        for seq in 1..=500u32 {
            s.send_to(&datagram(seq), r.local).unwrap();
            if seq % 2 == 0 {
                std::thread::sleep(Duration::from_millis(4));
            }
        }
        assert_eq!(held.datagrams, 0, "nothing went in while it was held");
        drop(held);
        wait_for("500 datagrams in or dropped", || {
            r.collector.lock().unwrap().datagrams + r.dropped() >= 500
        });
        assert_eq!(r.dropped(), 0, "the socket dropped none");
        assert_eq!(r.collector.lock().unwrap().datagrams, 500);
        assert_eq!(r.collector.lock().unwrap().lost_datagrams(), 0);
    }

    #[test]
    fn a_stopped_receiver_frees_its_port() {
        let r = Receiver::start(&settings(DEFAULT_RECEIVE_BUFFER)).unwrap();
        let local = r.local;
        drop(r);
        let again = std::net::UdpSocket::bind(local);
        assert!(again.is_ok(), "{again:?}");
    }
}

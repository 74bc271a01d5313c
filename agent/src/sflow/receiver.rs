//! The live sFlow receiver: one UDP socket (a bounded receive buffer the kernel drops from
//! when the collector falls behind; those drops are read back and exported), every datagram
//! into the shared [`Collector`].

use super::collector::Collector;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

/// The validated `[sflow]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SflowSettings {
    pub listen: SocketAddr,
    /// The socket's receive buffer (SO_RCVBUF; the kernel doubles it for its bookkeeping).
    pub receive_buffer_bytes: usize,
    /// The collector's bounds, allow-list and protected groups.
    pub limits: super::collector::Limits,
}

/// Default receive buffer: 4 MiB, about 3,000 full datagrams.
pub const DEFAULT_RECEIVE_BUFFER: usize = 4 << 20;

/// A running receiver.
pub struct Receiver {
    pub collector: Arc<Mutex<Collector>>,
    pub local: SocketAddr,
    fd: RawFd,
    task: tokio::task::JoinHandle<()>,
    /// Receive errors other than drops.
    pub errors: Arc<std::sync::atomic::AtomicU64>,
}

impl Receiver {
    /// Binds the socket (a taken address fails here, before anything else starts) and starts
    /// receiving.
    pub fn start(s: &SflowSettings) -> Result<Receiver> {
        let std_sock = std::net::UdpSocket::bind(s.listen)
            .with_context(|| format!("bind the sFlow listener {}", s.listen))?;
        std_sock.set_nonblocking(true)?;
        let fd = std_sock.as_raw_fd();
        let size = s.receive_buffer_bytes.min(i32::MAX as usize) as libc::c_int;
        // SAFETY: a valid socket and a c_int option value. A refused size keeps the default.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        let sock = tokio::net::UdpSocket::from_std(std_sock)?;
        let local = sock.local_addr()?;
        let collector = Arc::new(Mutex::new(Collector::new(s.limits.clone())));
        let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (c, e) = (collector.clone(), errors.clone());
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            let start = std::time::Instant::now();
            loop {
                match sock.recv_from(&mut buf).await {
                    Ok((n, _)) => {
                        // The collector's clock (idle entries): time since the receiver started.
                        let now_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        if let Ok(mut c) = c.lock() {
                            c.datagram(&buf[..n], now_ns);
                        }
                    }
                    Err(err) => {
                        e.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        log::debug!("sFlow receive: {err}");
                    }
                }
            }
        });
        log::info!("receiving sFlow on udp://{local}");
        Ok(Receiver {
            collector,
            local,
            fd,
            task,
            errors,
        })
    }

    /// Datagrams the kernel dropped because the receive buffer was full (SO_MEMINFO).
    pub fn dropped(&self) -> u64 {
        // SK_MEMINFO_DROPS is the ninth value.
        let mut v = [0u32; 9];
        let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
        // SAFETY: a buffer of `len` bytes for the kernel to fill; the socket lives while the
        // task does.
        let r = unsafe {
            libc::getsockopt(
                self.fd,
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
        self.task.abort();
    }
}

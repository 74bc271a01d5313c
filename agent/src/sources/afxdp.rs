//! AF_XDP capture (`rocemon run --capture afxdp`): kernel bypass for mirror collectors.
//!
//! The `rocemon_xdp_afxdp` program redirects RoCE frames (plain or inside a mirror
//! encapsulation) to one AF_XDP socket per receive queue and passes everything else to the
//! stack. Each socket has its own UMEM and a thread that parses the frames with
//! `agent-common`'s parser and counts them with [`Tally`] (the kernel's update logic), so the
//! poller merges queue tallies exactly as it merges per-CPU map values.
//!
//! Zero-copy binds where the driver supports it; `auto` tries zero-copy and falls back to copy
//! mode. The kernel's XDP_STATISTICS per socket give the drops: no free buffer in the fill ring
//! (`rx_dropped`), receive ring full and invalid descriptors.
//!
//! Dependency: `xdpilone` (pure Rust AF_XDP rings, no libbpf/libxdp): UMEM registration, ring
//! mmaps and the ring protocol, so this file holds only the policy.

use super::tally::{Switches, Tally};
pub use crate::config::afxdp::{AfxdpOptions, BindMode, MAX_BATCH};
use crate::error::UsageError;
use agent_common::{
    parse_record, FlowKey, FlowStats, Hook, HookCounters, LinkType, SessionKey, SessionStats,
    SliceReader, MAX_CAPTURE_QUEUES,
};
use anyhow::{Context, Result};
use rustc_hash::FxHashMap;
use std::num::NonZeroU32;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use xdpilone::{DeviceQueue, IfInfo, RingRx, Socket, SocketConfig, Umem, UmemConfig, User};

/// Frames per queue (UMEM chunks, fill and receive ring entries): 8 MiB of 4 KiB chunks.
const FRAMES: u32 = MAX_BATCH;
const FRAME_SIZE: u32 = 4096;
/// `sockaddr_xdp` flag: multi-buffer frames arrive as several descriptors (Linux 6.6+).
const XDP_USE_SG: u16 = 1 << 4;
/// Descriptor option: more buffers of this frame follow.
const XDP_PKT_CONTD: u32 = 1 << 0;
/// Bytes of a multi-buffer frame's first buffer kept for the parser: every header it reads
/// starts within `MAX_READ_OFFSET`.
const HEAD: usize = agent_common::reader::MAX_READ_OFFSET + 128;

/// One queue's figures, cumulative since the socket opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub queue: u32,
    /// "copy" or "zerocopy".
    pub mode: &'static str,
    pub frames: u64,
    pub bytes: u64,
    /// Frames the kernel dropped because the fill ring had no free buffer.
    pub dropped_no_buffer: u64,
    /// Frames the kernel dropped because the receive ring was full.
    pub dropped_rx_ring_full: u64,
    /// Descriptors the kernel found invalid, plus descriptors outside our UMEM.
    pub invalid_descriptors: u64,
    /// Times the kernel found the fill ring empty.
    pub fill_ring_empty: u64,
}

struct QueueState {
    tally: Tally,
    stats: QueueStats,
}

struct Worker {
    state: Arc<Mutex<QueueState>>,
    thread: Option<JoinHandle<()>>,
}

/// The sockets of one interface; dropping it stops the threads and closes the sockets.
pub struct Capture {
    stop: Arc<AtomicBool>,
    workers: Vec<Worker>,
}

/// Receive queues of an interface (`/sys/class/net/IF/queues/rx-*`), at least one.
pub fn rx_queues(iface: &str) -> u32 {
    let dir = std::path::Path::new("/sys/class/net")
        .join(iface)
        .join("queues");
    let n = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1);
    n.max(1)
}

impl Capture {
    /// Opens one socket per receive queue of `iface` and registers each with `register`
    /// (which puts it into the XSKMAP at its queue index).
    pub fn open(
        iface: &str,
        ifindex: u32,
        opts: AfxdpOptions,
        flow_limit: super::tally::FlowLimits,
        switches: Switches,
        mut register: impl FnMut(u32, RawFd) -> Result<()>,
    ) -> Result<Capture> {
        let queues = rx_queues(iface);
        if queues > MAX_CAPTURE_QUEUES {
            return Err(UsageError::BadConfig(format!(
                "'{iface}' has {queues} receive queues; AF_XDP capture serves at most \
                 {MAX_CAPTURE_QUEUES}: reduce them with `ethtool -L {iface} combined \
                 {MAX_CAPTURE_QUEUES}`"
            ))
            .into());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut cap = Capture {
            stop: stop.clone(),
            workers: Vec::new(),
        };
        for q in 0..queues {
            let state = Arc::new(Mutex::new(QueueState {
                tally: Tally::with_switches(Hook::AfXdp, flow_limit, switches),
                stats: QueueStats {
                    queue: q,
                    ..QueueStats::default()
                },
            }));
            let (tx, rx) = mpsc::channel();
            let (st, sp) = (state.clone(), stop.clone());
            let thread = std::thread::Builder::new()
                .name(format!("afxdp-{iface}-{q}"))
                .spawn(move || worker(ifindex, q, opts, tx, sp, st))
                .context("spawn an AF_XDP queue thread")?;
            let opened = rx
                .recv()
                .unwrap_or_else(|_| Err("the queue thread ended".into()));
            cap.workers.push(Worker {
                state,
                thread: Some(thread),
            });
            match opened {
                Ok((fd, m)) => {
                    register(q, fd)
                        .with_context(|| format!("register the AF_XDP socket of queue {q}"))?;
                    log::info!("AF_XDP socket on {iface} queue {q} ({m} mode)");
                }
                Err(e) if opts.mode == BindMode::ZeroCopy => {
                    return Err(UsageError::BadConfig(format!(
                        "AF_XDP zero-copy is not available on '{iface}' queue {q} ({e}); \
                         the driver lacks zero-copy support: use --afxdp-mode copy or auto"
                    ))
                    .into())
                }
                Err(e) => {
                    return Err(anyhow::anyhow!(
                        "open an AF_XDP socket on {iface} queue {q}: {e}"
                    ))
                }
            }
        }
        Ok(cap)
    }

    /// Folds every queue's state into one value (each queue locked in turn, briefly). Each
    /// reader below merges only what it returns: the poller reads counters every poll but
    /// should not pay for merging the flow tables to get them.
    fn fold<T>(&self, mut acc: T, mut f: impl FnMut(&mut T, &QueueState)) -> T {
        for w in &self.workers {
            // A worker that panicked leaves its lock poisoned: its counts are still good
            // (every update is whole), so they are read anyway, never silently dropped.
            let st = w.state.lock().unwrap_or_else(|e| {
                log::error!("an AF_XDP queue worker panicked; its counts so far are kept");
                e.into_inner()
            });
            f(&mut acc, &st);
        }
        acc
    }

    /// The counter block, queues summed.
    pub fn counters(&self) -> HookCounters {
        self.fold(HookCounters::ZERO, |c, st| c.add(&st.tally.counters))
    }

    /// Every flow, queues merged.
    pub fn flows(&self) -> FxHashMap<FlowKey, FlowStats> {
        self.fold(FxHashMap::default(), |f, st| {
            super::tally::merge_flows(f, &st.tally.flows)
        })
    }

    /// Deletes every queue's flows with no packet since `before_ns` (see [`Tally::expire`]).
    pub fn expire(&self, before_ns: u64) -> u64 {
        let mut n = 0;
        for w in &self.workers {
            let mut st = w.state.lock().unwrap_or_else(|e| e.into_inner());
            n += st.tally.expire(before_ns);
        }
        n
    }

    /// Every mirror session, queues merged.
    pub fn sessions(&self) -> FxHashMap<SessionKey, SessionStats> {
        self.fold(FxHashMap::default(), |s, st| {
            super::tally::merge_sessions(s, &st.tally.sessions)
        })
    }

    /// Each queue's figures.
    pub fn queues(&self) -> Vec<QueueStats> {
        self.fold(Vec::new(), |q, st| q.push(st.stats))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// A page-aligned anonymous mapping for one UMEM; unmapped on drop.
struct Area {
    ptr: NonNull<u8>,
    len: usize,
}

impl Area {
    fn new(len: usize) -> Result<Area, String> {
        // SAFETY: an anonymous private mapping; no file, no fixed address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "mmap {len} bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or("mmap returned null")?;
        Ok(Area { ptr, len })
    }

    /// The bytes of a received descriptor, if it lies inside the area.
    fn frame(&self, addr: u64, len: u32) -> Option<&[u8]> {
        let start = usize::try_from(addr).ok()?;
        let end = start.checked_add(len as usize)?;
        if end > self.len {
            return None;
        }
        // SAFETY: in bounds of a live mapping; the kernel wrote this chunk before publishing
        // its descriptor on the receive ring, and does not touch it until we give it back.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), len as usize) })
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the sockets using it are closed first (field
        // order of `XskSocket`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// One bound socket. Field order is drop order: rings and socket first, memory last.
struct XskSocket {
    rx: RingRx,
    fill: DeviceQueue,
    user: User,
    _umem: Umem,
    area: Area,
    mode: &'static str,
}

fn errno(what: &str, e: xdpilone::Errno) -> String {
    format!(
        "{what}: {}",
        std::io::Error::from_raw_os_error(e.get_raw().abs())
    )
}

fn open_socket(ifindex: u32, queue: u32, zero_copy: bool) -> Result<XskSocket, String> {
    // Multi-buffer first (jumbo frames); kernels before 6.6 refuse the flag.
    open_socket_with(ifindex, queue, zero_copy, XDP_USE_SG).or_else(|e| {
        log::debug!("AF_XDP without multi-buffer support on queue {queue} ({e})");
        open_socket_with(ifindex, queue, zero_copy, 0)
    })
}

fn open_socket_with(
    ifindex: u32,
    queue: u32,
    zero_copy: bool,
    extra_flags: u16,
) -> Result<XskSocket, String> {
    let area = Area::new((FRAMES * FRAME_SIZE) as usize)?;
    let cfg = UmemConfig {
        fill_size: FRAMES,
        complete_size: FRAMES,
        frame_size: FRAME_SIZE,
        headroom: 0,
        flags: 0,
    };
    let mem = NonNull::slice_from_raw_parts(area.ptr, area.len);
    // SAFETY: page-aligned (mmap), alive as long as the socket (dropped after it).
    let umem = unsafe { Umem::new(cfg, mem) }.map_err(|e| errno("register the UMEM", e))?;
    let mut info = IfInfo::invalid();
    info.from_ifindex(ifindex)
        .map_err(|e| errno("interface", e))?;
    info.set_queue(queue);
    let sock = Socket::with_shared(&info, &umem).map_err(|e| errno("AF_XDP socket", e))?;
    let mut fill = umem
        .fq_cq(&sock)
        .map_err(|e| errno("fill/completion rings", e))?;
    let flags = SocketConfig::XDP_BIND_NEED_WAKEUP
        | extra_flags
        | if zero_copy {
            SocketConfig::XDP_BIND_ZEROCOPY
        } else {
            SocketConfig::XDP_BIND_COPY
        };
    let user = umem
        .rx_tx(
            &sock,
            &SocketConfig {
                rx_size: NonZeroU32::new(FRAMES),
                tx_size: None,
                bind_flags: flags,
            },
        )
        .map_err(|e| errno("receive ring", e))?;
    let rx = user
        .map_rx()
        .map_err(|e| errno("map the receive ring", e))?;
    umem.bind(&user).map_err(|e| errno("bind", e))?;
    let mut w = fill.fill(FRAMES);
    w.insert((0..FRAMES).map(|i| u64::from(i) * u64::from(FRAME_SIZE)));
    w.commit();
    drop(w);
    Ok(XskSocket {
        rx,
        fill,
        user,
        _umem: umem,
        area,
        mode: if zero_copy { "zerocopy" } else { "copy" },
    })
}

use super::maps::monotonic_ns;

type Opened = Result<(RawFd, &'static str), String>;

fn worker(
    ifindex: u32,
    queue: u32,
    opts: AfxdpOptions,
    opened: mpsc::Sender<Opened>,
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<QueueState>>,
) {
    let sock = match opts.mode {
        BindMode::ZeroCopy => open_socket(ifindex, queue, true),
        BindMode::Copy => open_socket(ifindex, queue, false),
        BindMode::Auto => open_socket(ifindex, queue, true).or_else(|zc| {
            log::debug!("AF_XDP zero-copy unavailable on queue {queue} ({zc}); copy mode");
            open_socket(ifindex, queue, false)
        }),
    };
    let mut sock = match sock.and_then(|s| busy_poll(&s, opts).map(|()| s)) {
        Ok(s) => s,
        Err(e) => {
            let _ = opened.send(Err(e));
            return;
        }
    };
    if let Ok(mut st) = state.lock() {
        st.stats.mode = sock.mode;
    }
    if opened.send(Ok((sock.rx.as_raw_fd(), sock.mode))).is_err() {
        return;
    }
    receive(&mut sock, &stop, &state, opts);
}

/// Turns on busy polling for the socket when asked (see [`AfxdpOptions::busy_poll_us`]).
fn busy_poll(sock: &XskSocket, opts: AfxdpOptions) -> Result<(), String> {
    if opts.busy_poll_us == 0 {
        return Ok(());
    }
    let fd = sock.rx.as_raw_fd();
    for (name, opt, v) in [
        ("SO_PREFER_BUSY_POLL", libc::SO_PREFER_BUSY_POLL, 1),
        ("SO_BUSY_POLL", libc::SO_BUSY_POLL, opts.busy_poll_us as i32),
        (
            "SO_BUSY_POLL_BUDGET",
            libc::SO_BUSY_POLL_BUDGET,
            opts.batch as i32,
        ),
    ] {
        // SAFETY: a valid socket and a pointer to an int of the size given.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(format!(
                "setsockopt {name}: {} (busy polling needs Linux 5.11+ and CAP_NET_ADMIN)",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// The receive loop: wait, parse and count a batch, give the chunks back to the fill ring.
fn receive(sock: &mut XskSocket, stop: &AtomicBool, state: &Mutex<QueueState>, opts: AfxdpOptions) {
    let mut pfd = libc::pollfd {
        fd: sock.rx.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let mut chunks: Vec<u64> = Vec::with_capacity(FRAMES as usize);
    let mut last_stats = Instant::now();
    let mut bad_descs = 0u64;
    // A multi-buffer frame in progress: its head and the length so far.
    let mut head = [0u8; HEAD];
    let mut head_len = 0usize;
    let mut frame_len: Option<u64> = None;
    while !stop.load(Ordering::Relaxed) {
        if sock.rx.available() == 0 {
            if opts.busy_poll_us > 0 {
                // Drive the driver's receive queue from here (a non-blocking receive busy
                // polls the socket's NAPI context).
                // SAFETY: a valid socket; no buffer is read or written.
                unsafe {
                    libc::recvfrom(
                        pfd.fd,
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
            } else if opts.coalesce_us > 0 {
                // Let frames gather before waiting for them: each wake-up costs a system
                // call and a context switch that the sender and the kernel's copy into the
                // UMEM need the CPU for (the bench's AF_XDP rows measure the pause). The ring
                // holds 2,048 frames: 200 us of traffic up to 10 M frames/s.
                std::thread::sleep(Duration::from_micros(u64::from(opts.coalesce_us)));
            }
            if sock.rx.available() == 0 {
                // SAFETY: one valid pollfd. A timeout bounds how late a stop is noticed.
                unsafe { libc::poll(&mut pfd, 1, 100) };
            }
        }
        let Ok(mut st) = state.lock() else {
            return;
        };
        {
            let mut rx = sock.rx.receive(opts.batch);
            let now = monotonic_ns();
            while let Some(d) = rx.read() {
                chunks.push(d.addr - d.addr % u64::from(FRAME_SIZE));
                let Some(data) = sock.area.frame(d.addr, d.len) else {
                    bad_descs += 1;
                    continue;
                };
                let more = d.options & XDP_PKT_CONTD != 0;
                let total = match (frame_len, more) {
                    // The common case: a frame in one buffer, parsed in place.
                    (None, false) => {
                        let p = parse_record(&SliceReader(data), LinkType::Ethernet);
                        st.tally.record(&p, u64::from(d.len), now);
                        st.stats.frames += 1;
                        st.stats.bytes += u64::from(d.len);
                        continue;
                    }
                    (None, true) => {
                        head_len = data.len().min(HEAD);
                        head[..head_len].copy_from_slice(&data[..head_len]);
                        u64::from(d.len)
                    }
                    (Some(n), _) => n + u64::from(d.len),
                };
                if more {
                    frame_len = Some(total);
                    continue;
                }
                frame_len = None;
                let r = agent_common::PrefixReader {
                    head: &head[..head_len],
                    len: total as usize,
                };
                st.tally
                    .record(&parse_record(&r, LinkType::Ethernet), total, now);
                st.stats.frames += 1;
                st.stats.bytes += total;
            }
            rx.release();
        }
        if last_stats.elapsed() >= Duration::from_millis(250) || stop.load(Ordering::Relaxed) {
            last_stats = Instant::now();
            if let Ok(k) = sock.user.statistics_v2() {
                st.stats.dropped_no_buffer = k.rx_dropped;
                st.stats.dropped_rx_ring_full = k.rx_ring_full;
                st.stats.fill_ring_empty = k.rx_fill_ring_empty_descs;
                st.stats.invalid_descriptors = k.rx_invalid_descs + bad_descs;
            }
        }
        drop(st);
        if !chunks.is_empty() {
            let mut w = sock.fill.fill(chunks.len() as u32);
            let n = w.insert(chunks.iter().copied()) as usize;
            w.commit();
            drop(w);
            chunks.drain(..n);
        }
        if sock.fill.needs_wakeup() {
            sock.fill.wake();
        }
    }
}

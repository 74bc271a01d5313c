//! A traffic source for the demo: frames generated round after round (so that sequence
//! numbers go on instead of starting over, as a looped capture would make them), sent out of
//! an interface in a namespace through an AF_PACKET socket, at a rate or at the frames' own
//! timestamps, from a thread of its own until dropped.

use crate::netns::enter_netns;
use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Frames of one round: (nanoseconds, frame); times matter at the frames' own pace.
pub type Round = Vec<(u64, Vec<u8>)>;

pub struct Sender {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

/// A raw socket on `ifname` (in the calling thread's namespace).
fn raw_socket(ifname: &str) -> Result<i32> {
    let c = std::ffi::CString::new(ifname)?;
    // SAFETY: a valid NUL-terminated name.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        bail!("no interface {ifname}");
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
    if fd < 0 {
        bail!("AF_PACKET socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a zeroed sockaddr_ll is valid; the fields set below make it an address.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = proto;
    sa.sll_ifindex = idx as i32;
    // SAFETY: a valid socket and address of the right size.
    let r = unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        bail!("bind to {ifname}: {e}");
    }
    Ok(fd)
}

impl Sender {
    /// Sends `round(n)` for n = 0, 1, .. out of `ifname` in namespace `ns`: `pps` frames per
    /// second, or (None) each frame at its time from the round's start, a round `length` long
    /// (from its first frame).
    pub fn start(
        ns: &str,
        ifname: &str,
        pps: Option<u32>,
        length: Duration,
        round: impl Fn(u64) -> Round + Send + 'static,
    ) -> Result<Sender> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, ifname, s) = (ns.to_string(), ifname.to_string(), stop.clone());
        let thread = std::thread::spawn(move || -> Result<()> {
            enter_netns(&ns)?;
            if pps.is_none() {
                realtime();
            }
            let fd = raw_socket(&ifname)?;
            let result = send_rounds(fd, pps, length, &round, &s);
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            result
        });
        Ok(Sender {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops and reports how the thread ended (an error it met, if any).
    pub fn finish(mut self) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("sender thread panicked"),
            None => Ok(()),
        }
    }
}

/// Frames sent at their own times are a rhythm only while the sender keeps its deadlines: on
/// a loaded machine (other tests, a CPU hog) a thread of normal priority wakes late and the
/// steps smear. This thread asks for a real-time priority (as root it gets it; elsewhere it
/// keeps its own and says nothing).
fn realtime() {
    // SAFETY: a plain sched_param for the calling thread.
    unsafe {
        let p = libc::sched_param { sched_priority: 10 };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &p);
    }
}

fn send_rounds(
    fd: i32,
    pps: Option<u32>,
    length: Duration,
    round: &dyn Fn(u64) -> Round,
    stop: &AtomicBool,
) -> Result<()> {
    send_rounds_paced(fd, pps, length, round, stop, u64::MAX)
}

/// [`send_rounds`] at the frames' own times, for at most `rounds` rounds.
fn send_rounds_until(
    fd: i32,
    length: Duration,
    round: &dyn Fn(u64) -> Round,
    stop: &AtomicBool,
    rounds: u64,
) -> Result<()> {
    send_rounds_paced(fd, None, length, round, stop, rounds)
}

fn send_rounds_paced(
    fd: i32,
    pps: Option<u32>,
    length: Duration,
    round: &dyn Fn(u64) -> Round,
    stop: &AtomicBool,
    rounds: u64,
) -> Result<()> {
    let start = Instant::now();
    let mut sent = 0u64;
    let mut n = 0u64;
    let mut round_start = Instant::now();
    while !stop.load(Ordering::SeqCst) && n < rounds {
        let frames = round(n);
        let t0 = frames.first().map_or(0, |f| f.0);
        for (t, f) in &frames {
            if stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            // The frame's time: by rate from the sender's start, or by its own timestamp.
            let due = match pps {
                Some(p) => start + Duration::from_secs_f64(sent as f64 / f64::from(p)),
                None => round_start + Duration::from_nanos(t - t0),
            };
            // Sleep only when well ahead: frames due within the next 200 µs go out as a burst
            // (a sleep per frame would cap the rate at the timer's granularity).
            let now = Instant::now();
            if due > now + Duration::from_micros(200) {
                std::thread::sleep(due - now);
            }
            // SAFETY: a valid socket and buffer.
            let r = unsafe { libc::send(fd, f.as_ptr().cast(), f.len(), 0) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                // A full queue drops the frame, as a busy link would; anything else is fatal.
                if e.raw_os_error() != Some(libc::ENOBUFS) {
                    return Err(e).context("send");
                }
            }
            sent += 1;
        }
        round_start += length;
        n += 1;
    }
    Ok(())
}

/// Sends `frames` once out of `ifname` in namespace `ns`, each at its time from the first,
/// from a thread of real-time priority with absolute deadlines (a paced replay that keeps its
/// timing on a loaded machine, where tcpreplay's smeared a training job's steps); returns
/// when the last frame is out.
pub fn send_paced(ns: &str, ifname: &str, frames: Round) -> Result<()> {
    let (ns, ifname) = (ns.to_string(), ifname.to_string());
    let t = std::thread::spawn(move || -> Result<()> {
        enter_netns(&ns)?;
        realtime();
        let fd = raw_socket(&ifname)?;
        let length = Duration::from_nanos(
            frames.last().map_or(0, |f| f.0) - frames.first().map_or(0, |f| f.0) + 1,
        );
        let stop = AtomicBool::new(false);
        let once = move |n: u64| if n == 0 { frames.clone() } else { Vec::new() };
        // One round, then stop: the second (empty) round ends the loop.
        let result = send_rounds_until(fd, length, &once, &stop, 1);
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        result
    });
    match t.join() {
        Ok(r) => r,
        Err(_) => bail!("paced sender thread panicked"),
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

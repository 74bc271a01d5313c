//! BPF_PROG_TEST_RUN: feed a frame straight through a loaded XDP or tc program (through the
//! agent's own wrapper of the syscall, `rocemon::sources::prog_run`).
//! Test and benchmark support, not part of the agent: included by path where it is used.
// Each including crate uses a part of it.
#![allow(dead_code)]

use anyhow::{bail, Result};
use std::os::fd::{AsFd, AsRawFd};

use rocemon::sources::prog_run::TestRunAttr;

/// The program's return value and the mean duration per run in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct TestRun {
    pub retval: u32,
    pub duration_ns: u32,
}

/// Runs `prog` over `frame` `repeat` times (at least once).
pub fn test_run(prog: impl AsFd, frame: &[u8], repeat: u32) -> Result<TestRun> {
    let mut out = vec![0u8; frame.len() + 256];
    let mut attr = TestRunAttr {
        prog_fd: prog.as_fd().as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: repeat.max(1),
        ..TestRunAttr::default()
    };
    if let Err(e) = rocemon::sources::prog_run::test_run(&mut attr) {
        bail!("BPF_PROG_TEST_RUN failed: {e}");
    }
    Ok(TestRun {
        retval: attr.retval,
        duration_ns: attr.duration,
    })
}

/// Pins the calling thread to one CPU. BPF_PROG_TEST_RUN runs the program on the caller's
/// CPU, and the flow map is per CPU: a thread that migrates would split one flow's PSN
/// tracking over two CPUs (as a flow whose packets RSS spread would). Tests and the
/// differential fuzzer compare per-flow state, so they stay on one CPU, as a flow does.
pub fn pin_to_one_cpu() -> Result<()> {
    // SAFETY: sched_getcpu has no preconditions.
    pin_to_cpu(unsafe { libc::sched_getcpu() }.max(0) as usize)
}

/// Pins the calling thread to CPU `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu is below CPU_SETSIZE on any machine this runs on.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the set is valid for its size; 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
        bail!("sched_setaffinity: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// What a kernel program counts for one Ethernet frame, computed on the host: the shared
/// counting sequence over the general parser's result, plus the kernel-only count of frames
/// the fast path hands to the slow program. The differential tests and the kernel fuzzer
/// compare the kernel maps with this.
pub fn record_as_kernel(t: &mut rocemon::sources::tally::Tally, frame: &[u8], now_ns: u64) {
    use agent_common::{fast::parse_fast, parse_record, LinkType, SliceReader};
    let r = SliceReader(frame);
    t.record(
        &parse_record(&r, LinkType::Ethernet),
        frame.len() as u64,
        now_ns,
    );
    if parse_fast(&r).is_none() {
        t.counters.slow_path_frames += 1;
    }
}

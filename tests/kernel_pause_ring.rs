//! The kernel's pause ring (every PFC and PAUSE frame with its time, for the live union of the
//! pause intervals) through BPF_PROG_TEST_RUN: the frames come back from the agent's reader in
//! order, with their pause times and the kernel's clock; a CPU that takes more frames between
//! two reads than its ring holds loses the oldest, counted.

#[path = "support/kernel.rs"]
mod support;
#[path = "support/testrun.rs"]
mod testrun;

use agent_common::pause_ring::PAUSE_RING_SLOTS;
use rocemon::kernel::loader;
use rocemon::sources::maps::monotonic_ns;
use rocemon::sources::pause_ring::PauseRingReader;
use rocemon_testkit::frames;
use support::{ready, xdp_object};
use testrun::test_run;

/// An XOFF for priority 3 asking for `quanta`.
fn xoff(quanta: u16) -> Vec<u8> {
    let mut times = [0; 8];
    times[3] = quanta;
    frames::pfc(1 << 3, times)
}

/// An object to run frames through and a reader of its ring that has not read yet; None
/// where the test cannot load programs.
fn object() -> Option<(aya::Ebpf, PauseRingReader)> {
    if !ready(true) {
        return None;
    }
    let ebpf = xdp_object(1024, loader::Switches::default());
    Some((ebpf, PauseRingReader::default()))
}

/// PFC, PAUSE and RoCE frames: the MAC control frames come back, in order, in the time they
/// ran in; RoCE and the frames from before the first read do not.
#[test]
fn every_pause_frame_comes_back_with_its_time() {
    let Some((ebpf, mut reader)) = object() else {
        return;
    };
    let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
    let fd = prog.fd().unwrap();
    test_run(fd, &xoff(7), 1).unwrap();
    assert!(
        reader.read(&ebpf).unwrap().events.is_empty(),
        "the first read starts the reader"
    );
    let before = monotonic_ns();
    test_run(fd, &xoff(100), 1).unwrap();
    test_run(
        fd,
        &frames::writes("10.0.0.1", "10.0.0.2", (1, 2), 0..1, 64)[0],
        1,
    )
    .unwrap();
    test_run(fd, &frames::pause(300), 1).unwrap();
    test_run(fd, &xoff(0), 1).unwrap();
    let after = monotonic_ns();
    let read = reader.read(&ebpf).unwrap();
    assert_eq!(read.lost, 0);
    let got: Vec<(u16, u16, u16)> = read
        .events
        .iter()
        .map(|e| (e.opcode, e.class_enable, e.times[3].max(e.times[0])))
        .collect();
    assert_eq!(
        got,
        vec![(0x0101, 8, 100), (0x0001, 1, 300), (0x0101, 8, 0)]
    );
    assert!(read.events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    assert!(read
        .events
        .iter()
        .all(|e| e.ts_ns >= before && e.ts_ns <= after));
    assert!(reader.read(&ebpf).unwrap().events.is_empty(), "read once");
}

/// More frames between two reads than the ring holds: the newest ring-full come back, the
/// rest are counted lost.
#[test]
fn frames_the_ring_overwrote_are_counted_lost() {
    let Some((ebpf, mut reader)) = object() else {
        return;
    };
    let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
    reader.read(&ebpf).unwrap();
    let n = PAUSE_RING_SLOTS + 40;
    test_run(prog.fd().unwrap(), &xoff(9), n).unwrap();
    let read = reader.read(&ebpf).unwrap();
    assert_eq!(read.events.len() as u32, PAUSE_RING_SLOTS);
    assert_eq!(read.lost, 40);
}

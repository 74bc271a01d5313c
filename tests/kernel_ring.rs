//! The kernel's per-millisecond ring (the training rhythm's series) through
//! BPF_PROG_TEST_RUN: the kernel clock is CLOCK_MONOTONIC, which the test reads around each
//! batch of frames, so each batch's milliseconds are known.

use agent_common::{parse, Hook, LinkType, SliceReader};
#[path = "support/kernel.rs"]
mod support;
#[path = "support/testrun.rs"]
mod testrun;

use rocemon::kernel::loader;
use rocemon_testkit::fixtures;
use support::{ready, xdp_object};
use testrun::test_run;

const XDP_PASS: u32 = 2;

/// The RoCE frames of the PSN fixture, and their total length.
fn roce_frames() -> (Vec<Vec<u8>>, u64) {
    let frames: Vec<Vec<u8>> = fixtures::psn_health()
        .records()
        .map(|(_, _, d)| d)
        .filter(|d| parse(&SliceReader(d), LinkType::Ethernet).is_ok())
        .collect();
    let bytes = frames.iter().map(|d| d.len() as u64).sum();
    (frames, bytes)
}

/// The per-millisecond ring: two batches of RoCE frames 40 ms apart land in the milliseconds
/// they ran in (the kernel's clock is CLOCK_MONOTONIC, read around each batch), with every
/// packet and byte, and nothing in between.
#[test]
fn the_ring_holds_each_millisecond_s_roce_packets_and_bytes() {
    if !ready(true) {
        return;
    }
    let fine = loader::Switches {
        coarse_ring_clock: false,
        ..loader::Switches::default()
    };
    batches_land_in_their_milliseconds(fine, rocemon::sources::maps::monotonic_ms);
}

/// The same on the coarse clock (the loader's choice where a tick is at most a millisecond;
/// forced here whatever this host's tick): each batch lands in the milliseconds
/// CLOCK_MONOTONIC_COARSE read around it, the clock `bpf_ktime_get_coarse_ns` reads.
#[test]
fn on_the_coarse_clock_the_ring_holds_each_tick_s_packets_and_bytes() {
    if !ready(true) {
        return;
    }
    let coarse = loader::Switches {
        coarse_ring_clock: true,
        ..loader::Switches::default()
    };
    batches_land_in_their_milliseconds(coarse, coarse_ms);
}

/// CLOCK_MONOTONIC_COARSE in milliseconds.
fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) },
        0
    );
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Two batches of RoCE frames 40 ms apart, the ring read afterwards: each batch's packets and
/// bytes are in the milliseconds `now` read around it, and nothing is anywhere else.
fn batches_land_in_their_milliseconds(switches: loader::Switches, now: fn() -> u64) {
    let ebpf = xdp_object(65_536, switches);
    let (frames, bytes) = roce_frames();
    assert!(frames.len() > 10, "{} RoCE frames", frames.len());
    let mut batches = Vec::new();
    for _ in 0..2 {
        let from = now();
        for d in &frames {
            let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
            assert_eq!(
                test_run(prog.fd().unwrap(), d, 1).unwrap().retval,
                XDP_PASS,
                "d {d:?}"
            );
        }
        batches.push((from, now()));
        std::thread::sleep(std::time::Duration::from_millis(40));
    }
    let (start, end) = (batches[0].0, batches[1].1);
    let ring = loader::read_ring(&ebpf, start - 5, end + 5).unwrap();
    for (i, (from, to)) in batches.iter().enumerate() {
        let (mut p, mut b) = (0, 0);
        for ms in *from..=*to {
            let m = ring[(ms - (start - 5)) as usize];
            p += m.packets;
            b += m.bytes;
        }
        assert_eq!(
            (p, b),
            (frames.len() as u64, bytes),
            "batch {i} ran in ms {from}..={to}"
        );
    }
    let total: (u64, u64) = ring
        .iter()
        .fold((0, 0), |a, m| (a.0 + m.packets, a.1 + m.bytes));
    assert_eq!(
        total,
        (2 * frames.len() as u64, 2 * bytes),
        "nothing outside the batches' milliseconds"
    );
    // Each frame's bytes are in its source's lane, rounded up to lane units (the frames'
    // sources worked out by agent-common's parser, their lanes by `lane_of`).
    let mut want = [0u64; agent_common::ring::LANES];
    for d in &frames {
        let src = parse(&SliceReader(d), LinkType::Ethernet).unwrap().src;
        want[agent_common::ring::lane_of(&src)] +=
            2 * (d.len() as u64).div_ceil(agent_common::ring::LANE_UNIT);
    }
    let mut got = [0u64; agent_common::ring::LANES];
    for m in &ring {
        for (g, l) in got.iter_mut().zip(m.lanes.iter()) {
            *g += l;
        }
    }
    assert_eq!(got, want, "the lanes");
    assert!(
        want.iter().filter(|&&u| u > 0).count() >= 2,
        "sources in two lanes at least: {want:?}"
    );
    // The counter block agrees: every RoCE frame's bytes are in the ring.
    let k = loader::read_counters(&ebpf).unwrap();
    assert_eq!(k[Hook::Xdp as usize].roce_bytes(), 2 * bytes);
}

/// With the rhythm switched off the ring stays empty; everything else counts as before.
#[test]
fn switched_off_rhythm_leaves_the_ring_empty() {
    if !ready(true) {
        return;
    }
    let off = loader::Switches {
        rhythm: false,
        ..loader::Switches::default()
    };
    let ebpf = xdp_object(65_536, off);
    let (frames, bytes) = roce_frames();
    let start = rocemon::sources::maps::monotonic_ms();
    for d in &frames {
        let prog = ebpf.program(agent_common::PROG_XDP).unwrap();
        assert_eq!(
            test_run(prog.fd().unwrap(), d, 1).unwrap().retval,
            XDP_PASS,
            "d {d:?}"
        );
    }
    let end = rocemon::sources::maps::monotonic_ms();
    let ring = loader::read_ring(&ebpf, start - 1, end + 1).unwrap();
    assert!(ring.iter().all(|m| m.packets == 0 && m.bytes == 0));
    let k = loader::read_counters(&ebpf).unwrap();
    assert_eq!(
        k[Hook::Xdp as usize].roce_bytes(),
        bytes,
        "counted as before"
    );
}

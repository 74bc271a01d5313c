//! The pinned tests' shared parts (`e2e_pins.rs`, `e2e_pin_holders.rs`): a bpffs of the
//! test's own, a pinned agent on a veth pair, and the agent's flags.
// Each including crate uses a part of it.
#![allow(dead_code)]

use rocemon_testkit::netns::{try_metric_sum, Agent, BpfFs, VethPair};
use rocemon_testkit::{fixtures, require_tshark, tshark, TempDir};
use std::path::PathBuf;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
pub const XDP_AND_TC: &str = "xdp,tc-ingress";
pub const ADDR: &str = "127.0.0.1:9442";

pub fn can_run() -> bool {
    rocemon_testkit::netns::can_run_e2e()
}

pub fn wait_ready(ns: &str, agent: &mut Agent) -> String {
    agent.wait_ready(ns, ADDR).unwrap()
}

/// A pinned test's set-up, `None` when it cannot run here (it says why): a temporary
/// directory with a bpffs of the test's own in it and the pin directory on it, `fx` written
/// there, and tshark's counts of it.
pub fn own_bpffs(
    prefix: &str,
    fx: &fixtures::Fixture,
) -> Option<(TempDir, BpfFs, PathBuf, PathBuf, tshark::Expected)> {
    if !can_run() {
        return None;
    }
    require_tshark();
    let dir = TempDir::new(prefix).unwrap();
    let fs = BpfFs::mount(&dir.path().join("bpffs")).unwrap();
    let pin_dir = fs.path().join("rocemon");
    let path = fx.write(dir.path()).unwrap();
    let e = tshark::expected(&path).unwrap();
    Some((dir, fs, pin_dir, path, e))
}

/// A pinned agent (XDP native and tc ingress) on a veth pair, over a bpffs of its own, with
/// the rc_ipv4 fixture and tshark's counts of it; `want` is what it has counted so far.
pub struct PinnedLab {
    pub _dir: TempDir,
    pub _fs: BpfFs,
    pub pin_dir: PathBuf,
    pub path: PathBuf,
    pub e: tshark::Expected,
    pub pair: VethPair,
    pub agent: Agent,
    pub want: u64,
}

impl PinnedLab {
    pub fn start(dir_prefix: &str, veth_prefix: &str) -> Option<PinnedLab> {
        let (dir, fs, pin_dir, path, e) = own_bpffs(dir_prefix, &fixtures::rc_ipv4())?;
        let pair = VethPair::new(veth_prefix).unwrap();
        let mut agent = Agent::start(
            &pair.ns_a,
            BIN,
            &pinned_args(&pair.a_if, pin_dir.to_str().unwrap(), XDP_AND_TC, "native"),
        )
        .unwrap();
        wait_ready(&pair.ns_a, &mut agent);
        Some(PinnedLab {
            _dir: dir,
            _fs: fs,
            pin_dir,
            path,
            e,
            pair,
            agent,
            want: 0,
        })
    }

    /// Replays the fixture once more and waits until XDP and tc ingress have counted every
    /// RoCE packet so far, exactly; the scrape.
    pub fn send_and_count(&mut self, step: &str) -> String {
        let packets = |b: &str, hook: &str| {
            try_metric_sum(b, "rocemon_packets_total", &[("hook", hook)]).unwrap_or(0.0) as u64
        };
        self.pair.replay_from_b(&self.path).unwrap();
        self.want += self.e.roce_packets;
        let want = self.want;
        let body = self
            .agent
            .wait_metrics(&self.pair.ns_a, ADDR, Duration::from_secs(30), |b| {
                packets(b, "xdp") >= want && packets(b, "tc_ingress") >= want
            })
            .unwrap_or_else(|err| panic!("{step}: {err}"));
        assert_eq!(packets(&body, "xdp"), want, "{step}: xdp");
        assert_eq!(packets(&body, "tc_ingress"), want, "{step}: tc_ingress");
        body
    }
}

/// `rocemon run` with `hooks` (XDP in `mode`) on `ifn`, pinned under `pin`, fast polls.
pub fn pinned_args<'a>(ifn: &'a str, pin: &'a str, hooks: &'a str, mode: &'a str) -> [&'a str; 13] {
    [
        "run",
        "--iface",
        ifn,
        "--hooks",
        hooks,
        "--xdp-mode",
        mode,
        "--listen",
        ADDR,
        "--poll-interval-ms",
        "100",
        "--pin-dir",
        pin,
    ]
}

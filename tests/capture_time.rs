//! A capture's clock that jumps or steps back: `analyze` takes a frame decades ahead as a
//! discontinuity (listed), not as a capture decades long, and frames stepped back a little as
//! the time already reached. The truth is the generator's: the job's period, the storm's span.

use rocemon_testkit::fixtures::{whole, Format};
use rocemon_testkit::frames::{self, Roce};
use rocemon_testkit::training::{self, Job};
use rocemon_testkit::TempDir;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const S: u64 = 1_000_000_000;

/// `rocemon analyze --format json` of `frames` in the order given, with `args`.
fn analyze(frames: Vec<(u64, Vec<u8>)>, args: &[&str]) -> Value {
    let dir = TempDir::new("rocemon-capture-time").unwrap();
    let p = whole("clock", Format::PcapNanos, frames, false)
        .write(dir.path())
        .unwrap();
    rocemon_testkit::analyze_json(BIN, args, &[&p])
}

/// A training job of 100 ms steps with one frame dated 30 years ahead in its middle: the
/// rhythm is found, the capture lasts what the job lasts, the jump is listed.
#[test]
fn a_frame_decades_ahead_is_a_discontinuity_not_a_span() {
    let job = Job::steady(60);
    let mut f = training::frames(job, "10.78.0.1", "10.78.0.2", 0);
    let (t_mid, _) = f[f.len() / 2];
    let mut stray = Roce::new(
        "10.78.0.9".parse().unwrap(),
        "10.78.0.2".parse().unwrap(),
        0xC999,
        0x99,
        0x0A,
    );
    stray.payload = 64;
    f.insert(
        f.len() / 2,
        (t_mid + 30 * 365 * 24 * 3600 * S, stray.frame()),
    );
    let j = analyze(f, &[]);
    let period = j["training"]["period_seconds"].as_f64();
    assert!(
        period.is_some_and(|p| (p - 0.1).abs() < 0.005),
        "{:#}",
        j["training"]
    );
    let d = j["duration_seconds"].as_f64().unwrap();
    assert!(d < 7.0, "{d} s");
    let ct = &j["capture_time"];
    assert_eq!(ct["discontinuities_total"], 1, "{ct:#}");
    assert!(ct["discontinuities"][0]["jump_seconds"].as_f64().unwrap() > 9e8);
}

/// A 20 s pause storm (XOFFs 2 ms apart, each pausing 3.4 ms at 10 Gb/s) with a few frames
/// dated back: two by 100 us, two to the storm's first seconds: the pause time is the
/// storm's 20 s (the stray frames closed the pause run with an end before its start).
#[test]
fn frames_stepped_back_keep_a_storms_pause_time() {
    let t0 = 1_764_547_200 * S;
    let every = 2_000_000;
    let mut f: Vec<(u64, Vec<u8>)> = (0..10_000u64)
        .map(|k| {
            (
                t0 + k * every,
                frames::pfc(0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]),
            )
        })
        .collect();
    for k in [1_000, 4_000] {
        f[k].0 = f[k - 1].0 - 100_000;
    }
    f[7_000].0 = t0;
    f[9_000].0 = t0 + S;
    let j = analyze(f, &["--link-speed", "10"]);
    let paused = j["pfc"]["priorities"][3]["paused_seconds"]
        .as_f64()
        .unwrap();
    let want = (9_999 * every + 0xFFFF * 512 / 10) as f64 / 1e9;
    assert!(
        (paused - want).abs() < 0.01 * want,
        "{paused} s paused of {want}"
    );
    assert_eq!(j["capture_time"]["frames_stepped_back"], 2);
    assert_eq!(j["capture_time"]["discontinuities_total"], 2);
}

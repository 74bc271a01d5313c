//! Replays every fuzz input kept in `fuzz/regressions/capture` and the committed capture seeds
//! through the capture reader and the analysis: none may panic.

use rocemon::cmd::analyze::{Analysis, AnalyzeOptions};
use rocemon::sources::capture::read_capture_from;
use std::path::Path;

#[test]
fn capture_fuzz_regressions_and_seeds_replay_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut seeds = 0;
    for dir in ["regressions/capture", "seeds/capture"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name.ends_with(".md") {
                continue;
            }
            let data = std::fs::read(e.path()).unwrap();
            let mut a = Analysis::new(AnalyzeOptions::default());
            let mut frames = 0u64;
            let read = read_capture_from(
                std::io::Cursor::new(data.clone()),
                |_| {},
                |f| {
                    frames += 1;
                    a.frame(f)
                },
            );
            a.finish();
            // Every frame the reader handed over is in the report, read error or not; a seed
            // (a real capture) reads without one.
            let report = rocemon::export::report::build::build(
                &a,
                rocemon::pipeline::findings::judge_analysis(&a),
            );
            assert_eq!(report.frames, frames, "{dir}/{name}");
            if dir.starts_with("seeds") {
                assert!(read.is_ok(), "{dir}/{name}: {:?}", read.err());
            }
            if dir.starts_with("seeds") {
                seeds += 1;
            }
        }
    }
    assert!(seeds >= 3, "the committed capture seeds are missing");
}

//! Replays every fuzz input kept in `fuzz/regressions/parse` and the committed seed corpus
//! through the parser and the counting code: none may panic, and every frame is accounted for.

use agent_common::{
    parse_record, FlowStats, Hook, HookCounters, LinkType, SliceReader, TrafficClasses,
};
use std::path::Path;

fn replay(dir: &Path) -> usize {
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') || name.ends_with(".md") {
            continue;
        }
        let data = std::fs::read(e.path()).unwrap();
        let mut c = HookCounters::ZERO;
        let mut f = FlowStats::default();
        for link in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2] {
            let p = parse_record(&SliceReader(&data), link);
            c.record(&p, data.len() as u64, &TrafficClasses::DEFAULT);
            if p.is_roce() {
                assert_eq!(p.flow_key(Hook::Xdp).hook, Hook::Xdp as u8, "{name}");
                c.record_flow(&f.record(&p, data.len() as u64, 0));
            }
        }
        assert_eq!(c.outcomes.iter().sum::<u64>(), c.frames, "{name}");
        n += 1;
    }
    n
}

#[test]
fn fuzz_regressions_and_seeds_replay_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    replay(&root.join("regressions/parse"));
    let seeds = replay(&root.join("seeds/parse"));
    assert!(
        seeds >= 20,
        "the committed seed corpus is missing ({seeds} files)"
    );
}

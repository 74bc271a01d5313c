//! The shared parser and counting code over arbitrary bytes, for every link type.
#![no_main]

use agent_common::{
    parse_frame, parse_record, FlowStats, Hook, HookCounters, LinkType, SliceReader,
    TrafficClasses,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut c = HookCounters::ZERO;
    let mut f = FlowStats::default();
    for link in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2] {
        let p = parse_record(&SliceReader(data), link);
        // The rich result is the record's own reading of itself.
        assert_eq!(parse_frame(&SliceReader(data), link), p.load());
        c.record(&p, data.len() as u64, &TrafficClasses::DEFAULT);
        if p.is_roce() {
            let _ = p.flow_key(Hook::Xdp);
            let ev = f.record(&p, data.len() as u64, 0);
            c.record_flow(&ev);
        }
    }
    assert_eq!(c.outcomes.iter().sum::<u64>(), c.frames);
});

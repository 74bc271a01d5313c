//! The shared parser and counting code over arbitrary bytes, for every link type.
#![no_main]

use agent_common::{
    parse_frame, FlowStats, Hook, HookCounters, LinkType, Parsed, SliceReader, TrafficClasses,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut c = HookCounters::ZERO;
    let mut f = FlowStats::default();
    for link in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2] {
        let p = parse_frame(&SliceReader(data), link);
        c.record(&p, data.len() as u64, &TrafficClasses::DEFAULT);
        if let Parsed::Roce(info) = &p {
            let _ = info.flow_key(Hook::Xdp);
            let ev = f.record(info, data.len() as u64, 0);
            c.record_flow(&ev);
        }
    }
    assert_eq!(c.outcomes.iter().sum::<u64>(), c.frames);
});

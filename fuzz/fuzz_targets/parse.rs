//! The shared parser and the one counting sequence over arbitrary bytes, for every link type.
#![no_main]

use agent_common::count::{count, flow_step, Store};
use agent_common::{
    parse_frame, parse_record, FlowStats, Hook, HookCounters, LinkType, PacketRecord, SessionKey,
    SessionStats, SliceReader, TrafficClasses,
};
use libfuzzer_sys::fuzz_target;

/// One flow and one session, whatever the frames' keys: the sequence and the updates are the
/// subject here, not the keeping.
#[derive(Default)]
struct One {
    flow: FlowStats,
    session: SessionStats,
}

impl Store for One {
    fn classes(&self) -> TrafficClasses {
        TrafficClasses::DEFAULT
    }
    fn sessions_on(&self) -> bool {
        true
    }
    fn psn_on(&self) -> bool {
        true
    }
    fn now(&mut self, _: &PacketRecord, _: u64) -> u64 {
        0
    }
    fn session(&mut self, _: SessionKey, rec: &PacketRecord, frame_len: u64) -> bool {
        self.session.record(rec, frame_len);
        true
    }
    fn flow(
        &mut self,
        rec: &PacketRecord,
        hook: Hook,
        c: &mut HookCounters,
        frame_len: u64,
        now: u64,
        psn: bool,
    ) -> bool {
        let _ = rec.flow_key(hook);
        flow_step(&mut self.flow, rec, c, frame_len, now, psn);
        false
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = HookCounters::ZERO;
    let mut store = One::default();
    for link in [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2] {
        let p = parse_record(&SliceReader(data), link);
        // The rich result is the record's own reading of itself.
        assert_eq!(parse_frame(&SliceReader(data), link), p.load());
        count(&mut store, &mut c, &p, Hook::Xdp, data.len() as u64);
    }
    assert_eq!(c.outcomes.iter().sum::<u64>(), c.frames);
});

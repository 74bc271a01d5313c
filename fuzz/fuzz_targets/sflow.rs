//! The sFlow collector over arbitrary datagrams: the decoder, the sampled headers through the
//! shared parser, the tables and the report. Nothing may panic, and every datagram ends as read
//! or as malformed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocemon::sflow::collector::Collector;

fuzz_target!(|data: &[u8]| {
    let mut c = Collector::default();
    c.datagram(data, 0);
    c.datagram(data, 0);
    let malformed: u64 = c.malformed.values().sum();
    assert!(c.datagrams == 2 || malformed >= 2 - c.datagrams);
    let _ = rocemon::sflow::report::build(&c, None);
});

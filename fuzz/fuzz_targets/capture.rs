//! The capture reader (pcap and pcapng) and analysis over arbitrary files.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocemon::analyze::{Analysis, AnalyzeOptions};
use rocemon::sources::capture::read_capture_from;

fuzz_target!(|data: &[u8]| {
    let mut a = Analysis::new(AnalyzeOptions::default());
    let _ = read_capture_from(data, |_| {}, |f| a.frame(f));
    a.finish();
    let _ = rocemon::report::build(&a);
});

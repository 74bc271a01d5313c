//! The capture reader (pcap and pcapng) and analysis over arbitrary files.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocemon::cmd::analyze::{Analysis, AnalyzeOptions};
use rocemon::sources::capture::read_capture_buffered;

fuzz_target!(|data: &[u8]| {
    let mut a = Analysis::new(AnalyzeOptions::default());
    // A small first buffer: a fuzz input is small, and a megabyte each (zeroed under
    // AddressSanitizer) was most of the cost; records that need more grow it as files do.
    let _ = read_capture_buffered(data, 4096, |_| {}, |f| a.frame(f));
    a.finish();
    let _ = rocemon::export::report::build::build(&a, rocemon::pipeline::findings::judge_analysis(&a));
});

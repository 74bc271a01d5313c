//! The sFlow collector's capacity: samples per second one core takes through the decoder, the
//! shared parser and the collector's tables, against the shared parser alone over the same
//! sampled headers (the baseline, same run).

use crate::median;
use agent_common::{parse_record, LinkType, SliceReader};
use anyhow::Result;
use rocemon::sflow::collector::Collector;
use rocemon_testkit::frames::Roce;
use rocemon_testkit::sflow::{Datagram, Sample};
use serde_json::{json, Value};
use std::time::Instant;

const DATAGRAMS: u32 = 20_000;
const SAMPLES_PER_DATAGRAM: u32 = 7;

/// Datagrams as a switch sends them: 16 agents, 64 ports each, 4,096 flows, seven flow
/// samples of 128-byte RoCE headers per datagram.
fn datagrams() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut headers = Vec::new();
    let mut out = Vec::new();
    for d in 0..DATAGRAMS {
        let samples = (0..SAMPLES_PER_DATAGRAM)
            .map(|s| {
                let i = d * SAMPLES_PER_DATAGRAM + s;
                let mut r = Roce::new(
                    crate::ip(&format!("10.{}.{}.1", (i >> 8) % 16, i % 256)),
                    crate::ip("10.200.0.1"),
                    0xC000 + (i % 4096) as u16,
                    0x100 + i % 4096,
                    if i.is_multiple_of(10) { 0x81 } else { 0x0A },
                );
                r.payload = 4096;
                r.dma_len = 4096;
                r.ecn = (i % 4) as u8;
                let mut h = r.frame();
                h.truncate(128);
                headers.push(h.clone());
                Sample::Flow {
                    expanded: false,
                    sequence: i,
                    source_index: 1 + i % 64,
                    sampling_rate: 4096,
                    sample_pool: i * 4096,
                    drops: 0,
                    input: 1 + (i % 64),
                    output: 65 + (i % 8),
                    frame_length: 4096 + 66,
                    header: h,
                    switch: true,
                }
            })
            .collect();
        out.push(
            Datagram {
                agent: crate::ip(&format!("192.0.2.{}", 1 + d % 16)),
                sub_agent: 0,
                sequence: 1 + d / 16,
                uptime_ms: d,
                samples,
            }
            .encode(),
        );
    }
    (out, headers)
}

pub(crate) fn sflow_bench() -> Result<Value> {
    let (dgrams, headers) = datagrams();
    let samples = f64::from(DATAGRAMS * SAMPLES_PER_DATAGRAM);
    let mut parse_s = Vec::new();
    let mut collect_s = Vec::new();
    let mut roce = 0u64;
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0u64;
        for h in &headers {
            if parse_record(&SliceReader(h), LinkType::Ethernet).is_roce() {
                n += 1;
            }
        }
        parse_s.push(t.elapsed().as_secs_f64());
        std::hint::black_box(n);
        let mut c = Collector::default();
        let t = Instant::now();
        for d in &dgrams {
            c.datagram(d, 0);
        }
        collect_s.push(t.elapsed().as_secs_f64());
        roce = c.samples.packets;
    }
    let (p, c) = (median(parse_s), median(collect_s));
    let bytes: usize = dgrams.iter().map(Vec::len).sum();
    let r = json!({
        "datagrams": DATAGRAMS,
        "samples": samples,
        "roce_samples": roce,
        "datagram_bytes": bytes,
        "collector_seconds": c,
        "collector_samples_per_second": samples / c,
        "collector_datagrams_per_second": f64::from(DATAGRAMS) / c,
        "parse_only_seconds": p,
        "parse_only_samples_per_second": samples / p,
        "ratio_vs_parse_only": c / p,
    });
    println!(
        "sflow: {:.0} samples/s ({:.0} datagrams/s) on one core through decode, parse and tables; the parser alone {:.0} samples/s (x{:.1})",
        samples / c,
        f64::from(DATAGRAMS) / c,
        samples / p,
        c / p
    );
    Ok(r)
}

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
    let fabric = fabric_scale()?;
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
        "fabric": fabric,
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

/// Datagrams fed per round of the fabric-scale case.
const FABRIC_DATAGRAMS: usize = 200_000;

/// The rates bench's stream (500 switches x 64 ports, about 30,000 port keys and 32,000 flows)
/// through the collector as that bench configures it (room for its ports, two protected uplink
/// groups), at a simulated 200,000 datagrams/s, with the fabric view ticked once per simulated
/// second as a live agent's poll does: what one core costs per datagram when the tables hold
/// a fabric, not 16 switches.
fn fabric_scale() -> Result<Value> {
    use rocemon::config::elephant::ElephantConfig;
    use rocemon::sflow::collector::Limits;
    use rocemon::sflow::fabric::{Fabric, UplinkGroup};
    let groups: Vec<UplinkGroup> = (0..2u8)
        .map(|g| UplinkGroup {
            name: format!("leaf-{g}"),
            agent: std::net::IpAddr::from([10, 100, g, 1]),
            uplinks: vec![1, 2, 3, 4],
        })
        .collect();
    let limits = Limits {
        max_ports: 65_536,
        protected: groups
            .iter()
            .map(|g| (g.agent, g.uplinks.clone()))
            .collect(),
        ..Limits::default()
    };
    let mut stream = crate::sflow_rates::stream();
    let mut seq = vec![0u32; crate::sflow_rates::SWITCHES as usize];
    let cfg = ElephantConfig::default();
    let (mut datagram_s, mut tick_s, mut held) = (Vec::new(), Vec::new(), (0, 0, 0));
    // The live poll's view of the collector (built under its lock once a second).
    let mut view_s = Vec::new();
    for _ in 0..3 {
        let mut c = Collector::new(limits.clone());
        let mut fabric = Fabric::default();
        let mut in_ticks = 0.0;
        let t = Instant::now();
        for i in 0..FABRIC_DATAGRAMS {
            let n = stream.len();
            let (a, d) = &mut stream[i % n];
            let q = &mut seq[*a as usize];
            *q += 1;
            let at = crate::sflow_rates::SEQ_AT;
            d[at..at + 4].copy_from_slice(&q.to_be_bytes());
            c.datagram(d, i as u64 * 5_000);
            if (i + 1) % 200_000 == 0 {
                let t = Instant::now();
                fabric.tick(&c, &groups, &cfg, 10.0, 1.0);
                in_ticks += t.elapsed().as_secs_f64();
            }
        }
        datagram_s.push(t.elapsed().as_secs_f64() - in_ticks);
        tick_s.push(in_ticks);
        held = (c.ports.len(), c.flows.len(), c.port_flows.len());
        let t = Instant::now();
        let view = rocemon::sflow::report::build(&c, Some(&fabric));
        view_s.push(t.elapsed().as_secs_f64());
        drop(view);
    }
    let view = median(view_s);
    let (d, t) = (median(datagram_s), median(tick_s));
    let per = d / FABRIC_DATAGRAMS as f64;
    println!(
        "sflow at fabric scale: {:.2} us per datagram ({:.0} datagrams/s on one core), fabric tick {:.1} ms, the poll's view {:.1} ms; held {} ports, {} flows, {} port-flows",
        per * 1e6,
        1.0 / per,
        t * 1e3,
        view * 1e3,
        held.0,
        held.1,
        held.2
    );
    Ok(json!({
        "datagrams": FABRIC_DATAGRAMS,
        "seconds_per_datagram": per,
        "datagrams_per_second": 1.0 / per,
        "fabric_tick_seconds": t,
        "view_seconds": view,
        "ports": held.0, "flows": held.1, "port_flows": held.2,
    }))
}

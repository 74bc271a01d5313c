//! IPFIX phase: what exporting flow records costs.
//!
//! - Records per second on one core: 100,000 flows' records through the exporter's thread
//!   (encode and send over UDP to a socket on loopback that another thread drains), from
//!   hand-over to the last one sent; and the bytes each takes on the wire.
//! - The agent's poll with export on against off, in one run: 100,000 flows read from the
//!   kernel's flow map every poll, all of them moving (each poll adds packets to every flow),
//!   through the pipeline (ingest, tick, ECMP views) with and without the flow-record stage
//!   at the default 60 s active timeout (flows started evenly over a minute, so a sixtieth of
//!   them is due each poll, as on a host whose flows came and stay). Polls on a simulated
//!   one-second clock, the two modes interleaved in rounds; the first two polls of each
//!   pipeline (every flow new) left out.

use super::*;
use rocemon::config::ipfix::{Destination, IpfixSettings};
use rocemon::export::ipfix::{elements, Exporter};
use rocemon::pipeline::flow_counts::EndReason;
use rocemon::pipeline::flow_records::{RecordSettings, Recorder};
use rocemon::pipeline::stages::{History, Pipeline, Rates, Settings};
use std::net::UdpSocket;
use std::sync::atomic::Ordering::Relaxed;

const FLOWS: usize = 100_000;
const S: u64 = 1_000_000_000;

/// A UDP socket on loopback drained by a thread (the collector): its address.
fn drain() -> Result<std::net::SocketAddr> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    let addr = s.local_addr()?;
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while s.recv(&mut buf).is_ok() {}
    });
    Ok(addr)
}

fn settings(to: std::net::SocketAddr) -> IpfixSettings {
    IpfixSettings {
        destinations: vec![Destination::Udp(to)],
        observation_domain: 1,
        enterprise: rocemon::config::ipfix::DEFAULT_ENTERPRISE,
        active_timeout: Duration::from_secs(60),
        template_refresh: Duration::from_secs(60),
        max_message_bytes: rocemon::config::ipfix::DEFAULT_MAX_MESSAGE_BYTES,
        queue_records: 1 << 22,
    }
}

/// The flows the kernel map holds, as the agent reads them.
fn kernel_flows() -> Result<(aya::Ebpf, Vec<(FlowKey, FlowStats)>)> {
    let mut ebpf = loader::load_object(131_072)?;
    loader::load_programs(&mut ebpf, &[Hook::Xdp])?;
    crate::kernel::populate(&mut ebpf, FLOWS, 0)?;
    let (flows, _) = loader::read_flows(&ebpf)?;
    if flows.len() != FLOWS {
        bail!("expected {FLOWS} flows in the map, got {}", flows.len());
    }
    Ok((ebpf, flows))
}

/// Records per second through the exporter thread, and bytes per record.
fn throughput(flows: &[(FlowKey, FlowStats)]) -> Result<(f64, f64)> {
    // The records of every flow, made once by the stage itself.
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = got.clone();
    let mut table = FlowTable::new(vec!["bench0".into()]);
    table.record_ends = true;
    table.begin_poll();
    table.end_poll(&[(0, u64::MAX)]);
    table.begin_poll();
    for (k, s) in flows {
        table.update(0, *k, *s);
    }
    let mut r = Recorder::new(RecordSettings {
        active_timeout_ns: 60 * S,
        idle_timeout_ns: 60 * S,
        sink: rocemon::pipeline::flow_records::RecordSink(std::sync::Arc::new(move |v| {
            into.lock().map(|mut g| g.extend(v)).unwrap_or(())
        })),
    });
    r.finish(&mut table, S, 0, None, EndReason::ForcedEnd);
    let records = std::mem::take(&mut *got.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    let mut rates = Vec::new();
    let mut bytes_per_record = 0.0;
    for _ in 0..5 {
        let x = Exporter::start(&settings(drain()?), vec![1])?;
        let counts = x.collectors[0].1.clone();
        let sink = x.waiting_sink();
        let batch = records.clone();
        let t = Instant::now();
        for chunk in batch.chunks(4096) {
            (sink.0)(chunk.to_vec());
        }
        while counts.sent.load(Relaxed) + counts.send_failed.load(Relaxed) < records.len() as u64 {
            std::thread::sleep(Duration::from_micros(200));
        }
        rates.push(records.len() as f64 / t.elapsed().as_secs_f64());
        if counts.send_failed.load(Relaxed) > 0 {
            bail!("the loopback collector lost records");
        }
        let messages = counts.messages.load(Relaxed) as f64;
        // Header and set header per message, the templates once.
        let payload = elements::record_len(false) as f64 * records.len() as f64;
        bytes_per_record = (payload + messages * 20.0 + 372.0) / records.len() as f64;
        x.finish();
    }
    Ok((median(rates), bytes_per_record))
}

/// The pipeline an agent runs, with or without the flow-record stage.
fn pipeline(records: Option<&Exporter>) -> Pipeline {
    let settings = Settings {
        elephant: Default::default(),
        ecmp: Default::default(),
        rate_window_s: 5.0,
        max_flows: None,
        hold_pushed_out: 0,
        sflow_groups: Vec::new(),
        history: History::Off,
        records: records.map(|x| RecordSettings {
            active_timeout_ns: 60 * S,
            idle_timeout_ns: 60 * S,
            sink: x.sink(),
        }),
    };
    let mut p = Pipeline::new(vec!["bench0".into()], settings);
    // A fresh agent's first poll, over empty maps: the flows that come after it are new, not
    // a baseline of a previous agent's counts (which no record carries).
    p.begin_poll();
    p.end_poll(&[(0, u64::MAX)]);
    p
}

/// One poll at simulated second `n`: the map read, every flow moved on, ingest, tick, the
/// ECMP views, and the records' round.
fn poll(ebpf: &aya::Ebpf, p: &mut Pipeline, n: u64, start_ns: &[u64]) -> Result<f64> {
    let t = Instant::now();
    let (flows, _) = loader::read_flows(ebpf)?;
    p.begin_poll();
    for (i, (k, mut s)) in flows.into_iter().enumerate() {
        s.packets += n * 100;
        s.bytes += n * 100_000;
        s.first_seen_ns = start_ns[i % start_ns.len()];
        s.last_seen_ns = (60 + n) * S;
        p.flow(0, k, s);
    }
    p.end_poll(&[(0, u64::MAX)]);
    p.tick(1.0, &[12_500_000.0], None);
    p.detect([], Rates::Now);
    p.records((60 + n) * S, 0);
    Ok(t.elapsed().as_secs_f64())
}

pub(crate) fn ipfix_bench() -> Result<Value> {
    let (ebpf, flows) = kernel_flows()?;
    let (records_per_second, bytes_per_record) = throughput(&flows)?;
    eprintln!(
        "ipfix: {records_per_second:.0} records/s on the exporter's core, {bytes_per_record:.1} bytes per IPv4 record on the wire"
    );
    // Flows that started evenly over the minute before the first poll.
    let start_ns: Vec<u64> = (0..FLOWS as u64)
        .map(|i| i * 60 * S / FLOWS as u64)
        .collect();
    let x = Exporter::start(&settings(drain()?), vec![1])?;
    let counts = x.collectors[0].1.clone();
    let mut on = pipeline(Some(&x));
    let mut off = pipeline(None);
    let (mut t_on, mut t_off) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    for round in 0..6 {
        for _ in 0..5 {
            n += 1;
            let a = poll(&ebpf, &mut on, n, &start_ns)?;
            let b = poll(&ebpf, &mut off, n, &start_ns)?;
            if n > 2 {
                t_on.push(a);
                t_off.push(b);
            }
        }
        eprintln!("ipfix: poll round {round} done");
    }
    // The exporter thread sends what the last polls handed over.
    std::thread::sleep(Duration::from_millis(500));
    let sent_per_poll = counts.sent.load(Relaxed) as f64 / n as f64;
    if sent_per_poll < 100.0 {
        bail!("export on sent {sent_per_poll:.0} records a poll: the stage did not run");
    }
    x.finish();
    let (on_ms, off_ms) = (median(&t_on) * 1e3, median(&t_off) * 1e3);
    let ratio = on_ms / off_ms;
    eprintln!(
        "ipfix: poll of {FLOWS} flows {on_ms:.1} ms with export against {off_ms:.1} ms without (x{ratio:.3}), {sent_per_poll:.0} records a poll"
    );
    Ok(json!({
        "flows": FLOWS,
        "records_per_second_one_core": records_per_second,
        "bytes_per_ipv4_record": bytes_per_record,
        "ipv4_record_bytes": elements::record_len(false),
        "ipv6_record_bytes": elements::record_len(true),
        "poll_ms_export_on": on_ms,
        "poll_ms_export_off": off_ms,
        "poll_ratio": ratio,
        "records_per_poll": sent_per_poll,
        "polls_each": t_on.len(),
    }))
}

//! Scale phase: the agent's poll, flow table and `/metrics` with 100,000 flows (run in a
//! subprocess so its resident memory is its own).

use super::*;

pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:").map(|v| {
                    v.trim()
                        .trim_end_matches(" kB")
                        .trim()
                        .parse::<u64>()
                        .unwrap_or(0)
                        * 1024
                })
            })
        })
        .unwrap_or(0)
}

pub(crate) fn scale_bench() -> Result<Value> {
    const N: usize = 100_000;
    let rss_before = rss_bytes();
    let mut ebpf = loader::load_object(131_072)?;
    loader::load_programs(&mut ebpf, &[Hook::Xdp])?;
    // One family, as on a fabric (IPv4 here): N flows in all.
    crate::kernel::populate(&mut ebpf, N, 0)?;
    let mut table = FlowTable::new(vec!["bench0".into()]);
    let mut metrics = Metrics::new()?;
    metrics.set_attached("bench0", Hook::Xdp, "native");
    let cfg = rocemon::config::elephant::ElephantConfig::default();
    let mut poll_s = Vec::new();
    let mut read_s = Vec::new();
    let mut render_s = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let (flows, _) = loader::read_flows(&ebpf)?;
        let counters = loader::read_counters(&ebpf)?;
        read_s.push(t.elapsed().as_secs_f64());
        table.begin_poll();
        for (k, s) in flows {
            table.update(0, k, s);
        }
        table.end_poll(&[(0, u64::MAX)]);
        table.tick(1.0, &cfg, &[cfg.threshold_bytes_per_second]);
        let report = rocemon::detect::ecmp::analyze(
            &table.views(),
            &table.ifaces,
            &rocemon::config::ecmp::EcmpConfig::default(),
        );
        metrics.observe_counters("bench0", Hook::Xdp, &counters[0]);
        metrics.set_flows(&table, 20);
        metrics.set_ecmp(&report, 20);
        poll_s.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let text = metrics.encode()?;
        render_s.push(t.elapsed().as_secs_f64());
        size = text.len();
    }
    if table.len() != N {
        bail!("expected {N} flows in the table, got {}", table.len());
    }
    let poll = median(poll_s);
    let read = median(read_s);
    let render = median(render_s);
    let rss = rss_bytes();
    eprintln!("scale: {N} flows: poll {:.1} ms (map reads {:.1} ms), /metrics render {:.2} ms ({size} bytes), RSS {:.1} MB, CPU {:.1}% at 1 poll/s", poll * 1e3, read * 1e3, render * 1e3, rss as f64 / 1e6, poll * 100.0);
    Ok(json!({
        "flows": N, "poll_ms": poll * 1e3, "map_read_ms": read * 1e3, "metrics_render_ms": render * 1e3, "metrics_bytes": size,
        "rss_bytes": rss, "rss_before_bytes": rss_before, "cpu_share_at_1s_poll": poll,
    }))
}

pub(crate) fn scale_in_subprocess() -> Result<Value> {
    let out = Command::new(std::env::current_exe()?)
        .arg("--phase-scale")
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("scale phase failed");
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

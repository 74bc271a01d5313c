//! The sFlow collector at rising datagram rates, side by side with pmacct's `sfacctd` (a real
//! collector, Debian's package) on the same stream: 500 switches x 64 ports, seven sampled
//! RoCE headers per datagram, each switch's datagram sequence counting up. Each collector runs
//! on CPU 1 (`taskset`), the sender on CPU 0, in a namespace of its own; per rate: the
//! datagrams the kernel dropped at the collector's socket (`/proc/net/udp`, the same measure
//! for both), the collector's CPU time per 100,000 datagrams, and its resident memory after
//! the run (every process of it). rocemon runs with the fabric view on (two uplink groups) and
//! its default bounds (`max_ports` 65,536: room for the stream's 500 x 64 ports in two
//! directions).

use super::*;
use rocemon_testkit::sflow::{roce_header, Datagram, Sample};

/// Switches and ports of the stream.
pub(crate) const SWITCHES: u32 = 500;
const PORTS: u32 = 64;
/// Datagrams per second, rising.
const RATES: [u64; 5] = [25_000, 50_000, 100_000, 200_000, 400_000];
/// Seconds of traffic per rate.
const SECS: f64 = 3.0;
/// Where the datagram sequence sits (IPv4 agent: version, address type, address, sub-agent).
pub(crate) const SEQ_AT: usize = 16;

/// The datagrams to cycle through, with their switch: each switch sends eight, each with
/// samples of seven of its ports.
pub(crate) fn stream() -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    for a in 0..SWITCHES {
        let agent = IpAddr::from([10, 100 + (a >> 8) as u8, a as u8, 1]);
        for g in 0..PORTS / 8 {
            let samples = (0..7)
                .map(|s| {
                    let port = g * 8 + s + 1;
                    Sample::Flow {
                        expanded: false,
                        sequence: s,
                        source_index: port,
                        sampling_rate: 4096,
                        sample_pool: 4096,
                        drops: 0,
                        input: port,
                        output: 1 + (port % 4),
                        frame_length: 4160,
                        header: roce_header(a * 64 + port),
                        switch: false,
                    }
                })
                .collect();
            let d = Datagram {
                agent,
                sub_agent: 0,
                sequence: 0,
                uptime_ms: 1000,
                samples,
            };
            out.push((a, d.encode()));
        }
    }
    out
}

/// Sends the stream to `addr` from namespace `ns` at `rate` datagrams per second for `secs`
/// (paced every millisecond against absolute deadlines), each switch's sequence counting up
/// from `seq`. Returns datagrams sent.
fn send(ns: &str, addr: &str, rate: u64, secs: f64, seq: &mut [u32]) -> Result<u64> {
    let (ns, addr) = (ns.to_string(), addr.to_string());
    let mut stream = stream();
    let mut seqs = seq.to_vec();
    let (sent, seqs) = std::thread::spawn(move || -> Result<(u64, Vec<u32>)> {
        use std::os::fd::AsRawFd;
        testrun::pin_to_cpu(0)?;
        let f = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
        // SAFETY: valid fd; affects this thread only.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns: {}", std::io::Error::last_os_error());
        }
        let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
        s.connect(&addr)?;
        let start = Instant::now();
        let total = (rate as f64 * secs) as u64;
        let (mut sent, mut i) = (0u64, 0usize);
        while sent < total {
            // Due by now: rate x elapsed.
            let due = ((start.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
            while sent < due {
                let n = stream.len();
                let (a, d) = &mut stream[i % n];
                i += 1;
                let q = &mut seqs[*a as usize];
                *q += 1;
                d[SEQ_AT..SEQ_AT + 4].copy_from_slice(&q.to_be_bytes());
                let _ = s.send(d);
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok((sent, seqs))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("sender panicked"))??;
    seq.copy_from_slice(&seqs);
    Ok(sent)
}

/// The kernel's drop count of the UDP socket bound to 127.0.0.1:`port` in `ns`.
fn udp_drops(ns: &str, port: u16) -> Result<u64> {
    let out = run("ip", &["netns", "exec", ns, "cat", "/proc/net/udp"])?;
    let local = format!("0100007F:{port:04X}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .with_context(|| format!("no socket on 127.0.0.1:{port} in {ns}"))
}

/// CPU seconds (user + system) and resident bytes of the processes `pids`.
fn usage(pids: &[u32]) -> (f64, u64) {
    let tick = 100.0; // USER_HZ
    let (mut cpu, mut rss) = (0.0, 0);
    for pid in pids {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
            let rest = stat.rsplit_once(')').map_or("", |r| r.1);
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t = |i: usize| {
                f.get(i - 3)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            cpu += (t(14) + t(15)) / tick;
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            rss += status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024;
        }
    }
    (cpu, rss)
}

/// Every process whose command name starts with `name`.
fn pids_named(name: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with(name)) {
            out.push(pid);
        }
    }
    out
}

/// One collector through every rate: per rate the datagrams sent, dropped at its socket, and
/// its CPU seconds; its memory at the end.
fn through_rates(ns: &str, port: u16, pids: &dyn Fn() -> Vec<u32>) -> Result<Value> {
    let mut seq = vec![0u32; SWITCHES as usize];
    let addr = format!("127.0.0.1:{port}");
    // A first second at the lowest rate: every switch and port known before the measure.
    send(ns, &addr, RATES[0], 1.0, &mut seq)?;
    std::thread::sleep(Duration::from_millis(500));
    let mut rows = Vec::new();
    for rate in RATES {
        let (d0, (c0, _)) = (udp_drops(ns, port)?, usage(&pids()));
        let sent = send(ns, &addr, rate, SECS, &mut seq)?;
        // Let the collector drain its socket before the counts are read.
        std::thread::sleep(Duration::from_millis(700));
        let (d1, (c1, rss)) = (udp_drops(ns, port)?, usage(&pids()));
        let (dropped, cpu) = (d1 - d0, c1 - c0);
        rows.push(json!({
            "rate": rate, "sent": sent, "dropped": dropped,
            "cpu_seconds_per_100k": cpu * 100_000.0 / sent.max(1) as f64, "rss_bytes": rss,
        }));
        eprintln!(
            "sflow rates: port {port}, {rate} datagrams/s: {sent} sent, {dropped} dropped, {:.3} CPU s per 100k, RSS {:.1} MB",
            cpu * 100_000.0 / sent.max(1) as f64,
            rss as f64 / 1e6
        );
    }
    let clean = rows
        .iter()
        .filter(|r| r["dropped"] == 0)
        .filter_map(|r| r["rate"].as_u64())
        .max()
        .unwrap_or(0);
    Ok(json!({ "rows": rows, "highest_rate_without_loss": clean }))
}

pub(crate) fn sflow_rates() -> Result<Value> {
    let ns = rocemon_testkit::netns::LoopNs::new("rcsfr")?;
    let tmp = rocemon_testkit::TempDir::new("rocemon-bench-sflow-rates")?;
    // rocemon: the collector with the fabric view on, on CPU 1.
    let cfg = tmp.path().join("rocemon.toml");
    std::fs::write(
        &cfg,
        "[[sflow.groups]]\nname = \"leaf-0\"\nagent = \"10.100.0.1\"\nuplinks = [1, 2, 3, 4]\n\
         [[sflow.groups]]\nname = \"leaf-1\"\nagent = \"10.100.1.1\"\nuplinks = [1, 2, 3, 4]\n",
    )?;
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.0, "taskset", "-c", "1", BIN, "run"])
        .args([
            "--sflow-listen",
            "127.0.0.1:6343",
            "--listen",
            "127.0.0.1:9442",
        ])
        .args(["--no-pin", "--config"])
        .arg(&cfg)
        .stderr(std::process::Stdio::null())
        .spawn()?;
    std::thread::sleep(Duration::from_secs(2));
    let pid = child.id();
    // `ip netns exec` execs: the child is rocemon itself (taskset execs too).
    let rocemon = through_rates(&ns.0, 6343, &|| vec![pid]);
    // What a Prometheus shard takes from a collector of this fabric: its series, one scrape.
    let t = Instant::now();
    let scrape = rocemon_testkit::netns::http_get_in(&ns.0, "127.0.0.1:9442", "/metrics");
    let scrape_s = t.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let rocemon = rocemon?;
    // sfacctd: its print plugin aggregating by the 5-tuple and ports, on CPU 1.
    let conf = tmp.path().join("sfacctd.conf");
    std::fs::write(
        &conf,
        format!(
            "daemonize: false\nsfacctd_ip: 127.0.0.1\nsfacctd_port: 6344\nplugins: print\n\
             aggregate: src_host, dst_host, src_port, dst_port, proto, in_iface, out_iface\n\
             print_refresh_time: 60\nprint_output_file: {}\n",
            tmp.path().join("sfacctd.out").display()
        ),
    )?;
    let mut child = Command::new("ip")
        .args([
            "netns", "exec", &ns.0, "taskset", "-c", "1", "sfacctd", "-f",
        ])
        .arg(&conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    std::thread::sleep(Duration::from_secs(2));
    let sfacctd = through_rates(&ns.0, 6344, &|| pids_named("sfacctd"));
    let _ = child.kill();
    let _ = child.wait();
    for p in pids_named("sfacctd") {
        let _ = Command::new("kill").arg(p.to_string()).status();
    }
    let sfacctd = sfacctd?;
    let (_, body) = scrape?;
    let samples: Vec<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let per_port = samples
        .iter()
        .filter(|l| l.starts_with("rocemon_sflow_port_"))
        .count();
    eprintln!(
        "sflow rates: rocemon /metrics: {} series ({per_port} per switch port), {} bytes, scraped in {:.0} ms",
        samples.len(),
        body.len(),
        scrape_s * 1e3
    );
    let tables = table_figures(&samples);
    eprintln!("sflow rates: rocemon's tables after the run: {tables}");
    Ok(json!({
        "tables": tables,
        "rocemon_series": samples.len(), "rocemon_port_series": per_port,
        "rocemon_scrape_bytes": body.len(), "rocemon_scrape_seconds": scrape_s,
        "switches": SWITCHES, "ports": PORTS, "samples_per_datagram": 7, "seconds_per_rate": SECS,
        "rocemon": rocemon, "sfacctd": sfacctd,
    }))
}

/// The collector's tables after the run, from its `/metrics` lines: per table the entries
/// held and those refused (`dropped`) or pushed out for room (`evicted`): at the default sizes
/// the bench's fabric must fit, neither moving.
fn table_figures(samples: &[&str]) -> Value {
    let label = |l: &str, name: &str| -> Option<String> {
        let at = l.find(&format!("{name}=\""))? + name.len() + 2;
        Some(l[at..].split('"').next()?.to_string())
    };
    let value = |l: &str| -> f64 {
        l.rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let mut t = serde_json::Map::new();
    for l in samples {
        let field = if l.starts_with("rocemon_sflow_table_entries{") {
            Some("entries".to_string())
        } else if l.starts_with("rocemon_sflow_table_entries_removed_total{") {
            label(l, "reason").filter(|r| r != "expired")
        } else {
            None
        };
        if let (Some(f), Some(table)) = (field, label(l, "table")) {
            let e = t.entry(table).or_insert_with(|| json!({}));
            e[&f] = json!(value(l));
        }
    }
    Value::Object(t)
}

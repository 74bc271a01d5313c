//! Live phase: replayed RoCE through a veth pair (the sender on CPU 0) with rocemon, with the
//! count-only program attached the same way, and with nothing; AF_XDP delivery.

use super::*;

/// Sends `frame` from `ns`/`ifname` with a raw packet socket for `secs` (see
/// [`blast_flows`]); returns frames sent.
pub(crate) fn blast(ns: &str, ifname: &str, frame: Vec<u8>, secs: f64) -> Result<u64> {
    blast_flows(ns, ifname, frame, (1, 1), secs)
}

/// Sends from `ns`/`ifname` for `secs`: `frame` as `n` flows taking turns, `burst` packets
/// each (a raw packet socket; one flow: the frame as it is). The sender stays on CPU 0 (veth
/// receives on the sending CPU, so every measurement runs its whole path there, not wherever
/// the scheduler moves the thread). Returns frames sent.
pub(crate) fn blast_flows(
    ns: &str,
    ifname: &str,
    mut frame: Vec<u8>,
    (n, burst): (usize, usize),
    secs: f64,
) -> Result<u64> {
    let (ns, ifname) = (ns.to_string(), ifname.to_string());
    let stream = format!("live-{ns}-{ifname}");
    std::thread::spawn(move || -> Result<u64> {
        use std::os::fd::AsRawFd;
        testrun::pin_to_cpu(0)?;
        let f = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
        // SAFETY: valid fd; affects this thread only.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns: {}", std::io::Error::last_os_error());
        }
        let cname = std::ffi::CString::new(ifname)?;
        // SAFETY: plain libc calls with checked results.
        unsafe {
            let idx = libc::if_nametoindex(cname.as_ptr());
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
            if fd < 0 || idx == 0 {
                bail!("raw socket: {}", std::io::Error::last_os_error());
            }
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_ifindex = idx as i32;
            sll.sll_halen = 6;
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let mut k = 0usize;
            let mut sent = 0u64;
            let mut psns = crate::shapes::take_psns(&stream, n);
            while Instant::now() < end {
                for _ in 0..256 {
                    let f = crate::shapes::flow_of(k, n, burst);
                    crate::shapes::as_next_packet(&mut frame, f, n, &mut psns);
                    k += 1;
                    let r = libc::sendto(
                        fd,
                        frame.as_ptr() as *const _,
                        frame.len(),
                        0,
                        &sll as *const _ as *const libc::sockaddr,
                        std::mem::size_of::<libc::sockaddr_ll>() as u32,
                    );
                    if r > 0 {
                        sent += 1;
                    }
                }
            }
            libc::close(fd);
            crate::shapes::put_psns(&stream, psns);
            Ok(sent)
        }
    })
    .join()
    .map_err(|_| anyhow::anyhow!("sender panicked"))?
}

pub(crate) fn rx_packets(ns: &str, ifname: &str) -> Result<u64> {
    let out = run(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            "cat",
            &format!("/sys/class/net/{ifname}/statistics/rx_packets"),
        ],
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// Rounds of the live comparison per hook (each about 13 s).
const LIVE_ROUNDS: usize = 3;

pub(crate) fn live_bench() -> Result<Value> {
    let pair = VethPair::new("rcbench")?;
    let mut f = Roce::new(ip("10.77.0.2"), ip("10.77.0.1"), 0xC001, 0x11, 0x07);
    f.payload = 64;
    let frame = f.frame();
    let measure = |pair: &VethPair| -> Result<f64> {
        let before = rx_packets(&pair.ns_a, &pair.a_if)?;
        let t = Instant::now();
        blast(&pair.ns_b, &pair.b_if, frame.clone(), 3.0)?;
        let secs = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(200));
        Ok((rx_packets(&pair.ns_a, &pair.a_if)? - before) as f64 / secs)
    };
    let mut rows = Vec::new();
    let base = measure(&pair)?;
    let _stats = baseline::Stats::on()?;
    for (name, hooks, mode, tc, program) in [
        ("xdp native", "xdp", "native", false, agent_common::PROG_XDP),
        (
            "tc ingress",
            "tc-ingress",
            "auto",
            true,
            agent_common::PROG_TC_INGRESS,
        ),
    ] {
        // Interleaved rounds (nothing, the count-only program, rocemon), each ratio taken
        // within its round, the medians reported: the veth's rate drifts by 10-20% between
        // runs on this machine, more than the difference measured.
        let mut rounds = Vec::new();
        for _ in 0..LIVE_ROUNDS {
            let without = measure(&pair)?;
            // The yardstick: the count-only program attached the same way.
            let count_only = baseline::Attached::new(&pair.ns_a, &pair.a_if, tc)?;
            let (r0, t0) = count_only.runs()?;
            let pps_count_only = measure(&pair)?;
            let (r1, t1) = count_only.runs()?;
            drop(count_only);
            let ns_count_only = (t1 - t0) * 1e9 / (r1 - r0).max(1) as f64;
            let agent = start_agent(&pair, &["--no-pin", "--hooks", hooks, "--xdp-mode", mode])?;
            let cost = || -> Result<(f64, f64)> {
                let body = metrics(&pair)?;
                let l = [("program", program)];
                Ok((
                    metric_sum(&body, "rocemon_program_runs_total", &l),
                    metric_sum(&body, "rocemon_program_run_seconds_total", &l),
                ))
            };
            let (a0, s0) = cost()?;
            let with = measure(&pair)?;
            // The agent's next poll brings the run time up to date.
            std::thread::sleep(Duration::from_millis(1200));
            let (a1, s1) = cost()?;
            agent.stop()?;
            let ns_rocemon = (s1 - s0) * 1e9 / (a1 - a0).max(1.0);
            eprintln!(
                "live: {name}: {with:.0} pps with rocemon, {pps_count_only:.0} with the count-only program (x{:.2}), {without:.0} without any (x{:.2}); kernel run time {ns_rocemon:.0} ns vs {ns_count_only:.0} ns (x{:.2})",
                with / pps_count_only,
                with / without,
                ns_rocemon / ns_count_only
            );
            rounds.push([
                with,
                pps_count_only,
                without,
                ns_rocemon,
                ns_count_only,
                with / pps_count_only,
                with / without,
                ns_rocemon / ns_count_only,
            ]);
        }
        let m = |i: usize| median(rounds.iter().map(|r| r[i]).collect::<Vec<_>>());
        let per_round = |i: usize| rounds.iter().map(|r| r[i]).collect::<Vec<_>>();
        rows.push(json!({
            "hook": name, "rounds": LIVE_ROUNDS,
            "pps_with": m(0), "pps_count_only": m(1), "pps_without": m(2),
            "run_ns": m(3), "run_ns_count_only": m(4),
            "ratio_vs_count_only": m(5), "ratio": m(6), "run_ns_ratio": m(7),
            "ratios_vs_count_only": per_round(5), "run_ns_ratios": per_round(7),
        }));
    }
    // AF_XDP capture: the frames redirected are gone from the stack, so the figure is what
    // the sockets delivered to userspace (and what the kernel dropped), against the rate the
    // stack received without rocemon. The receive loop's settings side by side: the default,
    // no pause before waiting, smaller and larger batches, busy polling.
    let tunings: [(&str, &str); 6] = [
        ("default (batch 64, 200 us pause)", ""),
        ("no pause", "afxdp_coalesce_us = 0\n"),
        ("batch 16", "afxdp_batch = 16\n"),
        ("batch 256", "afxdp_batch = 256\n"),
        ("busy poll 50 us", "afxdp_busy_poll_us = 50\n"),
        (
            "busy poll 50 us, batch 256",
            "afxdp_busy_poll_us = 50\nafxdp_batch = 256\n",
        ),
    ];
    let tmp = rocemon_testkit::TempDir::new("rocemon-bench-afxdp")?;
    for (label, toml) in tunings {
        let cfg = tmp.path().join("afxdp.toml");
        std::fs::write(&cfg, format!("capture = \"afxdp\"\n{toml}"))?;
        let (delivered, dropped) = afxdp_rate(&pair, &frame, &cfg)?;
        eprintln!(
            "live: afxdp copy, {label}: {delivered:.0} frames/s delivered to userspace, {dropped:.0}/s dropped; the stack alone received {base:.0} pps (x{:.2})",
            delivered / base
        );
        rows.push(json!({"hook": format!("afxdp copy, {label} (frames delivered to userspace)"), "pps_with": delivered, "pps_without": base, "ratio": delivered / base, "dropped_per_second": dropped}));
    }
    Ok(json!({ "frame_bytes": frame.len(), "rows": rows }))
}

/// Frames per second an AF_XDP agent with the configuration file `cfg` delivers to userspace
/// (and drops) while `frame` is sent at full speed for three seconds.
fn afxdp_rate(pair: &VethPair, frame: &[u8], cfg: &std::path::Path) -> Result<(f64, f64)> {
    let agent = start_agent(
        pair,
        &[
            "--config",
            cfg.to_str().context("config path")?,
            "--xdp-mode",
            "native",
            "--poll-interval-ms",
            "200",
        ],
    )?;
    let sums = || -> Result<(f64, f64)> {
        let body = metrics(pair)?;
        Ok((
            metric_sum(&body, "rocemon_afxdp_frames_total", &[]),
            metric_sum(&body, "rocemon_afxdp_dropped_frames_total", &[]),
        ))
    };
    let (f0, d0) = sums()?;
    let t = Instant::now();
    blast(&pair.ns_b, &pair.b_if, frame.to_vec(), 3.0)?;
    let secs = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(600));
    let (f1, d1) = sums()?;
    agent.stop()?;
    Ok(((f1 - f0) / secs, (d1 - d0) / secs))
}

/// Where the benchmarked agent serves /metrics (inside the receiving namespace).
const LISTEN: &str = "127.0.0.1:9442";

/// Starts rocemon on the pair's receiving side with `args` and gives it two seconds to
/// attach and count.
fn start_agent(pair: &VethPair, args: &[&str]) -> Result<Agent> {
    let mut all = vec!["run", "--iface", pair.a_if.as_str(), "--listen", LISTEN];
    all.extend_from_slice(args);
    let agent = Agent::start(&pair.ns_a, BIN, &all)?;
    std::thread::sleep(Duration::from_secs(2));
    Ok(agent)
}

/// The benchmarked agent's /metrics.
fn metrics(pair: &VethPair) -> Result<String> {
    Ok(http_get_in(&pair.ns_a, LISTEN, "/metrics")?.1)
}

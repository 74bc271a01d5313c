//! Kernel phase: each program through BPF_PROG_TEST_RUN on plain RoCE, non-RoCE and rare
//! frames with 1 to 100,000 flows in the map, against the one-counter program; and the
//! verifier's instruction count of every program.

use super::*;

/// The plain RoCE packet of the kernel rows: an RC WRITE_ONLY of 1 KiB over IPv4 from source
/// port `sport` (the flow cache rows vary the port to find two flows that share a slot).
fn write_only_1k(sport: u16) -> Roce {
    let mut w = Roce::new(ip("10.1.0.1"), ip("10.1.0.2"), sport, 0x11, 0x0A);
    w.payload = 1024;
    w.dma_len = 1024;
    w
}

/// The frames the kernel benchmark runs: several opcodes, IPv4 and IPv6, VLAN; the non-RoCE
/// frames a RoCE host sees next to RoCE (UDP to another port, ARP); and the rare shapes the
/// slow program parses (QinQ, IPv4 options, a VXLAN tunnel, an ERSPAN mirror).
pub(crate) fn bench_frames() -> Vec<(&'static str, Vec<u8>)> {
    let w = write_only_1k(0xC001);
    let mut s6 = Roce::new(ip("fd00::1"), ip("fd00::2"), 0xC002, 0x12, 0x04);
    s6.payload = 256;
    let mut ack = Roce::new(ip("10.1.0.2"), ip("10.1.0.1"), 0xC001, 0x13, 0x11);
    ack.vlans = vec![(TPID_8021Q, 100)];
    let cnp = Roce::cnp(ip("10.1.0.2"), ip("10.1.0.1"), 0xC001, 0x14);
    let mut ud = Roce::new(ip("fd00::1"), ip("fd00::3"), 0xC003, 0x15, 0x64);
    ud.vlans = vec![(TPID_8021AD, 10), (TPID_8021Q, 20)];
    ud.payload = 512;
    vec![
        ("RC WRITE_ONLY IPv4 1 KiB", w.frame()),
        ("RC SEND_ONLY IPv6", s6.frame()),
        ("RC ACK IPv4 802.1Q", ack.frame()),
        ("CNP IPv4", cnp.frame()),
        ("UD SEND_ONLY IPv6 QinQ", ud.frame()),
        ("UDP 53 IPv4 (not RoCE)", {
            let u = frames::udp(40000, 53, &[0u8; 40]);
            frames::ethernet(
                &[],
                frames::ETH_IPV4,
                &frames::ipv4([10, 1, 0, 1], [10, 1, 0, 9], 0, 17, 0, &u),
            )
        }),
        (
            "ARP (not IP)",
            frames::ethernet(&[], frames::ETH_ARP, &[0u8; 28]),
        ),
        ("RC WRITE_ONLY IPv4 options", {
            let mut o = w.clone();
            o.ipv4_options = 8;
            o.frame()
        }),
        (
            "RC SEND_ONLY in VXLAN",
            frames::tunnel::vxlan(&s6.frame(), 77),
        ),
        ("RC WRITE_ONLY in ERSPAN III", {
            frames::tunnel::erspan3(&w.frame(), 12, 1, true)
        }),
    ]
}

/// Fills the IPv4 flow map with `v4` flows and the IPv6 one with `v6`, none of which the
/// benchmark frames belong to.
pub(crate) fn populate(ebpf: &mut aya::Ebpf, v4: usize, v6: usize) -> Result<()> {
    let cpus = nr_cpus().map_err(|(_, e)| e)?;
    let key = |i: u32, ip_version: u8| {
        let mut k = FlowKey {
            ip_version,
            sport: (i % 0x4000) as u16 | 0xC000,
            dest_qp: 0x10000 + i,
            ..FlowKey::default()
        };
        k.src[..4].copy_from_slice(&[10, 200, (i >> 8) as u8, i as u8]);
        k.dst[..4].copy_from_slice(&[10, 201, 0, 1]);
        k
    };
    let stats = |i: u32| FlowStats {
        packets: 10 + u64::from(i) % 1000,
        bytes: 1000 * (10 + u64::from(i) % 1000),
        ..FlowStats::default()
    };
    let map = ebpf.map_mut(MAP_FLOWS4).context("FLOWS4")?;
    let mut flows4: PerCpuHashMap<_, FlowKey4, FlowStats> = PerCpuHashMap::try_from(map)?;
    for i in 0..v4 as u32 {
        let values = PerCpuValues::try_from(vec![stats(i); cpus])?;
        flows4.insert(FlowKey4::of(&key(i, 4)), values, 0)?;
    }
    let map = ebpf.map_mut(MAP_FLOWS).context("FLOWS")?;
    let mut flows: PerCpuHashMap<_, FlowKey, FlowStats> = PerCpuHashMap::try_from(map)?;
    for i in 0..v6 as u32 {
        let values = PerCpuValues::try_from(vec![stats(i); cpus])?;
        flows.insert(key(i, 6), values, 0)?;
    }
    Ok(())
}

/// Loads the count-only programs the figures are compared with: XDP, and tc with `tc`.
pub(crate) fn load_baselines(ebpf: &mut aya::Ebpf, tc: bool) -> Result<()> {
    let names: &[&str] = if tc {
        &[
            agent_common::PROG_BASELINE_XDP,
            agent_common::PROG_BASELINE_TC,
        ]
    } else {
        &[agent_common::PROG_BASELINE_XDP]
    };
    for name in names {
        match ebpf.program_mut(name).context("baseline program")? {
            aya::programs::Program::Xdp(x) => x.load()?,
            aya::programs::Program::SchedClassifier(c) => c.load()?,
            _ => bail!("unexpected baseline program type"),
        }
    }
    Ok(())
}

pub(crate) fn kernel_bench() -> Result<Value> {
    const REPEAT: u32 = 200_000;
    // Each flow count is loaded afresh in several interleaved rounds (one load can sit in a
    // slow or a fast mode for all its runs on a noisy machine): per row the minimum and the
    // median over every round's runs.
    const ROUNDS: usize = 3;
    const PROGRAMS: [&str; 4] = [
        agent_common::PROG_XDP,
        agent_common::PROG_BASELINE_XDP,
        agent_common::PROG_TC_INGRESS,
        agent_common::PROG_BASELINE_TC,
    ];
    let frames = bench_frames();
    let counts = [1usize, 10_000, 100_000];
    // samples[count][frame][program]
    let mut samples = vec![vec![[(); 4].map(|_| Vec::new()); frames.len()]; counts.len()];
    for _ in 0..ROUNDS {
        for (n, per_frame) in counts.iter().zip(samples.iter_mut()) {
            let mut ebpf = loader::load_object(131_072)?;
            loader::load_programs(&mut ebpf, &[Hook::Xdp, Hook::TcIngress])?;
            load_baselines(&mut ebpf, true)?;
            // The map a frame's flow goes to holds n flows with it (IPv4 and IPv6 alike).
            populate(&mut ebpf, n.saturating_sub(1), n.saturating_sub(1))?;
            for ((_, frame), per_prog) in frames.iter().zip(per_frame.iter_mut()) {
                for (prog, out) in PROGRAMS.iter().zip(per_prog.iter_mut()) {
                    let fd = ebpf.program(prog).context("program")?.fd()?;
                    for _ in 0..3 {
                        out.push(test_run(fd, frame, REPEAT)?.duration_ns as f64);
                    }
                }
            }
        }
    }
    let mut rows = Vec::new();
    for (n, per_frame) in counts.iter().zip(samples) {
        for ((label, frame), per_prog) in frames.iter().zip(per_frame) {
            let [xdp, xdp_base, tc, tc_base] = per_prog.map(|mut v| {
                v.sort_by(f64::total_cmp);
                (v[0], median(v))
            });
            let path = if agent_common::fast::parse_fast(&SliceReader(frame)).is_some() {
                "fast"
            } else {
                "slow"
            };
            rows.push(json!({
                "flows_in_map": n, "frame": label, "bytes": frame.len(), "path": path,
                "xdp_ns": xdp.1, "xdp_baseline_ns": xdp_base.1, "xdp_ratio": xdp.1 / xdp_base.1,
                "xdp_min_ns": xdp.0, "xdp_min_ratio": xdp.0 / xdp_base.0,
                "tc_ns": tc.1, "tc_baseline_ns": tc_base.1, "tc_ratio": tc.1 / tc_base.1,
                "tc_min_ns": tc.0, "tc_min_ratio": tc.0 / tc_base.0,
            }));
            eprintln!(
                "kernel: {n:>6} flows {label:<28} {path} xdp {:>5.0} ns (min {:>4.0}; baseline {:>4.0}, x{:.2})  tc {:>5.0} ns (min {:>4.0}; baseline {:>4.0}, x{:.2})",
                xdp.1, xdp.0, xdp_base.1, xdp.1 / xdp_base.1, tc.1, tc.0, tc_base.1, tc.1 / tc_base.1
            );
        }
    }
    let switches = switch_costs(REPEAT)?;
    let cache = cache_miss_costs()?;
    // What the verifier checked, per program (the budget: 100,000 each).
    let mut verified = serde_json::Map::new();
    for h in Hook::ALL {
        let mut ebpf = loader::load_object(1024)?;
        loader::load_programs(&mut ebpf, &[h])?;
        for name in [
            h.program(),
            h.slow_path().2,
            agent_common::flow_cache::PROG_FLOW_FLUSH,
        ] {
            let p = ebpf.program(name).context("program")?;
            let n = p.info()?.verified_instruction_count().unwrap_or(0);
            verified.insert(name.to_string(), json!(n));
        }
    }
    eprintln!("kernel: verified instructions {verified:?}");
    Ok(json!({
        "repeat": REPEAT, "rows": rows, "verified_instructions": verified,
        "switches": switches, "flow_cache": cache,
    }))
}

/// What each load-time switch costs on the plain RoCE frame (one flow in the map): the XDP
/// program with every switch on (the default; the ring on the fine clock, as on a host whose
/// tick is longer than a millisecond), the ring on the coarse clock (the default where
/// HZ >= 1000), each switch off alone, and all off, against the count-only program loaded
/// beside it.
fn switch_costs(repeat: u32) -> Result<Value> {
    let on = loader::Switches {
        coarse_ring_clock: false,
        ..loader::Switches::default()
    };
    let configs = [
        ("all on (default)", on),
        (
            "ring on the coarse clock",
            loader::Switches {
                coarse_ring_clock: true,
                ..on
            },
        ),
        (
            "rhythm off",
            loader::Switches {
                rhythm: false,
                ..on
            },
        ),
        (
            "psn tracking off",
            loader::Switches {
                psn_tracking: false,
                ..on
            },
        ),
        (
            "session counters off",
            loader::Switches {
                session_counters: false,
                ..on
            },
        ),
        (
            "flow cache off",
            loader::Switches {
                flow_cache: false,
                ..on
            },
        ),
        (
            "all off (cache on)",
            loader::Switches {
                rhythm: false,
                psn_tracking: false,
                session_counters: false,
                ..on
            },
        ),
    ];
    let frame = bench_frames()
        .into_iter()
        .next()
        .context("a bench frame")?
        .1;
    // Interleaved rounds, each loading every configuration afresh (one load can sit in a slow
    // or a fast mode for all its runs on a noisy machine, as `--ab` found): the minimum and
    // the median over rounds.
    const ROUNDS: usize = 6;
    let mut ns = vec![(Vec::new(), Vec::new()); configs.len()];
    for _ in 0..ROUNDS {
        for ((_, sw), (xdp, base)) in configs.iter().zip(ns.iter_mut()) {
            let mut ebpf = loader::load_object_with(1024, *sw)?;
            loader::load_programs(&mut ebpf, &[Hook::Xdp])?;
            load_baselines(&mut ebpf, false)?;
            for _ in 0..3 {
                for (prog, out) in [
                    (agent_common::PROG_XDP, &mut *xdp),
                    (agent_common::PROG_BASELINE_XDP, &mut *base),
                ] {
                    let fd = ebpf.program(prog).context("program")?.fd()?;
                    out.push(test_run(fd, &frame, repeat)?.duration_ns as f64);
                }
            }
        }
    }
    let mut rows = Vec::new();
    for ((label, _), (mut xdp, base)) in configs.iter().zip(ns) {
        xdp.sort_by(f64::total_cmp);
        let (min, xdp, base) = (xdp[0], median(&xdp), median(base));
        eprintln!(
            "kernel: switches {label:<24} xdp min {min:>5.0} median {xdp:>5.0} ns (baseline {base:>4.0}, x{:.2})",
            xdp / base
        );
        rows.push(json!({ "switches": label, "xdp_min_ns": min, "xdp_ns": xdp, "xdp_baseline_ns": base, "xdp_ratio": xdp / base }));
    }
    Ok(Value::Array(rows))
}

/// What a flow cache miss costs: single runs (BPF_PROG_TEST_RUN with one repeat, so each
/// run can carry another frame) of one flow over and over (every packet hits its slot), of
/// two flows that share a slot taking turns (one keeps the slot, the other's packets miss and
/// go to the map), in pairs (A A B B: a quarter of the packets swap the slot, a write-back and
/// a load each), and of the same two flows with the cache off, each next to the count-only
/// program run the same way (a single run's figure includes the harness's own cost).
fn cache_miss_costs() -> Result<Value> {
    const RUNS: usize = 20_000;
    const ROUNDS: usize = 5;
    let frame = |sport: u16| write_only_1k(sport).frame();
    let slot = |f: &[u8]| {
        let mut rec = agent_common::parse_record(&SliceReader(f), agent_common::LinkType::Ethernet);
        rec.key.hook = Hook::Xdp as u8;
        agent_common::flow_cache::slot_of(&rec.key_words())
    };
    let a = frame(0xC001);
    let b = (0xC002..=0xFFFF)
        .map(frame)
        .find(|f| slot(f) == slot(&a))
        .context("a flow that shares the first one's slot")?;
    let cases: [(&str, bool, [&Vec<u8>; 4]); 4] = [
        ("one flow (every packet hits)", true, [&a, &a, &a, &a]),
        (
            "two flows in one slot, taking turns",
            true,
            [&a, &b, &a, &b],
        ),
        ("two flows in one slot, in pairs", true, [&a, &a, &b, &b]),
        ("the same two flows, cache off", false, [&a, &b, &a, &b]),
    ];
    let mut ns = vec![(Vec::new(), Vec::new()); cases.len()];
    for _ in 0..ROUNDS {
        for ((_, on, frames), (xdp, base)) in cases.iter().zip(ns.iter_mut()) {
            let sw = loader::Switches {
                flow_cache: *on,
                ..loader::Switches::default()
            };
            let mut ebpf = loader::load_object_with(1024, sw)?;
            loader::load_programs(&mut ebpf, &[Hook::Xdp])?;
            load_baselines(&mut ebpf, false)?;
            for (prog, out) in [
                (agent_common::PROG_XDP, &mut *xdp),
                (agent_common::PROG_BASELINE_XDP, &mut *base),
            ] {
                let fd = ebpf.program(prog).context("program")?.fd()?;
                let mut total = 0u64;
                for i in 0..RUNS {
                    total += u64::from(test_run(fd, frames[i % 4], 1)?.duration_ns);
                }
                out.push(total as f64 / RUNS as f64);
            }
        }
    }
    let mut rows = Vec::new();
    for ((label, _, _), (mut xdp, base)) in cases.iter().zip(ns) {
        xdp.sort_by(f64::total_cmp);
        let (min, xdp, base) = (xdp[0], median(&xdp), median(base));
        eprintln!("kernel: flow cache, {label:<44} xdp min {min:>5.0} median {xdp:>5.0} ns (baseline {base:>4.0}, single runs)");
        rows.push(
            json!({ "case": label, "xdp_min_ns": min, "xdp_ns": xdp, "xdp_baseline_ns": base }),
        );
    }
    Ok(Value::Array(rows))
}

/// `--ab=FILE[,FILE...]`: this build's XDP program against saved builds of the object (for
/// example `target/release/build/rocemon-*/out/agent` copied before a change), on each
/// fast-path frame (plain RoCE and the non-RoCE frames), interleaved: each round loads every
/// object afresh and runs it next to the count-only program. One load can sit in a slow or a
/// fast mode for all its runs on this noisy machine, so the figures are the minimum, the
/// first quartile and the median over rounds, not one median.
///
/// Runs on a thread pinned to one CPU (the flow cache and the flow maps are per CPU); in the
/// many-flow rows each object's flow cache is first settled by its own flush as the agent's
/// polls would leave it ([`crate::shapes::settle_cache`]).
pub(crate) fn ab(files: &str) -> Result<()> {
    std::thread::scope(|s| {
        s.spawn(|| {
            crate::testrun::pin_to_one_cpu()?;
            ab_here(files)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the --ab thread panicked"))?
    })
}

fn ab_here(files: &str) -> Result<()> {
    const ROUNDS: usize = 8;
    let mut objects = vec![("this build".to_string(), loader::EBPF_OBJECT.to_vec())];
    for f in files.split(',') {
        objects.push((
            f.to_string(),
            std::fs::read(f).with_context(|| format!("read {f}"))?,
        ));
    }
    let frames: Vec<_> = bench_frames()
        .into_iter()
        .filter(|(_, f)| agent_common::fast::parse_fast(&SliceReader(f)).is_some())
        .collect();
    // ns[frame][object, then the count-only program]
    let mut ns = vec![vec![Vec::new(); objects.len() + 1]; frames.len()];
    for _ in 0..ROUNDS {
        for (i, (_, bytes)) in objects.iter().enumerate() {
            let mut ebpf = loader::load_object_bytes(bytes, 131_072, loader::Switches::default())?;
            loader::load_programs(&mut ebpf, &[Hook::Xdp])?;
            load_baselines(&mut ebpf, false)?;
            for (f, (_, frame)) in frames.iter().enumerate() {
                for _ in 0..3 {
                    for (slot, prog) in [
                        (i, agent_common::PROG_XDP),
                        (objects.len(), agent_common::PROG_BASELINE_XDP),
                    ] {
                        let fd = ebpf.program(prog).context("program")?.fd()?;
                        ns[f][slot].push(test_run(fd, frame, 200_000)?.duration_ns as f64);
                    }
                }
            }
        }
    }
    // Many flows taking turns (a rotating set of plain RoCE frames, each run one frame): the
    // flow state's cache misses, which one frame fed again and again never shows.
    let turns = [1_000usize, 10_000];
    let mut ns_turns = vec![vec![Vec::new(); objects.len() + 1]; turns.len()];
    let mut frame = crate::shapes::template(64);
    for _ in 0..ROUNDS / 2 {
        for (i, (_, bytes)) in objects.iter().enumerate() {
            let mut ebpf = loader::load_object_bytes(bytes, 131_072, loader::Switches::default())?;
            loader::load_programs(&mut ebpf, &[Hook::Xdp])?;
            load_baselines(&mut ebpf, false)?;
            for (t, &n) in turns.iter().enumerate() {
                for (slot, prog) in [
                    (i, agent_common::PROG_XDP),
                    (objects.len(), agent_common::PROG_BASELINE_XDP),
                ] {
                    let fd = ebpf.program(prog).context("program")?.fd()?;
                    crate::shapes::rotate(fd, &mut frame, n, n)?;
                    if prog == agent_common::PROG_XDP {
                        crate::shapes::settle_cache(&ebpf, fd, &mut frame, n)?;
                    }
                    ns_turns[t][slot].push(crate::shapes::rotate(fd, &mut frame, n, 20_000)?);
                }
            }
        }
    }
    let turn_names: Vec<String> = turns
        .iter()
        .map(|n| format!("{n} flows taking turns (plain RoCE, one frame a run)"))
        .collect();
    let names = frames.iter().map(|(f, _)| f.to_string()).chain(turn_names);
    for (frame, per_object) in names.zip(ns.into_iter().chain(ns_turns)) {
        println!("{frame}:");
        for (i, mut v) in per_object.into_iter().enumerate() {
            v.sort_by(f64::total_cmp);
            let name = objects
                .get(i)
                .map_or("count-only program", |o| o.0.as_str());
            println!(
                "  {name:<46} min {:>5.0} ns  p25 {:>5.0} ns  median {:>5.0} ns",
                v[0],
                v[v.len() / 4],
                v[v.len() / 2]
            );
        }
    }
    Ok(())
}

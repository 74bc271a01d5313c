//! Traffic shapes: what the XDP program costs with many flows taking turns, as a mirror
//! collector or a busy host sees them (hundreds to thousands of QPs interleaved packet by
//! packet), not one frame again and again. The same curve two ways:
//!
//! - BPF_PROG_TEST_RUN over a rotating set of frames of N flows (each run one frame, the next
//!   flow's; every flow created in a first pass that is not measured, then the agent's flush
//!   between passes until the flow cache's mode settles, as the agent's polls leave it),
//!   rocemon's XDP program with its flow cache in that mode and switched off, against the
//!   count-only program run the same way. A single run's figure includes the harness's own
//!   cost, the same for both;
//! - live through a veth pair: a raw-socket sender rotating over N flows (one packet each in
//!   turn, or bursts of [`BURST`]), the agent's XDP program's kernel run time (BPF statistics)
//!   against the count-only program and the flow floor attached the same way, in interleaved
//!   rounds; and its tc ingress program's, at the flow counts of issue #49's goals.
//!
//! A flow here is the plain RoCE frame with its own destination QP (the flow key's last
//! field): the sender patches three bytes per packet, so 100,000 flows of 4 KiB frames cost no
//! memory.

use super::*;
use std::collections::BTreeMap;

/// Flow counts of the curve.
pub(crate) const FLOWS: [usize; 5] = [1, 100, 1_000, 10_000, 100_000];

/// Packets per flow in a row, in the bursty case.
pub(crate) const BURST: usize = 32;

/// Flows of the bursty case.
const BURST_FLOWS: usize = 1_000;

/// Flow counts of the live curve at tc ingress (issue #49's goals).
const TC_FLOWS: [usize; 4] = [1, 1_000, 10_000, 100_000];

/// Where the BTH's destination QP sits in a plain IPv4 RoCE frame: Ethernet 14, IPv4 20,
/// UDP 8, then BTH bytes 5..8.
const QP_AT: usize = 14 + 20 + 8 + 5;

/// The plain RoCE WRITE_ONLY with `payload` bytes, from the sender's side of the pair.
pub(crate) fn template(payload: usize) -> Vec<u8> {
    let mut r = Roce::new(ip("10.77.0.2"), ip("10.77.0.1"), 0xC001, 0x100, 0x0A);
    r.payload = payload;
    r.dma_len = payload as u32;
    r.frame()
}

/// `frame` as flow `i`'s: its destination QP is 0x100 + i.
pub(crate) fn as_flow(frame: &mut [u8], i: usize) {
    let qp = (0x100 + i as u32) & 0xFF_FFFF;
    frame[QP_AT..QP_AT + 3].copy_from_slice(&qp.to_be_bytes()[1..]);
}

/// Where the BTH's PSN sits in a plain IPv4 RoCE frame (BTH bytes 9..12).
const PSN_AT: usize = 14 + 20 + 8 + 9;

/// The flows' next PSNs per stream (a program's test runs, a live sender's interface), kept
/// across calls: a flow's packets carry PSNs one apart, in order, as a real QP's do (a
/// fixed PSN made every packet after a flow's first a retransmission, which no healthy
/// fabric shows and which writes a counter a real packet does not).
static NEXT_PSN: std::sync::Mutex<BTreeMap<String, Vec<u32>>> =
    std::sync::Mutex::new(BTreeMap::new());

/// A stream's PSN table, taken out for one call (put back with [`put_psns`]).
pub(crate) fn take_psns(stream: &str, flows: usize) -> Vec<u32> {
    let mut all = NEXT_PSN.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = all.remove(stream).unwrap_or_default();
    if t.len() < flows {
        t.resize(flows, 0);
    }
    t
}

/// Puts a stream's PSN table back.
pub(crate) fn put_psns(stream: &str, t: Vec<u32>) {
    let mut all = NEXT_PSN.lock().unwrap_or_else(|e| e.into_inner());
    all.insert(stream.to_string(), t);
}

/// `frame` as the next packet of flow `i` of `n`: its QP and the flow's next PSN.
pub(crate) fn as_next_packet(frame: &mut [u8], i: usize, n: usize, psns: &mut [u32]) {
    if n > 1 {
        as_flow(frame, i);
    }
    if let Some(p) = psns.get_mut(i) {
        frame[PSN_AT..PSN_AT + 3].copy_from_slice(&p.to_be_bytes()[1..]);
        *p = (*p + 1) & 0xFF_FFFF;
    }
}

/// The flow of the `k`th packet: `n` flows taking turns, `burst` packets each.
pub(crate) fn flow_of(k: usize, n: usize, burst: usize) -> usize {
    (k / burst) % n
}

/// Mean kernel-measured ns of `runs` single runs of program `fd`, the frames' flows taking
/// turns over `n`.
pub(crate) fn rotate(
    fd: &aya::programs::ProgramFd,
    frame: &mut [u8],
    n: usize,
    runs: usize,
) -> Result<f64> {
    use std::os::fd::{AsFd, AsRawFd};
    let stream = format!("test-run-{}", fd.as_fd().as_raw_fd());
    let mut psns = take_psns(&stream, n);
    let mut total = 0u64;
    for k in 0..runs {
        as_next_packet(frame, flow_of(k, n, 1), n, &mut psns);
        match test_run(fd, frame, 1) {
            Ok(r) => total += u64::from(r.duration_ns),
            Err(e) => {
                put_psns(&stream, psns);
                return Err(e);
            }
        }
    }
    put_psns(&stream, psns);
    Ok(total as f64 / runs as f64)
}

/// Polls of the agent a test-run pass may take to settle the flow cache's mode: on to
/// draining at the first, draining to off at the second (a whole pass finds every slot
/// empty); two more to spare.
const SETTLE_POLLS: usize = 4;

/// What the agent does between passes of traffic: its flush on this CPU (every chunk, as a
/// poll runs it), each after a pass of the `n` flows (at least 4,096 packets, so the flush
/// has as many to judge the cache by as the kernel asks for), until the cache's mode stays
/// the same over a poll. Returns the mode it settled in ("on", "draining", "off").
/// The flush state of builds before it kept the pass times: its mode where today's is.
#[derive(Clone, Copy)]
#[repr(C)]
struct FlushStateBefore {
    flushing: u32,
    mode: u32,
    rest: [u32; 4],
    roce_seen: u64,
}

// SAFETY: `#[repr(C)]`, plain integers, no padding: every bit pattern is valid.
unsafe impl aya::Pod for FlushStateBefore {}

pub(crate) fn settle_cache(
    ebpf: &aya::Ebpf,
    fd: &aya::programs::ProgramFd,
    frame: &mut [u8],
    n: usize,
) -> Result<&'static str> {
    // SAFETY: sched_getcpu has no preconditions (the curve's thread is pinned to one CPU).
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as u32;
    let mode_here = || -> Result<u32> {
        let Some(map) = ebpf.map(agent_common::flow_cache::MAP_FLOW_FLUSHING) else {
            return Ok(agent_common::cache_mode::CACHE_ON);
        };
        if let Ok(states) =
            aya::maps::PerCpuArray::<_, agent_common::cache_mode::FlushState>::try_from(map)
        {
            return Ok(states.get(&0, 0)?.get(cpu as usize).map_or(0, |s| s.mode));
        }
        // A build from before the pass times (under `--ab`): the same mode, a shorter state.
        let states: aya::maps::PerCpuArray<_, FlushStateBefore> =
            aya::maps::PerCpuArray::try_from(map)?;
        Ok(states.get(&0, 0)?.get(cpu as usize).map_or(0, |s| s.mode))
    };
    let mut mode = mode_here()?;
    for _ in 0..SETTLE_POLLS {
        if !rocemon::sources::prog_run::flush_flow_cache(ebpf, &[cpu]).is_empty() {
            bail!("the flush did not run on CPU {cpu}");
        }
        rotate(fd, frame, n, n.max(4_096))?;
        let now = mode_here()?;
        if now == mode && mode != agent_common::cache_mode::CACHE_DRAINING {
            break;
        }
        mode = now;
    }
    Ok(match mode {
        agent_common::cache_mode::CACHE_ON => "on",
        agent_common::cache_mode::CACHE_DRAINING => "draining",
        _ => "off",
    })
}

/// What the agent's flush of this CPU's cache costs a poll, wall time in microseconds, and
/// beside it (the baseline, in the same moments) a walk of every chunk whatever the mode, as
/// the flush ran before an off cache was skipped: medians of 6 each, interleaved. Each run
/// of the first chunk judges the cache again: 12 passes keep an off cache off (it is tried
/// again after 16, and the settling took at most 2 of them).
fn time_flush(ebpf: &aya::Ebpf) -> Result<(f64, f64)> {
    // SAFETY: sched_getcpu has no preconditions (the curve's thread is pinned to one CPU).
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as u32;
    let prog = ebpf
        .program(agent_common::flow_cache::PROG_FLOW_FLUSH)
        .context("flush program")?
        .fd()?;
    let (mut agent, mut every) = (Vec::new(), Vec::new());
    for _ in 0..6 {
        let t = Instant::now();
        if !rocemon::sources::prog_run::flush_flow_cache(ebpf, &[cpu]).is_empty() {
            bail!("the flush did not run on CPU {cpu}");
        }
        agent.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        for start in agent_common::flow_cache::flush_starts() {
            rocemon::sources::prog_run::run_on_cpu(
                std::os::fd::AsFd::as_fd(prog),
                cpu,
                u64::from(start),
            )?;
        }
        every.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok((median(agent), median(every)))
}

/// The BPF_PROG_TEST_RUN curve: per frame size and flow count, rocemon's XDP program (cache
/// on, as the agent's flush leaves it; cache switched off), the count-only program and the
/// flow floor, medians over interleaved rounds. Runs on a thread of its own pinned to one
/// CPU: the flow cache and the flow maps are per CPU, as a flow's packets stay on one.
pub(crate) fn test_run_curve() -> Result<Value> {
    std::thread::spawn(|| {
        testrun::pin_to_one_cpu()?;
        test_run_curve_here()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the test-run curve's thread panicked"))?
}

fn test_run_curve_here() -> Result<Value> {
    const RUNS: usize = 20_000;
    const ROUNDS: usize = 3;
    let mut rows = Vec::new();
    for payload in [64usize, 1024] {
        let mut frame = template(payload);
        for &n in &FLOWS {
            // [cache on, cache off, count-only, flow floor]
            let mut ns = [(); 4].map(|_| Vec::new());
            // The cache's mode the agent's flush left for each measured "cache on" pass.
            let mut modes = Vec::new();
            // The agent's flush of this CPU after the measured pass, wall time.
            let (mut flush_us, mut walk_us) = (Vec::new(), Vec::new());
            let runs = RUNS.max(n);
            for _ in 0..ROUNDS {
                for (i, cache) in [true, false].into_iter().enumerate() {
                    let sw = loader::Switches {
                        flow_cache: cache,
                        ..loader::Switches::default()
                    };
                    let mut ebpf = loader::load_object_with(SHAPES_FLOW_MAP_ENTRIES, sw)?;
                    loader::load_programs(&mut ebpf, &[Hook::Xdp])?;
                    kernel::load_baselines(&mut ebpf, false)?;
                    let fd = ebpf
                        .program(agent_common::PROG_XDP)
                        .context("program")?
                        .fd()?;
                    // Every flow created first: the curve is the cost of flows that exist.
                    rotate(fd, &mut frame, n, n)?;
                    // Then the agent's polls, each after a pass of the traffic, until its
                    // flush has settled the flow cache's mode on this CPU.
                    let mode = settle_cache(&ebpf, fd, &mut frame, n)?;
                    if cache {
                        modes.push(mode);
                    }
                    ns[i].push(rotate(fd, &mut frame, n, runs)?);
                    if cache {
                        let (agent, every) = time_flush(&ebpf)?;
                        flush_us.push(agent);
                        walk_us.push(every);
                        let base = ebpf
                            .program(agent_common::PROG_BASELINE_XDP)
                            .context("baseline program")?
                            .fd()?;
                        ns[2].push(rotate(base, &mut frame, n, runs)?);
                    }
                }
                let mut floor = baseline::flow_floor_object(SHAPES_FLOW_MAP_ENTRIES)?;
                let p: &mut aya::programs::Xdp = floor
                    .program_mut(agent_common::PROG_FLOW_FLOOR_XDP)
                    .context("flow floor")?
                    .try_into()?;
                p.load()?;
                let fd = p.fd()?;
                rotate(fd, &mut frame, n, n)?;
                ns[3].push(rotate(fd, &mut frame, n, runs)?);
            }
            let [on, off, base, floor] = ns.map(median);
            let mode = modes.join("/");
            let (flush, walk) = (median(flush_us), median(walk_us));
            eprintln!(
                "shapes: test run, {n:>6} flows taking turns, {:>4}-byte frames: xdp {on:>5.0} ns (cache {mode}, its flush {flush:.1} us a poll, every chunk {walk:.1}; switched off {off:>5.0}), count-only {base:>4.0} ns: x{:.2} (switched off x{:.2}); flow floor {floor:>4.0} ns (x{:.2})",
                frame.len(),
                on / base,
                off / base,
                floor / base
            );
            rows.push(json!({
                "flows": n, "bytes": frame.len(), "runs": runs, "cache_mode": mode, "flush_us": flush, "flush_every_chunk_us": walk,
                "xdp_ns": on, "xdp_cache_off_ns": off, "count_only_ns": base, "flow_floor_ns": floor,
                "ratio": on / base, "ratio_cache_off": off / base, "floor_ratio": floor / base,
            }));
        }
    }
    Ok(Value::Array(rows))
}

/// The kernel's run count and run time of each loaded program named `name` (the agent's), by
/// program id. The kernel keeps the first 15 bytes of a name: `rocemon_tc_ingress` is
/// `rocemon_tc_ingr`, as its slow program is, whose own figures stay zero (a tail call runs in
/// its caller's time and count).
pub(crate) fn program_runs(name: &str) -> Result<Runs> {
    let kept = &name[..name.len().min(15)];
    let mut out = Vec::new();
    for p in aya::programs::loaded_programs() {
        let p = p?;
        if p.name_as_str() == Some(kept) {
            out.push((p.id(), p.run_count(), p.run_time().as_secs_f64()));
        }
    }
    Ok(Runs(out))
}

/// Run counts and run times of programs at one read, by program id.
pub(crate) struct Runs(Vec<(u32, u64, f64)>);

impl Runs {
    /// One program's figures (a yardstick the bench holds itself).
    pub(crate) fn one((count, time): (u64, f64)) -> Runs {
        Runs(vec![(0, count, time)])
    }

    /// The runs and run time since `before`, over the programs loaded at both reads: the
    /// program of an agent stopped just before (still loaded at the first read, freed by the
    /// second) took its runs off the sum and once made a case read -0 ns.
    pub(crate) fn since(&self, before: &Runs) -> (u64, f64) {
        let mut out = (0, 0.0);
        for &(id, count, time) in &self.0 {
            if let Some(&(_, c0, t0)) = before.0.iter().find(|b| b.0 == id) {
                out.0 += count.saturating_sub(c0);
                out.1 += time - t0;
            }
        }
        out
    }
}

/// The hook a live case is measured at: rocemon's program there, against the yardsticks
/// attached the same way.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LiveHook {
    /// Native XDP.
    Xdp,
    /// tc ingress (TCX).
    Tc,
}

impl LiveHook {
    fn tc(self) -> bool {
        self == LiveHook::Tc
    }

    /// How the report and the JSON name it.
    fn name(self) -> &'static str {
        match self {
            LiveHook::Xdp => "xdp",
            LiveHook::Tc => "tc ingress",
        }
    }

    /// rocemon's program at this hook (its kernel run time is the figure).
    fn program(self) -> &'static str {
        match self {
            LiveHook::Xdp => agent_common::PROG_XDP,
            LiveHook::Tc => agent_common::PROG_TC_INGRESS,
        }
    }

    /// The agent's flags that attach it here.
    fn agent_args(self) -> &'static [&'static str] {
        match self {
            LiveHook::Xdp => &["--hooks", "xdp", "--xdp-mode", "native"],
            LiveHook::Tc => &["--hooks", "tc-ingress"],
        }
    }
}

/// One live case: its hook, flows, packets per turn and payload.
struct Case {
    hook: LiveHook,
    flows: usize,
    burst: usize,
    payload: usize,
}

impl Case {
    fn label(&self) -> String {
        let shape = if self.burst == 1 {
            "taking turns".to_string()
        } else {
            format!("in bursts of {}", self.burst)
        };
        format!(
            "{} flows {shape}, {}-byte payloads",
            self.flows, self.payload
        )
    }

    /// The case's name in `ROCEMON_BENCH_SHAPES_CASES`: `flows x payload`, `tc:` before it
    /// at tc.
    fn key(&self) -> String {
        let at = if self.hook.tc() { "tc:" } else { "" };
        format!("{at}{}x{}", self.flows, self.payload)
    }
}

/// The agent `bin` on the pair's first end, its XDP program in native mode (as the live
/// curve measures it), given two seconds to attach.
pub(crate) fn start_agent(pair: &VethPair, bin: &str) -> Result<Agent> {
    start_agent_at(pair, bin, LiveHook::Xdp)
}

/// The agent `bin` on the pair's first end, its program at `hook`, given two seconds to
/// attach.
fn start_agent_at(pair: &VethPair, bin: &str, hook: LiveHook) -> Result<Agent> {
    // Load-time switches to weigh on the live curve (an ablation by hand, e.g.
    // `ROCEMON_BENCH_AGENT_ARGS="--no-rhythm --no-psn-tracking"`); none in a full run.
    let extra = std::env::var("ROCEMON_BENCH_AGENT_ARGS").unwrap_or_default();
    let entries = SHAPES_FLOW_MAP_ENTRIES.to_string();
    let mut args = vec![
        "run",
        "--iface",
        &pair.a_if,
        "--listen",
        "127.0.0.1:9442",
        "--no-pin",
        "--flow-map-entries",
        &entries,
    ];
    args.extend(hook.agent_args());
    args.extend(extra.split_whitespace());
    let agent = Agent::start(&pair.ns_a, bin, &args)?;
    std::thread::sleep(Duration::from_secs(2));
    Ok(agent)
}

/// The flow maps of the shapes (the agent, the test runs) and the flow floor's map.
const SHAPES_FLOW_MAP_ENTRIES: u32 = 131_072;

/// Rounds of the live curve (the three programs back to back per case in each).
const LIVE_ROUNDS: usize = 3;
/// Seconds of traffic per case and program.
const LIVE_SECS: f64 = 2.0;
/// Seconds of the case's traffic before each measurement: the steady state users run in (the
/// agent's flow cache is judged at its polls, a second apart, and steps aside over two).
const LIVE_WARMUP_SECS: f64 = 3.0;

/// The live curve: per case, the kernel run time per packet of rocemon's XDP or tc ingress
/// program (the agent, as users run it), of the count-only program and of the flow floor (the
/// least an exact per-flow counter costs) at the same hook, medians of per-round ratios.
pub(crate) fn live_curve() -> Result<Value> {
    let pair = VethPair::new("rcshape")?;
    let _stats = baseline::Stats::on()?;
    let mut cases = Vec::new();
    for payload in [64usize, 4096] {
        for &flows in &FLOWS {
            cases.push(Case {
                hook: LiveHook::Xdp,
                flows,
                burst: 1,
                payload,
            });
        }
    }
    for payload in [64usize, 4096] {
        cases.push(Case {
            hook: LiveHook::Xdp,
            flows: BURST_FLOWS,
            burst: BURST,
            payload,
        });
    }
    // At tc ingress, the flow counts of issue #49's goals (the rest of the curve is XDP's).
    for payload in [64usize, 4096] {
        for flows in TC_FLOWS {
            cases.push(Case {
                hook: LiveHook::Tc,
                flows,
                burst: 1,
                payload,
            });
        }
    }
    // An A/B of one kernel change needs only the cases it moves: `flows x payload` pairs,
    // `tc:` before those at tc, e.g. `ROCEMON_BENCH_SHAPES_CASES=10000x64,tc:100000x4096`,
    // with `--phase-shapes-live`, which prints the curve and writes no report.
    if let Ok(want) = std::env::var("ROCEMON_BENCH_SHAPES_CASES") {
        cases.retain(|c| want.split(',').any(|w| w.trim() == c.key()));
    }
    let send_for = |c: &Case, secs: f64| {
        live::blast_flows(
            &pair.ns_b,
            &pair.b_if,
            template(c.payload),
            (c.flows, c.burst),
            secs,
        )
    };
    let send = |c: &Case| send_for(c, LIVE_SECS);
    // Another build of the agent in its place (`ROCEMON_BENCH_BIN`), for an A/B of two
    // builds case by case; none in a full run.
    let bin = std::env::var("ROCEMON_BENCH_BIN").unwrap_or_else(|_| BIN.to_string());
    // The three programs back to back within each case (the agent started afresh for it),
    // so that the machine's drift over a round (2-3x on this VM) falls between cases, not
    // between a case's figures. [case][round] = (rocemon ns, count-only ns, flow floor ns)
    let mut ns = vec![Vec::new(); cases.len()];
    for _ in 0..LIVE_ROUNDS {
        for (i, c) in cases.iter().enumerate() {
            // The case's traffic, then the ns per run it cost the program `runs` reads.
            let measure = |runs: &dyn Fn() -> Result<Runs>| -> Result<f64> {
                send_for(c, LIVE_WARMUP_SECS)?;
                let before = runs()?;
                send(c)?;
                let (n, t) = runs()?.since(&before);
                if n == 0 {
                    bail!("{}: the program ran no packet of the case", c.label());
                }
                Ok(t * 1e9 / n as f64)
            };
            let yardstick =
                |program: baseline::Attached| measure(&|| program.runs().map(Runs::one));
            let tc = c.hook.tc();
            let base = yardstick(baseline::Attached::new(&pair.ns_a, &pair.a_if, tc)?)?;
            let floor = yardstick(baseline::Attached::flow_floor(
                &pair.ns_a,
                &pair.a_if,
                SHAPES_FLOW_MAP_ENTRIES,
                tc,
            )?)?;
            let agent = start_agent_at(&pair, &bin, c.hook)?;
            let rocemon = measure(&|| program_runs(c.hook.program()))?;
            agent.stop()?;
            eprintln!(
                "shapes: live, {}, {}: rocemon {rocemon:.0} ns, count-only {base:.0} ns (x{:.2}), flow floor {floor:.0} ns (x{:.2} the count-only; rocemon x{:.2} the floor)",
                c.hook.name(),
                c.label(),
                rocemon / base,
                floor / base,
                rocemon / floor
            );
            ns[i].push((rocemon, base, floor));
        }
    }
    let mut rows = Vec::new();
    for (c, rounds) in cases.iter().zip(ns) {
        let per_round = |f: fn(&(f64, f64, f64)) -> f64| rounds.iter().map(f).collect::<Vec<_>>();
        let ratios = per_round(|r| r.0 / r.1);
        rows.push(json!({
            "case": c.label(), "hook": c.hook.name(), "flows": c.flows, "burst": c.burst, "payload": c.payload,
            "run_ns": median(per_round(|r| r.0)),
            "run_ns_count_only": median(per_round(|r| r.1)),
            "run_ns_flow_floor": median(per_round(|r| r.2)),
            "ratio": median(ratios.clone()), "ratios": ratios,
            "floor_ratio": median(per_round(|r| r.2 / r.1)),
            "ratio_to_floor": median(per_round(|r| r.0 / r.2)),
        }));
    }
    Ok(
        json!({ "rounds": LIVE_ROUNDS, "seconds_per_case": LIVE_SECS, "warmup_seconds": LIVE_WARMUP_SECS, "rows": rows }),
    )
}

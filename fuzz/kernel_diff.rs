//! The kernel differential fuzzer (`--fuzz-kernel=SECS`): mutated frames through every
//! program in batches with fresh maps; every counter, session and flow must equal the host's.

use super::*;

/// Whether the kernel's skb test harness refuses `frame` (it pulls the IP header named by
/// the EtherType before running the program: Linux `bpf_prog_test_run_skb`). The stack never
/// hands such runts to tc; any other refusal is a failure.
pub(crate) fn skb_harness_refuses(frame: &[u8]) -> bool {
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => frame.len() < 14 + 20,
        0x86DD => frame.len() < 14 + 40,
        _ => false,
    }
}

/// How long the differential runs: for some seconds (`cargo xtask fuzz`), or a number of
/// batches (`cargo xtask test`: the same seeded frames every run).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Limit {
    Seconds(u64),
    Batches(u64),
}

/// Differential fuzzing of the kernel programs: mutated fixture frames through every program
/// (XDP, tc ingress, tc egress, the AF_XDP capture program; BPF_PROG_TEST_RUN) for `secs`,
/// in batches with fresh maps: after each batch the whole counter block, the session map and
/// the flow map of every program must equal the host's counts of the same frames. Every other
/// batch runs with flow maps of `SMALL_MAP` entries, far fewer than its flows: the LRU maps
/// admit every new flow and push the least recently used out, by the kernel's approximation
/// of recency, which no host model follows flow by flow; so there the policy's guarantees are
/// checked: every per-packet counter equal (not the sequence counts a flow's state derives: a
/// flow pushed out starts its sequence afresh), no update refused, every flow held with
/// counts no higher than the host's (unbounded) count of it, and flows that come after the
/// pressure held with exactly the host's counts.
pub(crate) fn fuzz_kernel(limit: Limit) -> Result<()> {
    use agent_common::{FlowKey, FlowStats, Outcome};
    use rocemon::sources::tally::Tally;
    use std::collections::BTreeMap;
    const BATCH: usize = 20_000; // frames per batch: at most one flow each, map of 65,536
    const SMALL_MAP: u32 = 256;
    // Frames between two flushes (as the agent's polls): 8 passes a batch, each over enough
    // RoCE packets for the flush to judge the cache.
    const FLUSH_EVERY: usize = BATCH / 8;
    loader::raise_memlock();
    crate::testrun::pin_to_one_cpu()?;
    let online = aya::util::online_cpus().map_err(|(_, e)| e)?;
    // Flushes that left a CPU's flow cache draining, and off.
    let mut stepped_aside = [0u64; 2];
    let seeds: Vec<Vec<u8>> = rocemon_testkit::fixtures::all()
        .into_iter()
        .filter(|f| f.link == rocemon_testkit::fixtures::Link::Ethernet)
        .flat_map(|f| f.records().map(|r| r.2).collect::<Vec<_>>())
        .collect();
    let roce_seed = seeds
        .iter()
        .find(|f| {
            f.len() > 60
                && f[12..15] == [0x08, 0x00, 0x45]
                && agent_common::parse_record(
                    &agent_common::SliceReader(f),
                    agent_common::LinkType::Ethernet,
                )
                .is_roce()
        })
        .context("a plain IPv4 RoCE seed")?
        .clone();
    let mut rng = Rng(0xF022);
    let started = Instant::now();
    let end = match limit {
        Limit::Seconds(secs) => started + Duration::from_secs(secs),
        Limit::Batches(_) => started + Duration::from_secs(24 * 3600),
    };
    let (mut runs, mut refused, mut batches, mut flows_compared) = (0u64, 0u64, 0u64, 0usize);
    let mut full_batches = 0u64;
    let mut flows_refused = 0u64;
    let comparable = |s: &FlowStats| FlowStats {
        first_seen_ns: 0,
        last_seen_ns: 0,
        ..*s
    };
    while Instant::now() < end && !matches!(limit, Limit::Batches(n) if batches >= n) {
        // Fresh maps: one object per program, as the agent has one per interface.
        let small = batches % 2 == 1;
        let entries = if small { SMALL_MAP } else { 65_536 };
        let mut objects = Vec::new();
        for h in Hook::ALL {
            let mut o = loader::load_object(entries)?;
            loader::load_programs(&mut o, &[h])?;
            objects.push((h, o));
        }
        let limits = rocemon::sources::tally::FlowLimits::UNBOUNDED;
        let mut host = Hook::ALL.map(|h| Tally::new(h, limits));
        for n in 0..BATCH {
            // The agent's flush at its polls, many times a batch: each pass judges the flow
            // cache, which steps aside (drains, turns off, comes back) while frames come.
            if n % FLUSH_EVERY == FLUSH_EVERY - 1 {
                for (_, ebpf) in &objects {
                    rocemon::sources::prog_run::flush_flow_cache(ebpf, &online);
                    let modes = rocemon::sources::maps::cache_modes(ebpf)?;
                    stepped_aside[0] += u64::from(modes[1] > 0);
                    stepped_aside[1] += u64::from(modes[2] > 0);
                }
            }
            if n % 3 != 0 {
                // Two frames in three a flow of its own (the plain RoCE seed with its own
                // destination QP): more flows than the cache's slots, so the flushes judge
                // it missed and it steps aside while the fuzzed frames keep coming.
                let mut f = roce_seed.clone();
                f[47..50].copy_from_slice(&(n as u32 | (batches as u32) << 20).to_be_bytes()[1..]);
                run_all(&objects, &f, &mut host, &mut runs, &mut refused)?;
                continue;
            }
            let mut f = seeds[rng.below(seeds.len() as u64) as usize].clone();
            for _ in 0..rng.below(6) {
                let i = rng.below(f.len() as u64) as usize;
                f[i] ^= rng.next_u64() as u8;
            }
            match rng.below(4) {
                0 => f.truncate(14 + rng.below(f.len() as u64) as usize),
                1 => f.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8)),
                _ => {}
            }
            f.truncate(1500);
            if f.len() < 14 {
                continue;
            }
            run_all(&objects, &f, &mut host, &mut runs, &mut refused)?;
        }
        batches += 1;
        // After the pressure (a poll reads the maps first), later flows: held exactly.
        let mut later = Hook::ALL.map(|h| Tally::new(h, limits));
        if small {
            for (_, ebpf) in &objects {
                loader::read_flows(ebpf)?;
            }
            let mut seed = roce_seed.clone();
            seed[26..30].copy_from_slice(&[10, 250, 0, 1]);
            for round in 0..20u32 {
                for k in 0..8u32 {
                    let mut f = seed.clone();
                    f[47..50].copy_from_slice(&(0xF0_0000 | k).to_be_bytes()[1..]);
                    f[50..54].copy_from_slice(&round.to_be_bytes());
                    run_all(&objects, &f, &mut host, &mut runs, &mut refused)?;
                    for t in later.iter_mut() {
                        crate::testrun::record_as_kernel(t, &f, 0);
                    }
                }
            }
        }
        if small {
            // Past the maps' capacity, or the batch tests nothing of it.
            let created: u64 = host.iter().map(|t| t.counters.flows_created).sum();
            if created <= 4 * u64::from(SMALL_MAP) {
                bail!("a batch with flow maps of {SMALL_MAP} entries never filled them");
            }
            full_batches += 1;
            flows_refused += created - 4 * u64::from(SMALL_MAP);
        }
        for (hook, ebpf) in &objects {
            let i = *hook as usize;
            let mut want = host[i].counters;
            let got = loader::read_counters(ebpf)?[i];
            if small {
                // The map's own counts follow its policy; nothing may be refused.
                if got.flow_update_errors != 0 {
                    bail!(
                        "{}: {} flow updates refused by an LRU map",
                        hook.name(),
                        got.flow_update_errors
                    );
                }
                want.flows_created = got.flows_created;
            }
            if *hook == Hook::AfXdp {
                // No socket is bound in a test run: what the program meant to redirect is
                // counted as redirect failures, by the contract (RoCE, RoCE cut in its
                // headers or BTH, broken mirror encapsulations), from the host's outcomes.
                want.capture_redirect_failures = Outcome::ALL
                    .iter()
                    .filter(|o| rocemon_testkit::AFXDP_CAPTURED_OUTCOMES.contains(&o.name()))
                    .map(|o| want.outcomes[*o as usize])
                    .sum();
            }
            // Past the capacity, what a flow's state derives (its sequence: PSN gaps and
            // retransmissions; its messages) starts afresh when a pushed-out flow comes back,
            // so it is not compared there; every per-packet counter stays exact, and the
            // flows that come after the pressure are held exactly (below). The sequence
            // counts are not even bounded by the host's: a fresh start measures the next
            // PSNs from another reference (the host expecting PSN 5,000,001 takes 10 as a
            // retransmission, a flow started afresh at 10 counts 20 as a gap of 9; batch 55
            // of the seeded run counts 27.4 M gap PSNs in the kernel against 23.3 M, one
            // returned flow 6.7 M against 4).
            let differ: Vec<(String, u64, u64)> = agent_common::counters::differences(&got, &want)
                .into_iter()
                .filter(|(name, _, _)| {
                    !(small
                        && (name.starts_with("message")
                            || name == "psn_gaps"
                            || name == "retransmits"))
                })
                .collect();
            if !differ.is_empty() {
                eprintln!("batch {batches}, {}:", hook.name());
                for (name, k, h) in &differ {
                    eprintln!("  {name}: kernel {k}, host {h}");
                }
                bail!(
                    "kernel {} counters differ from the host's after fuzzing",
                    hook.name()
                );
            }
            if loader::read_sessions(ebpf)? != host[i].sessions {
                bail!(
                    "kernel {} mirror sessions differ from the host's after fuzzing",
                    hook.name()
                );
            }
            let (flows, errors) = loader::read_flows(ebpf)?;
            if errors != 0 {
                bail!("{}: {errors} flow map read errors", hook.name());
            }
            let got: BTreeMap<FlowKey, FlowStats> =
                flows.iter().map(|(k, s)| (*k, comparable(s))).collect();
            let want: BTreeMap<FlowKey, FlowStats> = host[i]
                .flows
                .iter()
                .map(|(k, s)| (*k, comparable(s)))
                .collect();
            if small {
                // Held flows: none counts more than the host's count of it; the later flows
                // exactly the host's.
                for (k, g) in &got {
                    let Some(w) = want.get(k) else {
                        bail!("{}: a held flow the host never saw: {k:?}", hook.name());
                    };
                    if g.packets > w.packets || g.bytes > w.bytes {
                        bail!("{}: {k:?} holds more than the host counted", hook.name());
                    }
                }
                for (k, w) in &later[i].flows {
                    if got.get(k) != Some(&comparable(w)) {
                        bail!(
                            "{}: a flow that came after the pressure is not held exactly: {k:?}",
                            hook.name()
                        );
                    }
                }
                flows_compared += later[i].flows.len();
                continue;
            }
            if got != want {
                let missing = want.keys().filter(|k| !got.contains_key(k)).count();
                let differ = want
                    .iter()
                    .filter(|(k, s)| got.get(k).is_some_and(|g| g != *s))
                    .count();
                bail!(
                    "kernel {} flow map differs from the host's after fuzzing: {} flows vs {}, {missing} missing, {differ} with other counts",
                    hook.name(),
                    got.len(),
                    want.len()
                );
            }
            flows_compared += got.len();
        }
    }
    eprintln!(
        "fuzz-kernel: {runs} program runs in {batches} batches over {:.0} s (xdp, tc_ingress, tc_egress, afxdp; {refused} runts refused by the skb harness; {full_batches} batches past flow maps of {SMALL_MAP} entries, {flows_refused} flows more than they hold, then later flows held exactly; the flow cache draining after {} flushes and off after {}); every counter (past the capacity: every per-packet one), session and flow ({flows_compared} flows) equal to the host's",
        started.elapsed().as_secs_f64(),
        stepped_aside[0],
        stepped_aside[1]
    );
    if batches > 0 && stepped_aside[1] == 0 {
        bail!("the flow cache never stepped aside: the fuzzer tested none of its modes");
    }
    Ok(())
}

/// Runs one frame through every program (the test harness's refusals of runts counted) and
/// into the host's counts; traffic must never be dropped.
fn run_all(
    objects: &[(Hook, aya::Ebpf)],
    f: &[u8],
    host: &mut [rocemon::sources::tally::Tally; Hook::COUNT],
    runs: &mut u64,
    refused: &mut u64,
) -> Result<()> {
    for (hook, ebpf) in objects {
        let hook = *hook;
        let xdp = matches!(hook, Hook::Xdp | Hook::AfXdp);
        let p = ebpf.program(hook.program()).context("program")?;
        let r = match test_run(p.fd()?, f, 1) {
            Ok(r) => r,
            Err(e) => {
                let einval = e.chain().any(|c| c.to_string().contains("os error 22"));
                if !xdp && einval && skb_harness_refuses(f) {
                    *refused += 1;
                    continue;
                }
                return Err(e.context(format!(
                    "{} refused a {}-byte frame the harness should run",
                    hook.name(),
                    f.len()
                )));
            }
        };
        let want = if xdp { 2 } else { 3 };
        if r.retval != want {
            bail!(
                "{} returned {} for a fuzzed frame: traffic must never be dropped",
                hook.name(),
                r.retval
            );
        }
        crate::testrun::record_as_kernel(&mut host[hook as usize], f, 0);
        *runs += 1;
    }
    Ok(())
}

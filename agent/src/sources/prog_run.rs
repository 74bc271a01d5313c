//! BPF_PROG_TEST_RUN, the kernel's way to run a loaded program on demand: the agent runs the
//! flow cache's flush program with it on every CPU before it reads the flow maps
//! ([`flush_flow_cache`]); tests and benchmarks feed frames through the packet programs with
//! it. aya 0.14 keeps its test-run wrapper private, so this calls bpf(2) itself ([`crate::bpf_sys`]).

use agent_common::cache_mode::{FlushState, CACHE_OFF, FLUSH_RELEASE};
use agent_common::flow_cache::{flush_starts, MAP_FLOW_FLUSHING, PROG_FLOW_FLUSH};
use aya::Ebpf;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

const BPF_PROG_TEST_RUN: libc::c_long = 10;
/// Run on the CPU named in `cpu` (raw tracepoint programs only).
const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

/// `union bpf_attr`'s `test` member (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
pub struct TestRunAttr {
    pub prog_fd: u32,
    pub retval: u32,
    pub data_size_in: u32,
    pub data_size_out: u32,
    pub data_in: u64,
    pub data_out: u64,
    pub repeat: u32,
    pub duration: u32,
    pub ctx_size_in: u32,
    pub ctx_size_out: u32,
    pub ctx_in: u64,
    pub ctx_out: u64,
    pub flags: u32,
    pub cpu: u32,
    pub batch_size: u32,
    pub _pad: u32,
}

/// Runs a program as `attr` says (its buffers must outlive the call); `attr` holds the
/// return value and the duration afterwards.
pub fn test_run(attr: &mut TestRunAttr) -> std::io::Result<()> {
    // SAFETY: attr is a valid `test` attribute whose pointers the caller keeps alive.
    unsafe { crate::bpf_sys::bpf(BPF_PROG_TEST_RUN, attr) }.map(drop)
}

/// Runs a raw tracepoint program on one CPU, `arg` its context's first argument.
pub fn run_on_cpu(prog: BorrowedFd<'_>, cpu: u32, arg: u64) -> std::io::Result<()> {
    let args = [arg];
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        flags: BPF_F_TEST_RUN_ON_CPU,
        cpu,
        ctx_size_in: std::mem::size_of_val(&args) as u32,
        ctx_in: args.as_ptr() as u64,
        ..TestRunAttr::default()
    };
    test_run(&mut attr)
}

/// Writes every changed slot of the kernel's per-CPU flow cache back into the flow maps
/// ([`agent_common::flow_cache`]): the flush program, run on each of `cpus` (the online
/// ones), once per chunk of slots; then its release walk on each, which empties the slots
/// unchanged since the last flush (after every write-back, so that a flow the full map
/// pushed out and another CPU's write-back created again takes this CPU's state back). The first chunk of every CPU goes first: it judges that
/// CPU's cache and sets its mode ([`agent_common::cache_mode`]). A cache left off holds no
/// flow and takes none, so the rest of its slots are not walked: where flows outnumber the
/// slots (the cache off on every CPU) a poll runs one program per CPU instead of one per
/// chunk, each an interrupt of a CPU that forwards packets. A slot the maps refuse stays in
/// the cache for the next flush (the kernel counts the refusal as a flow update error of the
/// flow's hook). Returns the CPUs it could not run on (one that went offline in between: its
/// slots are read from userspace, see [`crate::sources::maps::read_flows`]). An object
/// without the program (a build from before the cache, under `--ab`) has nothing to flush;
/// with the cache switched off at load the flush finds no changed slot.
pub fn flush_flow_cache(ebpf: &Ebpf, cpus: &[u32]) -> Vec<u32> {
    let Some(p) = ebpf.program(PROG_FLOW_FLUSH) else {
        return Vec::new();
    };
    let Ok(fd) = p.fd() else {
        return Vec::new();
    };
    let run = |cpu: u32, start: u64| {
        run_on_cpu(fd.as_fd(), cpu, start)
            .map_err(|e| log::debug!("run {PROG_FLOW_FLUSH} on CPU {cpu} from slot {start}: {e}"))
    };
    let any_off_before = flush_states(ebpf).iter().any(|s| s.mode == CACHE_OFF);
    let mut missed: Vec<u32> = cpus
        .iter()
        .copied()
        .filter(|&c| run(c, 0).is_err())
        .collect();
    // The first chunk never turns a cache off (only a whole pass does), so a cache off now
    // was off before: read the modes again only then.
    let walk_first_only: Vec<bool> = if any_off_before {
        flush_states(ebpf)
            .iter()
            .map(|s| s.mode == CACHE_OFF)
            .collect()
    } else {
        Vec::new()
    };
    let walked: Vec<u32> = cpus
        .iter()
        .copied()
        .filter(|&cpu| {
            !missed.contains(&cpu) && !walk_first_only.get(cpu as usize).copied().unwrap_or(false)
        })
        .collect();
    for &cpu in &walked {
        if flush_starts()
            .skip(1)
            .any(|start| run(cpu, u64::from(start)).is_err())
        {
            missed.push(cpu);
        }
    }
    // The release walk, once every CPU's changed slots are back in the maps (a CPU's state of
    // a flow the full map pushed out goes back into the element another CPU created again).
    let mut unreleased = Vec::new();
    for &cpu in walked.iter().filter(|c| !missed.contains(c)) {
        // A CPU the release walk could not reach keeps its busiest slots changed: they are
        // read from userspace as a missed CPU's are.
        if flush_starts().any(|start| run(cpu, u64::from(start) | FLUSH_RELEASE).is_err()) {
            unreleased.push(cpu);
        }
    }
    missed.extend(unreleased);
    missed
}

/// Each CPU's flush state (its cache's mode and passes off), by CPU number; empty when the
/// object has no flush state (then every chunk is walked) or it cannot be read.
fn flush_states(ebpf: &Ebpf) -> Vec<FlushState> {
    let Some(map) = ebpf.map(MAP_FLOW_FLUSHING) else {
        return Vec::new();
    };
    let read = aya::maps::PerCpuArray::<_, FlushState>::try_from(map).and_then(|m| m.get(&0, 0));
    match read {
        Ok(states) => states.iter().copied().collect(),
        Err(e) => {
            log::debug!("read {MAP_FLOW_FLUSHING}: {e}");
            Vec::new()
        }
    }
}

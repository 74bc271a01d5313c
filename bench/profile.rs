//! `--profile=FRAME[,SECONDS[,FLOWS]]`: where this build's XDP program spends its time on one
//! bench frame, by source line. The program runs the frame through BPF_PROG_TEST_RUN for a few
//! seconds under `perf record -a`; each sample inside the program's JIT image is mapped to the
//! BPF instruction it came from (the program's `jited_line_info`) and that to its source line
//! (the line text the compiler stored in the program's BTF). `bpftool` here has no
//! disassembler and `perf annotate` cannot read a BPF program, so the mapping is done here,
//! through bpf(2) directly (aya 0.14 does not expose line info). The kernel functions the
//! program calls (the hash maps' lookups) are listed beside its lines.
//!
//! With FLOWS, the plain RoCE frame of the shapes phase as that many flows taking turns (one
//! run per frame, each the next flow's: where the flow state and the flow maps' lookups miss
//! the CPU's caches). `--profile=live[,SECONDS[,FLOWS]]`: the agent's own XDP program live, as
//! the shapes phase runs it (a veth pair, native mode, a raw-socket sender over FLOWS flows
//! taking turns); `ROCEMON_PROFILE_BIN` names another build of the agent to run instead.
//!
//! A sample lands on the instruction after the one that waited (skid): read a line's share as
//! "around here". The frames are numbered as in the kernel phase's table (0: the plain RoCE
//! WRITE); the run needs root and `perf`.

use super::*;
use rocemon::bpf_sys::bpf;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

const BPF_BTF_GET_FD_BY_ID: libc::c_long = 19;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// Offsets in `struct bpf_prog_info` (include/uapi/linux/bpf.h).
mod prog_info {
    pub const NR_JITED_KSYMS: usize = 104;
    pub const NR_JITED_FUNC_LENS: usize = 108;
    pub const JITED_KSYMS: usize = 112;
    pub const JITED_FUNC_LENS: usize = 120;
    pub const BTF_ID: usize = 128;
    pub const NR_LINE_INFO: usize = 148;
    pub const LINE_INFO: usize = 152;
    pub const JITED_LINE_INFO: usize = 160;
    pub const NR_JITED_LINE_INFO: usize = 168;
    pub const LINE_INFO_REC_SIZE: usize = 172;
    pub const JITED_LINE_INFO_REC_SIZE: usize = 176;
    pub const SIZE: usize = 256;
}

/// A loaded program's JIT image as source lines: its functions' address ranges and, sorted by
/// address, where each source line's code starts.
struct JitLines {
    funcs: Vec<(u64, u64)>,
    lines: Vec<(u64, String)>,
}

impl JitLines {
    /// The source line at kernel address `ip`, if it lies in the program.
    fn line_at(&self, ip: u64) -> Option<&str> {
        if !self.funcs.iter().any(|&(a, n)| ip >= a && ip < a + n) {
            return None;
        }
        let i = self.lines.partition_point(|(a, _)| *a <= ip);
        self.lines.get(i.checked_sub(1)?).map(|(_, l)| l.as_str())
    }
}

/// BPF_OBJ_GET_INFO_BY_FD into `info`.
fn obj_info(fd: i32, info: &mut [u8]) -> Result<()> {
    let mut attr = [0u8; 16];
    attr[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(info.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: the `info` member: a descriptor, the buffer's length and address (it outlives
    // the call; the kernel writes at most its length).
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.context("BPF_OBJ_GET_INFO_BY_FD")?;
    Ok(())
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn put(b: &mut [u8], off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}

/// The string at `off` of a BTF blob's string section.
fn btf_str(btf: &[u8], off: u32) -> String {
    let (hdr_len, str_off) = (u32_at(btf, 4) as usize, u32_at(btf, 16) as usize);
    let s = btf
        .get(hdr_len + str_off + off as usize..)
        .unwrap_or_default();
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).trim().to_string()
}

/// A source path as its crate and the path inside its `src/` (`agent-common/fast.rs`,
/// `aya-ebpf-0.2.1/programs/xdp.rs`).
fn short_path(path: &str) -> String {
    match path.rsplit_once("/src/") {
        Some((krate, rest)) => format!("{}/{rest}", krate.rsplit('/').next().unwrap_or(krate)),
        None => path.rsplit('/').next().unwrap_or(path).to_string(),
    }
}

/// The program's BTF blob (its line info's strings live there).
fn prog_btf(btf_id: u32) -> Result<Vec<u8>> {
    let mut attr = [0u8; 16];
    put(&mut attr, 0, &btf_id.to_ne_bytes());
    // SAFETY: the `btf_id` member; the kernel returns a new descriptor that nothing else
    // owns.
    let fd = unsafe {
        OwnedFd::from_raw_fd(
            bpf(BPF_BTF_GET_FD_BY_ID, &mut attr).context("BPF_BTF_GET_FD_BY_ID")? as i32,
        )
    };
    // struct bpf_btf_info: btf (u64), btf_size (u32), ...: the size first, then the blob.
    let mut info = [0u8; 32];
    obj_info(fd.as_raw_fd(), &mut info)?;
    let mut btf = vec![0u8; u32_at(&info, 8) as usize];
    let mut info = [0u8; 32];
    put(&mut info, 0, &(btf.as_mut_ptr() as u64).to_ne_bytes());
    put(&mut info, 8, &(btf.len() as u32).to_ne_bytes());
    obj_info(fd.as_raw_fd(), &mut info)?;
    Ok(btf)
}

/// A loaded program's JIT functions and line info.
fn jit_lines(prog_fd: i32) -> Result<JitLines> {
    use prog_info::*;
    let mut info = [0u8; SIZE];
    obj_info(prog_fd, &mut info)?;
    let (nks, nfl) = (
        u32_at(&info, NR_JITED_KSYMS),
        u32_at(&info, NR_JITED_FUNC_LENS),
    );
    let (nli, njli) = (
        u32_at(&info, NR_LINE_INFO),
        u32_at(&info, NR_JITED_LINE_INFO),
    );
    let (lrs, jlrs) = (
        u32_at(&info, LINE_INFO_REC_SIZE),
        u32_at(&info, JITED_LINE_INFO_REC_SIZE),
    );
    let btf_id = u32_at(&info, BTF_ID);
    if nli == 0 || njli != nli || lrs < 16 || jlrs != 8 {
        bail!("the program has no JIT line info (is the JIT on, and the object built with BTF?)");
    }
    let mut ksyms = vec![0u64; nks as usize];
    let mut lens = vec![0u32; nfl as usize];
    let mut li = vec![0u8; (nli * lrs) as usize];
    let mut jli = vec![0u64; njli as usize];
    let mut info = [0u8; SIZE];
    for (off, n) in [
        (NR_JITED_KSYMS, nks),
        (NR_JITED_FUNC_LENS, nfl),
        (NR_LINE_INFO, nli),
        (NR_JITED_LINE_INFO, njli),
        (LINE_INFO_REC_SIZE, lrs),
        (JITED_LINE_INFO_REC_SIZE, jlrs),
    ] {
        put(&mut info, off, &n.to_ne_bytes());
    }
    for (off, ptr) in [
        (JITED_KSYMS, ksyms.as_mut_ptr() as u64),
        (JITED_FUNC_LENS, lens.as_mut_ptr() as u64),
        (LINE_INFO, li.as_mut_ptr() as u64),
        (JITED_LINE_INFO, jli.as_mut_ptr() as u64),
    ] {
        put(&mut info, off, &ptr.to_ne_bytes());
    }
    obj_info(prog_fd, &mut info)?;
    let btf = prog_btf(btf_id)?;
    // struct bpf_line_info: insn_off, file_name_off, line_off, line_col (line << 10 | col).
    let mut lines: Vec<(u64, String)> = (0..nli as usize)
        .map(|i| {
            let r = &li[i * lrs as usize..];
            let file = short_path(&btf_str(&btf, u32_at(r, 4)));
            let line = u32_at(r, 12) >> 10;
            (
                jli[i],
                format!("{file}:{line}  {}", btf_str(&btf, u32_at(r, 8))),
            )
        })
        .collect();
    lines.sort_by_key(|(a, _)| *a);
    Ok(JitLines {
        funcs: ksyms
            .into_iter()
            .zip(lens.into_iter().map(u64::from))
            .collect(),
        lines,
    })
}

/// `perf record -a` running until it is stopped.
struct Perf {
    child: std::process::Child,
    _tmp: rocemon_testkit::TempDir,
    data: std::path::PathBuf,
}

impl Perf {
    fn start() -> Result<Perf> {
        let tmp = rocemon_testkit::TempDir::new("rocemon-profile")?;
        let data = tmp.path().join("perf.data");
        let child = Command::new("perf")
            .args(["record", "-a", "-F", "9999", "-o"])
            .arg(&data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("run perf (install linux-perf)")?;
        std::thread::sleep(Duration::from_millis(500));
        Ok(Perf {
            child,
            _tmp: tmp,
            data,
        })
    }

    fn stop(mut self) -> Result<Perf> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.child.wait()?;
        Ok(self)
    }
}

/// `--profile=FRAME[,SECONDS[,FLOWS]]` or `--profile=live[,SECONDS[,FLOWS]]` (see the module
/// doc).
pub(crate) fn profile(arg: &str) -> Result<()> {
    let mut parts = arg.split(',');
    let first = parts.next().unwrap_or("0");
    let secs: f64 = parts
        .next()
        .map_or(Ok(5.0), str::parse)
        .context("--profile seconds")?;
    let flows: usize = parts
        .next()
        .map_or(Ok(1), str::parse)
        .context("--profile flows")?;
    if first == "live" {
        return profile_live(secs, flows);
    }
    let which: usize = first
        .parse()
        .context("--profile=FRAME[,SECONDS[,FLOWS]] (FRAME a number, or live)")?;
    let (name, mut frame) = if flows > 1 {
        (
            format!("{flows} flows taking turns, RoCE WRITE 64 B"),
            shapes::template(64),
        )
    } else {
        let (name, frame) = kernel::bench_frames()
            .into_iter()
            .nth(which)
            .context("no bench frame of that number (0 is the plain RoCE WRITE)")?;
        (name.to_string(), frame)
    };
    let mut ebpf = loader::load_object_with(131_072, loader::Switches::default())?;
    loader::load_programs(&mut ebpf, &[Hook::Xdp])?;
    let prog = ebpf
        .program(agent_common::PROG_XDP)
        .context("XDP program")?;
    let fd = prog.fd()?.as_fd().as_raw_fd();
    let jit = jit_lines(fd)?;
    let perf = Perf::start()?;
    if flows > 1 {
        // Every flow created first, as in the shapes phase.
        shapes::rotate(prog.fd()?, &mut frame, flows, flows)?;
    }
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut ns = Vec::new();
    while Instant::now() < end {
        ns.push(if flows > 1 {
            shapes::rotate(prog.fd()?, &mut frame, flows, 20_000)?
        } else {
            test_run(prog.fd()?, &frame, 200_000)?.duration_ns as f64
        });
    }
    let perf = perf.stop()?;
    let head = format!(
        "{name}: {:.0} ns per packet (median of {} runs)",
        median(&ns),
        ns.len()
    );
    report(&jit, &perf.data, &head)
}

/// The agent's XDP program live (as the shapes phase runs it: a veth pair, the agent in
/// native mode, a raw-socket sender rotating over `flows` flows of 64-byte payloads, or of
/// `ROCEMON_PROFILE_PAYLOAD` bytes).
fn profile_live(secs: f64, flows: usize) -> Result<()> {
    let payload: usize = match std::env::var("ROCEMON_PROFILE_PAYLOAD") {
        Ok(v) => v
            .parse()
            .context("ROCEMON_PROFILE_PAYLOAD: a payload size in bytes, e.g. 4096")?,
        Err(_) => 64,
    };
    let pair = VethPair::new("rcprof")?;
    let _stats = baseline::Stats::on()?;
    // Another build of the agent to compare with (`ROCEMON_PROFILE_BIN`), else this one.
    let bin = std::env::var("ROCEMON_PROFILE_BIN").unwrap_or_else(|_| BIN.to_string());
    let agent = shapes::start_agent(&pair, &bin)?;
    let prog = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.name_as_str() == Some(agent_common::PROG_XDP))
        .context("the agent's XDP program is not loaded")?;
    let fd = prog.fd()?;
    let jit = jit_lines(fd.as_fd().as_raw_fd())?;
    let send = |secs| {
        live::blast_flows(
            &pair.ns_b,
            &pair.b_if,
            shapes::template(payload),
            (flows, 1),
            secs,
        )
    };
    // Every flow created first.
    send(1.0)?;
    let perf = Perf::start()?;
    let before = shapes::program_runs(agent_common::PROG_XDP)?;
    send(secs)?;
    let (runs, run_s) = shapes::program_runs(agent_common::PROG_XDP)?.since(&before);
    let perf = perf.stop()?;
    agent.stop()?;
    let head = format!(
        "live, {flows} flows taking turns, {payload}-byte payloads: {:.0} ns per packet over {} packets",
        run_s * 1e9 / runs.max(1) as f64,
        runs
    );
    report(&jit, &perf.data, &head)
}

/// Prints `head`, the kernel functions outside the program and the program's source lines
/// by their share of the samples in `data`.
fn report(jit: &JitLines, data: &std::path::Path, head: &str) -> Result<()> {
    let script = Command::new("perf")
        .args(["script", "-F", "ip,sym", "-i"])
        .arg(data)
        .output()?;
    let mut by_line: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_sym: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0u64;
    for l in String::from_utf8_lossy(&script.stdout).lines() {
        let mut f = l.split_whitespace();
        let Some(Ok(ip)) = f.next().map(|a| u64::from_str_radix(a, 16)) else {
            continue;
        };
        if let Some(line) = jit.line_at(ip) {
            *by_line.entry(line).or_default() += 1;
            total += 1;
        } else if let Some(sym) = f.next() {
            *by_sym
                .entry(sym.split('+').next().unwrap_or(sym).to_string())
                .or_default() += 1;
        }
    }
    if total == 0 {
        bail!("no sample landed in the program (is kernel.kptr_restrict keeping addresses from perf?)");
    }
    println!("{head}; {total} samples in the program");
    let mut syms: Vec<_> = by_sym.into_iter().collect();
    syms.sort_by_key(|l| std::cmp::Reverse(l.1));
    println!("outside the program (samples, against {total} inside):");
    for (sym, n) in syms.into_iter().take(15) {
        println!("{n:8}  {sym}");
    }
    let mut lines: Vec<_> = by_line.into_iter().collect();
    lines.sort_by_key(|l| std::cmp::Reverse(l.1));
    for (line, n) in lines.into_iter().take(40) {
        println!("{:5.1}%  {line}", 100.0 * n as f64 / total as f64);
    }
    Ok(())
}

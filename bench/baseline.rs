//! The live phases' yardsticks: the one-counter program (`rocemon_baseline_xdp` /
//! `rocemon_baseline_tc`) attached to the same veth the same way as rocemon's programs, so that
//! rocemon is compared with the cheapest program that counts, not with "no program" (attaching
//! any XDP program changes veth's receive path); and the flow floor (`rocemon_flow_floor_xdp`),
//! the least an exact per-flow counter costs, for the traffic shapes.

use anyhow::{bail, Context, Result};
use aya::programs::{xdp::XdpMode, SchedClassifier, TcAttachType, Xdp};
use rocemon::kernel::loader;
use std::os::fd::AsRawFd;

/// The count-only program attached in a namespace; dropping it detaches.
pub struct Attached {
    ebpf: aya::Ebpf,
    program: &'static str,
}

impl Attached {
    /// Attaches the count-only program to `iface` in namespace `ns`: XDP in native mode, or
    /// tc ingress (TCX), as the agent attaches its own.
    pub fn new(ns: &str, iface: &str, tc: bool) -> Result<Attached> {
        let program = if tc {
            agent_common::PROG_BASELINE_TC
        } else {
            agent_common::PROG_BASELINE_XDP
        };
        Attached::load(ns, iface, program, tc, || loader::load_object(1024))
    }

    /// Attaches the flow floor (the least an exact per-flow counter costs: a per-CPU hash map
    /// of `flow_entries`, as the agent's IPv4 flow map is sized) to `iface`: native XDP, or
    /// tc ingress (TCX), as the agent attaches its own.
    pub fn flow_floor(ns: &str, iface: &str, flow_entries: u32, tc: bool) -> Result<Attached> {
        let program = if tc {
            agent_common::PROG_FLOW_FLOOR_TC
        } else {
            agent_common::PROG_FLOW_FLOOR_XDP
        };
        Attached::load(ns, iface, program, tc, move || {
            flow_floor_object(flow_entries)
        })
    }

    fn load(
        ns: &str,
        iface: &str,
        program: &'static str,
        tc: bool,
        object: impl FnOnce() -> Result<aya::Ebpf> + Send + 'static,
    ) -> Result<Attached> {
        let (ns, iface) = (ns.to_string(), iface.to_string());
        // The interface name resolves in the thread's namespace; the link outlives the thread.
        let ebpf = std::thread::spawn(move || -> Result<aya::Ebpf> {
            let f = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
            // SAFETY: a valid fd; affects this thread only.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                bail!("setns: {}", std::io::Error::last_os_error());
            }
            let mut ebpf = object()?;
            let p = ebpf.program_mut(program).context("yardstick program")?;
            if tc {
                let p: &mut SchedClassifier = p.try_into()?;
                p.load()?;
                p.attach(&iface, TcAttachType::Ingress)?;
            } else {
                let p: &mut Xdp = p.try_into()?;
                p.load()?;
                p.attach(&iface, XdpMode::Driver)?;
            }
            Ok(ebpf)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("attach thread panicked"))??;
        Ok(Attached { ebpf, program })
    }

    /// The kernel's run count and run time of the program (BPF statistics on).
    pub fn runs(&self) -> Result<(u64, f64)> {
        let info = self
            .ebpf
            .program(self.program)
            .context("yardstick program")?
            .info()?;
        Ok((info.run_count(), info.run_time().as_secs_f64()))
    }
}

/// The object with the flow floor's map sized to `flow_entries` (nothing loaded yet).
pub fn flow_floor_object(flow_entries: u32) -> Result<aya::Ebpf> {
    Ok(aya::EbpfLoader::new()
        .map_max_entries(agent_common::MAP_FLOW_FLOOR, flow_entries)
        .load(loader::EBPF_OBJECT)?)
}

/// `kernel.bpf_stats_enabled` on while it lives, as it was afterwards.
pub struct Stats(String);

impl Stats {
    pub fn on() -> Result<Stats> {
        const P: &str = "/proc/sys/kernel/bpf_stats_enabled";
        let was = std::fs::read_to_string(P)?.trim().to_string();
        std::fs::write(P, "1")?;
        Ok(Stats(was))
    }
}

impl Drop for Stats {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", &self.0);
    }
}

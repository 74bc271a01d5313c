//! Loading and attaching the kernel programs: one object per interface (its own counters and
//! flow map), the requested hooks attached, XDP native mode with fallback to skb mode.
//! Dropping an [`Attachment`] closes the links, which detaches every program.

use crate::config::{FlowMapSizes, XdpMode};
use crate::error::UsageError;
use crate::kernel::pins::IfacePins;
use crate::sources::afxdp::{AfxdpOptions, Capture, QueueStats};
pub use crate::sources::maps::{read_counters, read_flows, read_ring, read_sessions};
use agent_common::{
    FlowKey, FlowStats, Hook, HookCounters, SessionKey, SessionStats, MAP_FLOWS, MAP_FLOWS4,
};
use anyhow::{Context, Result};
use aya::maps::ProgramArray;
use aya::programs::links::PinnedLink;
use aya::programs::{RawTracePoint, SchedClassifier, Xdp};
use aya::{Ebpf, EbpfLoader};
use rustc_hash::FxHashMap;
use std::ffi::CString;
use std::path::Path;

/// The kernel object built by `build.rs` from `agent-ebpf`.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/agent"));

/// What an attachment holds besides its settings (made in [`super::attach`]).
pub(super) type Loaded = (Ebpf, Option<Capture>, Option<&'static str>, Vec<PinnedLink>);

/// The programs and maps attached to one interface.
pub struct Attachment {
    pub iface: String,
    pub ifindex: u32,
    /// The XDP mode actually in use ("native" or "skb"), when XDP is attached.
    pub xdp_mode: Option<&'static str>,
    pub hooks: Vec<Hook>,
    pub ebpf: Ebpf,
    /// AF_XDP capture mode: the sockets and their counts. Declared after `ebpf`, so the
    /// program is detached before the sockets close.
    pub(super) capture: Option<Capture>,
    /// Links pinned on the bpffs: they outlive this process (closing the fd leaves them).
    pub(super) _pinned: Vec<PinnedLink>,
    /// Where this interface's pins are (pinned mode).
    pub(super) pins: Option<IfacePins>,
    /// Whether the maps came from a previous run (counts continue from their totals).
    pub maps_reused: bool,
    /// The BPF links of this attachment's entry programs on the device, checked at every
    /// poll ([`Attachment::lost_link`]).
    pub(super) links: Vec<u32>,
    /// How full the flow maps are, and the flows they pushed out, from poll to poll.
    pub flow_pressure: crate::sources::flow_pressure::FlowPressure,
    /// Where the pause ring was read up to.
    pub pause_ring: crate::sources::pause_ring::PauseRingReader,
}

/// How to attach one interface.
#[derive(Clone, Copy, Debug)]
pub struct AttachOptions<'a> {
    pub hooks: &'a [Hook],
    pub xdp_mode: XdpMode,
    pub flow_maps: FlowMapSizes,
    pub afxdp: Option<AfxdpOptions>,
    /// The bpffs directory for pins.
    pub pin_root: &'a Path,
    /// Pin maps and links there; false: everything ends with the process.
    pub pin: bool,
    /// The kernel programs' load-time switches.
    pub switches: Switches,
}

/// The index of a named interface, or a usage error naming it.
pub fn ifindex(name: &str) -> Result<u32, UsageError> {
    let c = CString::new(name).map_err(|_| UsageError::NoSuchInterface(name.into()))?;
    // SAFETY: a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(UsageError::NoSuchInterface(name.into()));
    }
    Ok(idx)
}

/// Checks the effective capabilities needed to load and attach BPF programs.
pub fn check_privileges() -> Result<(), UsageError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| UsageError::NotPermitted(format!("cannot read /proc/self/status: {e}")))?;
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_NET_ADMIN: u64 = 12;
    const CAP_SYS_ADMIN: u64 = 21;
    const CAP_PERFMON: u64 = 38;
    const CAP_BPF: u64 = 39;
    let has = |c: u64| eff & (1 << c) != 0;
    let mut missing = Vec::new();
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    if !has(CAP_PERFMON) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_PERFMON");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(UsageError::NotPermitted(format!(
            "the process lacks {}",
            missing.join(", ")
        )))
    }
}

/// Raises RLIMIT_MEMLOCK for kernels that still charge BPF memory to it (harmless otherwise).
pub fn raise_memlock() {
    let r = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &r) } != 0 {
        log::debug!("setrlimit(RLIMIT_MEMLOCK) failed; fine on kernels with memcg accounting");
    }
}

/// Loads the object with both flow maps sized to `flow_entries`, without attaching anything.
pub fn load_object(flow_entries: u32) -> Result<Ebpf> {
    load_object_with(flow_entries, Switches::default())
}

/// The hooks whose RoCE packets feed the per-millisecond ring, as the kernel's bit set: the
/// first ingress hook attached (XDP, AF_XDP, else tc ingress, which sees the same packets)
/// and tc egress. 0 when the rhythm is off.
pub fn ring_hooks(hooks: &[Hook], rhythm: bool) -> u8 {
    if !rhythm {
        return 0;
    }
    let ingress = [Hook::Xdp, Hook::AfXdp, Hook::TcIngress]
        .into_iter()
        .find(|h| hooks.contains(h));
    let egress = hooks.contains(&Hook::TcEgress).then_some(Hook::TcEgress);
    ingress
        .into_iter()
        .chain(egress)
        .fold(0, |m, h| m | 1 << (h as u8))
}

pub use crate::sources::tally::Switches;

/// Loads the object with the given switches (not pinned; the ring, when on, fed by every
/// hook: tests run one hook at a time).
pub fn load_object_with(flow_entries: u32, switches: Switches) -> Result<Ebpf> {
    load_object_sized(FlowMapSizes::both(flow_entries), switches)
}

/// [`load_object_with`] for another build of the object (`cargo xtask bench --ab=FILE`
/// compares a saved build with this one).
pub fn load_object_bytes(object: &[u8], flow_entries: u32, switches: Switches) -> Result<Ebpf> {
    load_unpinned(object, FlowMapSizes::both(flow_entries), switches)
}

/// [`load_object_with`] with each family's flow map sized on its own.
pub fn load_object_sized(flow_maps: FlowMapSizes, switches: Switches) -> Result<Ebpf> {
    load_unpinned(EBPF_OBJECT, flow_maps, switches)
}

/// An object loaded for tests and benchmarks: nothing pinned, the ring (when on) fed by
/// every hook.
fn load_unpinned(object: &[u8], flow_maps: FlowMapSizes, switches: Switches) -> Result<Ebpf> {
    let ring = if switches.rhythm { 0x0F } else { 0 };
    load_object_pinned(object, flow_maps, None, switches, ring)
}

/// Loads the object; with `pins`, the counting maps are opened from (or created at) their
/// pinned paths, so programs of several runs share them.
pub(super) fn load_object_pinned(
    object: &[u8],
    flow_maps: FlowMapSizes,
    pins: Option<&IfacePins>,
    switches: Switches,
    ring_hooks: u8,
) -> Result<Ebpf> {
    let mut l = EbpfLoader::new();
    l.map_max_entries(MAP_FLOWS4, flow_maps.ipv4);
    l.map_max_entries(MAP_FLOWS, flow_maps.ipv6);
    l.map_max_entries(agent_common::MAP_FLOWS_OUT, flow_maps.own());
    let (psn, sessions) = (
        u8::from(switches.psn_tracking),
        u8::from(switches.session_counters),
    );
    l.override_global(agent_common::SWITCH_TRACK_PSN, &psn, true);
    l.override_global(agent_common::SWITCH_SESSIONS, &sessions, true);
    l.override_global(agent_common::SWITCH_RING_HOOKS, &ring_hooks, true);
    // Not required to exist: `--ab` loads builds from before the cache (tests/kernel_flow_cache
    // checks that this build takes the switch).
    let cache = u8::from(switches.flow_cache);
    l.override_global(agent_common::flow_cache::SWITCH_FLOW_CACHE, &cache, false);
    let coarse = u8::from(switches.coarse_ring_clock);
    l.override_global(agent_common::SWITCH_RING_COARSE, &coarse, true);
    let c = &switches.classes;
    let (roce_dscp, roce_priority, cnp_dscp) = (c.roce_dscp, c.roce_priority, c.cnp_dscp);
    l.override_global(agent_common::GLOBAL_ROCE_DSCP, &roce_dscp, true);
    l.override_global(agent_common::GLOBAL_ROCE_PRIORITY, &roce_priority, true);
    l.override_global(agent_common::GLOBAL_CNP_DSCP, &cnp_dscp, true);
    // Not required to exist: `--ab` loads builds from before the reconciliation.
    let cpus = aya::util::nr_cpus().map_or(1, |n| n as u32);
    l.override_global(agent_common::GLOBAL_NR_CPUS, &cpus, false);
    // Not required to exist: `--ab` loads builds from before the lookups of cached flows.
    let ref_every = agent_common::flow_cache::ref_every(flow_maps.smallest(), cpus);
    l.override_global(
        agent_common::flow_cache::GLOBAL_REF_EVERY,
        &ref_every,
        false,
    );
    if let Some(p) = pins {
        for m in crate::kernel::pins::PINNED_MAPS {
            l.map_pin_path(m, p.map_path(m));
        }
    }
    l.load(object).context("load the rocemon BPF object")
}

/// A program of the object by name, as its type (`Xdp`, `SchedClassifier`).
pub(super) fn prog<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let p = ebpf
        .program_mut(name)
        .with_context(|| format!("{name} missing from the object"))?;
    Ok(p.try_into()?)
}

/// Loads the programs for `hooks` (the verifier runs here) without attaching them: each hook's
/// fast entry program and its slow program, whose program-array slot is filled here, before
/// anything is attached (an empty slot would leave the frames it serves unparsed).
pub fn load_programs(ebpf: &mut Ebpf, hooks: &[Hook]) -> Result<()> {
    load_flush(ebpf)?;
    for h in hooks {
        let (array, slot, slow) = h.slow_path();
        for name in [h.program(), slow] {
            match h {
                Hook::Xdp | Hook::AfXdp => prog::<Xdp>(ebpf, name)?.load(),
                Hook::TcIngress | Hook::TcEgress => prog::<SchedClassifier>(ebpf, name)?.load(),
            }
            .with_context(|| format!("load {name} (the {} hook)", h.name()))?;
        }
        let fd = ebpf
            .program(slow)
            .with_context(|| format!("{slow} missing from the object"))?
            .fd()?
            .try_clone()
            .with_context(|| format!("duplicate the fd of {slow}"))?;
        let mut jump = ProgramArray::try_from(
            ebpf.map_mut(array)
                .with_context(|| format!("{array} map missing"))?,
        )?;
        jump.set(slot, &fd, 0)
            .with_context(|| format!("put {slow} into {array}[{slot}]"))?;
    }
    Ok(())
}

/// Loads the flow cache's flush program ([`crate::sources::prog_run::flush_flow_cache`] runs
/// it), once per object; an object built without one (an older build under `--ab`) has none.
/// Loaded with the cache switched off too: pinned maps may hold a previous run's cached
/// flows, which only the flush brings into the flow maps.
fn load_flush(ebpf: &mut Ebpf) -> Result<()> {
    let name = agent_common::flow_cache::PROG_FLOW_FLUSH;
    let Some(p) = ebpf.program_mut(name) else {
        return Ok(());
    };
    let p: &mut RawTracePoint = p.try_into()?;
    if p.fd().is_err() {
        p.load().with_context(|| format!("load {name}"))?;
    }
    Ok(())
}

impl Attachment {
    /// A link of this attachment that no longer runs its program on the device (the device
    /// was deleted and perhaps created again under the same index); None while all do.
    pub fn lost_link(&self) -> Option<u32> {
        crate::kernel::liveness::first_lost(&self.links, self.ifindex)
    }

    /// The kernel's run count and run time of each attached program: (hook, program name,
    /// runs, seconds). Both stay 0 unless BPF run-time statistics are on.
    pub fn program_stats(&self) -> Vec<(Hook, &'static str, u64, f64)> {
        self.hooks
            .iter()
            .filter_map(|h| {
                let info = self.ebpf.program(h.program())?.info().ok()?;
                Some((
                    *h,
                    h.program(),
                    info.run_count(),
                    info.run_time().as_secs_f64(),
                ))
            })
            .collect()
    }

    /// Removes this probe's link pins (pinned mode), so that dropping it detaches the
    /// programs; the pinned maps stay, and the next attach counts on from them.
    pub fn unpin_links(&self) {
        if let Some(p) = &self.pins {
            if let Err(e) = p.remove_links() {
                log::warn!("remove the link pins of {}: {e:#}", self.iface);
            }
        }
    }

    /// Whether this probe pinned its links and the pins are gone now (removed under it).
    pub fn pins_removed(&self) -> bool {
        self.pins.as_ref().is_some_and(|p| !p.links_pinned())
    }

    /// The counter blocks of every hook, summed over CPUs (and AF_XDP queues).
    pub fn read_counters(&self) -> Result<[HookCounters; Hook::COUNT]> {
        let mut blocks = read_counters(&self.ebpf)?;
        if let Some(c) = &self.capture {
            blocks[Hook::AfXdp as usize].add(&c.counters());
        }
        Ok(blocks)
    }

    /// Every flow, merged over CPUs (and AF_XDP queues), and how many entries failed to read.
    pub fn read_flows(&self) -> Result<(Vec<(FlowKey, FlowStats)>, u64)> {
        let (mut flows, errors) = read_flows(&self.ebpf)?;
        if let Some(c) = &self.capture {
            let mut all = c.flows();
            for (k, s) in flows.drain(..) {
                all.entry(k).or_default().merge(&s);
            }
            flows = all.into_iter().collect();
        }
        Ok((flows, errors))
    }

    /// Deletes the flows of `flows` (as [`Attachment::read_flows`] returned them) with no
    /// packet since `before_ns` (monotonic) from the kernel's flow maps and the AF_XDP
    /// queues' tallies: the idle timeout. Returns the flows deleted and the deletions that
    /// failed.
    pub fn expire_flows(
        &mut self,
        flows: &[(FlowKey, FlowStats)],
        before_ns: u64,
    ) -> Result<(u64, u64)> {
        let idle: Vec<FlowKey> = flows
            .iter()
            .filter(|(_, s)| crate::sources::maps::idle(s, before_ns))
            .map(|(k, _)| *k)
            .collect();
        if idle.is_empty() {
            return Ok((0, 0));
        }
        let (mut deleted, errors) = crate::sources::maps::delete_flows(&mut self.ebpf, &idle)?;
        if let Some(c) = &self.capture {
            // A flow is in the kernel's maps or a queue's tally (or both, counted once).
            deleted = deleted.max(c.expire(before_ns));
        }
        Ok((deleted, errors))
    }

    /// The online CPUs whose flow cache is on, draining and off (see
    /// [`crate::sources::maps::cache_modes`]).
    pub fn flow_cache_modes(&self) -> Result<[u64; 3]> {
        crate::sources::maps::cache_modes(&self.ebpf)
    }

    /// RoCE packets and bytes per millisecond, `from_ms..=to_ms` (see
    /// [`crate::sources::maps::read_ring`]).
    pub fn read_ring(&self, from_ms: u64, to_ms: u64) -> Result<Vec<crate::sources::maps::RingMs>> {
        crate::sources::maps::read_ring(&self.ebpf, from_ms, to_ms)
    }

    /// Mirror sessions / tunnel ids with what they carried (kernel and AF_XDP queues).
    pub fn read_sessions(&self) -> Result<FxHashMap<SessionKey, SessionStats>> {
        let mut out = read_sessions(&self.ebpf)?;
        if let Some(c) = &self.capture {
            crate::sources::tally::merge_sessions(&mut out, &c.sessions());
        }
        Ok(out)
    }

    /// Per-queue figures of the AF_XDP capture (empty in map mode).
    pub fn capture_queues(&self) -> Vec<QueueStats> {
        self.capture
            .as_ref()
            .map(Capture::queues)
            .unwrap_or_default()
    }
}

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
    MAP_XSKS,
};
use anyhow::{Context, Result};
use aya::maps::{ProgramArray, XskMap};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::{SchedClassifierLink, TcAttachType};
use aya::programs::xdp::XdpLink;
use aya::programs::{RawTracePoint, SchedClassifier, Xdp, XdpMode as AyaXdpMode};
use aya::{Ebpf, EbpfLoader};
use rustc_hash::FxHashMap;
use std::ffi::CString;
use std::path::Path;

/// The kernel object built by `build.rs` from `agent-ebpf`.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/agent"));

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
    capture: Option<Capture>,
    /// Links pinned on the bpffs: they outlive this process (closing the fd leaves them).
    _pinned: Vec<PinnedLink>,
    /// Where this interface's pins are (pinned mode).
    pins: Option<IfacePins>,
    /// Whether the maps came from a previous run (counts continue from their totals).
    pub maps_reused: bool,
    /// The BPF links of this attachment's entry programs on the device, checked at every
    /// poll ([`Attachment::lost_link`]).
    links: Vec<u32>,
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
fn load_object_pinned(
    object: &[u8],
    flow_maps: FlowMapSizes,
    pins: Option<&IfacePins>,
    switches: Switches,
    ring_hooks: u8,
) -> Result<Ebpf> {
    let mut l = EbpfLoader::new();
    l.map_max_entries(MAP_FLOWS4, flow_maps.ipv4);
    l.map_max_entries(MAP_FLOWS, flow_maps.ipv6);
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
    if let Some(p) = pins {
        for m in crate::kernel::pins::PINNED_MAPS {
            l.map_pin_path(m, p.map_path(m));
        }
    }
    l.load(object).context("load the rocemon BPF object")
}

/// A program of the object by name, as its type (`Xdp`, `SchedClassifier`).
fn prog<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
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

/// Loads and attaches the hooks on one interface. With [`Hook::AfXdp`], `afxdp` says how the
/// capture sockets bind; they are open and registered before the program is attached. With a
/// pin root (map-based capture only: sockets cannot outlive the process), links found from a
/// previous run get the new programs atomically, and new links are pinned.
pub fn attach(iface: &str, o: AttachOptions<'_>) -> Result<Attachment> {
    let idx = ifindex(iface)?;
    let pins = if o.pin && o.afxdp.is_none() {
        crate::kernel::pins::ensure_bpffs(o.pin_root)?;
        let fresh = !o.pin_root.join(iface).exists();
        Some((IfacePins::new(o.pin_root, iface, o.flow_maps)?, fresh))
    } else {
        if o.pin_root.join(iface).exists() {
            bail_pinned(o.pin_root, iface)?;
        }
        None
    };
    let maps_reused = pins.as_ref().is_some_and(|(p, _)| p.maps_exist());
    let links_before = pins.as_ref().is_some_and(|(p, _)| p.links_pinned());
    let (pins, fresh) = match pins {
        Some((p, fresh)) => (Some(p), fresh),
        None => (None, false),
    };
    match attach_with(iface, idx, &o, pins, maps_reused) {
        Ok(a) => Ok(a),
        Err((e, pins)) => {
            // A refused start (the interface is taken, a hook fails) leaves nothing behind:
            // what this attempt pinned goes; a previous run's pins stay.
            if let Some(p) = pins {
                p.remove_created(!maps_reused, !links_before, fresh);
            }
            Err(e)
        }
    }
}

/// [`attach`] once the pins are decided; on failure the error and the pins, so that the
/// caller removes what this attempt made.
fn attach_with(
    iface: &str,
    idx: u32,
    o: &AttachOptions<'_>,
    pins: Option<IfacePins>,
    maps_reused: bool,
) -> std::result::Result<Attachment, (anyhow::Error, Option<IfacePins>)> {
    match attach_loaded(iface, o, pins.as_ref()) {
        Ok((ebpf, capture, xdp_mode, pinned)) => {
            let prog_ids: Vec<u32> = o
                .hooks
                .iter()
                .filter_map(|h| Some(ebpf.program(h.program())?.info().ok()?.id()))
                .collect();
            Ok(Attachment {
                iface: iface.to_string(),
                ifindex: idx,
                xdp_mode,
                hooks: o.hooks.to_vec(),
                links: crate::kernel::liveness::links_of(&prog_ids, idx),
                ebpf,
                capture,
                _pinned: pinned,
                pins,
                maps_reused,
            })
        }
        Err(e) => Err((e, pins)),
    }
}

/// What an attachment holds besides its settings.
type Loaded = (Ebpf, Option<Capture>, Option<&'static str>, Vec<PinnedLink>);

/// Loads the object (maps pinned under `pins`), loads the programs and attaches them.
fn attach_loaded(iface: &str, o: &AttachOptions<'_>, pins: Option<&IfacePins>) -> Result<Loaded> {
    let idx = ifindex(iface)?;
    let mut ebpf = load_object_pinned(
        EBPF_OBJECT,
        o.flow_maps,
        pins,
        o.switches,
        ring_hooks(o.hooks, o.switches.rhythm),
    )?;
    load_programs(&mut ebpf, o.hooks)?;
    let mut capture = None;
    if o.hooks.contains(&Hook::AfXdp) {
        let mut xsks: XskMap<_> = XskMap::try_from(
            ebpf.map_mut(MAP_XSKS)
                .with_context(|| format!("{MAP_XSKS} map missing"))?,
        )?;
        capture = Some(Capture::open(
            iface,
            idx,
            o.afxdp.unwrap_or_default(),
            o.flow_maps.total(),
            o.switches,
            |q, fd| xsks.set(q, fd, 0).map_err(Into::into),
        )?);
    }
    let mut xdp_mode = None;
    let mut pinned = Vec::new();
    for h in o.hooks {
        let link_pin = pins.map(|p| p.link_path(*h));
        match h {
            Hook::Xdp | Hook::AfXdp => {
                let p = prog::<Xdp>(&mut ebpf, h.program())?;
                if let Some(lp) = &link_pin {
                    let want = match o.xdp_mode {
                        XdpMode::Auto => None,
                        XdpMode::Native => Some("native"),
                        XdpMode::Skb => Some("skb"),
                    };
                    if let Some(mode) = reattach(lp, want, |fd| {
                        p.attach_to_link(XdpLink::try_from(fd)?)?;
                        Ok(())
                    }) {
                        xdp_mode = Some(mode);
                        continue;
                    }
                }
                let (mode, id) = attach_xdp(p, iface, o.xdp_mode)?;
                xdp_mode = Some(mode);
                if let Some(lp) = &link_pin {
                    let fd: FdLink = p.take_link(id)?.try_into().map_err(|_| no_link(iface))?;
                    pinned.push(pin_link(fd, lp, mode)?);
                }
            }
            Hook::TcIngress | Hook::TcEgress => {
                let at = if *h == Hook::TcIngress {
                    TcAttachType::Ingress
                } else {
                    TcAttachType::Egress
                };
                let p = prog::<SchedClassifier>(&mut ebpf, h.program())?;
                if let Some(lp) = &link_pin {
                    if reattach(lp, None, |fd| {
                        p.attach_to_link(SchedClassifierLink::try_from(fd)?)?;
                        Ok(())
                    })
                    .is_some()
                    {
                        continue;
                    }
                }
                let id = p
                    .attach(iface, at)
                    .with_context(|| format!("attach {} to {iface}", h.name()))?;
                if let Some(lp) = &link_pin {
                    let fd: FdLink = p.take_link(id)?.try_into().map_err(|_| no_link(iface))?;
                    pinned.push(pin_link(fd, lp, "tcx")?);
                }
            }
        }
    }
    if let Some(p) = pins {
        p.prune(o.hooks)?;
    }
    Ok((ebpf, capture, xdp_mode, pinned))
}

fn bail_pinned(root: &Path, iface: &str) -> Result<()> {
    if let Some(pid) = crate::kernel::pins::PinLock::held(root) {
        let who = pid.map(|p| format!(" (process {p})")).unwrap_or_default();
        return Err(UsageError::BadConfig(format!(
            "a running rocemon{who} is attached to '{iface}' (pins under {}); stop it first",
            root.display()
        ))
        .into());
    }
    Err(UsageError::BadConfig(format!(
        "programs of a previous run are still attached to '{iface}' (pinned under {}); run `rocemon detach --iface {iface}` first",
        root.join(iface).display()
    ))
    .into())
}

fn no_link(iface: &str) -> anyhow::Error {
    UsageError::BadConfig(format!(
        "the kernel attached to '{iface}' without a BPF link, which cannot be pinned (XDP links need Linux 5.9, TCX 6.6); run with --no-pin"
    ))
    .into()
}

/// Pins a new link as `<path>@<mode>` (the mode is kept in the name, so a later run reports it).
fn pin_link(fd: FdLink, path: &Path, mode: &str) -> Result<PinnedLink> {
    let p = path.with_file_name(format!(
        "{}@{mode}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("link")
    ));
    fd.pin(&p)
        .with_context(|| format!("pin the link at {}", p.display()))
}

/// Swaps the new program into a link pinned by a previous run. Returns the link's mode, or
/// None when there is no such link or it is stale (its interface went away): then the pin
/// is removed and the caller attaches afresh.
fn reattach(
    path: &Path,
    want_mode: Option<&str>,
    swap: impl FnOnce(FdLink) -> Result<()>,
) -> Option<&'static str> {
    let dir = path.parent()?;
    let stem = path.file_name()?.to_str()?;
    let found = std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let mode = name.strip_prefix(stem)?.strip_prefix('@')?.to_string();
        Some((e.path(), mode))
    })?;
    let (pin, mode) = found;
    if let Some(want) = want_mode.filter(|w| *w != mode) {
        // The link's mode cannot change: a new link in the wanted mode replaces it. The maps
        // stay, so counts continue; packets in the moment between the two are not counted.
        log::warn!(
            "XDP mode changes from {mode} to {want}: replacing the pinned link (counts continue; a few packets may pass uncounted)"
        );
        let _ = std::fs::remove_file(&pin);
        return None;
    }
    let swapped = PinnedLink::from_pin(&pin)
        .map_err(anyhow::Error::from)
        .and_then(|l| swap(FdLink::from(l)));
    match swapped {
        Ok(()) => {
            log::info!(
                "took over the link pinned at {} (no packet missed)",
                pin.display()
            );
            Some(match mode.as_str() {
                "native" => "native",
                "skb" => "skb",
                _ => "tcx",
            })
        }
        Err(e) => {
            log::warn!(
                "pinned link {} is stale ({e:#}); attaching afresh",
                pin.display()
            );
            let _ = std::fs::remove_file(&pin);
            None
        }
    }
}

fn attach_xdp(
    p: &mut Xdp,
    iface: &str,
    mode: XdpMode,
) -> Result<(&'static str, aya::programs::xdp::XdpLinkId)> {
    match mode {
        XdpMode::Skb => match p_attach(p, iface, AyaXdpMode::Skb) {
            Ok(id) => Ok(("skb", id)),
            Err(e) if taken(&e) => Err(xdp_taken(iface)),
            Err(e) => Err(anyhow::anyhow!(e).context(format!("attach XDP (skb mode) to {iface}"))),
        },
        XdpMode::Native => match p_attach(p, iface, AyaXdpMode::Driver) {
            Ok(id) => Ok(("native", id)),
            Err(e) if taken(&e) => Err(xdp_taken(iface)),
            Err(e) => Err(UsageError::XdpModeUnsupported {
                iface: iface.into(),
                mode: "native",
                reason: e,
            }
            .into()),
        },
        XdpMode::Auto => match p_attach(p, iface, AyaXdpMode::Driver) {
            Ok(id) => Ok(("native", id)),
            Err(e) if taken(&e) => Err(xdp_taken(iface)),
            Err(e) => {
                log::warn!("XDP native mode failed on {iface} ({e}); falling back to skb mode");
                let id = p
                    .attach(iface, AyaXdpMode::Skb)
                    .with_context(|| format!("attach XDP (skb mode) to {iface}"))?;
                Ok(("skb", id))
            }
        },
    }
}

/// Whether an attach failed because the interface already has an XDP program: EBUSY from
/// `bpf_link_create` (an XDP link is there), EEXIST from netlink (a program is there).
fn taken(e: &str) -> bool {
    e.contains("os error 16") || e.contains("os error 17")
}

fn xdp_taken(iface: &str) -> anyhow::Error {
    UsageError::BadConfig(format!(
        "'{iface}' already has an XDP program attached (another rocemon, or another tool: see `ip link show {iface}`); stop or detach it first"
    ))
    .into()
}

fn p_attach(
    p: &mut Xdp,
    iface: &str,
    mode: AyaXdpMode,
) -> Result<aya::programs::xdp::XdpLinkId, String> {
    p.attach(iface, mode).map_err(|e| {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(c) = src {
            s.push_str(": ");
            s.push_str(&c.to_string());
            src = c.source();
        }
        s
    })
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

    /// RoCE packets and bytes per millisecond, `from_ms..=to_ms` (see
    /// [`crate::sources::maps::read_ring`]).
    pub fn read_ring(&self, from_ms: u64, to_ms: u64) -> Result<Vec<(u64, u64)>> {
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
